//! Feeds a bulkhead's limit algorithm from its calls, and keeps the limit in force.
//!
//! The hot path reads a few atomics here: whether an algorithm is being fed, its
//! generation, and how often to measure latency. Only a call whose latency is
//! measured (one in `sample_every`) or that reports overload takes the lock,
//! after it completed; no lock is held while the limit is applied to the
//! admission machine, so a waiter woken by a larger limit may call back into
//! the bulkhead at once.

use std::error::Error;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use seawall_core::{BoxError, Classify, Outcome, RandomSource, SeededRandom};
use tokio::time::Instant;

use crate::adaptive::{AdaptiveConfig, Aimd, Gradient, LimitAlgorithm, Observation, Sample};
use crate::config::BulkheadConfig;
use crate::machine::Machine;

/// What an admitted call carries for the algorithm: the generation it was admitted
/// in and, if its latency is measured, when it was admitted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ticket {
    generation: u64,
    started: Option<Instant>,
}

#[derive(Debug)]
enum Algorithm {
    Aimd(Aimd),
    // Boxed: a gradient keeps its latest latencies inline (about 700 bytes).
    Gradient(Box<Gradient>),
}

impl Algorithm {
    fn get(&self) -> &dyn LimitAlgorithm {
        match self {
            Self::Aimd(a) => a,
            Self::Gradient(g) => &**g,
        }
    }

    fn get_mut(&mut self) -> &mut dyn LimitAlgorithm {
        match self {
            Self::Aimd(a) => a,
            Self::Gradient(g) => &mut **g,
        }
    }
}

#[derive(Debug)]
struct State {
    config: Option<AdaptiveConfig>,
    algorithm: Option<Algorithm>,
    /// The operator's limit, which overrides everything while set.
    pinned: Option<usize>,
    /// `max_concurrent`: the limit without an algorithm.
    fixed: usize,
    seeds: SeededRandom,
}

impl State {
    fn in_force(&self) -> usize {
        self.pinned
            .or_else(|| self.algorithm.as_ref().map(|a| a.get().limit()))
            .unwrap_or(self.fixed)
    }

    fn build(&mut self, config: AdaptiveConfig) -> Algorithm {
        match config {
            AdaptiveConfig::Aimd(c) => Algorithm::Aimd(Aimd::new(c)),
            AdaptiveConfig::Gradient(c) => {
                let seed = (self.seeds.next_f64() * (1u64 << 53) as f64) as u64;
                Algorithm::Gradient(Box::new(Gradient::with_seed(c, seed)))
            }
        }
    }
}

/// What the adaptive state looks like now (see [`AdaptiveSnapshot`](crate::AdaptiveSnapshot)).
#[derive(Debug, Clone, Copy)]
pub(crate) struct View {
    pub(crate) algorithm: Option<&'static str>,
    pub(crate) generation: u64,
    pub(crate) min_rtt: Option<Duration>,
    pub(crate) measuring: bool,
    pub(crate) pinned: bool,
}

/// A bulkhead's limit: fixed, chosen by an algorithm, or pinned by an operator.
#[derive(Debug)]
pub(crate) struct Feedback {
    /// An algorithm is being fed (adaptive and not pinned).
    on: AtomicBool,
    /// The algorithm wants every call's latency for now.
    every_call: AtomicBool,
    generation: AtomicU64,
    /// `sample_every - 1` (a power of two minus one).
    sample_mask: AtomicU64,
    /// The limit in force, which the machine applies.
    limit: AtomicUsize,
    state: Mutex<State>,
}

