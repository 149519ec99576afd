//! [`Keyed`] with a toy policy whose callbacks can be interrupted by a script: an
//! operator (or a call with a new key) landing at a chosen point of another's work,
//! which makes each interleaving of a race happen on one thread, every run.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use proptest::prelude::*;

use super::{Keyed, KeyedPolicy};
use crate::{ConfigError, Name};

/// What a toy state was last brought to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    config: u32,
    forced: Option<u32>,
}

#[derive(Debug)]
struct ToyState {
    held: Mutex<Held>,
}

impl ToyState {
    fn held(&self) -> Held {
        *self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn change(&self, f: impl FnOnce(&mut Held)) {
        f(&mut self.held.lock().unwrap_or_else(PoisonError::into_inner));
    }
}

/// What a script runs, and what a test does.
#[derive(Debug, Clone, Copy)]
enum Action {
    Reconfigure(u32),
    Force(u32),
    Release,
    /// A call with this key: its state, or the overflow state when there is no room.
    Call(u32),
    /// Keeps the key's state (if it has one) from being evicted.
    Pin(u32),
    Unpin,
}

/// A policy whose configuration and forced state are numbers (0 is invalid for
/// both), and whose every callback first runs the script's next action.
#[derive(Default)]
struct Toy {
    script: Mutex<VecDeque<Option<Action>>>,
    layer: OnceLock<Weak<Keyed<Toy>>>,
    pinned: Mutex<Vec<Arc<ToyState>>>,
    /// Operator actions in the order they started, which is the order in which
    /// they wrote the settings.
    log: Mutex<Vec<Action>>,
    built: AtomicUsize,
    applied: AtomicUsize,
    /// Whether each callback yields the thread first (the threaded test).
    yields: bool,
}

impl Toy {
    /// Runs the next action of the script, if any: whatever the caller was about
    /// to do happens after it.
    fn interrupt(&self) {
        if self.yields {
            std::thread::yield_now();
        }
        let next = self
            .script
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front();
        if let (Some(Some(action)), Some(layer)) = (next, self.layer.get()) {
            if let Some(layer) = layer.upgrade() {
                run(&layer, action);
            }
        }
    }
}

impl KeyedPolicy for Toy {
    type Key = u32;
    type State = ToyState;
    type Config = u32;
    type Forced = u32;
    type Error = ConfigError;

    fn check(config: &u32, _built: &u32) -> Result<(), ConfigError> {
        if *config == 0 {
            return Err(ConfigError::new("config", "zero"));
        }
        Ok(())
    }

    fn check_forced(forced: u32) -> Result<(), ConfigError> {
        if forced == 0 {
            return Err(ConfigError::new("forced", "zero"));
        }
        Ok(())
    }

    fn build(
        &self,
        _name: &Name,
        _key: Option<&u32>,
        config: &Arc<u32>,
    ) -> Result<Arc<ToyState>, ConfigError> {
        self.interrupt();
        self.built.fetch_add(1, Ordering::SeqCst);
        Ok(Arc::new(ToyState {
            held: Mutex::new(Held {
                config: **config,
                forced: None,
            }),
        }))
    }

    fn pinned(&self, state: &Arc<ToyState>) -> bool {
        Arc::strong_count(state) > 1
    }

    fn reconfigure(&self, state: &Arc<ToyState>, config: &Arc<u32>) {
        self.interrupt();
        self.applied.fetch_add(1, Ordering::SeqCst);
        state.change(|h| h.config = **config);
    }

    fn force(&self, state: &Arc<ToyState>, forced: u32) {
        self.interrupt();
        self.applied.fetch_add(1, Ordering::SeqCst);
        state.change(|h| h.forced = Some(forced));
    }

