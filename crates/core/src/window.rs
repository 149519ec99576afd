//! Sliding windows of call outcomes, count-based and time-based.
//!
//! A consecutive-failure counter is reset by one success, so a dependency failing
//! 80 % of the time can keep a breaker closed. These windows count what really
//! happened over the last N calls or the last T seconds. Both take `now` as an
//! argument (no clock reads, no background task) and use memory bounded by their
//! configuration, never by traffic. A minimum number of calls before the rates
//! mean anything is the caller's rule.

use std::time::Duration;

use tokio::time::Instant;

use crate::config::{check_positive, ConfigError};

/// What a window holds at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct WindowCounts {
    /// Outcomes recorded (successes and failures).
    pub calls: u32,
    /// Outcomes that were failures.
    pub failures: u32,
    /// Outcomes (successes or failures) slower than the slow-call threshold.
    pub slow: u32,
}

impl WindowCounts {
    /// Outcomes that were successes.
    pub fn successes(&self) -> u32 {
        self.calls - self.failures
    }

    /// `failures / calls`, or 0 when the window is empty.
    pub fn failure_rate(&self) -> f64 {
        ratio(self.failures, self.calls)
    }

    /// `slow / calls`, or 0 when the window is empty.
    pub fn slow_rate(&self) -> f64 {
        ratio(self.slow, self.calls)
    }

    fn add(&mut self, failed: bool, slow: bool) {
        self.calls += 1;
        self.failures += u32::from(failed);
        self.slow += u32::from(slow);
    }

    fn remove(&mut self, other: &WindowCounts) {
        self.calls -= other.calls;
        self.failures -= other.failures;
        self.slow -= other.slow;
    }
}

fn ratio(part: u32, whole: u32) -> f64 {
    if whole == 0 {
        0.0
    } else {
        f64::from(part) / f64::from(whole)
    }
}

const FAILED: u8 = 1;
const SLOW: u8 = 2;

/// The last `size` outcomes. Recording is O(1): the oldest outcome leaves as a new
/// one enters. Memory is one byte per slot, allocated by the first outcome
/// recorded: a window that never records one (a keyed layer's breaker for a key
/// seen once, its successes still tallied outside the window) allocates nothing.
#[derive(Debug, Clone)]
pub struct CountWindow {
    /// Empty until the first outcome, then `size` slots.
    slots: Box<[u8]>,
    size: u32,
    next: usize,
    filled: usize,
    counts: WindowCounts,
}

impl CountWindow {
    /// A window over the last `size` outcomes (at least 1).
    pub fn new(size: usize) -> Result<Self, ConfigError> {
        let size = check_positive("window_size", size)?;
        let Ok(size) = u32::try_from(size) else {
            return Err(ConfigError::new("window_size", "must fit in 32 bits"));
        };
        Ok(Self {
            slots: Box::default(),
            size,
            next: 0,
            filled: 0,
            counts: WindowCounts::default(),
        })
    }

    /// How many outcomes the window holds when full.
    pub fn size(&self) -> usize {
        self.size as usize
    }

    /// Records one outcome, evicting the oldest when the window is full.
    pub fn record(&mut self, failed: bool, slow: bool) {
        if self.slots.is_empty() {
            self.slots = vec![0; self.size()].into_boxed_slice();
        }
        if self.filled == self.slots.len() {
            let old = self.slots[self.next];
            self.counts.calls -= 1;
            self.counts.failures -= u32::from(old & FAILED != 0);
            self.counts.slow -= u32::from(old & SLOW != 0);
        } else {
            self.filled += 1;
        }
        self.slots[self.next] = (u8::from(failed) * FAILED) | (u8::from(slow) * SLOW);
        self.counts.add(failed, slow);
        self.next = (self.next + 1) % self.slots.len();
    }

    /// The counts over the outcomes currently in the window.
    pub fn counts(&self) -> WindowCounts {
        self.counts
    }

    /// Forgets every outcome.
    pub fn reset(&mut self) {
        self.next = 0;
        self.filled = 0;
        self.counts = WindowCounts::default();
    }
}

/// The outcomes of the last `window` of time, kept in a ring of buckets.
///
/// Time is cut into buckets of `bucket` length, counted from the window's creation.
/// The window holds the current bucket and the `window / bucket - 1` before it, so
/// an outcome stays counted for at most `window` and at least `window - bucket`;
/// in particular an outcome exactly `window` old has expired. Old buckets are
/// cleared lazily, when the window is next touched; there is no background task.
/// Memory is one bucket (12 bytes) per `bucket` of the window, not per call.
#[derive(Debug, Clone)]
pub struct TimeWindow {
    origin: Instant,
    bucket_nanos: u128,
    buckets: Box<[WindowCounts]>,
    head: u64,
    totals: WindowCounts,
}

/// The most buckets a time window may have (bounds its memory).
pub const MAX_BUCKETS: usize = 10_000;

