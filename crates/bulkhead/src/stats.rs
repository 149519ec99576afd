//! The admission-wait distribution: a fixed log-scale histogram of atomics.
//!
//! Only calls that waited in the queue are recorded here; a call admitted at once
//! waited zero, and their number is `admitted - recorded`, so the fast path pays
//! nothing for the histogram. Bucket 0 holds waits up to 1 µs; bucket `i` holds
//! waits in `(2^(i-1), 2^i]` µs; the last bucket also holds everything longer.
//! Quantiles are reported as the upper bound of their bucket (so at most twice the
//! true value), never above the largest wait seen.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const BUCKETS: usize = 32;

/// Recorded waits of queued calls. 272 bytes, no allocation after creation.
#[derive(Debug)]
pub(crate) struct WaitHistogram {
    buckets: [AtomicU64; BUCKETS],
    recorded: AtomicU64,
    max_nanos: AtomicU64,
}

fn bucket_of(wait: Duration) -> usize {
    let micros = wait.as_micros();
    if micros <= 1 {
        0
    } else {
        let bits = (u128::BITS - (micros - 1).leading_zeros()) as usize;
        bits.min(BUCKETS - 1)
    }
}

fn upper_bound(bucket: usize) -> Duration {
    Duration::from_micros(1u64 << bucket.min(63))
}

/// The summary reported by a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WaitSummary {
    pub(crate) p50: Duration,
    pub(crate) p99: Duration,
    pub(crate) max: Duration,
    pub(crate) queued_admissions: u64,
}

impl WaitHistogram {
    pub(crate) const fn new() -> Self {
        Self {
            buckets: [const { AtomicU64::new(0) }; BUCKETS],
            recorded: AtomicU64::new(0),
            max_nanos: AtomicU64::new(0),
        }
    }

    /// Records the wait of one call admitted from the queue.
    pub(crate) fn record(&self, wait: Duration) {
        if let Some(b) = self.buckets.get(bucket_of(wait)) {
            b.fetch_add(1, Ordering::Relaxed);
        }
        let nanos = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
        self.max_nanos.fetch_max(nanos, Ordering::Relaxed);
        self.recorded.fetch_add(1, Ordering::Relaxed);
    }

    /// p50, p99 and max over all `admitted` calls, those admitted at once counting
    /// as a zero wait.
    pub(crate) fn summary(&self, admitted: u64) -> WaitSummary {
        let counts: [u64; BUCKETS] =
            std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed));
        let recorded: u64 = counts.iter().sum();
        let max = Duration::from_nanos(self.max_nanos.load(Ordering::Relaxed));
        let zero = admitted.saturating_sub(recorded);
        let total = zero + recorded;
        let quantile = |q: f64| -> Duration {
            if total == 0 {
                return Duration::ZERO;
            }
            // The rank (1-based) of the q-quantile among `total` sorted waits.
            let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
            if rank <= zero {
                return Duration::ZERO;
            }
            let mut seen = zero;
            for (i, &n) in counts.iter().enumerate() {
                seen += n;
                if seen >= rank {
                    return upper_bound(i).min(max);
                }
            }
            max
        };
        WaitSummary {
            p50: quantile(0.50),
            p99: quantile(0.99),
            max,
            queued_admissions: self.recorded.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_powers_of_two_microseconds() {
        assert_eq!(bucket_of(Duration::ZERO), 0);
        assert_eq!(bucket_of(Duration::from_nanos(1_999)), 0);
        assert_eq!(bucket_of(Duration::from_micros(2)), 1);
        assert_eq!(bucket_of(Duration::from_micros(3)), 2);
        assert_eq!(bucket_of(Duration::from_micros(4)), 2);
        assert_eq!(bucket_of(Duration::from_micros(5)), 3);
        assert_eq!(bucket_of(Duration::from_millis(5)), 13);
        assert_eq!(bucket_of(Duration::from_secs(100_000)), BUCKETS - 1);
    }

    #[test]
    fn quantiles_count_immediate_admissions_as_zero() {
        let h = WaitHistogram::new();
        assert_eq!(h.summary(0).p99, Duration::ZERO);
        // 98 immediate admissions, one 3 ms wait, one 15 ms wait.
        h.record(Duration::from_millis(3));
        h.record(Duration::from_millis(15));
        let s = h.summary(100);
        assert_eq!(s.p50, Duration::ZERO);
        assert_eq!(s.queued_admissions, 2);
        // p99 is the 99th of 100: the 3 ms wait, reported as its bucket bound 4.096 ms.
        assert_eq!(s.p99, Duration::from_micros(4096));
        assert_eq!(s.max, Duration::from_millis(15));
        // With only queued waits, the median is capped by the max.
        let s = h.summary(2);
        assert_eq!(s.p50, Duration::from_micros(4096));
        assert_eq!(s.p99, Duration::from_millis(15));
    }
}
