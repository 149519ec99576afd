//! The retry budget: retries allowed up to a share of recent first attempts.
//!
//! Attempts limit the retries of one request; they do nothing against an outage,
//! where every request fails and every one of them retries, so a dependency that
//! is already failing gets `max_attempts` times its usual load. The budget bounds
//! the retries of all requests together: over any window, at most
//! `share × first attempts + reserve` retries are made, so the dependency sees at
//! most `(1 + share)` times the first attempts, plus the reserve.
//!
//! First attempts and retries are counted in ten buckets spanning the window, each
//! an atomic word holding the bucket's number and its count, so that a bucket is
//! reset and counted in one compare-and-swap. The share is applied when a retry is
//! asked for, to the sums of the buckets still in the window. A count therefore
//! lasts between 0.9 and 1 window. Taking a retry is one compare-and-swap on the
//! current bucket against the sums just read, so callers asking at the same moment
//! cannot both take the last retry (within one bucket; two callers on either side
//! of a bucket boundary may each take one).
//!
//! # Why not tower's `TpsBudget`
//!
//! `tower::retry::budget::TpsBudget` has the same shape (a share of recent deposits
//! over ten slots, plus a reserve), but it turns the share into a whole number of
//! deposits per retry, `1 / share` rounded down: a share of 0.3 allows a third, and
//! any share above one half allows one retry per first attempt. The bound that
//! seawall documents would not hold. It also panics on out-of-range parameters and
//! takes a mutex on every deposit, that is on every first attempt.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::{check_fraction, ConfigError};

/// Buckets in a window.
const BUCKETS: usize = 10;
/// Parts per million: the share is kept to six decimal places.
const PPM: u128 = 1_000_000;

/// A retry budget. Methods take `now`; the policy reads the clock.
///
/// Bucket numbers are kept modulo 2^32: with buckets of at least 100 ms, a bucket
/// could be mistaken for one 2^32 buckets older only after 13 years without a call.
pub(crate) struct RetryBudget {
    start: Instant,
    bucket_nanos: u128,
    share_ppm: u128,
    reserve: u64,
    firsts: [AtomicU64; BUCKETS],
    retries: [AtomicU64; BUCKETS],
    /// Set once a retry policy counts the first attempts (see [`SharedBudget`]).
    pub(crate) counted_by_retry: AtomicBool,
}

impl RetryBudget {
    /// A budget of `share` (validated: `0.0..=1.0`) of the first attempts of the last
    /// `window` (validated: at least 1 s), plus `reserve` retries per window.
    pub(crate) fn new(window: Duration, share: f64, reserve: u32, now: Instant) -> Self {
        let share_ppm = (share.clamp(0.0, 1.0) * PPM as f64).round() as u128;
        Self {
            start: now,
            bucket_nanos: (window.as_nanos() / BUCKETS as u128).max(1),
            share_ppm,
            reserve: u64::from(reserve),
            firsts: Default::default(),
            retries: Default::default(),
            counted_by_retry: AtomicBool::new(false),
        }
    }

    /// Counts one first attempt.
    pub(crate) fn deposit(&self, now: Instant) {
        let bucket = self.bucket(now);
        let word = &self.firsts[slot(bucket)];
        let mut current = word.load(Ordering::Relaxed);
        loop {
            let next = incremented(current, bucket);
            match word.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return,
                Err(actual) => current = actual,
            }
        }
    }

    /// Takes one retry if the budget allows it.
    pub(crate) fn withdraw(&self, now: Instant) -> bool {
        let bucket = self.bucket(now);
        let word = &self.retries[slot(bucket)];
        let mut current = word.load(Ordering::Relaxed);
        loop {
            let taken = self.sum_retries(bucket, Some(current));
            if taken >= self.allowance(bucket) {
                return false;
            }
            let next = incremented(current, bucket);
            match word.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(actual) => current = actual,
            }
        }
    }

    /// Retries the budget would allow now.
    pub(crate) fn available(&self, now: Instant) -> u64 {
        let bucket = self.bucket(now);
        self.allowance(bucket)
            .saturating_sub(self.sum_retries(bucket, None))
    }

    /// `share × first attempts + reserve`, over the buckets in the window.
    fn allowance(&self, bucket: u32) -> u64 {
        let firsts = u128::from(sum(&self.firsts, bucket, None));
        let earned = u64::try_from(firsts * self.share_ppm / PPM).unwrap_or(u64::MAX);
        earned.saturating_add(self.reserve)
    }

    /// Retries taken in the window; `current` stands in for the current bucket's
    /// word when the caller has just read it.
    fn sum_retries(&self, bucket: u32, current: Option<u64>) -> u64 {
        sum(&self.retries, bucket, current)
    }

    fn bucket(&self, now: Instant) -> u32 {
        let elapsed = now.saturating_duration_since(self.start).as_nanos();
        // Modulo 2^32 on purpose (see the type's docs).
        (elapsed / self.bucket_nanos) as u32
    }
}

