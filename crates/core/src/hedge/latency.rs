//! The latency estimator behind a percentile delay: a small, decaying,
//! log-bucketed histogram of first attempts' latencies. A leaf, with `now` passed in.
//!
//! - **No fixed upper bound.** A latency falls in one of 496 buckets by the position
//!   of its highest bit and the three bits after it (eight buckets per doubling), so
//!   every duration up to 2^64 ns (584 years) has a bucket, each at most 12.5 %
//!   wide. tower's `hedge` keeps an `hdrhistogram` with a fixed highest value, and a
//!   latency above it was a reported problem (tower issue 475).
//! - **Bounded memory.** Two arrays of 496 words, under 8 KiB, whatever the traffic.
//! - **Old samples decay.** Samples are counted in atomics on the way (one
//!   `fetch_add`), and folded into the decayed counts eight times per half-life: the
//!   decayed counts are multiplied by `2^(-1/8)` per fold, so a sample's weight halves
//!   every half-life. The percentile is recomputed at each fold and read as one
//!   atomic load; the lock is taken only by the caller that folds, and only with
//!   `try_lock`.
//! - **Censored samples.** A first attempt cancelled before it answered (a hedge
//!   won, or the caller gave up) is recorded with the time it ran: its true latency
//!   is at least that. The hedge fires at the delay, so these samples lie above the
//!   current percentile and keep it where it is, instead of leaving the slow tail
//!   out and pulling the percentile down.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::config::PercentileDelay;

/// Buckets per doubling, as a power of two.
const SUB_BITS: u32 = 3;
/// Every bucket of a `u64` of nanoseconds: the first `2^SUB_BITS` values one each,
/// then `2^SUB_BITS` per doubling.
pub(crate) const BUCKETS: usize = (64 - SUB_BITS as usize + 1) << SUB_BITS;
/// Folds per half-life.
const FOLDS_PER_HALF_LIFE: u32 = 8;
/// No estimate yet.
const NONE: u64 = u64::MAX;

/// The bucket of a latency of `nanos`.
fn bucket(nanos: u64) -> usize {
    if nanos < 1 << SUB_BITS {
        return nanos as usize;
    }
    let exponent = 63 - nanos.leading_zeros();
    let mantissa = (nanos >> (exponent - SUB_BITS)) & ((1 << SUB_BITS) - 1);
    (((exponent - SUB_BITS + 1) << SUB_BITS) as u64 + mantissa) as usize
}

/// The highest latency in bucket `index`, in nanoseconds.
fn upper_bound(index: usize) -> u64 {
    let index = index as u64;
    if index < 1 << SUB_BITS {
        return index;
    }
    let exponent = (index >> SUB_BITS) + u64::from(SUB_BITS) - 1;
    let mantissa = index & ((1 << SUB_BITS) - 1);
    let low = (1u64 << exponent) | (mantissa << (exponent - u64::from(SUB_BITS)));
    low.saturating_add((1u64 << (exponent - u64::from(SUB_BITS))) - 1)
}

/// Estimates a percentile of recent first-attempt latencies.
pub(crate) struct LatencyEstimator {
    config: PercentileDelay,
    start: Instant,
    fold_every: u64,
    /// Nanoseconds after `start` at which the next fold is due.
    next_fold: AtomicU64,
    /// Samples recorded since the last fold.
    recent: Box<[AtomicU64]>,
    decayed: Mutex<Decayed>,
    /// The percentile at the last fold in nanoseconds, `NONE` before enough samples.
    estimate: AtomicU64,
}

struct Decayed {
    weights: Box<[f64]>,
    total: f64,
    /// The fold the weights are as of.
    folds: u64,
}

