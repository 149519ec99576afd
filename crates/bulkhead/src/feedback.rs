//! Feeds a bulkhead's limit algorithm from its calls, and keeps the limit in force.
//!
//! The hot path reads a few atomics here: whether an algorithm is being fed, its
//! generation, and how often to measure latency. Only a call whose latency is
//! measured (one fast-path admission in `sample_every`, and every call that waited
//! for its slot) or that reports overload in the current generation takes the
//! lock, after it completed, and a measured call served in time only if the
//! algorithm could learn from it (see `Feedback::quiet_below`); no lock is held while the limit is applied to the
//! admission semaphore, so a waiter woken by a larger limit may call back into
//! the bulkhead at once.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use seawall_core::{BoxError, Classify, Outcome, RandomSource, SeededRandom};
use tokio::time::Instant;

use crate::adaptive::{AdaptiveConfig, Aimd, Gradient, LimitAlgorithm, Observation, Sample};
use crate::config::BulkheadConfig;
use crate::events::{BulkheadEvent, Events, LimitCause};
use crate::semaphore::Semaphore;

/// What an admitted call carries for the algorithm: the generation it was admitted
/// in and, if its latency is measured, when it was admitted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ticket {
    generation: u64,
    started: Option<Instant>,
}

/// A [`Ticket`] (or none) in the seven bytes a permit's slot leaves free beside its
/// pointer and flag, so that a permit takes 16 bytes: past 128 bytes, every move
/// of a response future is a call to `memcpy`. Packed by [`Feedback::issue_packed`]
/// and read back by [`Feedback::observe_packed`]: the generation modulo 2^14 (the
/// latest generation with those bits is taken, the ticket's own unless 16,384
/// began while the call ran) and the start in whole microseconds modulo 2^40 (a
/// latency is right to the microsecond for calls shorter than 12.7 days).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PackedTicket([u8; 7]);

const PACKED_SOME: u64 = 1 << 55;
const PACKED_TIMED: u64 = 1 << 54;
const PACKED_STARTED_BITS: u32 = 40;
const PACKED_STARTED: u64 = (1 << PACKED_STARTED_BITS) - 1;
const PACKED_GENERATION: u64 = (1 << 14) - 1;

impl PackedTicket {
    /// No ticket: the limit is fixed, or the call is let through beyond it.
    pub(crate) const NONE: Self = Self([0; 7]);

    #[inline]
    fn from_word(word: u64) -> Self {
        let b = word.to_le_bytes();
        Self([b[0], b[1], b[2], b[3], b[4], b[5], b[6]])
    }

    #[inline]
    fn word(self) -> u64 {
        let b = self.0;
        u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], 0])
    }

    /// Whether there is a ticket (an algorithm to tell how the call ended).
    #[inline]
    pub(crate) fn is_some(self) -> bool {
        self.word() & PACKED_SOME != 0
    }
}

/// What packed starts are counted from. Any instant will do (the first one asked
/// for): only differences of two starts modulo 2^40 are read.
static PACKED_BASE: OnceLock<Instant> = OnceLock::new();

/// `at` in whole microseconds since [`PACKED_BASE`] (rounded down, also before
/// it, so that two instants a whole number of microseconds apart are that number
/// apart here), modulo 2^64.
fn packed_micros(at: Instant) -> u64 {
    let base = *PACKED_BASE.get_or_init(Instant::now);
    let whole = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    if at >= base {
        whole(at - base)
    } else {
        let before = base - at;
        let up = u64::from(!before.subsec_nanos().is_multiple_of(1_000));
        whole(before).wrapping_add(up).wrapping_neg()
    }
}

/// When a call started, as [`Feedback::observe_at`] is given it.
#[derive(Debug, Clone, Copy)]
enum Started {
    /// Not timed.
    Untimed,
    /// A whole instant, as the tests give it.
    #[cfg(test)]
    At(Instant),
    /// [`packed_micros`] of the start, modulo 2^40.
    Since(u64),
}

#[derive(Debug)]
enum Algorithm {
    // Both boxed, as the configuration is: a fixed limit (every key of most keyed
    // bulkheads) then carries two pointers, not the 200 bytes of an algorithm it
    // does not have (a gradient keeps its latest latencies inline, about 700).
    Aimd(Box<Aimd>),
    Gradient(Box<Gradient>),
}

impl Algorithm {
    fn get(&self) -> &dyn LimitAlgorithm {
        match self {
            Self::Aimd(a) => &**a,
            Self::Gradient(g) => &**g,
        }
    }

