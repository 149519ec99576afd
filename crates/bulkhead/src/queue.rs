//! The queue policy: who takes a slot, who waits for one and until when, and who
//! is turned away. Pure functions of the counts and of `now`.
//!
//! The bulkhead's semaphore (slots and waiters counted in one atomic word, the
//! line behind a mutex) applies these decisions under its own atomics and lock;
//! this module is the policy alone, so that it can be read, tested and driven in
//! a user's own tests without a runtime:
//!
//! 1. **How long may a call wait?** At most `max_wait` after it arrives, and never
//!    past the request's deadline: a wait that outlives the budget only turns a
//!    late answer into a later one. A call whose bound has already passed may take
//!    a free slot but never joins the line ([`QueuePolicy::wait_until`]).
//! 2. **Where does it go?** A free slot is taken only when nobody is waiting, so a
//!    newcomer never overtakes a waiter (first in, first out); otherwise it joins
//!    the back of the line while fewer than `max_queue` wait, and is turned away
//!    when the line is full ([`QueuePolicy::place`]).
//! 3. **Who gets a freed slot?** The front of the line, while fewer calls are
//!    active than the limit ([`Load::hands_over`]). Lowering the limit preempts
//!    nobody: slots are handed over only below it.
//!
//! ```
//! use std::time::Duration;
//! use seawall_bulkhead::queue::{Load, Place, QueuePolicy};
//! use tokio::time::Instant;
//!
//! let policy = QueuePolicy { max_queue: 2, ..QueuePolicy::default() }; // 20 ms at most
//! let now = Instant::now();
//! let until = policy.wait_until(now, None);
//! assert_eq!(until, Some(now + Duration::from_millis(20)));
//!
//! let busy = Load { active: 8, queued: 1, limit: 8 };
//! assert_eq!(policy.place(busy, until.is_some()), Place::Wait);
//! let full = Load { queued: 2, ..busy };
//! assert_eq!(policy.place(full, true), Place::Full);
//! // A call whose deadline has passed may not wait: it is timed out, not queued.
//! assert_eq!(policy.wait_until(now, Some(now)), None);
//! assert_eq!(policy.place(busy, false), Place::Expired);
//! ```

use std::time::Duration;

use seawall_core::{check_duration, ConfigError};
use tokio::time::Instant;

/// The largest `max_concurrent` or `max_queue` a bulkhead accepts (2^20). Active
/// and waiting counts never exceed it, so they fit their 21 bits.
pub(crate) const MAX_LIMIT: usize = 1 << 20;

/// The bounds of a bulkhead's queue: how many may wait, and for how long.
///
/// This is the one list of the queue's options. A bulkhead holds it as
/// [`BulkheadConfig::queue`](crate::BulkheadConfig::queue), set with
/// [`BulkheadBuilder::queue`](crate::BulkheadBuilder::queue) and written as a
/// nested `queue` table in a policy file; [`Snapshot::queue`](crate::Snapshot::queue)
/// reports it back. A field added here is carried to all of them.
///
/// | field | default | meaning |
/// |---|---|---|
/// | `max_queue` | 10 | calls waiting for a slot, 0 to 2^20 (0: a busy bulkhead rejects at once) |
/// | `max_wait` | 20 ms | the longest wait for a slot (more than zero, at most a year), shortened by the request's [`Deadline`](seawall_core::Deadline) |
///
/// ```toml
/// [policies.freight.bulkhead.queue]
/// max_queue = 10
/// max_wait = "20ms"
/// ```
///
/// Fields left out take their defaults and an unknown field is an error naming
/// it. In code, start from the defaults (`QueuePolicy { max_queue: 0,
/// ..QueuePolicy::default() }`) so that a field added later keeps its default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
pub struct QueuePolicy {
    /// Calls allowed to wait for a slot (0: a busy bulkhead rejects at once).
    pub max_queue: usize,
    /// The longest a call waits for a slot; a request's deadline shortens it.
    #[cfg_attr(feature = "serde", serde(with = "seawall_core::duration_format"))]
    pub max_wait: Duration,
}

impl Default for QueuePolicy {
    /// 10 waiting, 20 ms at most: a starting point to calibrate, not a measured bound.
    fn default() -> Self {
        Self {
            max_queue: 10,
            max_wait: Duration::from_millis(20),
        }
    }
}

/// The counts a decision is made on, read together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Load {
    /// Calls holding a slot.
    pub active: usize,
    /// Calls waiting in line.
    pub queued: usize,
    /// The limit of active calls in force.
    pub limit: usize,
}

impl Load {
    /// Whether a newcomer may take a slot now: one is free and nobody is ahead
    /// of it in line.
    #[inline]
    pub fn slot_free(&self) -> bool {
        self.queued == 0 && self.active < self.limit
    }

    /// Whether a freed slot goes to the front of the line now: someone waits and
    /// fewer calls are active than the limit.
    #[inline]
    pub fn hands_over(&self) -> bool {
        self.queued != 0 && self.active < self.limit
    }
}

/// Where [`QueuePolicy::place`] puts a newcomer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Takes a free slot now.
    Admit,
    /// Joins the back of the line, until its bound ([`QueuePolicy::wait_until`]).
    Wait,
    /// No slot and no room in the line: turned away
    /// ([`BulkheadFull`](seawall_core::BulkheadFull)).
    Full,
    /// Would have to wait, but its bound has passed: timed out at once
    /// ([`BulkheadTimeout`](seawall_core::BulkheadTimeout) with no wait).
    Expired,
}

