//! Latency against a baseline that is measured again on a jittered schedule.

use std::fmt;
use std::time::Duration;

use seawall_core::{check_fraction, later, ConfigError, RandomSource, SeededRandom};
use tokio::time::Instant;

use super::{
    check_backoff, check_limits, check_window, decreased, LimitAlgorithm, Observation, Sample,
};

/// How many latencies a window or a baseline measurement keeps (the latest ones).
const KEPT: usize = 32;

/// The settings of [`Gradient`].
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
pub struct GradientConfig {
    /// The limit once the first baseline is measured (default 20).
    pub initial_limit: usize,
    /// The lowest limit, and the limit while the first baseline is measured
    /// (default 4).
    pub min_limit: usize,
    /// The highest limit (default 200, at most 2^20).
    pub max_limit: usize,
    /// How much queueing the limit allows, as a share of the baseline latency
    /// (default 0.1: calls may take 10 % longer than without any queue). The
    /// supplier's queue settles near this share of its capacity.
    pub tolerance: f64,
    /// The shortest time between two limit updates (default 250 ms).
    #[cfg_attr(feature = "serde", serde(with = "seawall_core::duration_format"))]
    pub window: Duration,
    /// The fewest latencies a window needs before it updates the limit (1 to 32,
    /// default 8).
    pub window_samples: usize,
    /// How often the baseline is measured again (default 30 s, plus up to
    /// `jitter` of it at random, so a fleet does not measure in step).
    #[cfg_attr(feature = "serde", serde(with = "seawall_core::duration_format"))]
    pub min_rtt_every: Duration,
    /// The random share added to each `min_rtt_every` (0.0 to 1.0, default 0.15).
    pub jitter: f64,
    /// The latencies one baseline measurement takes; the baseline is their median,
    /// so one lucky call does not set it (1 to 32, default 16).
    pub min_rtt_samples: usize,
    /// The factor applied on an overload signal (default 0.9, in `0.5..1.0`).
    pub backoff: f64,
    /// One admitted call in this many has its latency measured (a power of two,
    /// default 8); every call is measured while the baseline is.
    pub sample_every: u32,
}

impl Default for GradientConfig {
    fn default() -> Self {
        Self {
            initial_limit: 20,
            min_limit: 4,
            max_limit: 200,
            tolerance: 0.1,
            window: Duration::from_millis(250),
            window_samples: 8,
            min_rtt_every: Duration::from_secs(30),
            jitter: 0.15,
            min_rtt_samples: 16,
            backoff: 0.9,
            sample_every: 8,
        }
    }
}

impl GradientConfig {
    /// Checks every field, naming the first one at fault.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_limits(
            self.initial_limit,
            self.min_limit,
            self.max_limit,
            self.sample_every,
        )?;
        check_fraction("tolerance", self.tolerance)?;
        check_window("window", self.window)?;
        check_count("window_samples", self.window_samples)?;
        check_window("min_rtt_every", self.min_rtt_every)?;
        check_fraction("jitter", self.jitter)?;
        check_count("min_rtt_samples", self.min_rtt_samples)?;
        check_backoff(self.backoff)
    }
}

fn check_count(field: &'static str, n: usize) -> Result<(), ConfigError> {
    if (1..=KEPT).contains(&n) {
        Ok(())
    } else {
        Err(ConfigError::new(
            field,
            format!("must be between 1 and {KEPT}, got {n}"),
        ))
    }
}

/// A window's latencies, without allocating: the sum of all of them (for the
/// mean) and the latest [`KEPT`] (for a median).
#[derive(Debug, Clone)]
struct Latencies {
    kept: [Duration; KEPT],
    seen: usize,
    sum: Duration,
    busiest: usize,
}

impl Latencies {
    fn new() -> Self {
        Self {
            kept: [Duration::ZERO; KEPT],
            seen: 0,
            sum: Duration::ZERO,
            busiest: 0,
        }
    }

