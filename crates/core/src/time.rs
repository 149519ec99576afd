//! Instant arithmetic that cannot panic, and the longest duration any setting accepts.
//!
//! Every interval seawall measures (a deadline's budget, an open interval, a window, a
//! queue wait, a dwell, a retry's backoff, a fleet's lease renewal) is measured on the
//! monotonic clock, tokio's [`Instant`], never on the wall clock: a clock step (NTP, a
//! leap second, an operator setting the date) neither trips, opens, closes nor expires
//! anything. It also lets tests drive every interval with `tokio::time::pause()`.
//!
//! `Instant + Duration` panics when the sum leaves the clock's range, and a budget,
//! an open interval or a wait is user input. seawall's builders refuse budgets,
//! intervals, windows, timeouts and waits longer than [`MAX_DURATION`], and every
//! instant is computed with [`later`] (or a checked addition), so neither a hostile
//! policy file nor an unchecked path can turn a large value into a panic in the
//! middle of a request. (A degradation layer's `min_dwell` and `probe_window` accept
//! any length: there a huge value means "never".)

use std::time::Duration;

use tokio::time::Instant;

/// The longest duration accepted by any seawall setting: one year.
///
/// Far longer than any budget, open interval, dwell or wait a service means, and
/// far enough inside the clock's range that adding it to an instant never overflows.
/// A longer value is a mistake (a unit slip, `u64::MAX` seconds from a file) that
/// builders report as a [`ConfigError`](crate::ConfigError) naming the field.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// How far [`later`] saturates: about thirty years, as tokio's own timers do.
const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);

/// `at + d`, saturating instead of panicking.
///
/// When the sum leaves the clock's range the result is about thirty years after
/// `at` (or `at` itself if even that does not fit): an instant no request lives to
/// see, so a deadline or an open interval that large behaves as "never".
#[inline]
pub fn later(at: Instant, d: Duration) -> Instant {
    match at.checked_add(d) {
        Some(t) => t,
        None => at.checked_add(FAR_FUTURE.min(d)).unwrap_or(at),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_adds_when_it_fits_and_saturates_far_ahead_when_not() {
        let now = Instant::now();
        assert_eq!(
            later(now, Duration::from_secs(5)),
            now + Duration::from_secs(5)
        );
        let never = later(now, Duration::MAX);
        assert!(never >= now + Duration::from_secs(86_400 * 365 * 29));
        assert_eq!(later(now, MAX_DURATION), now + MAX_DURATION);
    }
}
