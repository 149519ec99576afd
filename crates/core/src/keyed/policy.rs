//! What every keyed layer does the same way, whatever its policy; see [`Keyed`].

use std::fmt;
use std::hash::Hash;
use std::slice;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use super::KeyedMap;
use crate::{check_positive, ConfigError, Name};

/// What a keyed layer needs from its policy (the breaker, the bulkhead): how to build
/// one key's state and how to bring it to the layer's settings. Everything else a
/// keyed layer does is [`Keyed`]'s, written once for every policy.
///
/// `build`, `reconfigure`, `force` and `release` are called with no lock held: they
/// may run user code (a metrics recorder, an event subscriber), which may call the
/// layer again.
///
/// The key's bounds are asked where keys are looked up, not here, so that a keyed
/// layer's public types can be named for any key type, as other layers' can.
pub trait KeyedPolicy {
    /// What calls are told apart by (a host, a route, a tenant): `Hash + Eq + Clone`
    /// for the methods of [`Keyed`] that look keys up.
    type Key;
    /// One key's state (a breaker, a bulkhead). Calls hold it through an `Arc`, so
    /// it may outlive its key's place in the map.
    type State;
    /// The configuration every key's state follows.
    type Config: Clone;
    /// What an operator holds every key at (an open breaker, a limit).
    type Forced: Copy + PartialEq;
    /// Why a state could not be built (`Infallible` when it always can).
    type Error;

    /// Validates `config` before it is put in force; `built` is the configuration
    /// the layer was built with (a layer may keep some of it, such as the kind of
    /// limit it has).
    fn check(config: &Self::Config, built: &Self::Config) -> Result<(), ConfigError>;

    /// Validates what [`Keyed::force`] is asked to hold the keys at. Anything, unless
    /// the policy says otherwise.
    fn check_forced(forced: Self::Forced) -> Result<(), ConfigError> {
        let _ = forced;
        Ok(())
    }

    /// A new state for `key` (`None`: the layer's overflow state, see
    /// [`Keyed::overflow`]) of the layer `name`, from `config`, the configuration in
    /// force. A new state is not forced; settings changed while it was built are
    /// applied to it afterwards.
    fn build(
        &self,
        name: &Name,
        key: Option<&Self::Key>,
        config: &Arc<Self::Config>,
    ) -> Result<Arc<Self::State>, Self::Error>;

    /// Whether `state` must not be evicted. Asked under the map's lock: cheap, and no
    /// user code (see [`KeyedMap::get_or_insert_with`]).
    fn pinned(&self, state: &Arc<Self::State>) -> bool;

    /// Applies `config`, validated by [`check`](Self::check), keeping the state.
    fn reconfigure(&self, state: &Arc<Self::State>, config: &Arc<Self::Config>);

    /// Holds `state` at `forced`, validated by [`check_forced`](Self::check_forced).
    fn force(&self, state: &Arc<Self::State>, forced: Self::Forced);

    /// Hands `state` back to its own policy.
    fn release(&self, state: &Arc<Self::State>);
}

/// What the services and the handle of a keyed layer share: one state per key in a
/// bounded [`KeyedMap`], the settings every key follows (the configuration in force
/// and what an operator holds them at), and an overflow state for calls whose key
/// finds no room.
///
/// # A key built while an operator acts catches up
///
/// A key's state is built from the settings in force, outside any lock, and then
/// put in the map; an operator's [`reconfigure`](Self::reconfigure),
/// [`force`](Self::force) or [`release`](Self::release) writes the settings, then
/// applies them to the states in the map, also outside any lock. So a state built
/// meanwhile may be missed by the operator, or be given the settings late, after a
/// newer operator already gave it theirs. One rule covers every interleaving: whoever
/// brings states to the settings (a new key's first call, an operator) reads them
/// again afterwards, and applies what changed meanwhile until they hold still.
/// Whoever changes them last applies them to every state in the map after writing
/// them, so a state settled before that write is brought to them too.
///
/// ```text
///   first call of key k                     operator: force(x)
///   ───────────────────                     ──────────────────
///   read settings (config c, not forced)
///   build k's state from c
///                                           settings.forced = x
///                                           force every state in the map (not k)
///   put k in the map
///   read settings: forced x ≠ none  ──────▶ force k
///   read settings: unchanged        ──────▶ done
/// ```
pub struct Keyed<P: KeyedPolicy> {
    name: Name,
    policy: P,
    built: P::Config,
    settings: Mutex<Settings<P>>,
    map: KeyedMap<P::Key, Arc<P::State>>,
    overflow: OnceLock<Arc<P::State>>,
}