    fn push(&mut self, latency: Duration, inflight: usize) {
        self.kept[self.seen % KEPT] = latency;
        self.seen += 1;
        self.sum = self.sum.saturating_add(latency);
        self.busiest = self.busiest.max(inflight);
    }

    /// Latencies kept (for the median).
    fn len(&self) -> usize {
        self.seen.min(KEPT)
    }

    /// The mean of every latency in the window: by Little's law, what relates
    /// latency to the number of calls queued.
    fn mean(&self) -> Duration {
        self.sum.div_f64(self.seen.max(1) as f64)
    }

    fn median(&self) -> Duration {
        let mut sorted = self.kept;
        let kept = &mut sorted[..self.len()];
        kept.sort_unstable();
        kept.get(kept.len() / 2).copied().unwrap_or_default()
    }

    fn clear(&mut self) {
        self.seen = 0;
        self.sum = Duration::ZERO;
        self.busiest = 0;
    }
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Measuring the baseline with the limit lowered; `resume` is the limit to go
    /// back to.
    Measuring { resume: f64 },
    /// Comparing windows of latencies with the baseline; the window began `since`.
    Tracking { since: Instant },
}

/// A latency gradient: the limit follows what the supplier serves without queueing.
///
/// **Baseline.** The latency without queueing, measured with the limit lowered so
/// that any queue the limit allowed drains: the first time at `min_limit`, then
/// every `min_rtt_every` (plus jitter) at the limit divided by
/// `1 + 2 × tolerance` — a limit that allowed `tolerance` of queueing leaves the
/// supplier idle capacity at that level, so the dip is short and shallow. The
/// baseline is the median of `min_rtt_samples` latencies, and it may go up as well
/// as down: a supplier that became slower for good gets a new baseline, not an
/// ever-shrinking limit. A measurement that comes due while the limit is falling
/// waits until it stops falling (or reaches `min_limit`), so it does not measure a
/// queue.
///
/// **Windows.** Between measurements, each window of at least `window` and
/// `window_samples` latencies of the current generation sets
///
/// ```text
/// gradient = clamp(baseline × (1 + tolerance) / mean latency, 0.5, 2.0)
/// limit    = limit × gradient            (+ √limit when the window saw no queueing at all)
/// ```
///
/// The mean, not the median: by Little's law the mean latency is what relates
/// the calls in flight to what the supplier serves, so with `limit` above what it
/// serves at once (`c`), one window brings the limit to about
/// `c × (1 + tolerance)`; below it, the limit grows by `tolerance` plus the
/// headroom each window. A limit far from used (less than half in flight) does not
/// grow. An overload signal from a current call multiplies the limit by `backoff`
/// at once and starts a new window.
///
/// ```
/// use std::time::Duration;
/// use seawall_bulkhead::adaptive::{Gradient, GradientConfig, LimitAlgorithm, Sample};
/// use tokio::time::Instant;
///
/// let config = GradientConfig { min_rtt_samples: 4, window_samples: 4, ..GradientConfig::default() };
/// let mut g = Gradient::with_seed(config, 7);
/// assert_eq!(g.limit(), 4); // measuring the first baseline at min_limit
/// let mut now = Instant::now();
/// let ms = Duration::from_millis;
/// for _ in 0..4 {
///     now += ms(100);
///     g.on_sample(now, Sample::served(ms(100), 4, g.generation()));
/// }
/// assert_eq!((g.limit(), g.min_rtt()), (20, Some(ms(100))));
/// // The supplier queues: calls take twice as long. One window brings the limit to
/// // what it serves at once, plus the tolerance: 20 × 110 / 200.
/// for _ in 0..4 {
///     now += ms(100);
///     g.on_sample(now, Sample::served(ms(200), 20, g.generation()));
/// }
/// assert_eq!(g.limit(), 11);
/// ```
pub struct Gradient {
    config: GradientConfig,
    limit: f64,
    generation: u64,
    phase: Phase,
    first: bool,
    baseline: Option<Duration>,
    window: Latencies,
    measure_at: Option<Instant>,
    fell: bool,
    random: Box<dyn RandomSource>,
}

