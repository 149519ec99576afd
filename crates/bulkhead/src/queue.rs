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
//! With classes (a layer given a [`Criticality`] extractor), the same three
//! questions have class-aware answers, over [`ClassLoad`]:
//!
//! 4. **How many slots may a class hold?** Its [`Shares`] of the limit in force
//!    (critical: all of them), rounded down ([`Shares::cap`]); shares follow the
//!    limit as it moves, and a lowered limit preempts nobody.
//! 5. **Where does a newcomer go?** A free slot is taken when its class is under
//!    its share and nobody of its class, or of a more critical class that could
//!    take the slot, waits ahead of it; otherwise it joins its class's line (first
//!    in, first out within a class). When the queue is full, a newcomer more
//!    critical than the least critical waiter takes that waiter's place: the
//!    newest waiter of the least critical class is turned away at once
//!    ([`ClassPlace::Displace`]) ([`Shares::place`]).
//! 6. **Who gets a freed slot?** The front of the most critical line whose class
//!    is still under its share ([`Shares::next`]).
//!
//! With a [`ControlledDelay`] (off by default), a line that has not been empty
//! for longer than its `interval` **stands**: the bulkhead is overloaded, not
//! absorbing a burst. While it stands, a newcomer waits at most the short
//! `target` ([`QueuePolicy::wait_until_standing`]) and a freed slot goes to the
//! newest waiter rather than the oldest ([`QueuePolicy::serves_newest`]), whose
//! caller is the most likely to still be there; when the line empties, waits and
//! order are back to normal. This is the controlled delay and adaptive LIFO of
//! Facebook's "Fail at Scale" (ACM Queue, 2015).
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

use seawall_core::{check_duration, ConfigError, Criticality};
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
/// | `shares` | default 90 %, sheddable 50 % | with classes only: the share of the limit in force each class may hold ([`Shares`]) |
/// | `controlled_delay` | none (off) | a short wait and newest-first service while the line stands ([`ControlledDelay`]) |
///
/// ```toml
/// [policies.freight.bulkhead.queue]
/// max_queue = 10
/// max_wait = "20ms"
/// shares = { default = 90, sheddable = 50 }
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
    /// With classes only (a layer given a criticality extractor): the share of the
    /// limit in force each class may hold. Without classes it is not read.
    pub shares: Shares,
    /// Controlled delay and adaptive LIFO while the line stands (default none: off).
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub controlled_delay: Option<ControlledDelay>,
}

impl Default for QueuePolicy {
    /// 10 waiting, 20 ms at most: a starting point to calibrate, not a measured bound.
    fn default() -> Self {
        Self {
            max_queue: 10,
            max_wait: Duration::from_millis(20),
            shares: Shares::default(),
            controlled_delay: None,
        }
    }
}