impl TimeWindow {
    /// A window of `window`, cut into buckets of `bucket`, starting at `now`.
    ///
    /// `window` must be a whole multiple of `bucket`, with at most [`MAX_BUCKETS`] buckets.
    pub fn new(window: Duration, bucket: Duration, now: Instant) -> Result<Self, ConfigError> {
        if bucket.is_zero() {
            return Err(ConfigError::new("bucket", "must be longer than zero"));
        }
        if window < bucket {
            return Err(ConfigError::new(
                "window",
                format!("must be at least one bucket ({bucket:?}), got {window:?}"),
            ));
        }
        let bucket_nanos = bucket.as_nanos();
        if !window.as_nanos().is_multiple_of(bucket_nanos) {
            return Err(ConfigError::new(
                "window",
                format!("must be a whole number of buckets ({bucket:?}), got {window:?}"),
            ));
        }
        let n = window.as_nanos() / bucket_nanos;
        let n = usize::try_from(n)
            .ok()
            .filter(|n| *n <= MAX_BUCKETS)
            .ok_or_else(|| {
                ConfigError::new(
                    "bucket",
                    format!("window / bucket must be at most {MAX_BUCKETS}"),
                )
            })?;
        Ok(Self {
            origin: now,
            bucket_nanos,
            buckets: vec![WindowCounts::default(); n].into_boxed_slice(),
            head: 0,
            totals: WindowCounts::default(),
        })
    }