    fn get_mut(&mut self) -> &mut dyn LimitAlgorithm {
        match self {
            Self::Aimd(a) => &mut **a,
            Self::Gradient(g) => &mut **g,
        }
    }
}

/// `repr(C)`, the fields a drop reads first, as in `Feedback` (see `Shared`).
#[derive(Debug)]
#[repr(C)]
struct State {
    config: Option<Box<AdaptiveConfig>>,
    algorithm: Option<Algorithm>,
    /// The operator's limit, which overrides everything while set.
    forced: Option<usize>,
    /// `max_concurrent`: the limit without an algorithm.
    fixed: usize,
    /// A ceiling set from outside (a fleet-wide cap's allotment), applied over
    /// everything else; may be 0.
    allotment: Option<usize>,
    seeds: SeededRandom,
}

impl State {
    /// The bulkhead's own limit: forced, the algorithm's, or `max_concurrent`.
    fn own(&self) -> usize {
        self.forced
            .or_else(|| self.algorithm.as_ref().map(|a| a.get().limit()))
            .unwrap_or(self.fixed)
    }

    fn in_force(&self) -> usize {
        match self.allotment {
            Some(ceiling) => self.own().min(ceiling),
            None => self.own(),
        }
    }

    fn build(&mut self, config: AdaptiveConfig) -> Algorithm {
        match config {
            AdaptiveConfig::Aimd(c) => Algorithm::Aimd(Box::new(Aimd::new(c))),
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
    pub(crate) forced: bool,
}

/// A bulkhead's limit: fixed, chosen by an algorithm, or forced by an operator.
///
/// `repr(C)`, the state first: its boxes are all a drop reads (see `Shared`).
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Feedback {
    state: Mutex<State>,
    /// An algorithm is being fed (adaptive and not forced).
    on: AtomicBool,
    generation: AtomicU64,
    /// `sample_every - 1` (a power of two minus one), or 0 while the algorithm
    /// wants every call's latency.
    sample_mask: AtomicU64,
    /// The limit in force, which the semaphore applies.
    limit: AtomicUsize,
    /// A served call with fewer calls in flight than this at its end, and a latency
    /// of at most `quiet_latency_nanos`, cannot move the algorithm (AIMD grows only
    /// a limit at least half used, and not past `max_limit`): it is dropped without
    /// taking the lock. 0 when every served sample may count (a gradient).
    quiet_below: AtomicUsize,
    quiet_latency_nanos: AtomicU64,
}

impl Feedback {
    pub(crate) fn new(config: &BulkheadConfig, seed: Option<u64>) -> Self {
        let seeds = seed.map_or_else(SeededRandom::from_entropy, SeededRandom::new);
        let mut state = State {
            config: config.adaptive.map(Box::new),
            algorithm: None,
            forced: None,
            fixed: config.max_concurrent,
            allotment: None,
            seeds,
        };
        state.algorithm = config.adaptive.map(|c| state.build(c));
        let f = Self {
            on: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            sample_mask: AtomicU64::new(0),
            limit: AtomicUsize::new(state.in_force()),
            quiet_below: AtomicUsize::new(0),
            quiet_latency_nanos: AtomicU64::new(0),
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
        let on = algorithm.is_some() && state.forced.is_none();
        let mut every = state.config.as_ref().map_or(1, |c| c.sample_every());
        if let Some(a) = algorithm {
            self.generation.store(a.generation(), Ordering::Relaxed);
            if a.wants_every_latency() {
                every = 1;
            }
        }
        self.sample_mask
            .store(u64::from(every.max(1)) - 1, Ordering::Relaxed);
        let (below, latency) = match &state.algorithm {
            Some(Algorithm::Aimd(a)) => {
                let c = a.config();
                let below = if a.limit() >= c.max_limit {
                    usize::MAX
                } else {
                    // `inflight * 2 < limit`, as AIMD tests it.
                    a.limit().div_ceil(2)
                };
                (
                    below,
                    u64::try_from(c.timeout.as_nanos()).unwrap_or(u64::MAX),
                )
            }
            Some(Algorithm::Gradient(_)) | None => (0, 0),
        };
        self.quiet_below.store(below, Ordering::Relaxed);
        self.quiet_latency_nanos.store(latency, Ordering::Relaxed);
        self.limit.store(state.in_force(), Ordering::Relaxed);
        self.on.store(on, Ordering::Relaxed);
    }

    /// The limit in force now.
    #[inline]
    pub(crate) fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// The ticket of a call admitted now, or `None` when no algorithm is fed (then
    /// nothing else is read). A call admitted on the fast path of `semaphore` is
    /// timed when its admission count is a multiple of `sample_every`; one
    /// admitted on the slow path (`None`) is always timed.
    #[inline]
    pub(crate) fn issue(&self, fast_path: Option<&Semaphore>) -> Option<Ticket> {
        if !self.on.load(Ordering::Relaxed) {
            return None;
        }
        Some(self.ticket(fast_path.map(Semaphore::admissions_hint)))
    }

    /// [`Feedback::issue`], packed for a permit.
    #[inline]
    pub(crate) fn issue_packed(&self, fast_path: Option<&Semaphore>) -> PackedTicket {
        match self.issue(fast_path) {
            Some(ticket) => self.pack(ticket),
            None => PackedTicket::NONE,
        }
    }

    #[inline]
    fn pack(&self, ticket: Ticket) -> PackedTicket {
        let mut word =
            PACKED_SOME | ((ticket.generation & PACKED_GENERATION) << PACKED_STARTED_BITS);
        if let Some(started) = ticket.started {
            word |= PACKED_TIMED | (packed_micros(started) & PACKED_STARTED);
        }
        PackedTicket::from_word(word)
    }

    /// How long a call that `started` took, ending `now`.
    fn latency(&self, started: Started, now: Instant) -> Duration {
        match started {
            Started::Untimed => Duration::ZERO,
            #[cfg(test)]
            Started::At(at) => now.saturating_duration_since(at),
            Started::Since(micros) => {
                Duration::from_micros(packed_micros(now).wrapping_sub(micros) & PACKED_STARTED)
            }
        }
    }

    /// [`Feedback::observe`], for a ticket a permit packed.
    pub(crate) fn observe_packed<Res, O>(
        &self,
        packed: PackedTicket,
        overload: &O,
        result: &Result<Res, BoxError>,
        semaphore: &Semaphore,
        events: &Events,
    ) -> Option<(usize, usize)>
    where
        O: Classify<Res>,
    {
        let (generation, started) = self.unpack(packed)?;
        self.observe_at(generation, started, overload, result, semaphore, events)
    }

    /// A packed ticket's generation (the latest whose low bits are the ticket's)
    /// and start; `None` for no ticket.
    #[inline]
    fn unpack(&self, packed: PackedTicket) -> Option<(u64, Started)> {
        let word = packed.word();
        if word & PACKED_SOME == 0 {
            return None;
        }
        let current = self.generation.load(Ordering::Relaxed);
        let low = (word >> PACKED_STARTED_BITS) & PACKED_GENERATION;
        let generation = current.wrapping_sub(current.wrapping_sub(low) & PACKED_GENERATION);
        let started = if word & PACKED_TIMED == 0 {
            Started::Untimed
        } else {
            Started::Since(word & PACKED_STARTED)
        };
        Some((generation, started))
    }

    /// The ticket of an admission numbered `admissions` (`None`: slow path).
    #[inline]
    fn ticket(&self, admissions: Option<u64>) -> Ticket {
        let generation = self.generation.load(Ordering::Relaxed);
        let timed = admissions.is_none_or(|n| n & self.sample_mask.load(Ordering::Relaxed) == 0);
        Ticket {
            generation,
            started: timed.then(Instant::now),
        }
    }

    /// Learns from a completed call with a whole ticket, as the tests make them (a
    /// permit's goes through [`Feedback::observe_packed`]).
    #[cfg(test)]
    pub(crate) fn observe<Res, O>(
        &self,
        ticket: Ticket,
        overload: &O,
        result: &Result<Res, BoxError>,
        semaphore: &Semaphore,
        events: &Events,
    ) -> Option<(usize, usize)>
    where
        O: Classify<Res>,
    {
        let started = ticket.started.map_or(Started::Untimed, Started::At);
        self.observe_at(
            ticket.generation,
            started,
            overload,
            result,
            semaphore,
            events,
        )
    }

    /// Learns from a completed call; the limits before and after when the limit in
    /// force changed (sent to `events` under the lock, so in order; the caller then
    /// applies it to the semaphore).
    fn observe_at<Res, O>(
        &self,
        generation: u64,
        started: Started,
        overload: &O,
        result: &Result<Res, BoxError>,
        semaphore: &Semaphore,
        events: &Events,
    ) -> Option<(usize, usize)>
    where
        O: Classify<Res>,
    {
        let outcome = overload.classify(
            result
                .as_ref()
                .map_err(|e| seawall_core::ErrorRef::from(&**e)),
        );
        let (observation, now) = match outcome {
            Outcome::Ignore => return None,
            Outcome::Success => {
                if matches!(started, Started::Untimed) {
                    return None;
                }
                let now = Instant::now();
                (Observation::Served(self.latency(started, now)), now)
            }
            Outcome::Failure => {
                // An overload signal from an older generation changes nothing: skip
                // the lock and the clock.
                if generation != self.generation.load(Ordering::Relaxed) {
                    return None;
                }
                (Observation::Overloaded, Instant::now())
            }
        };
        let inflight = semaphore.counts().active;
        if let Observation::Served(latency) = observation {
            if inflight < self.quiet_below.load(Ordering::Relaxed)
                && latency.as_nanos()
                    <= u128::from(self.quiet_latency_nanos.load(Ordering::Relaxed))
            {
                return None;
            }
        }
        let sample = Sample {
            observation,
            inflight,
            generation,
        };
        let mut state = self.lock();
        if state.forced.is_some() {
            return None;
        }
        let before = state.in_force();
        let algorithm = state.algorithm.as_mut()?;
        algorithm.get_mut().on_sample(now, sample);
        self.mirror(&state);
        let after = state.in_force();
        if after == before {
            return None;
        }
        events.send(|| limit_changed(before, after, LimitCause::Adaptive, now));
        Some((before, after))
    }

    /// Sets (or, with `None`, lifts) the external ceiling over the limit. Returns
    /// the limits in force before and after.
    pub(crate) fn set_allotment(
        &self,
        allotment: Option<usize>,
        events: &Events,
    ) -> (usize, usize) {
        let mut state = self.lock();
        let before = state.in_force();
        state.allotment = allotment;
        self.mirror(&state);
        let after = state.in_force();
        if after != before {
            events.send(|| limit_changed(before, after, LimitCause::Allotment, Instant::now()));
        }
        (before, after)
    }

    /// The external ceiling, if one is set.
    pub(crate) fn allotment(&self) -> Option<usize> {
        self.lock().allotment
    }

    /// The bulkhead's own limit, without the external ceiling.
    pub(crate) fn own_limit(&self) -> usize {
        self.lock().own()
    }

    /// Forces the limit to `limit` (an operator override): the algorithm is not fed
    /// until [`release`](Self::release). Returns the limit in force before.
    pub(crate) fn force(&self, limit: usize, events: &Events) -> usize {
        let mut state = self.lock();
        let before = state.in_force();
        state.forced = Some(limit);
        self.mirror(&state);
        // The allotment, if any, may keep the limit below the forced limit.
        let after = state.in_force();
        events.send(|| limit_changed(before, after, LimitCause::Forced, Instant::now()));
        before
    }

    /// Releases a forced limit: the algorithm starts again from it (clamped to its
    /// bounds); without an algorithm, `max_concurrent` is in force again. Returns
    /// the limits before and after.
    /// A release with nothing forced sends nothing.
    pub(crate) fn release(&self, now: Instant, events: &Events) -> (usize, usize) {
        let mut state = self.lock();
        let before = state.in_force();
        if let Some(forced) = state.forced.take() {
            if let Some(a) = state.algorithm.as_mut() {
                a.get_mut().restart_from(now, forced);
            }
            let after = state.in_force();
            events.send(|| limit_changed(before, after, LimitCause::Released, now));
        }
        self.mirror(&state);
        (before, state.in_force())
    }

    /// Takes a new configuration: `max_concurrent` for a fixed limit, and a changed
    /// `adaptive` section starts its algorithm again (from the limit in force when
    /// one was running, from its initial limit otherwise). A forced limit stays.
    pub(crate) fn reconfigure(&self, config: &BulkheadConfig, now: Instant, events: &Events) {
        let mut state = self.lock();
        let before = state.in_force();
        state.fixed = config.max_concurrent;
        if state.config.as_deref() != config.adaptive.as_ref() {
            let running = state.algorithm.as_ref().map(|a| a.get().limit());
            state.config = config.adaptive.map(Box::new);
            state.algorithm = config.adaptive.map(|c| {
                let mut a = state.build(c);
                if let Some(limit) = running {
                    a.get_mut().restart_from(now, limit);
                }
                a
            });
        }
        self.mirror(&state);
        let after = state.in_force();
        if after != before {
            events.send(|| limit_changed(before, after, LimitCause::Reconfigured, now));
        }
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
            algorithm: state.config.as_ref().map(|c| c.algorithm()),
            generation,
            min_rtt,
            measuring,
            forced: state.forced.is_some(),
        }
    }
}

fn limit_changed(from: usize, to: usize, cause: LimitCause, at: Instant) -> BulkheadEvent {
    BulkheadEvent::LimitChanged {
        from,
        to,
        cause,
        at,
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
        assert!(f.issue(None).is_none());
        assert!(f.view().algorithm.is_none());
    }

    #[test]
    fn one_call_in_sample_every_is_timed() {
        let f = Feedback::new(&config(Some(aimd())), Some(1));
        assert_eq!(f.limit(), 10);
        let timed: Vec<bool> = (1..=8)
            .map(|n| f.ticket(Some(n)).started.is_some())
            .collect();
        assert_eq!(
            timed,
            [false, false, false, true, false, false, false, true]
        );
        // A call that waited for its slot is always timed.
        assert!(f.issue(None).unwrap().started.is_some());
        let m = Semaphore::new(4, 0);
        assert!(m.try_acquire());
        assert!(
            f.issue(Some(&m)).unwrap().started.is_none(),
            "admission 1 of 4"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_forced_limit_overrides_and_release_restarts_from_it() {
        let f = Feedback::new(&config(Some(aimd())), Some(1));
        let m = Semaphore::new(10, 0);
        assert_eq!(f.force(3, &Events::default()), 10);
        assert_eq!(f.limit(), 3);
        assert!(f.issue(None).is_none(), "a forced limit feeds no algorithm");
        assert!(f.view().forced);
        let overloaded: Result<(), BoxError> = Err(Box::new(seawall_core::DeadlineExceeded::new()));
        let overload = |ticket| {
            f.observe(
                ticket,
                &TimeoutsAsOverload,
                &overloaded,
                &m,
                &Events::default(),
            )
        };
        let ticket = Ticket {
            generation: 0,
            started: None,
        };
        assert!(overload(ticket).is_none());
        assert_eq!(f.release(Instant::now(), &Events::default()), (3, 3));
        assert!(!f.view().forced);
        // Released: the algorithm continues from the forced limit, in a new generation.
        let ticket = f.issue(None).unwrap();
        assert_eq!(ticket.generation, 1);
        assert_eq!(overload(ticket), Some((3, 2)));
        // The same generation's next overload signal is stale.
        assert!(overload(ticket).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn ignored_and_untimed_served_calls_take_no_lock_and_change_nothing() {
        let f = Feedback::new(&config(Some(aimd())), Some(1));
        let m = Semaphore::new(10, 0);
        let untimed = f.ticket(Some(1));
        let ok: Result<(), BoxError> = Ok(());
        assert!(f
            .observe(untimed, &TimeoutsAsOverload, &ok, &m, &Events::default())
            .is_none());
        let open: Result<(), BoxError> = Err(Box::new(seawall_core::CircuitOpen::new(
            "b".into(),
            Duration::from_secs(1),
        )));
        let timed = f.ticket(Some(4));
        assert!(f
            .observe(timed, &TimeoutsAsOverload, &open, &m, &Events::default())
            .is_none());
        assert_eq!(f.limit(), 10);
    }

    #[tokio::test(start_paused = true)]
    async fn reconfiguring_restarts_a_changed_algorithm_from_the_limit_in_force() {
        let f = Feedback::new(&config(Some(aimd())), Some(1));
        let m = Semaphore::new(10, 0);
        let overloaded: Result<(), BoxError> = Err(Box::new(seawall_core::DeadlineExceeded::new()));
        let t = f.ticket(Some(1));
        f.observe(t, &TimeoutsAsOverload, &overloaded, &m, &Events::default());
        assert_eq!(f.limit(), 9);
        // The same section again: nothing restarts.
        f.reconfigure(&config(Some(aimd())), Instant::now(), &Events::default());
        assert_eq!((f.limit(), f.view().generation), (9, 1));
        let wider = AimdConfig {
            initial_limit: 10,
            max_limit: 300,
            ..AimdConfig::default()
        };
        f.reconfigure(
            &config(Some(wider.into())),
            Instant::now(),
            &Events::default(),
        );
        assert_eq!(f.limit(), 9);
        f.reconfigure(&config(None), Instant::now(), &Events::default());
        assert_eq!(f.limit(), 8);
        assert!(f.issue(None).is_none());
        f.reconfigure(&config(Some(aimd())), Instant::now(), &Events::default());
        assert_eq!(f.limit(), 10, "a new algorithm starts at its initial limit");
    }

    #[test]
    fn a_packed_ticket_takes_seven_bytes_and_none_is_not_a_ticket() {
        assert_eq!(std::mem::size_of::<PackedTicket>(), 7);
        let f = Feedback::new(&config(None), Some(1));
        assert!(!f.issue_packed(None).is_some());
        assert!(f.unpack(PackedTicket::NONE).is_none());
    }

    #[test]
    fn a_packed_ticket_reads_back_its_generation_while_fewer_than_2_14_began_since() {
        let f = Feedback::new(&config(Some(aimd())), Some(1));
        for (issued, current) in [
            (0, 0),
            (7, 7),
            (7, 9),
            (16_383, 16_384),
            (16_390, 16_390 + 16_383),
            (u64::MAX - 3, u64::MAX),
        ] {
            f.generation.store(issued, Ordering::Relaxed);
            let packed = f.issue_packed(None);
            assert!(packed.is_some());
            f.generation.store(current, Ordering::Relaxed);
            let (generation, _) = f.unpack(packed).unwrap();
            assert_eq!(generation, issued, "issued in {issued}, read in {current}");
        }
        // 2^14 generations later the low bits are the current generation's again.
        f.generation.store(5, Ordering::Relaxed);
        let packed = f.issue_packed(None);
        f.generation.store(5 + 16_384, Ordering::Relaxed);
        assert_eq!(f.unpack(packed).unwrap().0, 5 + 16_384);
    }

    #[tokio::test(start_paused = true)]
    async fn a_packed_ticket_gives_the_latency_to_the_microsecond_across_the_2_40_wrap() {
        let f = Feedback::new(&config(Some(aimd())), Some(1));
        let latency_of = |packed: PackedTicket| match f.unpack(packed) {
            Some((_, started @ Started::Since(_))) => f.latency(started, Instant::now()),
            other => panic!("a timed ticket, not {other:?}"),
        };
        tokio::time::advance(Duration::from_micros(3)).await;
        let packed = f.issue_packed(None);
        tokio::time::advance(Duration::from_millis(37)).await;
        assert_eq!(latency_of(packed), Duration::from_millis(37));
        // Started 5 µs before the start field wraps (2^40 µs, about 12.7 days, after
        // the feedback was made), ended 8 µs later, past the wrap.
        let field = 1u64 << 40;
        let into_field = packed_micros(Instant::now()) % field;
        tokio::time::advance(Duration::from_micros(field - into_field - 5)).await;
        let packed = f.issue_packed(None);
        tokio::time::advance(Duration::from_micros(8)).await;
        assert_eq!(latency_of(packed), Duration::from_micros(8));
        // An untimed ticket has no start.
        let untimed = f.pack(f.ticket(Some(1)));
        assert!(matches!(f.unpack(untimed), Some((_, Started::Untimed))));
    }
}

#[cfg(test)]
mod schedule {
    //! Random schedules of arrivals, completions (served, overloaded, failed,
    //! timed out, short-circuited), waits, clock advances and operator forces,
    //! through the admission semaphore and an adaptive algorithm together, checked
    //! after every step.
    use std::task::Waker;

    use proptest::prelude::*;
    use seawall_core::{CircuitOpen, DeadlineExceeded, OverloadStatus};

    use super::*;
    use crate::adaptive::{AimdConfig, GradientConfig};
    use crate::semaphore::{Enqueued, Leave, Left, WaiterId};
    use crate::state::Shared;

    #[derive(Debug, Clone, Copy)]
    enum Reply {
        Ok,
        Overloaded,
        Failed,
        TimedOut,
        Open,
    }

    #[derive(Debug, Clone)]
    enum Op {
        Arrive,
        Complete(usize, Reply),
        Poll(usize),
        TimeOut(usize),
        Advance(u64),
        Force(usize),
        Release,
    }

    fn reply() -> impl Strategy<Value = Reply> {
        prop_oneof![
            6 => Just(Reply::Ok),
            2 => Just(Reply::Overloaded),
            1 => Just(Reply::Failed),
            1 => Just(Reply::TimedOut),
            1 => Just(Reply::Open),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => Just(Op::Arrive),
            5 => (any::<usize>(), reply()).prop_map(|(i, r)| Op::Complete(i, r)),
            2 => any::<usize>().prop_map(Op::Poll),
            1 => any::<usize>().prop_map(Op::TimeOut),
            3 => (0..400u64).prop_map(Op::Advance),
            1 => (1..12usize).prop_map(Op::Force),
            1 => Just(Op::Release),
        ]
    }

    fn algorithm() -> impl Strategy<Value = AdaptiveConfig> {
        let bounds = (1..6usize, 0..10usize, 0..10usize);
        prop_oneof![
            (bounds.clone(), 0..4u32, 1..500u64).prop_map(|((min, span, at), every, timeout)| {
                AdaptiveConfig::from(AimdConfig {
                    min_limit: min,
                    max_limit: min + span,
                    initial_limit: min + at.min(span),
                    sample_every: 1 << every,
                    timeout: Duration::from_millis(timeout),
                    ..AimdConfig::default()
                })
            }),
            (bounds, 0..4u32, 1..5usize).prop_map(|((min, span, at), every, samples)| {
                AdaptiveConfig::from(GradientConfig {
                    min_limit: min,
                    max_limit: min + span,
                    initial_limit: min + at.min(span),
                    sample_every: 1 << every,
                    window: Duration::from_millis(50),
                    window_samples: samples,
                    min_rtt_samples: samples,
                    min_rtt_every: Duration::from_secs(2),
                    ..GradientConfig::default()
                })
            }),
        ]
    }

    fn result(reply: Reply) -> Result<http::Response<()>, BoxError> {
        let status = |code: u16| {
            let mut res = http::Response::new(());
            *res.status_mut() = http::StatusCode::from_u16(code).unwrap_or_default();
            Ok(res)
        };
        match reply {
            Reply::Ok => status(200),
            Reply::Overloaded => status(503),
            Reply::Failed => status(500),
            Reply::TimedOut => Err(Box::new(DeadlineExceeded::new())),
            Reply::Open => Err(Box::new(CircuitOpen::new(
                "inner".into(),
                Duration::from_secs(1),
            ))),
        }
    }

    fn run(adaptive: AdaptiveConfig, max_queue: usize, ops: Vec<Op>) -> Result<(), TestCaseError> {
        let rt = seawall_test_support::paused_runtime();
        rt.block_on(async move {
            let mut config = BulkheadConfig {
                adaptive: Some(adaptive),
                ..BulkheadConfig::default()
            };
            config.queue.max_queue = max_queue;
            let (min, max) = match adaptive {
                AdaptiveConfig::Aimd(c) => (c.min_limit, c.max_limit),
                AdaptiveConfig::Gradient(c) => (c.min_limit, c.max_limit),
            };
            let shared = Shared::new("schedule".into(), config, Some(3));
            let m = &shared.semaphore;
            let waker = Waker::noop();
            let mut holders: Vec<PackedTicket> = Vec::new();
            let mut waiters: Vec<WaiterId> = Vec::new();
            let mut forced: Option<usize> = None;
            let classify = OverloadStatus::default();

            for op in ops {
                let before = m.counts();
                let limit_before = m.max_concurrent();
                let mut left = false;
                match op {
                    Op::Arrive => {
                        if m.try_acquire() {
                            // No admission while active ≥ the limit, and none past a waiter.
                            prop_assert!(before.active < limit_before && before.queued == 0);
                            holders.push(shared.feedback.issue_packed(Some(m)));
                        } else if !m.is_full() {
                            match m.enqueue() {
                                Enqueued::Admitted => {
                                    prop_assert!(before.active < limit_before);
                                    holders.push(shared.feedback.issue_packed(None));
                                }
                                Enqueued::Waiting(id) => waiters.push(id),
                                Enqueued::Full | Enqueued::Expired => {}
                            }
                        }
                    }
                    Op::Complete(i, reply) if !holders.is_empty() => {
                        let ticket = holders.swap_remove(i % holders.len());
                        if let Some((b, a)) = shared.feedback.observe_packed(
                            ticket,
                            &classify,
                            &result(reply),
                            m,
                            &shared.events,
                        ) {
                            shared.apply_limit(b, a);
                        }
                        shared.release_slot();
                    }
                    Op::Poll(i) if !waiters.is_empty() => {
                        let k = i % waiters.len();
                        if m.poll_waiter(waiters[k], waker) {
                            waiters.swap_remove(k);
                            holders.push(shared.feedback.issue_packed(None));
                        }
                    }
                    Op::TimeOut(i) if !waiters.is_empty() => {
                        let id = waiters.swap_remove(i % waiters.len());
                        left = true;
                        if m.leave(id, Leave::TimedOut) == Left::HoldsSlot {
                            holders.push(shared.feedback.issue_packed(None));
                        }
                    }
                    Op::Advance(ms) => tokio::time::advance(Duration::from_millis(ms)).await,
                    Op::Force(n) => {
                        forced = Some(n);
                        shared.force_limit(n);
                    }
                    Op::Release => {
                        forced = None;
                        shared.release_limit();
                    }
                    Op::Complete(..) | Op::Poll(_) | Op::TimeOut(_) => {}
                }
                let after = m.counts();
                let limit = m.max_concurrent();
                prop_assert_eq!(limit, shared.feedback.limit());
                match forced {
                    Some(n) => prop_assert_eq!(limit, n),
                    None => prop_assert!(
                        (min..=max).contains(&limit),
                        "{limit} outside {min}..={max}"
                    ),
                }
                // Slots handed to waiters in this step went only below the limit.
                if after.queued < before.queued && !left {
                    prop_assert!(after.active <= limit, "{after:?} over {limit}");
                }
                // A slot never sits free while someone waits.
                prop_assert!(
                    after.queued == 0 || after.active >= limit,
                    "{after:?} with {limit}"
                );
                prop_assert_eq!(after.active, holders.len() + handed(m, &waiters));
            }
            Ok(())
        })
    }

    /// Waiters already handed a slot (they hold it, but have not polled yet).
    fn handed(m: &Semaphore, waiters: &[WaiterId]) -> usize {
        waiters.len() - m.counts().queued
    }

    fn bulkhead(config: AimdConfig) -> BulkheadConfig {
        BulkheadConfig {
            adaptive: Some(config.into()),
            ..BulkheadConfig::default()
        }
    }

    /// Feeds `samples` (latency in ms, calls in flight, time passing in ms) to a
    /// bulkhead's feedback and to a bare AIMD, and asserts the same limit after each:
    /// the lock-free drop of quiet served samples changes nothing the algorithm
    /// would have done.
    fn same_as_the_bare_algorithm(
        config: AimdConfig,
        samples: &[(u64, usize, u64)],
    ) -> Result<(), TestCaseError> {
        let rt = seawall_test_support::paused_runtime();
        rt.block_on(async {
            let f = Feedback::new(&bulkhead(config), Some(1));
            let mut bare = Aimd::new(config);
            let events = Events::default();
            let m = Semaphore::new(crate::queue::MAX_LIMIT, 0);
            let mut held = 0;
            for &(latency, inflight, pause) in samples {
                tokio::time::advance(Duration::from_millis(pause)).await;
                while held < inflight {
                    prop_assert!(m.try_acquire());
                    held += 1;
                }
                while held > inflight {
                    m.release();
                    held -= 1;
                }
                let now = Instant::now();
                let latency = Duration::from_millis(latency);
                let ticket = Ticket {
                    generation: f.generation.load(Ordering::Relaxed),
                    started: Some(now - latency),
                };
                let ok: Result<(), BoxError> = Ok(());
                f.observe(ticket, &seawall_core::TimeoutsAsOverload, &ok, &m, &events);
                bare.on_sample(now, Sample::served(latency, inflight, bare.generation()));
                prop_assert_eq!(f.limit(), bare.limit());
            }
            Ok(())
        })
    }

    #[test]
    fn quiet_served_samples_are_dropped_without_changing_what_aimd_does() {
        let config = AimdConfig {
            initial_limit: 10,
            min_limit: 1,
            max_limit: 12,
            timeout: Duration::from_millis(100),
            sample_every: 1,
            ..AimdConfig::default()
        };
        // Below half the limit: nothing; at half: one more; above the timeout: less;
        // at the maximum: nothing more.
        same_as_the_bare_algorithm(
            config,
            &[
                (10, 4, 0),
                (10, 5, 20),
                (200, 1, 20),
                (10, 9, 300),
                (10, 10, 300),
                (10, 11, 300),
                (10, 12, 300),
                (10, 12, 300),
            ],
        )
        .unwrap();
        let f = Feedback::new(&bulkhead(config), Some(1));
        assert_eq!(f.quiet_below.load(Ordering::Relaxed), 5);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
        #[test]
        fn dropping_quiet_samples_never_changes_the_limit_aimd_finds(
            max_limit in 1..40usize,
            timeout in 1..200u64,
            samples in proptest::collection::vec((0..300u64, 0..50usize, 0..150u64), 1..200),
        ) {
            let config = AimdConfig {
                initial_limit: max_limit.div_ceil(2),
                min_limit: 1,
                max_limit,
                timeout: Duration::from_millis(timeout),
                sample_every: 1,
                ..AimdConfig::default()
            };
            same_as_the_bare_algorithm(config, &samples)?;
        }

        #[test]
        fn the_limit_stays_in_bounds_and_nobody_is_admitted_at_it(
            adaptive in algorithm(),
            max_queue in 0..6usize,
            ops in proptest::collection::vec(op(), 1..250),
        ) {
            run(adaptive, max_queue, ops)?;
        }
    }
}
