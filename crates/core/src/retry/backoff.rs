//! The wait before each retry: exponential growth up to a cap, with jitter.
//!
//! Pure arithmetic on durations and one sample in `[0, 1)`; the policy draws the
//! sample and reads the clock. Every step saturates, so a configuration of huge
//! durations cannot overflow or panic.

use std::time::Duration;

/// How the wait before a retry is drawn between its bounds.
///
/// Both spread callers that failed at the same moment over the interval, so that
/// they do not come back at the same moment and fail together again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum Jitter {
    /// The n-th retry waits a uniform time in `[0, min(max_delay, base_delay × 2^(n-1)))`.
    /// The widest spread for a given ceiling, and the smallest average wait.
    #[default]
    Full,
    /// Each wait is uniform in `[base_delay, 3 × the previous wait]` (the previous
    /// is `base_delay` before the first retry), then capped at `max_delay`. Waits
    /// grow about as fast, but never drop to zero and do not depend on the attempt
    /// number, only on the last wait.
    Decorrelated,
}

/// The wait before retry number `retry` (1 for the first retry).
///
/// `previous` is the wait before the previous retry (`None` before the first);
/// `sample` is in `[0, 1)`.
pub(crate) fn wait(
    jitter: Jitter,
    base: Duration,
    max: Duration,
    retry: usize,
    previous: Option<Duration>,
    sample: f64,
) -> Duration {
    match jitter {
        Jitter::Full => {
            let doublings = u32::try_from(retry.saturating_sub(1)).unwrap_or(u32::MAX);
            let ceiling = match 1u32.checked_shl(doublings) {
                Some(factor) => base.saturating_mul(factor).min(max),
                // 2^32 times any non-zero base is past any cap worth having.
                None if base.is_zero() => Duration::ZERO,
                None => max,
            };
            between(Duration::ZERO, ceiling, sample)
        }
        Jitter::Decorrelated => {
            let previous = previous.unwrap_or(base);
            between(base, previous.saturating_mul(3), sample).min(max)
        }
    }
}

/// `low + sample × (high - low)`, within `[low, high]`.
///
/// Computed on nanoseconds as `f64`: exact for the dyadic samples the tests use on
/// spans below 2^53 ns (104 days), a rounding error of a few ns beyond.
fn between(low: Duration, high: Duration, sample: f64) -> Duration {
    let span = high.saturating_sub(low);
    // A lossy conversion is fine here: `u128 -> f64` rounds, never fails.
    let offset = span.as_nanos() as f64 * sample;
    low.saturating_add(from_nanos_f64(offset)).min(high)
}

/// A duration from a number of nanoseconds (rounded down; 0 for NaN or negatives,
/// saturating at `Duration::MAX`).
fn from_nanos_f64(nanos: f64) -> Duration {
    if nanos.is_nan() || nanos <= 0.0 {
        return Duration::ZERO;
    }
    let secs = (nanos / 1e9).floor();
    let sub = (nanos - secs * 1e9).clamp(0.0, 999_999_999.0);
    // `as` from f64 saturates, and `sub` stays below one second, so no carry can overflow.
    Duration::new(secs as u64, sub as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::{RandomSource, SeededRandom};

    const MS: Duration = Duration::from_millis(1);

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn full_jitter_doubles_the_ceiling_up_to_the_cap() {
        // base 10 ms, cap 100 ms: ceilings 10, 20, 40, 80, 100, 100 ms.
        let w = |retry, sample| wait(Jitter::Full, 10 * MS, 100 * MS, retry, None, sample);
        let at_half: Vec<Duration> = (1..=6).map(|n| w(n, 0.5)).collect();
        assert_eq!(
            at_half,
            [5 * MS, 10 * MS, 20 * MS, 40 * MS, 50 * MS, 50 * MS]
        );
        assert_eq!(w(1, 0.0), Duration::ZERO);
        assert_eq!(w(3, 0.25), 10 * MS);
        assert_eq!(w(4, 0.75), 60 * MS);
    }

    #[test]
    fn decorrelated_jitter_grows_from_the_last_wait() {
        // Samples of 0.5 from base 10 ms, cap 100 ms, each wait uniform in
        // [10 ms, 3 × previous]:
        //   [10, 30]    -> 20
        //   [10, 60]    -> 35
        //   [10, 105]   -> 57.5
        //   [10, 172.5] -> 91.25
        //   [10, 273.75] -> 141.875, capped at 100
        let mut previous = None;
        let mut waits = Vec::new();
        for n in 1..=5 {
            let w = wait(Jitter::Decorrelated, 10 * MS, 100 * MS, n, previous, 0.5);
            waits.push(w);
            previous = Some(w);
        }
        assert_eq!(
            waits,
            [20 * MS, 35 * MS, 57_500 * US, 91_250 * US, 100 * MS]
        );
        // The lowest sample waits the base, never zero.
        assert_eq!(
            wait(Jitter::Decorrelated, 10 * MS, 100 * MS, 1, None, 0.0),
            10 * MS
        );
    }

    #[test]
    fn seeded_waits_stay_within_their_bounds() {
        let (base, max) = (10 * MS, 300 * MS);
        let mut random = SeededRandom::new(7);
        for _ in 0..2000 {
            let mut previous = None;
            for n in 1..=8usize {
                let full = wait(Jitter::Full, base, max, n, None, random.next_f64());
                let ceiling = (base * (1 << (n - 1))).min(max);
                assert!(full < ceiling, "retry {n}: {full:?} not below {ceiling:?}");

                let d = wait(
                    Jitter::Decorrelated,
                    base,
                    max,
                    n,
                    previous,
                    random.next_f64(),
                );
                let upper = (previous.unwrap_or(base) * 3).min(max);
                assert!(
                    base <= d && d <= upper,
                    "retry {n}: {d:?} outside [{base:?}, {upper:?}]"
                );
                previous = Some(d);
            }
        }
    }

    #[test]
    fn huge_durations_and_retry_numbers_saturate() {
        let huge = Duration::MAX;
        assert_eq!(wait(Jitter::Full, huge, huge, 1, None, 0.0), Duration::ZERO);
        assert!(wait(Jitter::Full, huge, huge, 1, None, 0.999) <= huge);
        assert!(wait(Jitter::Full, MS, huge, usize::MAX, None, 0.5) <= huge);
        assert_eq!(wait(Jitter::Full, MS, 100 * MS, 64, None, 0.5), 50 * MS);
        assert_eq!(
            wait(Jitter::Full, Duration::ZERO, huge, 64, None, 0.5),
            Duration::ZERO
        );
        let d = wait(Jitter::Decorrelated, huge, huge, 3, Some(huge), 0.5);
        assert_eq!(d, huge);
    }
}