/// The settings every key follows, or those a state was last brought to.
struct Settings<P: KeyedPolicy> {
    /// A new `Arc` for every `reconfigure` (one copy shared by the states built
    /// from it), so comparing pointers tells whether it changed.
    config: Arc<P::Config>,
    forced: Option<P::Forced>,
}

impl<P: KeyedPolicy> Clone for Settings<P> {
    fn clone(&self) -> Self {
        Self {
            config: Arc::clone(&self.config),
            forced: self.forced,
        }
    }
}

impl<P: KeyedPolicy> Settings<P> {
    fn same_as(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.config, &other.config) && self.forced == other.forced
    }
}

impl<P: KeyedPolicy> fmt::Debug for Keyed<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyed")
            .field("name", &self.name)
            .field("max_keys", &self.map.max_keys())
            .finish_non_exhaustive()
    }
}

impl<P: KeyedPolicy> Keyed<P> {
    /// A layer named `name` of at most `max_keys` keys, every key built from
    /// `config`. Both are validated before `policy` is made (making it may register
    /// metrics).
    pub fn new(
        name: Name,
        config: P::Config,
        max_keys: usize,
        policy: impl FnOnce() -> P,
    ) -> Result<Self, ConfigError> {
        P::check(&config, &config)?;
        check_positive("max_keys", max_keys)?;
        Ok(Self {
            name,
            policy: policy(),
            settings: Mutex::new(Settings {
                config: Arc::new(config.clone()),
                forced: None,
            }),
            built: config,
            map: KeyedMap::new(max_keys),
            overflow: OnceLock::new(),
        })
    }

    /// The layer's name.
    pub fn name(&self) -> &Name {
        &self.name
    }

    /// The policy the layer was made with.
    pub fn policy(&self) -> &P {
        &self.policy
    }

    /// The map of the keys' states, for reading (a state is made by
    /// [`state_for`](Self::state_for), which catches it up).
    pub fn map(&self) -> &KeyedMap<P::Key, Arc<P::State>> {
        &self.map
    }

    /// The configuration in force: every key's, and the next keys'.
    pub fn config(&self) -> P::Config {
        P::Config::clone(&self.settings().config)
    }

    /// The configuration the layer was built with.
    pub fn built(&self) -> &P::Config {
        &self.built
    }

    /// What an operator holds every key at, if anything.
    pub fn forced(&self) -> Option<P::Forced> {
        self.settings().forced
    }

    /// The overflow state, if it was ever needed.
    pub fn peek_overflow(&self) -> Option<Arc<P::State>> {
        self.overflow.get().map(Arc::clone)
    }