/// One retry budget that a [`DeadlineRetry`](crate::DeadlineRetry) and a
/// [`HedgeLayer`](crate::HedgeLayer) draw on together, so that retries and hedges
/// *together* stay within `share × first attempts + reserve` per window.
///
/// Take it from a built policy ([`DeadlineRetry::budget`](crate::DeadlineRetry::budget))
/// and give it to the hedge layer
/// ([`HedgeBuilder::shared_budget`](crate::HedgeBuilder::shared_budget)), or make one
/// with [`new`](Self::new) and give it to both builders. Cloning shares it.
///
/// Who counts the first attempts: a retry policy built with (or owning) this budget
/// counts them, once per request however many attempts follow; the hedge layer then
/// only takes from it. A budget no retry policy uses is counted by the hedge layer,
/// once per request it sees.
#[derive(Clone)]
pub struct SharedBudget {
    pub(crate) budget: Arc<RetryBudget>,
}

impl SharedBudget {
    /// A budget of `share` (0.0 to 1.0) of the first attempts of the last `window`
    /// (1 s to 60 s), plus `reserve` per window. Errors name the field at fault
    /// (`budget_share`, `budget_window`).
    pub fn new(share: f64, reserve: u32, window: Duration) -> Result<Self, ConfigError> {
        check_fraction("budget_share", share)?;
        check_window(window)?;
        Ok(Self::build(share, reserve, window))
    }

    pub(crate) fn build(share: f64, reserve: u32, window: Duration) -> Self {
        Self {
            budget: Arc::new(RetryBudget::new(window, share, reserve, Instant::now())),
        }
    }

    /// Retries and hedges the budget would allow now.
    pub fn available(&self) -> u64 {
        self.budget.available(Instant::now())
    }

    /// Whether a retry policy counts this budget's first attempts.
    pub(crate) fn counted_by_retry(&self) -> bool {
        self.budget.counted_by_retry.load(Ordering::Relaxed)
    }
}

/// The budget window's bounds, the one check of every budget (a retry policy's, a
/// hedging layer's, a [`SharedBudget`]):
/// shorter than 1 s, the share is taken of too few calls to be a rate; longer than
/// 60 s, a long healthy spell funds a long burst at the start of an outage.
pub(crate) fn check_window(window: Duration) -> Result<(), ConfigError> {
    let (shortest, longest) = (Duration::from_secs(1), Duration::from_secs(60));
    if (shortest..=longest).contains(&window) {
        Ok(())
    } else {
        Err(ConfigError::new(
            "budget_window",
            format!("must be between {shortest:?} and {longest:?}, got {window:?}"),
        ))
    }
}

impl fmt::Debug for SharedBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.budget, f)
    }
}

impl fmt::Debug for RetryBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryBudget")
            .field("share_ppm", &self.share_ppm)
            .field("reserve", &self.reserve)
            .field(
                "window",
                &Duration::from_nanos(
                    u64::try_from(self.bucket_nanos * BUCKETS as u128).unwrap_or(u64::MAX),
                ),
            )
            .finish_non_exhaustive()
    }
}

fn slot(bucket: u32) -> usize {
    bucket as usize % BUCKETS
}

fn pack(bucket: u32, count: u32) -> u64 {
    (u64::from(bucket) << 32) | u64::from(count)
}

fn unpack(word: u64) -> (u32, u32) {
    ((word >> 32) as u32, word as u32)
}

/// Whether a word of bucket `of` counts at bucket `now`: less than a window older,
/// or (written by a caller whose clock read was a little later) a little newer.
fn in_window(of: u32, now: u32) -> bool {
    let behind = now.wrapping_sub(of);
    let ahead = of.wrapping_sub(now);
    behind < BUCKETS as u32 || ahead < BUCKETS as u32
}

/// The word after counting one more at `bucket`: a word of an older bucket starts
/// over; a count saturates rather than wrap.
fn incremented(word: u64, bucket: u32) -> u64 {
    let (of, count) = unpack(word);
    let newer = bucket.wrapping_sub(of);
    if newer != 0 && newer < 1 << 31 {
        pack(bucket, 1)
    } else {
        pack(of, count.saturating_add(1))
    }
}

