//! [`LayerHandle`]: what every seawall layer's handle offers, under one set of names.

use crate::ConfigError;

/// The operator's side of one layer: what every seawall layer's `Handle` (breaker,
/// bulkhead, degradation, fallback) has, with the same names and the same meaning.
///
/// Each handle also has these as inherent methods, so calling them needs no import;
/// the trait is for code that treats layers alike (reconfiguring every layer of a
/// policy from a document, reverting them all, an admin route per operation).
///
/// # Configuration
///
/// [`config`](Self::config) is the configuration in force;
/// [`reconfigure`](Self::reconfigure) validates a new one and applies it at run
/// time, keeping the layer's state (an open breaker stays open, running calls keep
/// their bulkhead slots), or refuses it with the field at fault and changes
/// nothing; [`revert`](Self::revert) goes back to the configuration the layer was
/// built with.
///
/// # Operator verbs
///
/// [`force`](Self::force) holds the layer in a state its own policy would not
/// choose, until [`release`](Self::release) hands control back:
///
/// | layer | `force(..)` takes | while forced | `release()` |
/// |---|---|---|---|
/// | circuit breaker | `Forced::Open` or `Forced::Closed` | every call rejected, or every call let through and never tripping | a fresh closed breaker |
/// | bulkhead | a limit of active calls | the limit, whatever the adaptive algorithm says | the algorithm (or `max_concurrent`) goes on from that limit |
/// | degradation | a level | that level, no probes | the machine picks again, with a fresh dwell |
/// | fallback | `()` | the primary is not called; the fallback answers | the primary is called again |
///
/// A forced state is an override, not configuration: `reconfigure` and `revert`
/// keep it, and `release` ends it (a layer's own verbs may end it too, such as
/// the breaker's `reset`). `release` on a layer that is not forced changes nothing.
///
/// A keyed layer (one breaker or bulkhead per key) is one layer here: its
/// configuration is every key's, `force` holds every key and the keys first seen
/// while forced, and its snapshot covers every key.
pub trait LayerHandle: Clone + Send + Sync + 'static {
    /// The layer's configuration, as `reconfigure` takes it and `config` gives it.
    type Config: Clone + PartialEq + Send + Sync + 'static;
    /// The layer's state and counters at one instant.
    type Snapshot;
    /// The states an operator can hold the layer in (see [`force`](Self::force)).
    type Forced;

    /// The layer's name.
    fn name(&self) -> &str;

    /// The configuration in force.
    fn config(&self) -> Self::Config;

    /// Applies `config` at run time after validating it, keeping the layer's state;
    /// refused, changing nothing, if it is invalid.
    fn reconfigure(&self, config: Self::Config) -> Result<(), ConfigError>;

    /// Goes back to the configuration the layer was built with, keeping its state.
    fn revert(&self);

    /// The layer's state and counters now.
    fn snapshot(&self) -> Self::Snapshot;

    /// Holds the layer in `forced` until [`release`](Self::release); refused,
    /// changing nothing, when `forced` is out of range for this layer (a level it
    /// does not have, a zero limit).
    fn force(&self, forced: Self::Forced) -> Result<(), ConfigError>;

    /// Hands control back to the layer's own policy after [`force`](Self::force).
    fn release(&self);
}

/// Implements [`LayerHandle`] for a handle whose inherent methods of the same names
/// (`name`, `config`, `reconfigure`, `revert`, `snapshot`, `release`) do the work,
/// as every seawall handle's do: the inherent methods need no import, and the trait
/// is then written once, here. `force` is given as a closure-like
/// `|handle, forced| expression`, since layers force different things.
///
/// ```
/// use seawall_core::{layer_handle_by_inherent_methods, ConfigError};
///
/// #[derive(Clone)]
/// struct Handle;
///
/// impl Handle {
///     fn name(&self) -> &str { "quotes" }
///     fn config(&self) -> u32 { 8 }
///     fn reconfigure(&self, _limit: u32) -> Result<(), ConfigError> { Ok(()) }
///     fn revert(&self) {}
///     fn snapshot(&self) -> u32 { 0 }
///     fn hold(&self, _limit: u32) {}
///     fn release(&self) {}
/// }
///
/// layer_handle_by_inherent_methods!(Handle {
///     Config = u32,
///     Snapshot = u32,
///     Forced = u32,
///     force = |handle, limit| {
///         handle.hold(limit);
///         Ok(())
///     },
/// });
/// ```
#[macro_export]
macro_rules! layer_handle_by_inherent_methods {
    ($handle:ty {
        Config = $config:ty,
        Snapshot = $snapshot:ty,
        $(#[$forced_meta:meta])*
        Forced = $forced:ty,
        force = |$this:ident, $forced_arg:pat_param| $force:expr $(,)?
    }) => {
        impl $crate::LayerHandle for $handle {
            type Config = $config;
            type Snapshot = $snapshot;
            $(#[$forced_meta])*
            type Forced = $forced;

            fn name(&self) -> &str {
                <$handle>::name(self)
            }

            fn config(&self) -> $config {
                <$handle>::config(self)
            }

            fn reconfigure(&self, config: $config) -> ::core::result::Result<(), $crate::ConfigError> {
                <$handle>::reconfigure(self, config)
            }

            fn revert(&self) {
                <$handle>::revert(self);
            }

            fn snapshot(&self) -> $snapshot {
                <$handle>::snapshot(self)
            }

            fn force(&self, $forced_arg: $forced) -> ::core::result::Result<(), $crate::ConfigError> {
                let $this = self;
                $force
            }

            fn release(&self) {
                <$handle>::release(self);
            }
        }
    };
}