impl LatencyEstimator {
    pub(crate) fn new(config: PercentileDelay, now: Instant) -> Self {
        let fold_every =
            u64::try_from(config.half_life.as_nanos() / u128::from(FOLDS_PER_HALF_LIFE))
                .unwrap_or(u64::MAX)
                .max(1);
        Self {
            config,
            start: now,
            fold_every,
            next_fold: AtomicU64::new(fold_every),
            recent: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            decayed: Mutex::new(Decayed {
                weights: vec![0.0; BUCKETS].into_boxed_slice(),
                total: 0.0,
                folds: 0,
            }),
            estimate: AtomicU64::new(NONE),
        }
    }

    /// Records one first attempt that ran `latency` (or at least that long).
    pub(crate) fn record(&self, latency: Duration, now: Instant) {
        let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.recent[bucket(nanos)].fetch_add(1, Ordering::Relaxed);
        self.maybe_fold(now);
    }

    /// The delay to use now: the percentile, at least `min_delay`, or `initial`
    /// until the samples weigh `min_samples`.
    pub(crate) fn delay(&self, now: Instant) -> Duration {
        self.maybe_fold(now);
        match self.estimate.load(Ordering::Relaxed) {
            NONE => self.config.initial,
            nanos => Duration::from_nanos(nanos).max(self.config.min_delay),
        }
    }

    /// The percentile now, if the samples weigh enough (for the handle).
    pub(crate) fn estimate(&self, now: Instant) -> Option<Duration> {
        self.maybe_fold(now);
        match self.estimate.load(Ordering::Relaxed) {
            NONE => None,
            nanos => Some(Duration::from_nanos(nanos)),
        }
    }

    fn elapsed(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.start).as_nanos()).unwrap_or(u64::MAX)
    }

    fn maybe_fold(&self, now: Instant) {
        let elapsed = self.elapsed(now);
        if elapsed < self.next_fold.load(Ordering::Relaxed) {
            return;
        }
        // Whoever holds the lock is folding; the others go on with the estimate as is.
        let Ok(mut decayed) = self.decayed.try_lock() else {
            return;
        };
        let folds = elapsed / self.fold_every;
        if folds <= decayed.folds {
            return;
        }
        let decay = 0.5f64.powf((folds - decayed.folds) as f64 / f64::from(FOLDS_PER_HALF_LIFE));
        let Decayed { weights, total, .. } = &mut *decayed;
        *total = 0.0;
        for (weight, recent) in weights.iter_mut().zip(self.recent.iter()) {
            *weight = *weight * decay + recent.swap(0, Ordering::Relaxed) as f64;
            *total += *weight;
        }
        decayed.folds = folds;
        self.next_fold.store(
            folds.saturating_add(1).saturating_mul(self.fold_every),
            Ordering::Relaxed,
        );
        let estimate = if decayed.total < f64::from(self.config.min_samples) {
            NONE
        } else {
            let wanted = decayed.total * self.config.percentile / 100.0;
            let mut seen = 0.0;
            let mut found = BUCKETS - 1;
            for (i, weight) in decayed.weights.iter().enumerate() {
                seen += weight;
                if seen >= wanted && *weight > 0.0 {
                    found = i;
                    break;
                }
            }
            upper_bound(found).min(NONE - 1)
        };
        self.estimate.store(estimate, Ordering::Relaxed);
    }

    /// The samples' total weight after the last fold (for tests).
    #[cfg(test)]
    fn weight(&self) -> f64 {
        self.decayed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .total
    }
}