fn sum(words: &[AtomicU64; BUCKETS], bucket: u32, current: Option<u64>) -> u64 {
    words
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let word = match current {
                Some(c) if i == slot(bucket) => c,
                _ => w.load(Ordering::Relaxed),
            };
            let (of, count) = unpack(word);
            if in_window(of, bucket) {
                u64::from(count)
            } else {
                0
            }
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const SECOND: Duration = Duration::from_secs(1);

    fn budget(share: f64, reserve: u32, t0: Instant) -> RetryBudget {
        RetryBudget::new(10 * SECOND, share, reserve, t0)
    }

    /// Deposits `n` first attempts at `now`.
    fn deposit_n(b: &RetryBudget, n: usize, now: Instant) {
        for _ in 0..n {
            b.deposit(now);
        }
    }

    fn drain(b: &RetryBudget, now: Instant) -> u64 {
        let mut taken = 0;
        while b.withdraw(now) {
            taken += 1;
        }
        taken
    }

    #[test]
    fn the_reserve_is_there_before_any_first_attempt() {
        let t0 = Instant::now();
        let b = budget(0.2, 3, t0);
        assert_eq!(b.available(t0), 3);
        assert_eq!(drain(&b, t0), 3);
        assert_eq!(b.available(t0), 0);
        assert_eq!(drain(&budget(1.0, 0, t0), t0), 0);
    }

    #[test]
    fn a_share_of_first_attempts_is_earned_rounded_down() {
        let t0 = Instant::now();
        let b = budget(0.2, 0, t0);
        deposit_n(&b, 4, t0);
        // 4 × 0.2 = 0.8: not yet a whole retry.
        assert!(!b.withdraw(t0));
        b.deposit(t0);
        assert!(b.withdraw(t0));
        assert!(!b.withdraw(t0));
        // Shares that a reciprocal would round: 0.7 of 10 is 7, 0.3 of 10 is 3.
        for (share, expected) in [(0.7, 7), (0.3, 3), (0.25, 2), (1.0, 10), (0.0, 0)] {
            let b = budget(share, 0, t0);
            deposit_n(&b, 10, t0);
            assert_eq!(drain(&b, t0), expected, "share {share}");
        }
    }

    #[test]
    fn counts_expire_after_a_window() {
        let t0 = Instant::now();
        let b = budget(1.0, 0, t0);
        b.deposit(t0);
        b.deposit(t0 + 5 * SECOND);
        // At 9.999 s both deposits are in the window.
        assert_eq!(b.available(t0 + 9999 * Duration::from_millis(1)), 2);
        // At 10 s the first bucket (0..1 s) has left the window; the second has not.
        assert_eq!(b.available(t0 + 10 * SECOND), 1);
        assert!(b.withdraw(t0 + 10 * SECOND));
        assert_eq!(b.available(t0 + 10 * SECOND), 0);
        // At 16 s the second deposit has left too, while the retry taken at 10 s is
        // still counted: nothing is available.
        assert_eq!(b.available(t0 + 16 * SECOND), 0);
        assert!(!b.withdraw(t0 + 16 * SECOND));
        // The reserve comes back as the retries that used it leave the window.
        let r = budget(0.0, 2, t0);
        assert_eq!(drain(&r, t0), 2);
        assert_eq!(r.available(t0 + 9 * SECOND), 0);
        assert_eq!(r.available(t0 + 10 * SECOND), 2);
    }

    #[test]
    fn a_bucket_reused_after_a_long_idle_spell_starts_over() {
        let t0 = Instant::now();
        let b = budget(1.0, 0, t0);
        deposit_n(&b, 5, t0);
        // An instant before the budget was made counts as its start.
        assert_eq!(b.available(t0.checked_sub(SECOND).unwrap_or(t0)), 5);
        // Ten windows later, the same slot: the old count is gone.
        let later = t0 + 100 * SECOND;
        assert_eq!(b.available(later), 0);
        b.deposit(later);
        assert_eq!(b.available(later), 1);
    }

    #[test]
    fn concurrent_callers_never_take_more_than_the_budget() {
        let t0 = Instant::now();
        let b = Arc::new(budget(0.2, 5, t0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let b = b.clone();
                std::thread::spawn(move || {
                    let mut taken = 0u64;
                    for _ in 0..10_000 {
                        b.deposit(t0);
                        taken += u64::from(b.withdraw(t0));
                        taken += u64::from(b.withdraw(t0));
                    }
                    taken
                })
            })
            .collect();
        let taken: u64 = threads
            .into_iter()
            .map(|t| t.join().expect("no thread panics"))
            .sum();
        // 40 000 first attempts × 0.2 + 5: every retry taken, none beyond.
        assert_eq!(taken + drain(&b, t0), 8_005);
    }

    #[test]
    fn counts_saturate_instead_of_wrapping() {
        let word = pack(7, u32::MAX);
        assert_eq!(incremented(word, 7), word);
        assert_eq!(incremented(word, 8), pack(8, 1));
        // A caller whose clock read is a bucket older counts into the newer bucket.
        assert_eq!(incremented(pack(8, 3), 7), pack(8, 4));
        assert!(in_window(u32::MAX, 3), "bucket numbers wrap");
    }
}
