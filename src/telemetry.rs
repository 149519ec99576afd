//! The only place with `cfg(feature = "tracing")`: the facade's events (target
//! `seawall::config` for documents applied, refused and reverted; `seawall::admin`
//! for operator actions), so call sites stay free of `cfg`.

#![cfg_attr(not(feature = "tracing"), allow(unused_variables))]

/// A document was applied at run time.
#[cfg(feature = "serde")]
pub(crate) fn applied(generation: u64, changed: &[String]) {
    #[cfg(feature = "tracing")]
    tracing::info!(
        target: "seawall::config",
        generation,
        changed = %changed.join(", "),
        "policy document applied"
    );
}

/// A document was refused; nothing changed. Takes the error as `Display`, so that
/// this module, which the config module calls, does not call it back.
#[cfg(feature = "serde")]
pub(crate) fn refused(error: &dyn std::fmt::Display) {
    #[cfg(feature = "tracing")]
    tracing::warn!(target: "seawall::config", %error, "policy document refused");
}

/// The start-up document was restored.
#[cfg(feature = "serde")]
pub(crate) fn reverted(generation: u64) {
    #[cfg(feature = "tracing")]
    tracing::info!(target: "seawall::config", generation, "policies reverted to the start-up document");
}

/// An operator action through the admin routes: who (by address, when known),
/// what, and whether it was allowed.
#[cfg(feature = "admin")]
pub(crate) fn admin_action(action: &str, policy: Option<&str>, outcome: &str) {
    #[cfg(feature = "tracing")]
    tracing::warn!(target: "seawall::admin", action, policy, outcome, "admin action");
}