/// Controlled delay and adaptive LIFO: what the queue does once it **stands**,
/// that is, has not been empty for longer than `interval`.
///
/// A queue that empties now and then is absorbing bursts, and first in, first out
/// with the normal `max_wait` is right. A queue that never empties is a standing
/// backlog: every waiter pays the whole wait and the oldest, served first, are
/// the callers most likely to have given up. So while it stands a newcomer waits
/// at most `target`, and (with `lifo`) a freed slot goes to the newest waiter;
/// the oldest time out. When the line empties, both return to normal. Every wait
/// is still bounded by `max_wait` and the request's deadline.
///
/// | field | default | meaning |
/// |---|---|---|
/// | `interval` | 100 ms | how long the line must stay non-empty to stand (more than zero, at most a year) |
/// | `target` | 5 ms | the longest a newcomer waits while the line stands (more than zero, at most a year) |
/// | `lifo` | `true` | serve the newest waiter first while the line stands |
///
/// The line's state is updated by arrivals (each reads the clock on its way into
/// the line), and cleared as the line empties.
///
/// - With classes, the lines keep their order between classes; within a class,
///   a standing line serves its newest first.
/// - [`Snapshot::standing`](crate::Snapshot::standing) says whether it stands now. Backpressure mode has no
///   queue of its own and is not affected.
///
/// ```
/// use std::time::Duration;
/// use seawall_bulkhead::{BulkheadLayer, ControlledDelay, QueuePolicy};
///
/// # fn main() -> Result<(), seawall_core::ConfigError> {
/// let freight = BulkheadLayer::builder("freight")
///     .queue(QueuePolicy {
///         max_wait: Duration::from_secs(1),
///         controlled_delay: Some(ControlledDelay::default()), // 100 ms, 5 ms, LIFO
///         ..QueuePolicy::default()
///     })
///     .build()?;
/// assert!(!freight.handle().snapshot().standing);
/// # Ok(())
/// # }
/// ```
///
/// It gains most when `max_wait` is long next to the dependency's latency (a
/// long wait lets a backlog grow that LIFO then serves out of order); with the
/// default 20 ms `max_wait` a standing line already times its waiters out soon,
/// and the mechanism changes little.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
pub struct ControlledDelay {
    /// How long the line must stay non-empty before it counts as standing.
    #[cfg_attr(feature = "serde", serde(with = "seawall_core::duration_format"))]
    pub interval: Duration,
    /// The longest a call that arrives while the line stands waits.
    #[cfg_attr(feature = "serde", serde(with = "seawall_core::duration_format"))]
    pub target: Duration,
    /// Serve the newest waiter first while the line stands.
    pub lifo: bool,
}

impl Default for ControlledDelay {
    /// Facebook's published numbers: a 100 ms interval, a 5 ms target.
    fn default() -> Self {
        Self {
            interval: Duration::from_millis(100),
            target: Duration::from_millis(5),
            lifo: true,
        }
    }
}

impl ControlledDelay {
    /// Checks every field, naming the first one at fault (`interval`, `target`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_duration("interval", self.interval)?;
        check_duration("target", self.target)?;
        Ok(())
    }

    /// Whether a line non-empty since `since` stands at `now`: longer than `interval`.
    pub fn stands(&self, since: Instant, now: Instant) -> bool {
        now.saturating_duration_since(since) > self.interval
    }
}

/// What the line remembers between arrivals, for the options whose rule reads its
/// history (a [`ControlledDelay`]'s standing line). The bulkhead keeps one under
/// the line's lock and hands it to [`QueuePolicy::arrive`] at each arrival; its
/// rules live here, beside the options, so that such an option is still written
/// in this file alone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LineState {
    /// When the line last became non-empty, as the arrivals saw it; `None` while
    /// it is empty.
    nonempty_since: Option<Instant>,
    /// It stands (as the last arrival saw it).
    standing: bool,
    /// A freed slot goes to the newest waiter.
    newest_first: bool,
}

impl LineState {
    /// The line emptied: its history starts again (first in, first out).
    pub(crate) fn emptied(&mut self) {
        *self = Self::default();
    }

    /// Whether the line stands, as the last arrival saw it.
    pub(crate) fn standing(&self) -> bool {
        self.standing
    }

    /// Whether a freed slot goes to the newest waiter rather than the oldest.
    pub(crate) fn newest_first(&self) -> bool {
        self.newest_first
    }
}

/// How much of the limit in force each [`Criticality`] may hold, in percent.
///
/// Critical calls may hold every slot; the other classes at most their share,
/// rounded down (`limit × share / 100`), of the limit in force now (fixed,
/// adaptive, forced or allotted), so a flood of sheddable calls cannot take the
/// slots a critical call needs. A share that rounds to 0 slots (50 % of a limit
/// of 1) admits nobody of that class until the limit grows. The defaults keep a
/// tenth of the slots for critical calls and half of them from sheddable ones: a
/// starting point, as Netflix's partitioned limiters start from a guess too.
///
/// | field | default | meaning |
/// |---|---|---|
/// | `default` | 90 | the most slots, in percent of the limit, default calls may hold (0 to 100) |
/// | `sheddable` | 50 | the same for sheddable calls (0 to `default`) |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
pub struct Shares {
    /// The share of the limit default calls may hold, in percent (0 to 100).
    pub default: u8,
    /// The share of the limit sheddable calls may hold, in percent (0 to `default`).
    pub sheddable: u8,
}