impl Feedback {
    pub(crate) fn new(config: &BulkheadConfig, seed: Option<u64>) -> Self {
        let seeds = seed.map_or_else(SeededRandom::from_entropy, SeededRandom::new);
        let mut state = State {
            config: config.adaptive,
            algorithm: None,
            pinned: None,
            fixed: config.max_concurrent,
            seeds,
        };
        state.algorithm = config.adaptive.map(|c| state.build(c));
        let f = Self {
            on: AtomicBool::new(false),
            every_call: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            sample_mask: AtomicU64::new(0),
            limit: AtomicUsize::new(state.in_force()),
            state: Mutex::new(state),
        };
        f.mirror(&f.lock());
        f
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding the lock; recover the data if it ever did.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Copies what the hot path reads out of the locked state.
    fn mirror(&self, state: &State) {
        let algorithm = state.algorithm.as_ref().map(Algorithm::get);
        let on = algorithm.is_some() && state.pinned.is_none();
        if let Some(a) = algorithm {
            self.generation.store(a.generation(), Ordering::Relaxed);
            self.every_call
                .store(a.wants_every_latency(), Ordering::Relaxed);
        }
        let every = state.config.map_or(1, |c| c.sample_every());
        self.sample_mask
            .store(u64::from(every.max(1)) - 1, Ordering::Relaxed);
        self.limit.store(state.in_force(), Ordering::Relaxed);
        self.on.store(on, Ordering::Relaxed);
    }

    /// The limit in force now.
    #[inline]
    pub(crate) fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// The ticket of a call admitted now, or `None` when no algorithm is fed.
    /// `admissions` numbers fast-path admissions: one in `sample_every` is timed.
    /// A call admitted on the slow path (`None`) is always timed.
    #[inline]
    pub(crate) fn issue(&self, admissions: Option<u64>) -> Option<Ticket> {
        if !self.on.load(Ordering::Relaxed) {
            return None;
        }
        let generation = self.generation.load(Ordering::Relaxed);
        let timed = admissions.is_none_or(|n| n & self.sample_mask.load(Ordering::Relaxed) == 0)
            || self.every_call.load(Ordering::Relaxed);
        Some(Ticket {
            generation,
            started: timed.then(Instant::now),
        })
    }

    /// Learns from a completed call; the limits before and after when the limit in
    /// force changed (the caller then applies it to the machine).
    pub(crate) fn observe<Res, O>(
        &self,
        ticket: Ticket,
        overload: &O,
        result: &Result<Res, BoxError>,
        machine: &Machine,
    ) -> Option<(usize, usize)>
    where
        O: Classify<Res>,
    {
        let outcome =
            overload.classify(result.as_ref().map_err(|e| &**e as &(dyn Error + 'static)));
        let (observation, now) = match outcome {
            Outcome::Ignore => return None,
            Outcome::Success => {
                let started = ticket.started?;
                let now = Instant::now();
                (
                    Observation::Served(now.saturating_duration_since(started)),
                    now,
                )
            }
            Outcome::Failure => {
                // An overload signal from an older generation changes nothing: skip
                // the lock and the clock.
                if ticket.generation != self.generation.load(Ordering::Relaxed) {
                    return None;
                }
                (Observation::Overloaded, Instant::now())
            }
        };
        let sample = Sample {
            observation,
            inflight: machine.counts().active,
            generation: ticket.generation,
        };
        let mut state = self.lock();
        if state.pinned.is_some() {
            return None;
        }
        let before = state.in_force();
        let algorithm = state.algorithm.as_mut()?;
        algorithm.get_mut().on_sample(now, sample);
        self.mirror(&state);
        let after = state.in_force();
        (after != before).then_some((before, after))
    }

    /// Pins the limit at `limit` (an operator override): the algorithm is not fed
    /// until [`release`](Self::release). Returns the limit in force before.
    pub(crate) fn pin(&self, limit: usize) -> usize {
        let mut state = self.lock();
        let before = state.in_force();
        state.pinned = Some(limit);
        self.mirror(&state);
        before
    }

    /// Releases a pinned limit: the algorithm starts again from it (clamped to its
    /// bounds); without an algorithm, `max_concurrent` is in force again. Returns
    /// the limits before and after.
    pub(crate) fn release(&self, now: Instant) -> (usize, usize) {
        let mut state = self.lock();
        let before = state.in_force();
        if let Some(pinned) = state.pinned.take() {
            if let Some(a) = state.algorithm.as_mut() {
                a.get_mut().restart_from(now, pinned);
            }
        }
        self.mirror(&state);
        (before, state.in_force())
    }

    /// Takes a new configuration: `max_concurrent` for a fixed limit, and a changed
    /// `adaptive` section starts its algorithm again (from the limit in force when
    /// one was running, from its initial limit otherwise). A pinned limit stays.
    pub(crate) fn reconfigure(&self, config: &BulkheadConfig, now: Instant) {
        let mut state = self.lock();
        state.fixed = config.max_concurrent;
        if state.config != config.adaptive {
            let running = state.algorithm.as_ref().map(|a| a.get().limit());
            state.config = config.adaptive;
            state.algorithm = config.adaptive.map(|c| {
                let mut a = state.build(c);
                if let Some(limit) = running {
                    a.get_mut().restart_from(now, limit);
                }
                a
            });
        }
        self.mirror(&state);
    }

    /// The algorithm's state for a snapshot.
    pub(crate) fn view(&self) -> View {
        let state = self.lock();
        let (generation, min_rtt, measuring) = match &state.algorithm {
            Some(Algorithm::Gradient(g)) => (g.generation(), g.min_rtt(), g.measuring()),
            Some(Algorithm::Aimd(a)) => (a.generation(), None, false),
            None => (0, None, false),
        };
        View {
            algorithm: state.config.map(|c| c.algorithm()),
            generation,
            min_rtt,
            measuring,
            pinned: state.pinned.is_some(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adaptive::AimdConfig;
    use seawall_core::TimeoutsAsOverload;

    fn config(adaptive: Option<AdaptiveConfig>) -> BulkheadConfig {
        BulkheadConfig {
            max_concurrent: 8,
            adaptive,
            ..BulkheadConfig::default()
        }
    }

    fn aimd() -> AdaptiveConfig {
        AimdConfig {
            initial_limit: 10,
            sample_every: 4,
            ..AimdConfig::default()
        }
        .into()
    }

    #[test]
    fn without_an_algorithm_nothing_is_issued_and_max_concurrent_is_in_force() {
        let f = Feedback::new(&config(None), Some(1));
        assert_eq!(f.limit(), 8);
        assert!(f.issue(Some(0)).is_none());
        assert!(f.view().algorithm.is_none());
    }

    #[test]
    fn one_call_in_sample_every_is_timed() {
        let f = Feedback::new(&config(Some(aimd())), Some(1));
        assert_eq!(f.limit(), 10);
        let timed: Vec<bool> = (1..=8)
            .map(|n| f.issue(Some(n)).unwrap().started.is_some())
            .collect();
        assert_eq!(
            timed,
            [false, false, false, true, false, false, false, true]
        );
        // A call that waited for its slot is always timed.
        assert!(f.issue(None).unwrap().started.is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_pinned_limit_overrides_and_release_restarts_from_it() {
        let f = Feedback::new(&config(Some(aimd())), Some(1));
        let m = Machine::new(10, 0);
        assert_eq!(f.pin(3), 10);
        assert_eq!(f.limit(), 3);
        assert!(
            f.issue(Some(4)).is_none(),
            "a pinned limit feeds no algorithm"
        );
        assert!(f.view().pinned);
        let overloaded: Result<(), BoxError> = Err(Box::new(seawall_core::DeadlineExceeded::new()));
        let ticket = Ticket {
            generation: 0,
            started: None,
        };
        assert!(f
            .observe(ticket, &TimeoutsAsOverload, &overloaded, &m)
            .is_none());
        assert_eq!(f.release(Instant::now()), (3, 3));
        assert!(!f.view().pinned);
        // Released: the algorithm continues from the pinned limit, in a new generation.
        let ticket = f.issue(Some(1)).unwrap();
        assert_eq!(ticket.generation, 1);
        assert_eq!(
            f.observe(ticket, &TimeoutsAsOverload, &overloaded, &m),
            Some((3, 2))
        );
        // The same generation's next overload signal is stale.
        assert!(f
            .observe(ticket, &TimeoutsAsOverload, &overloaded, &m)
            .is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn ignored_and_untimed_served_calls_take_no_lock_and_change_nothing() {
        let f = Feedback::new(&config(Some(aimd())), Some(1));
        let m = Machine::new(10, 0);
        let untimed = f.issue(Some(1)).unwrap();
        let ok: Result<(), BoxError> = Ok(());
        assert!(f.observe(untimed, &TimeoutsAsOverload, &ok, &m).is_none());
        let open: Result<(), BoxError> = Err(Box::new(seawall_core::CircuitOpen::new(
            "b".into(),
            Duration::from_secs(1),
        )));
        let timed = f.issue(Some(4)).unwrap();
        assert!(f.observe(timed, &TimeoutsAsOverload, &open, &m).is_none());
        assert_eq!(f.limit(), 10);
    }

    #[tokio::test(start_paused = true)]
    async fn reconfiguring_restarts_a_changed_algorithm_from_the_limit_in_force() {
        let f = Feedback::new(&config(Some(aimd())), Some(1));
        let m = Machine::new(10, 0);
        let overloaded: Result<(), BoxError> = Err(Box::new(seawall_core::DeadlineExceeded::new()));
        let t = f.issue(Some(1)).unwrap();
        f.observe(t, &TimeoutsAsOverload, &overloaded, &m);
        assert_eq!(f.limit(), 9);
        // The same section again: nothing restarts.
        f.reconfigure(&config(Some(aimd())), Instant::now());
        assert_eq!((f.limit(), f.view().generation), (9, 1));
        let wider = AimdConfig {
            initial_limit: 10,
            max_limit: 300,
            ..AimdConfig::default()
        };
        f.reconfigure(&config(Some(wider.into())), Instant::now());
        assert_eq!(f.limit(), 9);
        f.reconfigure(&config(None), Instant::now());
        assert_eq!(f.limit(), 8);
        assert!(f.issue(Some(8)).is_none());
        f.reconfigure(&config(Some(aimd())), Instant::now());
        assert_eq!(f.limit(), 10, "a new algorithm starts at its initial limit");
    }
}