    /// The window's length.
    pub fn window(&self) -> Duration {
        let nanos = self.bucket_nanos * self.buckets.len() as u128;
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    fn index(&self, now: Instant) -> u64 {
        let since = now.saturating_duration_since(self.origin).as_nanos();
        u64::try_from(since / self.bucket_nanos).unwrap_or(u64::MAX)
    }

    /// Moves the head to `now`, clearing the buckets that left the window.
    fn advance(&mut self, now: Instant) {
        let current = self.index(now);
        if current <= self.head {
            return;
        }
        let n = self.buckets.len() as u64;
        let steps = (current - self.head).min(n);
        for i in 1..=steps {
            let slot = ((self.head + i) % n) as usize;
            let expired = std::mem::take(&mut self.buckets[slot]);
            self.totals.remove(&expired);
        }
        self.head = current;
    }

    /// Records one outcome at `now`. A `now` earlier than the newest bucket (a clock
    /// read out of order) is recorded in the newest bucket.
    pub fn record(&mut self, now: Instant, failed: bool, slow: bool) {
        self.advance(now);
        let slot = (self.head % self.buckets.len() as u64) as usize;
        self.buckets[slot].add(failed, slow);
        self.totals.add(failed, slow);
    }

    /// The counts over the outcomes still in the window at `now`.
    pub fn counts(&mut self, now: Instant) -> WindowCounts {
        self.advance(now);
        self.totals
    }

    /// Forgets every outcome.
    pub fn reset(&mut self) {
        self.buckets
            .iter_mut()
            .for_each(|b| *b = WindowCounts::default());
        self.totals = WindowCounts::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    fn counts(calls: u32, failures: u32, slow: u32) -> WindowCounts {
        WindowCounts {
            calls,
            failures,
            slow,
        }
    }

    /// Records `n` outcomes alike.
    fn record_n(w: &mut CountWindow, n: usize, failed: bool, slow: bool) {
        for _ in 0..n {
            w.record(failed, slow);
        }
    }

    #[test]
    fn count_window_slides() {
        let mut w = CountWindow::new(10).unwrap();
        record_n(&mut w, 1000, false, false);
        assert_eq!(w.counts(), counts(10, 0, 0));
        record_n(&mut w, 5, true, false);
        assert_eq!(w.counts().failures, 5);
        assert_eq!(w.counts().calls, 10);
        assert!((w.counts().failure_rate() - 0.5).abs() < f64::EPSILON);
        record_n(&mut w, 5, false, true);
        assert_eq!(w.counts(), counts(10, 5, 5));
        record_n(&mut w, 5, false, false);
        assert_eq!(w.counts(), counts(10, 0, 5));
        w.reset();
        assert_eq!(w.counts(), WindowCounts::default());
        assert_eq!(w.counts().failure_rate(), 0.0);
    }

    #[test]
    fn a_count_window_allocates_its_slots_at_its_first_outcome() {
        let mut w = CountWindow::new(7).unwrap();
        assert!(w.slots.is_empty());
        assert_eq!(w.size(), 7);
        assert_eq!(w.counts(), WindowCounts::default());
        // A reset before any outcome leaves it unallocated too.
        w.reset();
        assert!(w.slots.is_empty());
        w.record(true, false);
        assert_eq!(w.slots.len(), 7);
        assert_eq!(w.counts(), counts(1, 1, 0));
        record_n(&mut w, 7, false, false);
        assert_eq!(w.counts(), counts(7, 0, 0));
    }

    #[test]
    fn count_window_rejects_zero() {
        assert_eq!(CountWindow::new(0).unwrap_err().field(), "window_size");
    }

    #[test]
    fn time_window_validates() {
        let now = Instant::now();
        let s = Duration::from_secs(1);
        assert_eq!(
            TimeWindow::new(s, Duration::ZERO, now).unwrap_err().field(),
            "bucket"
        );
        assert_eq!(
            TimeWindow::new(s, 2 * s, now).unwrap_err().field(),
            "window"
        );
        assert_eq!(
            TimeWindow::new(Duration::from_millis(1500), s, now)
                .unwrap_err()
                .field(),
            "window"
        );
        assert_eq!(
            TimeWindow::new(Duration::from_secs(60), Duration::from_micros(1), now)
                .unwrap_err()
                .field(),
            "bucket"
        );
        assert_eq!(TimeWindow::new(10 * s, s, now).unwrap().window(), 10 * s);
    }

    #[test]
    fn an_outcome_exactly_window_old_has_expired() {
        let t0 = Instant::now();
        let mut w = TimeWindow::new(Duration::from_secs(10), Duration::from_secs(1), t0).unwrap();
        w.record(t0, true, false);
        let just_before = t0 + Duration::from_secs(10) - Duration::from_nanos(1);
        assert_eq!(w.counts(just_before).failures, 1);
        assert_eq!(w.counts(t0 + Duration::from_secs(10)).failures, 0);
    }

    #[test]
    fn buckets_expire_lazily_and_one_at_a_time() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut w = TimeWindow::new(3 * s, s, t0).unwrap();
        w.record(t0, true, false);
        w.record(t0 + s, false, true);
        w.record(t0 + 2 * s, false, false);
        assert_eq!(w.counts(t0 + 2 * s), counts(3, 1, 1));
        assert_eq!(w.counts(t0 + 3 * s), counts(2, 0, 1));
        assert_eq!(w.counts(t0 + 4 * s), counts(1, 0, 0));
        // A long silence clears everything without walking more than the ring.
        assert_eq!(w.counts(t0 + 3600 * s), WindowCounts::default());
    }

    #[test]
    fn a_clock_read_out_of_order_lands_in_the_newest_bucket() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut w = TimeWindow::new(2 * s, s, t0 + s).unwrap();
        w.record(t0 + 3 * s, false, false);
        w.record(t0, true, false);
        assert_eq!(w.counts(t0 + 3 * s).failures, 1);
        assert_eq!(w.counts(t0 + 5 * s).calls, 0);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Record { failed: bool, slow: bool },
        Advance(u64),
        Reset,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (any::<bool>(), any::<bool>()).prop_map(|(failed, slow)| Op::Record { failed, slow }),
            3 => (0u64..2_500).prop_map(Op::Advance),
            1 => Just(Op::Reset),
        ]
    }

    fn naive(items: &[(bool, bool)]) -> WindowCounts {
        let mut c = WindowCounts::default();
        for (failed, slow) in items {
            c.add(*failed, *slow);
        }
        c
    }

    proptest! {
        #[test]
        fn count_window_matches_the_last_n(size in 1usize..20, ops in proptest::collection::vec(op(), 0..300)) {
            let mut w = CountWindow::new(size).unwrap();
            let mut model: VecDeque<(bool, bool)> = VecDeque::new();
            for op in ops {
                match op {
                    Op::Record { failed, slow } => {
                        w.record(failed, slow);
                        model.push_back((failed, slow));
                        if model.len() > size { model.pop_front(); }
                    }
                    Op::Advance(_) => {}
                    Op::Reset => { w.reset(); model.clear(); }
                }
                let items: Vec<_> = model.iter().copied().collect();
                prop_assert_eq!(w.counts(), naive(&items));
            }
        }

        #[test]
        fn time_window_matches_a_timestamped_model(
            buckets in 1u64..12,
            bucket_ms in 1u64..500,
            ops in proptest::collection::vec(op(), 0..300),
        ) {
            let t0 = Instant::now();
            let bucket = Duration::from_millis(bucket_ms);
            let window = bucket * u32::try_from(buckets).unwrap();
            let mut w = TimeWindow::new(window, bucket, t0).unwrap();
            let mut now = t0;
            let mut model: Vec<(Instant, bool, bool)> = Vec::new();
            let index = |t: Instant| (t - t0).as_millis() as u64 / bucket_ms;
            for op in ops {
                match op {
                    Op::Record { failed, slow } => {
                        w.record(now, failed, slow);
                        model.push((now, failed, slow));
                    }
                    Op::Advance(ms) => now += Duration::from_millis(ms),
                    Op::Reset => { w.reset(); model.clear(); }
                }
                // The reference: an outcome counts while its bucket is one of the
                // last `buckets` buckets, current one included.
                let current = index(now);
                let live: Vec<_> = model
                    .iter()
                    .filter(|(t, _, _)| index(*t) + buckets > current)
                    .map(|(_, f, s)| (*f, *s))
                    .collect();
                prop_assert_eq!(w.counts(now), naive(&live));
                // And never beyond `window` of age.
                for (t, _, _) in &model {
                    if now - *t >= window {
                        prop_assert!(index(*t) + buckets <= current);
                    }
                }
            }
        }
    }
}