    fn settings(&self) -> MutexGuard<'_, Settings<P>> {
        // Only assignments run under the lock: a poisoned one is still consistent.
        self.settings.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<P: KeyedPolicy> Keyed<P>
where
    P::Key: Hash + Eq + Clone,
{
    /// The keys that have a state now.
    pub fn keys(&self) -> Vec<P::Key> {
        self.map.entries().into_iter().map(|(k, _)| k).collect()
    }

    /// The state of `key`, built on the key's first call (and another key evicted
    /// if the map is full) and brought to the settings in force. `None` when the map
    /// is full and every key the sweep looked at is pinned (see
    /// [`overflow`](Self::overflow)).
    #[inline]
    pub fn state_for(&self, key: P::Key) -> Result<Option<Arc<P::State>>, P::Error> {
        let mut made = None;
        let found = self.map.get_or_insert_with(
            key,
            |state| self.policy.pinned(state),
            |key| {
                let config = Arc::clone(&self.settings().config);
                let state = self.policy.build(&self.name, Some(key), &config)?;
                made = Some((Arc::clone(&state), config));
                Ok(state)
            },
        )?;
        if let (Some(state), Some((mine, config))) = (&found, made) {
            // Another call may have put its own state for the key first: that call
            // catches its state up.
            if Arc::ptr_eq(state, &mine) {
                self.caught_up(state, config);
            }
        }
        Ok(found)
    }

    /// The one state shared by the calls whose key found no room, made on first use
    /// and from then on reconfigured, forced and released with the keys.
    pub fn overflow(&self) -> Result<Arc<P::State>, P::Error> {
        if let Some(state) = self.overflow.get() {
            return Ok(Arc::clone(state));
        }
        // Built before it is stored, not while the cell is being initialized: user
        // code that runs while it is built may call the layer again.
        let config = Arc::clone(&self.settings().config);
        let made = self.policy.build(&self.name, None, &config)?;
        let state = self.overflow.get_or_init(|| Arc::clone(&made));
        if Arc::ptr_eq(state, &made) {
            self.caught_up(state, config);
        }
        Ok(Arc::clone(state))
    }

    /// Puts `config` in force for every key (present and future) and the overflow
    /// state, after validating it; refused, changing nothing, if invalid.
    pub fn reconfigure(&self, config: P::Config) -> Result<(), ConfigError> {
        P::check(&config, &self.built)?;
        let config = Arc::new(config);
        self.change(
            |s| s.config = Arc::clone(&config),
            |policy, state| policy.reconfigure(state, &config),
        );
        Ok(())
    }

    /// Holds every key (present and future) and the overflow state at `forced` until
    /// [`release`](Self::release); refused, changing nothing, if `forced` is out of
    /// range for the policy.
    pub fn force(&self, forced: P::Forced) -> Result<(), ConfigError> {
        P::check_forced(forced)?;
        self.change(
            |s| s.forced = Some(forced),
            |policy, state| policy.force(state, forced),
        );
        Ok(())
    }

    /// Hands every key and the overflow state back to the policy after
    /// [`force`](Self::force).
    pub fn release(&self) {
        self.change(|s| s.forced = None, |policy, state| policy.release(state));
    }

    /// An operator's change: written to the settings, then `apply`'d to every state
    /// (even one that has it already: the operator's verb reaches every key), then
    /// whatever another operator changed meanwhile.
    fn change(&self, write: impl FnOnce(&mut Settings<P>), apply: impl Fn(&P, &Arc<P::State>)) {
        let mine = {
            let mut settings = self.settings();
            write(&mut settings);
            settings.clone()
        };
        let states = self.states();
        for state in &states {
            apply(&self.policy, state);
        }
        self.settle(&states, mine);
    }

    /// Every state an operator's change applies to, copied out: the policy's calls
    /// run with the map unlocked (a subscriber may read the map from an event).
    fn states(&self) -> Vec<Arc<P::State>> {
        let mut states = self.map.values();
        states.extend(self.peek_overflow());
        states
    }

    /// A state just built from `config`, not forced, brought to the settings in force.
    fn caught_up(&self, state: &Arc<P::State>, config: Arc<P::Config>) {
        let built = Settings {
            config,
            forced: None,
        };
        self.settle(slice::from_ref(state), built);
    }

    /// Brings `states`, last brought to `applied`, to the settings in force, and
    /// again until the settings read after applying them are those applied: anyone
    /// who changed them meanwhile may have given these states their change before
    /// this gave them the older one.
    fn settle(&self, states: &[Arc<P::State>], mut applied: Settings<P>) {
        loop {
            let now = self.settings().clone();
            if now.same_as(&applied) {
                return;
            }
            let reconfigured = !Arc::ptr_eq(&now.config, &applied.config);
            for state in states {
                if reconfigured {
                    self.policy.reconfigure(state, &now.config);
                }
                if now.forced != applied.forced {
                    match now.forced {
                        Some(forced) => self.policy.force(state, forced),
                        None => self.policy.release(state),
                    }
                }
            }
            applied = now;
        }
    }
}

#[cfg(test)]
mod tests;