    fn release(&self, state: &Arc<ToyState>) {
        self.interrupt();
        self.applied.fetch_add(1, Ordering::SeqCst);
        state.change(|h| h.forced = None);
    }
}

fn layer(max_keys: usize, script: &[Option<Action>]) -> Arc<Keyed<Toy>> {
    let layer = Arc::new(
        Keyed::new("toy".into(), 1, max_keys, || Toy {
            script: Mutex::new(script.iter().copied().collect()),
            ..Toy::default()
        })
        .unwrap(),
    );
    layer.policy().layer.set(Arc::downgrade(&layer)).unwrap();
    layer
}

/// What a layer's services and handle do, as the policy crates do it.
fn run(layer: &Keyed<Toy>, action: Action) {
    let toy = layer.policy();
    let log = |a| {
        toy.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(a);
    };
    match action {
        Action::Reconfigure(config) => {
            log(action);
            layer.reconfigure(config).unwrap();
        }
        Action::Force(forced) => {
            log(action);
            layer.force(forced).unwrap();
        }
        Action::Release => {
            log(action);
            layer.release();
        }
        Action::Call(key) => {
            if layer.state_for(key).unwrap().is_none() {
                layer.overflow().unwrap();
            }
        }
        Action::Pin(key) => {
            if let Some(state) = layer.map().peek(&key) {
                toy.pinned.lock().unwrap().push(state);
            }
        }
        Action::Unpin => toy.pinned.lock().unwrap().clear(),
    }
}

fn held(layer: &Keyed<Toy>, key: u32) -> Held {
    layer.map().peek(&key).unwrap().held()
}

/// Every state (each key's and the overflow's) holds the settings in force.
fn assert_settled(layer: &Keyed<Toy>) {
    let want = Held {
        config: layer.config(),
        forced: layer.forced(),
    };
    for (key, state) in layer.map().entries() {
        assert_eq!(state.held(), want, "key {key}");
    }
    if let Some(overflow) = layer.peek_overflow() {
        assert_eq!(overflow.held(), want, "the overflow state");
    }
}

#[test]
fn a_key_built_while_nothing_changed_is_built_once_and_given_nothing() {
    let layer = layer(8, &[]);
    layer.reconfigure(2).unwrap();
    layer.force(3).unwrap();
    let applied = layer.policy().applied.load(Ordering::SeqCst);
    run(&layer, Action::Call(1));
    run(&layer, Action::Call(1));
    assert_eq!(layer.policy().built.load(Ordering::SeqCst), 1);
    // Built from the configuration in force; forced once, as every new key is.
    assert_eq!(layer.policy().applied.load(Ordering::SeqCst), applied + 1);
    assert_eq!(
        held(&layer, 1),
        Held {
            config: 2,
            forced: Some(3)
        }
    );
}

#[test]
fn a_key_built_while_a_reconfigure_runs_takes_the_new_configuration() {
    // The key reads configuration 1, and while its state is built (not yet in the
    // map, where the reconfigure looks) the operator puts 2 in force.
    let layer = layer(8, &[Some(Action::Reconfigure(2))]);
    run(&layer, Action::Call(1));
    assert_eq!(layer.config(), 2);
    assert_eq!(held(&layer, 1).config, 2);
}

#[test]
fn a_key_built_while_a_force_runs_is_forced() {
    // Forced while its state is built.
    let layer = layer(8, &[Some(Action::Force(5))]);
    run(&layer, Action::Call(1));
    assert_eq!(held(&layer, 1).forced, Some(5));

    // First seen while a force goes through the keys it copied out (key 1's turn).
    let layer = self::layer(8, &[]);
    run(&layer, Action::Call(1));
    layer
        .policy()
        .script
        .lock()
        .unwrap()
        .push_back(Some(Action::Call(2)));
    layer.force(5).unwrap();
    assert_eq!(held(&layer, 1).forced, Some(5));
    assert_eq!(held(&layer, 2).forced, Some(5));
}

#[test]
fn a_release_that_lands_while_a_new_key_is_being_forced_is_not_undone() {
    // Key 1 is built (callback 1), then forced to catch up (callback 2); just before
    // that force lands, the operator releases every key, key 1 included. The
    // catch-up's force would hold key 1 forced after the release: it reads the
    // settings again and releases it.
    let layer = layer(8, &[None, Some(Action::Release)]);
    layer.force(5).unwrap();
    run(&layer, Action::Call(1));
    assert_eq!(layer.forced(), None);
    assert_eq!(held(&layer, 1).forced, None);
    assert_settled(&layer);
}

#[test]
fn a_force_after_a_release_holds_every_key_again() {
    let layer = layer(8, &[]);
    for key in 1..=3 {
        run(&layer, Action::Call(key));
    }
    layer.force(4).unwrap();
    layer.release();
    for key in 1..=3 {
        assert_eq!(held(&layer, key).forced, None);
    }
    layer.force(6).unwrap();
    run(&layer, Action::Call(4));
    for key in 1..=4 {
        assert_eq!(held(&layer, key).forced, Some(6));
    }
    assert_settled(&layer);
}

#[test]
fn an_operator_overtaken_by_another_ends_with_the_last_ones_settings() {
    // A reconfigure to 3 runs just before the one to 2 reaches key 1: the one to 2
    // would leave key 1 (and 2) at 2, while 3 is in force.
    let layer = layer(8, &[]);
    run(&layer, Action::Call(1));
    run(&layer, Action::Call(2));
    let script = &layer.policy().script;
    script
        .lock()
        .unwrap()
        .push_back(Some(Action::Reconfigure(3)));
    layer.reconfigure(2).unwrap();
    assert_eq!(layer.config(), 3);
    assert_settled(&layer);

    // The same with a release landing inside a force.
    script.lock().unwrap().push_back(Some(Action::Release));
    layer.force(7).unwrap();
    assert_eq!(layer.forced(), None);
    assert_settled(&layer);
}

#[test]
fn the_overflow_state_is_caught_up_and_then_follows_the_operator() {
    // One key, pinned: key 2 finds no room and gets the overflow state, which is
    // forced while it is built.
    let layer = layer(1, &[]);
    run(&layer, Action::Call(1));
    run(&layer, Action::Pin(1));
    layer
        .policy()
        .script
        .lock()
        .unwrap()
        .push_back(Some(Action::Force(4)));
    assert!(layer.state_for(2).unwrap().is_none());
    let overflow = layer.overflow().unwrap();
    assert!(Arc::ptr_eq(&layer.overflow().unwrap(), &overflow));
    assert_eq!(overflow.held().forced, Some(4));
    layer.reconfigure(9).unwrap();
    layer.release();
    assert_eq!(
        overflow.held(),
        Held {
            config: 9,
            forced: None
        }
    );
    assert_settled(&layer);
}

#[test]
fn a_refused_setting_changes_nothing() {
    let layer = layer(8, &[]);
    run(&layer, Action::Call(1));
    assert_eq!(layer.reconfigure(0).unwrap_err().field(), "config");
    assert_eq!(layer.force(0).unwrap_err().field(), "forced");
    assert_eq!((layer.config(), layer.forced()), (1, None));
    assert_eq!(layer.policy().applied.load(Ordering::SeqCst), 0);
    assert!(Keyed::new("toy".into(), 0, 1, Toy::default).is_err());
    assert!(Keyed::new("toy".into(), 1, 0, Toy::default).is_err());
}

#[test]
fn a_state_another_call_put_first_is_the_one_kept_and_caught_up() {
    // While key 1's state is built, another call builds one for key 1 and puts it
    // in the map first; the first call gets that one.
    let layer = layer(8, &[Some(Action::Call(1)), Some(Action::Force(2))]);
    let state = layer.state_for(1).unwrap().unwrap();
    assert!(Arc::ptr_eq(&state, &layer.map().peek(&1).unwrap()));
    assert_eq!(layer.policy().built.load(Ordering::SeqCst), 2);
    assert_eq!(state.held().forced, Some(2));
    assert_eq!(layer.map().len(), 1);
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        (1..4u32).prop_map(Action::Reconfigure),
        (1..4u32).prop_map(Action::Force),
        Just(Action::Release),
        (0..6u32).prop_map(Action::Call),
        (0..6u32).prop_map(Action::Pin),
        Just(Action::Unpin),
    ]
}