impl QueuePolicy {
    /// Checks every field, naming the first one at fault (`max_queue`, `max_wait`;
    /// a bulkhead's configuration names them `queue.max_queue`, `queue.max_wait`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_queue > MAX_LIMIT {
            return Err(ConfigError::new(
                "max_queue",
                format!("must be at most {MAX_LIMIT}"),
            ));
        }
        check_duration("max_wait", self.max_wait)?;
        Ok(())
    }

    /// The latest instant a call arriving at `now` may wait until: `max_wait`
    /// from now, or the request's `deadline` if that comes first. `None` when
    /// that instant is not after `now`: the call may not wait at all.
    pub fn wait_until(&self, now: Instant, deadline: Option<Instant>) -> Option<Instant> {
        let mut until = now
            .checked_add(self.max_wait)
            .unwrap_or_else(|| far_future(now));
        if let Some(deadline) = deadline {
            until = until.min(deadline);
        }
        (until > now).then_some(until)
    }

    /// Where a newcomer goes under `load`; `may_wait` is whether
    /// [`wait_until`](Self::wait_until) gave it a bound.
    #[inline]
    pub fn place(&self, load: Load, may_wait: bool) -> Place {
        Place::of(load, self.max_queue, may_wait)
    }
}

impl Place {
    /// Where a newcomer goes under `load` with room for `max_queue` waiters (as
    /// [`QueuePolicy::place`], for a caller that holds the bound apart from `max_wait`).
    #[inline]
    pub fn of(load: Load, max_queue: usize, may_wait: bool) -> Place {
        if load.slot_free() {
            Place::Admit
        } else if load.queued >= max_queue {
            Place::Full
        } else if !may_wait {
            Place::Expired
        } else {
            Place::Wait
        }
    }
}

fn far_future(now: Instant) -> Instant {
    // About 30 years, as tokio uses for "never".
    seawall_core::later(now, Duration::from_secs(86_400 * 365 * 30))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(active: usize, queued: usize, limit: usize) -> Load {
        Load {
            active,
            queued,
            limit,
        }
    }

    const POLICY: QueuePolicy = QueuePolicy {
        max_queue: 2,
        max_wait: Duration::from_millis(20),
    };

    #[test]
    fn the_defaults_are_the_documented_numbers_and_bad_fields_are_named() {
        let d = QueuePolicy::default();
        assert_eq!((d.max_queue, d.max_wait), (10, Duration::from_millis(20)));
        assert!(d.validate().is_ok());
        let bad = |q: QueuePolicy| q.validate().unwrap_err().field().to_owned();
        assert_eq!(
            bad(QueuePolicy {
                max_queue: MAX_LIMIT + 1,
                ..d
            }),
            "max_queue"
        );
        assert_eq!(
            bad(QueuePolicy {
                max_wait: Duration::ZERO,
                ..d
            }),
            "max_wait"
        );
        assert_eq!(
            bad(QueuePolicy {
                max_wait: Duration::MAX,
                ..d
            }),
            "max_wait"
        );
        // No queue at all is a valid choice.
        assert!(QueuePolicy { max_queue: 0, ..d }.validate().is_ok());
        assert!(QueuePolicy {
            max_queue: MAX_LIMIT,
            ..d
        }
        .validate()
        .is_ok());
    }

    #[test]
    fn a_newcomer_never_overtakes_a_waiter() {
        // A slot is free, but someone waits for it: the newcomer queues behind.
        assert_eq!(POLICY.place(load(3, 1, 4), true), Place::Wait);
        assert_eq!(POLICY.place(load(3, 0, 4), true), Place::Admit);
    }

    #[test]
    fn the_line_is_bounded_and_a_call_that_may_not_wait_is_timed_out() {
        assert_eq!(POLICY.place(load(4, 1, 4), true), Place::Wait);
        assert_eq!(POLICY.place(load(4, 2, 4), true), Place::Full);
        assert_eq!(POLICY.place(load(4, 1, 4), false), Place::Expired);
        // A full line turns it away as full, like everyone else.
        assert_eq!(POLICY.place(load(4, 2, 4), false), Place::Full);
        // With no queue, a busy bulkhead rejects at once.
        let none = QueuePolicy {
            max_queue: 0,
            ..POLICY
        };
        assert_eq!(none.place(load(4, 0, 4), true), Place::Full);
        // It may still take a free slot after its bound has passed.
        assert_eq!(none.place(load(3, 0, 4), false), Place::Admit);
    }

    #[test]
    fn the_wait_ends_at_max_wait_or_the_deadline_whichever_is_first() {
        let now = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(POLICY.wait_until(now, None), Some(now + ms(20)));
        assert_eq!(POLICY.wait_until(now, Some(now + ms(5))), Some(now + ms(5)));
        assert_eq!(
            POLICY.wait_until(now, Some(now + ms(50))),
            Some(now + ms(20))
        );
        // A deadline now or past: no wait at all.
        assert_eq!(POLICY.wait_until(now, Some(now)), None);
        let zero = QueuePolicy {
            max_wait: Duration::ZERO,
            ..POLICY
        };
        assert_eq!(zero.wait_until(now, None), None);
        // A huge max_wait does not overflow.
        let huge = QueuePolicy {
            max_wait: Duration::MAX,
            ..POLICY
        };
        assert!(huge.wait_until(now, None).is_some_and(|u| u > now + ms(1)));
    }

    #[test]
    fn a_freed_slot_goes_to_a_waiter_only_below_the_limit() {
        assert!(load(3, 1, 4).hands_over());
        assert!(!load(4, 1, 4).hands_over());
        // A lowered limit preempts nobody and hands nothing over above it.
        assert!(!load(6, 2, 4).hands_over());
        assert!(!load(0, 0, 4).hands_over());
    }
}
