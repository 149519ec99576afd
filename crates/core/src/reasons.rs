//! Counters per classification reason, for the layers that count them.
//!
//! A reason is a `&'static str` chosen by the application's classifier (see
//! [`Classify::reason`](crate::Classify::reason)), so its series cannot be registered
//! before the reason is first seen. This keeps up to [`MAX_REASONS`] distinct
//! (outcome, reason) pairs apart in fixed slots: once a pair has a slot, counting it
//! scans the slots with atomic loads and increments a counter, without a lock or an
//! allocation. A pair seen for the first time takes a lock and registers its series
//! (once). Past [`MAX_REASONS`] pairs, the rest are counted under `reason="other"`,
//! so a classifier that makes up reasons cannot grow the exposition without bound.

use std::fmt;
use std::sync::{Mutex, OnceLock, PoisonError};

use crate::{Name, Outcome};

/// How many distinct (outcome, reason) pairs one layer keeps apart; more are counted
/// as `reason="other"`.
pub const MAX_REASONS: usize = 16;

struct Slot {
    outcome: Outcome,
    reason: &'static str,
    counter: metrics::Counter,
}

/// One layer's counters by (outcome, reason), labelled `name`, `outcome`, `reason`.
///
/// For seawall's layers; an application reads the series, it does not build this.
pub struct ReasonCounters {
    metric: &'static str,
    name: Name,
    slots: [OnceLock<Slot>; MAX_REASONS],
    other: [OnceLock<metrics::Counter>; 3],
    grow: Mutex<()>,
}

impl fmt::Debug for ReasonCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let seen: Vec<(&str, &str)> = self
            .slots
            .iter()
            .map_while(OnceLock::get)
            .map(|s| (s.outcome.as_str(), s.reason))
            .collect();
        f.debug_struct("ReasonCounters")
            .field("metric", &self.metric)
            .field("name", &self.name)
            .field("seen", &seen)
            .finish_non_exhaustive()
    }
}

impl ReasonCounters {
    /// Counters of the family `metric` for the layer named `name`.
    pub fn new(metric: &'static str, name: Name) -> Self {
        Self {
            metric,
            name,
            slots: std::array::from_fn(|_| OnceLock::new()),
            other: std::array::from_fn(|_| OnceLock::new()),
            grow: Mutex::new(()),
        }
    }

    /// Counts one call classified `outcome` for `reason`.
    #[inline]
    pub fn count(&self, outcome: Outcome, reason: &'static str) {
        // Slots fill in order, so the first empty one ends the scan.
        for slot in &self.slots {
            match slot.get() {
                Some(s) if s.outcome == outcome && s.reason == reason => {
                    s.counter.increment(1);
                    return;
                }
                Some(_) => {}
                None => break,
            }
        }
        self.count_new(outcome, reason);
    }

    #[cold]
    fn count_new(&self, outcome: Outcome, reason: &'static str) {
        let _only_one_grows = self.grow.lock().unwrap_or_else(PoisonError::into_inner);
        for slot in &self.slots {
            let s = slot.get_or_init(|| Slot {
                outcome,
                reason,
                counter: self.register(outcome, reason),
            });
            if s.outcome == outcome && s.reason == reason {
                s.counter.increment(1);
                return;
            }
        }
        let i = match outcome {
            Outcome::Success => 0,
            Outcome::Failure => 1,
            Outcome::Ignore => 2,
        };
        self.other[i]
            .get_or_init(|| self.register(outcome, "other"))
            .increment(1);
    }

    fn register(&self, outcome: Outcome, reason: &'static str) -> metrics::Counter {
        metrics::counter!(
            self.metric,
            "name" => self.name.clone(),
            "outcome" => outcome.as_str(),
            "reason" => reason
        )
    }
}