proptest! {
    /// Calls and operator actions, each of which may be interrupted at any callback
    /// by others (new keys, reconfigures, forces, releases, nested in turn): at the
    /// end every state holds the settings in force, and those are what the last
    /// operator to act wrote.
    #[test]
    fn however_calls_and_operators_interleave_every_state_ends_with_the_settings_in_force(
        actions in proptest::collection::vec(action(), 1..24),
        script in proptest::collection::vec(proptest::option::of(action()), 0..24),
    ) {
        let layer = layer(3, &script);
        for action in actions {
            run(&layer, action);
        }
        assert_settled(&layer);
        let log = layer.policy().log.lock().unwrap().clone();
        let config = log.iter().rev().find_map(|a| match a {
            Action::Reconfigure(c) => Some(*c),
            _ => None,
        });
        let forced = log.iter().rev().find_map(|a| match a {
            Action::Force(f) => Some(Some(*f)),
            Action::Release => Some(None),
            _ => None,
        });
        prop_assert_eq!(layer.config(), config.unwrap_or(1));
        prop_assert_eq!(layer.forced(), forced.flatten());
    }
}

/// Keys arriving on two threads while a third reconfigures, forces and releases, with
/// every callback yielding the thread: every key ends as the last operator left it.
#[test]
fn keys_built_on_threads_while_an_operator_acts_end_with_the_settings_in_force() {
    for last in [Action::Force(3), Action::Release] {
        let layer = Arc::new(
            Keyed::new("toy".into(), 1, 1_000, || Toy {
                yields: true,
                ..Toy::default()
            })
            .unwrap(),
        );
        std::thread::scope(|scope| {
            for thread in 0..2 {
                let layer = &layer;
                scope.spawn(move || {
                    for key in 0..300 {
                        layer.state_for(thread * 1_000 + key).unwrap();
                    }
                });
            }
            let layer = &layer;
            scope.spawn(move || {
                for n in 1..=40 {
                    layer.reconfigure(n).unwrap();
                    layer.force(n).unwrap();
                    layer.release();
                }
                run(layer, last);
            });
        });
        assert_eq!(layer.map().len(), 600);
        assert_eq!(layer.config(), 40);
        assert_settled(&layer);
    }
}