impl Default for Shares {
    fn default() -> Self {
        Self {
            default: 90,
            sheddable: 50,
        }
    }
}

/// The counts a class-aware decision is made on, read together under the line's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassLoad {
    /// Calls holding a slot, of every class (and none).
    pub active: usize,
    /// Calls holding a slot, by class ([`Criticality::index`]).
    pub by_class: [usize; 3],
    /// Calls waiting in each class's line.
    pub queued: [usize; 3],
    /// The limit of active calls in force.
    pub limit: usize,
}

impl ClassLoad {
    /// Calls waiting in every line.
    pub fn queued_total(&self) -> usize {
        self.queued.iter().sum()
    }
}

/// Where [`Shares::place`] puts a newcomer of a class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClassPlace {
    /// Takes a free slot now.
    Admit,
    /// Joins the back of its class's line.
    Wait,
    /// Joins its class's line in the place of the newest waiter of this (less
    /// critical) class, who is turned away at once as full, with cause displaced.
    Displace(Criticality),
    /// No slot, and no room in the line nor anyone less critical to displace.
    Full,
    /// Would have to wait, but its bound has passed.
    Expired,
}

impl Shares {
    /// Checks every field, naming the first one at fault (`default`, `sheddable`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.default > 100 {
            return Err(ConfigError::new("default", "must be at most 100 (percent)"));
        }
        if self.sheddable > self.default {
            return Err(ConfigError::new(
                "sheddable",
                "must be at most the default share: a less critical class gets no more",
            ));
        }
        Ok(())
    }

    /// The most slots `class` may hold under `limit`.
    #[inline]
    pub fn cap(&self, class: Criticality, limit: usize) -> usize {
        let percent = match class {
            Criticality::Critical => return limit,
            Criticality::Default => self.default,
            Criticality::Sheddable => self.sheddable,
        };
        // At most 2^20 × 100: no overflow.
        limit.saturating_mul(usize::from(percent)) / 100
    }

    /// Whether a call of `class` may take a slot under `load`, the line aside:
    /// one is free and its class is under its share.
    #[inline]
    pub fn may_take(&self, load: &ClassLoad, class: Criticality) -> bool {
        load.active < load.limit && load.by_class[class.index()] < self.cap(class, load.limit)
    }

    /// Who gets a freed slot under `load`: the most critical class that has
    /// someone waiting and is under its share (the front of its line), if any.
    pub fn next(&self, load: &ClassLoad) -> Option<Criticality> {
        Criticality::ALL
            .into_iter()
            .find(|&c| load.queued[c.index()] != 0 && self.may_take(load, c))
    }

    /// Where a newcomer of `class` goes under `load` with room for `max_queue`
    /// waiters; `may_wait` is whether [`QueuePolicy::wait_until`] gave it a bound.
    pub fn place(
        &self,
        load: &ClassLoad,
        class: Criticality,
        max_queue: usize,
        may_wait: bool,
    ) -> ClassPlace {
        // Nobody who could take the slot waits ahead: not of its own class (first
        // in, first out), not of a more critical class under its share.
        let ahead = Criticality::ALL
            .into_iter()
            .filter(|&c| c <= class)
            .any(|c| load.queued[c.index()] != 0 && self.may_take(load, c));
        if self.may_take(load, class) && !ahead {
            return ClassPlace::Admit;
        }
        if load.queued_total() < max_queue {
            return if may_wait {
                ClassPlace::Wait
            } else {
                ClassPlace::Expired
            };
        }
        let least = Criticality::ALL
            .into_iter()
            .rev()
            .find(|&c| load.queued[c.index()] != 0);
        match least {
            Some(least) if least > class && may_wait => ClassPlace::Displace(least),
            _ => ClassPlace::Full,
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
    /// Checks every field, naming the first one at fault (`max_queue`, `max_wait`,
    /// `shares.sheddable`; a bulkhead's configuration names them `queue.max_queue`, …).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_queue > MAX_LIMIT {
            return Err(ConfigError::new(
                "max_queue",
                format!("must be at most {MAX_LIMIT}"),
            ));
        }
        check_duration("max_wait", self.max_wait)?;
        self.shares.validate().map_err(|e| e.within("shares"))?;
        if let Some(delay) = &self.controlled_delay {
            delay.validate().map_err(|e| e.within("controlled_delay"))?;
        }
        Ok(())
    }

    /// As [`wait_until`](Self::wait_until), for a call arriving while the line
    /// `standing` (see [`ControlledDelay`]): then at most `target` from now. Without
    /// a controlled delay, or with the line not standing, the same as `wait_until`.
    pub fn wait_until_standing(
        &self,
        now: Instant,
        deadline: Option<Instant>,
        standing: bool,
    ) -> Option<Instant> {
        let until = self.wait_until(now, deadline)?;
        match self.controlled_delay {
            Some(delay) if standing => Some(until.min(seawall_core::later(now, delay.target))),
            _ => Some(until),
        }
    }

    /// Whether a freed slot goes to the newest waiter: the line `standing` with
    /// adaptive LIFO configured. Otherwise, first in, first out.
    pub fn serves_newest(&self, standing: bool) -> bool {
        standing && self.controlled_delay.is_some_and(|d| d.lifo)
    }

    /// Whether an option reads the line's history ([`LineState`]), so that an
    /// arrival must update it under the line's lock. Without one, arrivals take
    /// no lock for it.
    pub(crate) fn has_history(&self) -> bool {
        self.controlled_delay.is_some()
    }

    /// An arrival at `now`, the line being `empty` before it: moves `line` on and
    /// returns it as this arrival sees it. The line that is empty now counts as
    /// non-empty from `now`, as this arrival may join it.
    pub(crate) fn arrive(&self, line: &mut LineState, empty: bool, now: Instant) -> LineState {
        if let Some(delay) = &self.controlled_delay {
            if empty {
                line.nonempty_since = Some(now);
            }
            let since = *line.nonempty_since.get_or_insert(now);
            line.standing = !empty && delay.stands(since, now);
            line.newest_first = self.serves_newest(line.standing);
        }
        *line
    }

    /// The latest instant a call arriving at `now` into `line` may wait until
    /// (see [`wait_until_standing`](Self::wait_until_standing)).
    pub(crate) fn wait_for(
        &self,
        now: Instant,
        deadline: Option<Instant>,
        line: &LineState,
    ) -> Option<Instant> {
        self.wait_until_standing(now, deadline, line.standing)
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
        shares: Shares {
            default: 90,
            sheddable: 50,
        },
        controlled_delay: None,
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

    const C: Criticality = Criticality::Critical;
    const D: Criticality = Criticality::Default;
    const S: Criticality = Criticality::Sheddable;

    fn classes(by_class: [usize; 3], queued: [usize; 3], limit: usize) -> ClassLoad {
        ClassLoad {
            active: by_class.iter().sum(),
            by_class,
            queued,
            limit,
        }
    }

    #[test]
    fn shares_are_fractions_of_the_limit_in_force_rounded_down() {
        let shares = Shares::default();
        assert_eq!((shares.default, shares.sheddable), (90, 50));
        assert_eq!(
            [C, D, S].map(|c| shares.cap(c, 10)),
            [10, 9, 5],
            "critical may hold all ten"
        );
        assert_eq!([C, D, S].map(|c| shares.cap(c, 3)), [3, 2, 1]);
        // Half of one slot is none: sheddable waits until the limit grows.
        assert_eq!([C, D, S].map(|c| shares.cap(c, 1)), [1, 0, 0]);
        let bad = |s: Shares| s.validate().unwrap_err().field().to_owned();
        assert_eq!(
            bad(Shares {
                default: 101,
                sheddable: 50
            }),
            "default"
        );
        assert_eq!(
            bad(Shares {
                default: 40,
                sheddable: 50
            }),
            "sheddable"
        );
        let policy = QueuePolicy {
            shares: Shares {
                default: 40,
                sheddable: 50,
            },
            ..POLICY
        };
        assert_eq!(policy.validate().unwrap_err().field(), "shares.sheddable");
        assert!(Shares {
            default: 0,
            sheddable: 0
        }
        .validate()
        .is_ok());
    }

    #[test]
    fn a_class_at_its_share_waits_while_a_more_critical_one_takes_a_free_slot() {
        let shares = Shares::default();
        // Limit 10, sheddable holds its 5: another sheddable waits, a default goes in.
        let load = classes([0, 0, 5], [0, 0, 0], 10);
        assert_eq!(shares.place(&load, S, 2, true), ClassPlace::Wait);
        assert_eq!(shares.place(&load, D, 2, true), ClassPlace::Admit);
        assert_eq!(shares.place(&load, C, 2, true), ClassPlace::Admit);
        // A sheddable waiting at its share does not hold up a critical newcomer.
        let load = classes([0, 0, 5], [0, 0, 1], 10);
        assert_eq!(shares.place(&load, C, 2, true), ClassPlace::Admit);
        // Every slot taken: everyone waits, whatever its class.
        let load = classes([4, 3, 3], [0, 0, 0], 10);
        assert_eq!(shares.place(&load, C, 2, true), ClassPlace::Wait);
    }

    #[test]
    fn within_a_class_first_in_first_out_and_a_critical_waiter_goes_first() {
        let shares = Shares::default();
        // A default waits (a slot just freed, not handed over yet): a default
        // newcomer queues behind it, and so does a sheddable one.
        let load = classes([0, 8, 1], [0, 1, 0], 10);
        assert_eq!(shares.place(&load, D, 5, true), ClassPlace::Wait);
        assert_eq!(shares.place(&load, S, 5, true), ClassPlace::Wait);
        // The freed slot goes to the most critical class under its share.
        let load = classes([2, 5, 2], [1, 1, 1], 10);
        assert_eq!(shares.next(&load), Some(C));
        let load = classes([0, 9, 0], [0, 1, 1], 10);
        assert_eq!(shares.next(&load), Some(S), "default is at its share");
        let load = classes([0, 9, 1], [0, 1, 0], 10);
        assert_eq!(shares.next(&load), None, "no class under its share waits");
        let load = classes([10, 0, 0], [1, 1, 1], 10);
        assert_eq!(shares.next(&load), None, "no slot free");
        // A lowered limit preempts nobody and hands nothing over above it.
        let load = classes([3, 3, 3], [1, 0, 0], 4);
        assert_eq!(shares.next(&load), None);
    }

    #[test]
    fn a_full_queue_displaces_the_least_critical_waiter_for_a_more_critical_newcomer() {
        let shares = Shares::default();
        let full = classes([4, 4, 2], [0, 1, 1], 10);
        assert_eq!(shares.place(&full, C, 2, true), ClassPlace::Displace(S));
        assert_eq!(shares.place(&full, D, 2, true), ClassPlace::Displace(S));
        // Nobody less critical than a sheddable newcomer: it is turned away.
        assert_eq!(shares.place(&full, S, 2, true), ClassPlace::Full);
        let defaults = classes([4, 4, 2], [0, 2, 0], 10);
        assert_eq!(shares.place(&defaults, C, 2, true), ClassPlace::Displace(D));
        assert_eq!(shares.place(&defaults, D, 2, true), ClassPlace::Full);
        // A newcomer that may not wait displaces nobody.
        assert_eq!(shares.place(&full, C, 2, false), ClassPlace::Full);
        // With room in the line, one that may not wait is timed out, as without classes.
        assert_eq!(shares.place(&full, C, 3, false), ClassPlace::Expired);
        // No queue at all: nothing to displace.
        let none = classes([4, 4, 2], [0, 0, 0], 10);
        assert_eq!(shares.place(&none, C, 0, true), ClassPlace::Full);
    }

    #[test]
    fn with_every_share_at_100_percent_one_class_places_as_without_classes() {
        let all = Shares {
            default: 100,
            sheddable: 100,
        };
        for active in 0..4 {
            for queued in 0..4 {
                let plain = POLICY.place(load(active, queued, 3), true);
                let classed = all.place(&classes([0, active, 0], [0, queued, 0], 3), D, 2, true);
                let expect = match plain {
                    Place::Admit => ClassPlace::Admit,
                    Place::Wait => ClassPlace::Wait,
                    Place::Full => ClassPlace::Full,
                    Place::Expired => ClassPlace::Expired,
                };
                assert_eq!(classed, expect, "active {active}, queued {queued}");
            }
        }
    }

    #[test]
    fn a_standing_line_shortens_the_wait_to_the_target_and_serves_the_newest() {
        let ms = Duration::from_millis;
        let now = Instant::now();
        let delay = ControlledDelay::default();
        assert!(delay.validate().is_ok());
        assert!(
            !delay.stands(now, now + ms(100)),
            "exactly the interval: not yet"
        );
        assert!(delay.stands(now, now + ms(101)));
        let policy = QueuePolicy {
            controlled_delay: Some(delay),
            ..POLICY
        };
        assert_eq!(
            policy.wait_until_standing(now, None, false),
            Some(now + ms(20))
        );
        assert_eq!(
            policy.wait_until_standing(now, None, true),
            Some(now + ms(5))
        );
        // The deadline still bounds it, and a passed one still forbids waiting.
        let soon = Some(now + ms(2));
        assert_eq!(
            policy.wait_until_standing(now, soon, true),
            Some(now + ms(2))
        );
        assert_eq!(policy.wait_until_standing(now, Some(now), true), None);
        assert!(policy.serves_newest(true));
        assert!(!policy.serves_newest(false));
        let fifo = QueuePolicy {
            controlled_delay: Some(ControlledDelay {
                lifo: false,
                ..delay
            }),
            ..POLICY
        };
        assert!(!fifo.serves_newest(true));
        // Off: standing changes nothing.
        assert_eq!(
            POLICY.wait_until_standing(now, None, true),
            Some(now + ms(20))
        );
        assert!(!POLICY.serves_newest(true));
        let bad = |d: ControlledDelay| {
            QueuePolicy {
                controlled_delay: Some(d),
                ..POLICY
            }
            .validate()
            .unwrap_err()
            .field()
            .to_owned()
        };
        assert_eq!(
            bad(ControlledDelay {
                target: Duration::ZERO,
                ..delay
            }),
            "controlled_delay.target"
        );
        assert_eq!(
            bad(ControlledDelay {
                interval: Duration::MAX,
                ..delay
            }),
            "controlled_delay.interval"
        );
    }

    mod wait_bounds {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn no_wait_passes_the_target_while_standing_nor_the_deadline_ever(
                max_wait in 1..2_000u64,
                target in 1..2_000u64,
                deadline in proptest::option::of(0..3_000u64),
                standing: bool,
                lifo: bool,
            ) {
                let ms = Duration::from_millis;
                let now = Instant::now();
                let policy = QueuePolicy {
                    max_wait: ms(max_wait),
                    controlled_delay: Some(ControlledDelay { interval: ms(100), target: ms(target), lifo }),
                    ..POLICY
                };
                let deadline = deadline.map(|d| now + ms(d));
                let plain = policy.wait_until(now, deadline);
                let got = policy.wait_until_standing(now, deadline, standing);
                // Never longer than without the delay, and it may wait exactly when it could.
                prop_assert_eq!(got.is_some(), plain.is_some());
                if let (Some(got), Some(plain)) = (got, plain) {
                    prop_assert!(got <= plain);
                    prop_assert!(got <= now + ms(max_wait));
                    if let Some(d) = deadline {
                        prop_assert!(got <= d);
                    }
                    if standing {
                        prop_assert!(got <= now + ms(target));
                    } else {
                        prop_assert_eq!(got, plain);
                    }
                }
            }
        }
    }
}
