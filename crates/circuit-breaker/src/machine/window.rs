//! The counting windows behind the trip policies: consecutive failures, the
//! last N outcomes, the outcomes of the last stretch of time.

use seawall_core::{ConfigError, CountWindow, TimeWindow, WindowCounts};
use tokio::time::Instant;

use super::Cause;
use crate::config::{SlowCallConfig, TripPolicy};

/// The outcomes a closed breaker keeps to decide whether to trip: one kind per
/// [`TripPolicy`].
#[derive(Debug)]
pub(super) enum Window {
    /// Failures in a row.
    Consecutive(u32),
    /// The last `size` outcomes.
    Count(CountWindow),
    /// The outcomes of the last `window`, in buckets (boxed: the largest kind).
    Time(Box<TimeWindow>),
}

impl Window {
    /// An empty window for `policy` (validated), starting at `now`.
    pub(super) fn new(policy: &TripPolicy, now: Instant) -> Result<Self, ConfigError> {
        Ok(match *policy {
            TripPolicy::ConsecutiveFailures { .. } => Window::Consecutive(0),
            TripPolicy::CountWindow { size, .. } => {
                Window::Count(CountWindow::new(size as usize).map_err(|e| e.within("policy"))?)
            }
            TripPolicy::TimeWindow { window, bucket, .. } => Window::Time(Box::new(
                TimeWindow::new(window, bucket, now).map_err(|e| e.within("policy"))?,
            )),
        })
    }

    /// Whether the window kept for `a` serves `b` as it is (so reconfiguring from
    /// one to the other keeps the outcomes recorded).
    pub(super) fn same_shape(a: &TripPolicy, b: &TripPolicy) -> bool {
        match (a, b) {
            (TripPolicy::ConsecutiveFailures { .. }, TripPolicy::ConsecutiveFailures { .. }) => {
                true
            }
            (TripPolicy::CountWindow { size: a, .. }, TripPolicy::CountWindow { size: b, .. }) => {
                a == b
            }
            (
                TripPolicy::TimeWindow {
                    window: wa,
                    bucket: ba,
                    ..
                },
                TripPolicy::TimeWindow {
                    window: wb,
                    bucket: bb,
                    ..
                },
            ) => wa == wb && ba == bb,
            _ => false,
        }
    }

    /// One outcome, at `now`.
    pub(super) fn record(&mut self, failed: bool, slow: bool, now: Instant) {
        match self {
            Window::Consecutive(n) => *n = if failed { n.saturating_add(1) } else { 0 },
            Window::Count(w) => w.record(failed, slow),
            Window::Time(w) => w.record(now, failed, slow),
        }
    }

    /// `n` successes that were not slow, in a row.
    pub(super) fn record_successes(&mut self, n: u64, now: Instant) {
        match self {
            Window::Consecutive(f) => *f = 0,
            Window::Count(w) => {
                for _ in 0..n.min(w.size() as u64) {
                    w.record(false, false);
                }
            }
            // Never batched by the service (a time window needs each call's instant),
            // but correct if it were, as long as `n` is small.
            Window::Time(w) => {
                for _ in 0..n {
                    w.record(now, false, false);
                }
            }
        }
    }

    /// Whether plain successes may be recorded late and together, as
    /// [`Window::record_successes`] does, with the same result as one by one: true
    /// where neither their order among themselves nor their instants matter.
    pub(super) fn successes_commute(&self) -> bool {
        // Exhaustive on purpose: a new window kind must say whether the order
        // and instant of its successes matter.
        match self {
            Window::Consecutive(_) | Window::Count(_) => true,
            Window::Time(_) => false,
        }
    }

    pub(super) fn counts(&mut self, now: Instant) -> Option<WindowCounts> {
        match self {
            Window::Consecutive(_) => None,
            Window::Count(w) => Some(w.counts()),
            Window::Time(w) => Some(w.counts(now)),
        }
    }

    /// Why the outcomes recorded so far trip `policy` (with slow-call detection,
    /// if configured), if they do.
    pub(super) fn trip_cause(
        &mut self,
        policy: &TripPolicy,
        slow_call: Option<&SlowCallConfig>,
        now: Instant,
    ) -> Option<Cause> {
        let (min_calls, failure_rate) = match *policy {
            TripPolicy::ConsecutiveFailures { threshold } => {
                return match self {
                    Window::Consecutive(n) if *n >= threshold => Some(Cause::ConsecutiveFailures),
                    _ => None,
                };
            }
            TripPolicy::CountWindow {
                min_calls,
                failure_rate,
                ..
            }
            | TripPolicy::TimeWindow {
                min_calls,
                failure_rate,
                ..
            } => (min_calls, failure_rate),
        };
        let counts = self.counts(now)?;
        if counts.calls < min_calls {
            return None;
        }
        if counts.failure_rate() >= failure_rate {
            return Some(Cause::FailureRate);
        }
        if slow_call.is_some_and(|slow| counts.slow_rate() >= slow.rate) {
            return Some(Cause::SlowCallRate);
        }
        None
    }

    pub(super) fn reset(&mut self) {
        match self {
            Window::Consecutive(n) => *n = 0,
            Window::Count(w) => w.reset(),
            Window::Time(w) => w.reset(),
        }
    }
}