impl fmt::Debug for LatencyEstimator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let folds = self
            .decayed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .folds;
        f.debug_struct("LatencyEstimator")
            .field("config", &self.config)
            .field("folds", &folds)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn estimator(percentile: f64, t0: Instant) -> LatencyEstimator {
        LatencyEstimator::new(
            PercentileDelay {
                percentile,
                half_life: Duration::from_secs(8),
                min_samples: 10,
                initial: 50 * MS,
                min_delay: MS,
            },
            t0,
        )
    }

    #[test]
    fn buckets_cover_every_u64_and_are_at_most_an_eighth_wide() {
        for nanos in (0..64)
            .flat_map(|e| [1u64 << e, (1u64 << e) + (1u64 << e) / 3, (1u64 << e) - 1])
            .chain([u64::MAX, 0, 7, 8, 9])
        {
            let b = bucket(nanos);
            assert!(b < BUCKETS, "{nanos}");
            let high = upper_bound(b);
            assert!(high >= nanos, "{nanos} above its bucket's bound {high}");
            if b > 0 {
                let low = upper_bound(b - 1) + 1;
                assert!(low <= nanos, "{nanos} below its bucket {low}");
                assert!((high - low) as f64 <= low as f64 / 8.0 + 1.0, "bucket {b}");
            }
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        assert_eq!(upper_bound(BUCKETS - 1), u64::MAX);
    }

    #[test]
    fn the_initial_delay_holds_until_enough_samples() {
        let t0 = Instant::now();
        let e = estimator(50.0, t0);
        for _ in 0..9 {
            e.record(5 * MS, t0);
        }
        assert_eq!(e.delay(t0 + Duration::from_secs(1)), 50 * MS);
        assert_eq!(e.estimate(t0 + Duration::from_secs(1)), None);
        // Nine samples decayed by one fold weigh 8.25: two more are enough.
        e.record(5 * MS, t0 + Duration::from_secs(1));
        e.record(5 * MS, t0 + Duration::from_secs(1));
        let d = e.delay(t0 + Duration::from_secs(2));
        assert!(d >= 5 * MS && d <= 5 * MS + 5 * MS / 8, "{d:?}");
    }

    #[test]
    fn the_percentile_follows_a_shifted_distribution() {
        let t0 = Instant::now();
        let e = estimator(90.0, t0);
        let second = Duration::from_secs(1);
        // 10 s at 1..=10 ms: the 90th percentile is about 9 ms.
        for s in 0..10u32 {
            for i in 1..=10u32 {
                for _ in 0..10 {
                    e.record(i * MS, t0 + s * second);
                }
            }
        }
        let before = e.delay(t0 + 10 * second);
        assert!(before >= 9 * MS && before < 10 * MS + 2 * MS, "{before:?}");
        // Then everything takes ten times longer: within a few half-lives the
        // percentile is about 90 ms.
        for s in 10..40u32 {
            for i in 1..=10u32 {
                for _ in 0..10 {
                    e.record(i * 10 * MS, t0 + s * second);
                }
            }
        }
        let after = e.delay(t0 + 40 * second);
        assert!(after >= 90 * MS && after < 100 * MS + 20 * MS, "{after:?}");
        // Old samples fade: with no traffic the weight halves every half-life.
        let w = e.weight();
        e.delay(t0 + 48 * second);
        let faded = e.weight();
        assert!((faded / w - 0.5).abs() < 0.01, "{w} → {faded}");
    }

    #[test]
    fn a_latency_of_years_is_measured_not_clamped() {
        let t0 = Instant::now();
        let e = estimator(50.0, t0);
        let long = Duration::from_secs(3600 * 24 * 365);
        for _ in 0..10 {
            e.record(long, t0);
        }
        let d = e.delay(t0 + Duration::from_secs(1));
        assert!(d >= long && d <= long + long / 8, "{d:?}");
        // Beyond a u64 of nanoseconds, the last bucket.
        for _ in 0..100 {
            e.record(Duration::MAX, t0 + Duration::from_secs(1));
        }
        assert_eq!(
            e.delay(t0 + Duration::from_secs(2)),
            Duration::from_nanos(NONE - 1)
        );
    }

    #[test]
    fn min_delay_is_a_floor() {
        let t0 = Instant::now();
        let e = estimator(50.0, t0);
        for _ in 0..10 {
            e.record(Duration::from_micros(3), t0);
        }
        assert_eq!(e.delay(t0 + Duration::from_secs(1)), MS);
    }
}