impl fmt::Debug for Gradient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gradient")
            .field("limit", &self.limit())
            .field("generation", &self.generation)
            .field("baseline", &self.baseline)
            .field("measuring", &self.measuring())
            .finish_non_exhaustive()
    }
}

impl Gradient {
    /// An algorithm that first measures its baseline at `min_limit`, then starts at
    /// `initial_limit`; `random` jitters the measurement schedule. The
    /// configuration is assumed valid ([`GradientConfig::validate`]); out-of-range
    /// values are clamped.
    pub fn new(config: GradientConfig, random: impl RandomSource) -> Self {
        let min = config.min_limit.max(1);
        let max = config.max_limit.max(min);
        let config = GradientConfig {
            min_limit: min,
            max_limit: max,
            initial_limit: config.initial_limit.clamp(min, max),
            window_samples: config.window_samples.clamp(1, KEPT),
            min_rtt_samples: config.min_rtt_samples.clamp(1, KEPT),
            ..config
        };
        Self {
            limit: min as f64,
            generation: 0,
            phase: Phase::Measuring {
                resume: config.initial_limit as f64,
            },
            first: true,
            baseline: None,
            window: Latencies::new(),
            measure_at: None,
            fell: false,
            random: Box::new(random),
            config,
        }
    }

    /// As [`Gradient::new`], with the schedule's jitter fixed by `seed`.
    pub fn with_seed(config: GradientConfig, seed: u64) -> Self {
        Self::new(config, SeededRandom::new(seed))
    }

    /// The settings.
    pub fn config(&self) -> &GradientConfig {
        &self.config
    }

    /// The baseline latency (the latency without queueing), once measured.
    pub fn min_rtt(&self) -> Option<Duration> {
        self.baseline
    }

    /// Whether the baseline is being measured now (the limit is lowered meanwhile).
    pub fn measuring(&self) -> bool {
        matches!(self.phase, Phase::Measuring { .. })
    }

    fn clamp(&self, limit: f64) -> f64 {
        limit.clamp(self.config.min_limit as f64, self.config.max_limit as f64)
    }

    /// Sets the limit; a change of its whole number starts a new generation.
    fn set(&mut self, limit: f64) {
        let limit = self.clamp(limit);
        if limit as usize != self.limit as usize {
            self.generation += 1;
        }
        self.limit = limit;
    }

    fn schedule_measurement(&mut self, now: Instant) {
        let jitter = self.config.jitter * self.random.next_f64().clamp(0.0, 1.0);
        let every = self.config.min_rtt_every.mul_f64(1.0 + jitter);
        self.measure_at = Some(later(now, every));
    }

    fn start_measuring(&mut self) {
        let resume = self.limit;
        let lowered = if self.first {
            self.config.min_limit as f64
        } else {
            (resume / (1.0 + 2.0 * self.config.tolerance)).ceil()
        };
        let before = self.generation;
        self.set(lowered);
        // A new generation even when the whole number did not move: only calls
        // admitted from now on measure the baseline.
        if self.generation == before {
            self.generation += 1;
        }
        self.phase = Phase::Measuring { resume };
        self.window.clear();
    }

    fn start_window(&mut self, now: Instant) {
        self.phase = Phase::Tracking { since: now };
        self.window.clear();
    }

    fn on_overload(&mut self, now: Instant) {
        match &mut self.phase {
            Phase::Measuring { resume } => {
                // Still too much for the supplier: come back lower.
                *resume = decreased(*resume, self.config.backoff, self.config.min_limit);
                self.generation += 1;
                self.window.clear();
            }
            Phase::Tracking { .. } => {
                let next = decreased(self.limit, self.config.backoff, self.config.min_limit);
                self.set(next);
                self.generation += 1;
                self.fell = true;
                self.start_window(now);
            }
        }
    }

    fn finish_measuring(&mut self, now: Instant, resume: f64) {
        self.baseline = Some(self.window.median());
        self.first = false;
        self.set(resume);
        self.generation += 1;
        self.fell = false;
        self.schedule_measurement(now);
        self.start_window(now);
    }

    fn close_window(&mut self, now: Instant, baseline: Duration) {
        let rtt = self.window.mean();
        let limit = self.limit;
        let mut next = if rtt.is_zero() {
            limit * 2.0
        } else {
            let target = baseline.as_secs_f64() * (1.0 + self.config.tolerance);
            limit * (target / rtt.as_secs_f64()).clamp(0.5, 2.0)
        };
        if rtt <= baseline {
            // No queueing at all: capacity has come back, climb fast.
            next += limit.sqrt();
        }
        if (self.window.busiest as f64) * 2.0 < limit {
            // Far from used: this window says nothing about a higher limit.
            next = next.min(limit);
        }
        self.fell = (next as usize) < (limit as usize);
        self.set(next);
        self.start_window(now);
    }
}

impl LimitAlgorithm for Gradient {
    fn limit(&self) -> usize {
        self.limit as usize
    }

    fn generation(&self) -> u64 {
        self.generation
    }

    fn on_sample(&mut self, now: Instant, sample: Sample) -> usize {
        if sample.generation != self.generation {
            // Admitted under another limit: its queue was made by that one.
            return self.limit();
        }
        let latency = match sample.observation {
            Observation::Overloaded => {
                self.on_overload(now);
                return self.limit();
            }
            Observation::Served(latency) => latency,
        };
        self.window.push(latency, sample.inflight);
        match self.phase {
            Phase::Measuring { resume } => {
                if self.window.len() >= self.config.min_rtt_samples {
                    self.finish_measuring(now, resume);
                }
            }
            Phase::Tracking { since } => {
                let due = self.measure_at.is_some_and(|at| now >= at);
                if due && (!self.fell || self.limit() == self.config.min_limit) {
                    self.start_measuring();
                } else if let Some(baseline) = self.baseline {
                    if now.saturating_duration_since(since) >= self.config.window
                        && self.window.seen >= self.config.window_samples
                    {
                        self.close_window(now, baseline);
                    }
                }
            }
        }
        self.limit()
    }

    fn restart_from(&mut self, now: Instant, limit: usize) {
        let limit = self.clamp(limit as f64);
        if self.baseline.is_some() {
            self.limit = limit;
            self.generation += 1;
            self.fell = false;
            self.start_window(now);
        } else {
            // No baseline yet: keep measuring, then continue from `limit`.
            self.phase = Phase::Measuring { resume: limit };
            self.generation += 1;
            self.window.clear();
        }
    }

    fn wants_every_latency(&self) -> bool {
        self.measuring()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn config() -> GradientConfig {
        GradientConfig {
            initial_limit: 20,
            min_limit: 4,
            max_limit: 100,
            window_samples: 4,
            min_rtt_samples: 4,
            window: ms(250),
            min_rtt_every: Duration::from_secs(30),
            jitter: 0.0,
            ..GradientConfig::default()
        }
    }

    /// Feeds `n` served samples of `latency`, `step` apart, in the current generation.
    fn feed(g: &mut Gradient, now: &mut Instant, n: usize, latency: Duration, step: Duration) {
        for _ in 0..n {
            *now += step;
            let inflight = g.limit();
            g.on_sample(*now, Sample::served(latency, inflight, g.generation()));
        }
    }

    fn measured(latency: Duration) -> (Gradient, Instant) {
        let mut g = Gradient::with_seed(config(), 1);
        let mut now = Instant::now();
        feed(&mut g, &mut now, 4, latency, ms(10));
        (g, now)
    }

    #[test]
    fn measures_the_first_baseline_at_the_minimum_as_a_median() {
        let mut g = Gradient::with_seed(config(), 1);
        assert!(g.measuring() && g.wants_every_latency());
        assert_eq!(g.limit(), 4);
        let mut now = Instant::now();
        // One lucky sample among four does not set the baseline.
        for latency in [ms(10), ms(100), ms(100), ms(120)] {
            now += ms(10);
            g.on_sample(now, Sample::served(latency, 4, g.generation()));
        }
        assert_eq!(g.min_rtt(), Some(ms(100)));
        assert!(!g.measuring());
        assert_eq!(g.limit(), 20);
    }

    #[test]
    fn a_queue_brings_the_limit_to_what_is_served_plus_the_tolerance() {
        let (mut g, mut now) = measured(ms(100));
        // 20 in flight and latency 2 × baseline: the supplier serves about 10 at
        // once. The window closes after 250 ms (25 samples).
        feed(&mut g, &mut now, 24, ms(200), ms(10));
        assert_eq!(g.limit(), 20);
        feed(&mut g, &mut now, 1, ms(200), ms(10));
        assert_eq!(g.limit(), 11);
        // At 11 the latency is 10 % above the baseline: that is the tolerance, stay.
        feed(&mut g, &mut now, 30, ms(110), ms(10));
        assert_eq!(g.limit(), 11);
        // The gradient never more than halves the limit in one window.
        feed(&mut g, &mut now, 30, ms(10_000), ms(10));
        assert!(g.limit() >= 4);
    }

    #[test]
    fn a_window_is_judged_by_its_mean_latency() {
        let (mut g, mut now) = measured(ms(100));
        // About half the calls wait a whole service time, the others none: the
        // mean says how long the queue is, the median (100 ms) would not see it.
        for i in 0..25 {
            now += ms(10);
            let latency = if i % 2 == 0 { ms(100) } else { ms(200) };
            g.on_sample(now, Sample::served(latency, 20, g.generation()));
        }
        // 13 × 100 ms and 12 × 200 ms: a mean of 148 ms, and 20 × 110 / 148 = 14.86.
        assert_eq!(g.limit(), 14);
    }

    #[test]
    fn without_queueing_it_climbs_by_tolerance_and_headroom_per_window() {
        let (mut g, mut now) = measured(ms(100));
        let g0 = g.generation();
        feed(&mut g, &mut now, 4, ms(100), ms(100));
        // 20 × 1.1 + √20 = 26.47.
        assert_eq!(g.limit(), 26);
        assert!(g.generation() > g0);
        feed(&mut g, &mut now, 4, ms(100), ms(100));
        // 26.47 × 1.1 + √26.47 = 34.26.
        assert_eq!(g.limit(), 34);
    }

    #[test]
    fn samples_from_an_older_generation_are_not_counted() {
        let (mut g, mut now) = measured(ms(100));
        let old = g.generation() - 1;
        for _ in 0..40 {
            now += ms(50);
            g.on_sample(now, Sample::served(ms(900), 20, old));
            g.on_sample(now, Sample::overloaded(20, old));
        }
        assert_eq!(g.limit(), 20);
    }

    #[test]
    fn an_unused_limit_does_not_grow() {
        let (mut g, mut now) = measured(ms(100));
        for _ in 0..8 {
            now += ms(100);
            g.on_sample(now, Sample::served(ms(100), 9, g.generation()));
        }
        assert_eq!(g.limit(), 20);
    }

    #[test]
    fn overload_shrinks_at_once_and_once_per_generation() {
        let (mut g, now) = measured(ms(100));
        let gen = g.generation();
        assert_eq!(g.on_sample(now, Sample::overloaded(20, gen)), 18);
        assert_eq!(g.on_sample(now, Sample::overloaded(20, gen)), 18);
        let gen = g.generation();
        assert_eq!(g.on_sample(now, Sample::overloaded(18, gen)), 16);
    }

    #[test]
    fn the_baseline_is_measured_again_on_schedule_and_may_go_up() {
        let (mut g, mut now) = measured(ms(100));
        let mut dips = Vec::new();
        // The supplier becomes twice as slow for good. The limit falls, then the
        // scheduled measurement finds the new baseline and the limit recovers.
        for _ in 0..4_000 {
            now += ms(10);
            let inflight = g.limit();
            g.on_sample(now, Sample::served(ms(200), inflight, g.generation()));
            if g.measuring() {
                dips.push(g.limit());
            }
        }
        assert_eq!(g.min_rtt(), Some(ms(200)));
        assert!(!dips.is_empty());
        assert!(g.limit() > 4, "{g:?}");
    }

    #[test]
    fn a_later_measurement_lowers_the_limit_by_twice_the_tolerance() {
        let (mut g, mut now) = measured(ms(100));
        // Keep the limit at 20 with latencies just at the tolerance.
        let start = now;
        while !g.measuring() {
            now += ms(10);
            g.on_sample(now, Sample::served(ms(110), 20, g.generation()));
        }
        assert!(now.duration_since(start) >= Duration::from_secs(30));
        assert_eq!(g.limit(), 17); // ⌈20 / 1.2⌉
        feed(&mut g, &mut now, 4, ms(100), ms(10));
        assert!(!g.measuring());
        assert_eq!(g.limit(), 20);
    }

    #[test]
    fn a_measurement_at_the_minimum_still_counts_only_calls_admitted_after_it() {
        let c = GradientConfig {
            tolerance: 0.5,
            ..config()
        };
        let mut g = Gradient::with_seed(c, 1);
        let mut now = Instant::now();
        feed(&mut g, &mut now, 4, ms(100), ms(10));
        // Latency far above the baseline: down to the minimum, 4.
        while g.limit() > 4 {
            feed(&mut g, &mut now, 30, ms(1_000), ms(10));
        }
        let before = g.generation();
        while !g.measuring() {
            now += ms(10);
            g.on_sample(now, Sample::served(ms(1_000), 4, g.generation()));
        }
        // ⌈4 / 2⌉ is below the minimum, so the limit stays 4, yet a new generation
        // began: calls admitted before it (their latency made by a queue) are
        // not counted.
        assert_eq!(g.limit(), 4);
        assert!(g.generation() > before);
        let stale = g.generation() - 1;
        for _ in 0..8 {
            now += ms(10);
            g.on_sample(now, Sample::served(ms(1_000), 4, stale));
        }
        assert!(g.measuring());
        feed(&mut g, &mut now, 4, ms(300), ms(10));
        assert_eq!(g.min_rtt(), Some(ms(300)));
    }

    #[test]
    fn jitter_spreads_the_schedule() {
        let c = GradientConfig {
            jitter: 0.5,
            ..config()
        };
        let mut at = Vec::new();
        for seed in 0..8 {
            let mut g = Gradient::with_seed(c, seed);
            let mut now = Instant::now();
            feed(&mut g, &mut now, 4, ms(100), ms(10));
            let measured = now;
            while !g.measuring() {
                now += ms(10);
                g.on_sample(now, Sample::served(ms(110), 20, g.generation()));
            }
            let waited = now.duration_since(measured);
            assert!(waited >= Duration::from_secs(30) && waited <= Duration::from_secs(46));
            at.push(waited);
        }
        at.sort();
        at.dedup();
        assert!(at.len() > 1, "{at:?}");
    }

    #[test]
    fn restart_keeps_the_baseline_and_clamps() {
        let (mut g, now) = measured(ms(100));
        g.restart_from(now, 1_000);
        assert_eq!(g.limit(), 100);
        assert_eq!(g.min_rtt(), Some(ms(100)));
        let mut fresh = Gradient::with_seed(config(), 1);
        fresh.restart_from(now, 50);
        assert!(fresh.measuring());
        let mut t = now;
        feed(&mut fresh, &mut t, 4, ms(100), ms(10));
        assert_eq!(fresh.limit(), 50);
    }
}
