//! One view of every replica: each coordinating instance reports its breaker to
//! the store every [`REPORT_EVERY`], and anyone can read the fleet's reports of
//! one breaker ([`Coordinated::fleet_view`]). A breaker open on one instance
//! only, long after it opened, is called out as stuck ([`StuckOpen`]).
//!
//! # Bounds and cost
//!
//! A report is one hash field of at most [`MAX_REPORT_LEN`] bytes per instance,
//! with the instances indexed by report time in a sorted set under the
//! breaker's hash tag (no `SCAN`). Writing one costs `O(log N)` and drops at
//! most 16 reports older than [`REPORT_FRESH`] (three periods): an instance
//! that left drops out within three periods. Each instance writes one report
//! per [`REPORT_EVERY`] (0.2 store operations per second), whatever the fleet's
//! size; the whole view is read only when asked for (an operator's page) and
//! by an instance whose breaker has been open long enough to be suspect.
//!
//! # The record, and a rolling upgrade
//!
//! A report is one line of tab-separated fields. Since the stuck-open flag
//! travels with it (so that the page shows it on every instance's card, not
//! only on the instance serving the page) it is a `v2` record; `v1` records
//! (without the flag) are still read. An instance of an earlier release reads
//! only `v1`: during a rolling upgrade, the views it serves leave the upgraded
//! instances out until it is upgraded too.

use std::time::Duration;

use seawall_circuit_breaker::{Snapshot, State};

/// How often each coordinating instance reports its breaker.
pub const REPORT_EVERY: Duration = Duration::from_secs(5);

/// How long a report counts: three periods. An instance silent longer is left
/// out of the view (it left, or lost the store).
pub const REPORT_FRESH: Duration = Duration::from_secs(15);

/// The longest report kept, in bytes.
pub const MAX_REPORT_LEN: usize = 256;

/// How long a breaker must have been open, at least, before it may be called
/// stuck: three of its open intervals, and never less than this.
pub const STUCK_AFTER: Duration = Duration::from_secs(60);

/// How long an operator's force open may last before it is called out.
pub const FORCED_TOO_LONG: Duration = Duration::from_secs(15 * 60);

/// One instance's report on one breaker.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct InstanceReport {
    /// The instance (32 hex digits, its coordination's token).
    pub instance: String,
    /// The breaker's state (`closed`, `open`, `half_open`, `forced_open`, …).
    pub state: String,
    /// How long it has been in that state, ms.
    pub in_state_ms: u64,
    /// How long it has been open without a success between (re-trips
    /// included), ms; absent when it is not open.
    pub open_spell_ms: Option<u64>,
    /// Calls, failures and calls short-circuited since the instance started.
    pub calls: u64,
    /// See `calls`.
    pub failures: u64,
    /// See `calls`.
    pub short_circuited: u64,
    /// The id of the fleet action holding the breaker, if any.
    pub fleet_action: Option<String>,
    /// When it reported, ms since the Unix epoch by its clock.
    pub at_ms: u64,
    /// The instance's stuck-open flag with its evidence, as it decided it
    /// when it wrote this report.
    pub stuck_open: Option<StuckOpen>,
}

impl InstanceReport {
    pub(crate) fn of(
        instance: String,
        snapshot: &Snapshot,
        fleet_action: Option<String>,
        stuck_open: Option<StuckOpen>,
        at_ms: u64,
    ) -> Self {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Self {
            instance,
            state: snapshot.state.as_str().to_owned(),
            in_state_ms: ms(snapshot.in_state_for),
            open_spell_ms: snapshot.open_spell.map(ms),
            calls: snapshot.counters.calls,
            failures: snapshot.counters.failures,
            short_circuited: snapshot.counters.short_circuited,
            fleet_action,
            at_ms,
            stuck_open,
        }
    }

    /// The store's form: one line of tab-separated fields (`v2`: `v1`'s, then
    /// the stuck-open flag's cause, open time and the others closed and open,
    /// empty when not flagged).
    pub fn encode(&self) -> String {
        let opt = |v: Option<u64>| v.map_or_else(String::new, |v| v.to_string());
        let stuck = self.stuck_open.as_ref().map_or_else(
            || "\t\t\t\t".to_owned(),
            |s| {
                format!(
                    "{}\t{}\t{}\t{}\t{}",
                    s.cause.as_str(),
                    s.open_for_ms,
                    s.others_closed,
                    s.others_open,
                    match s.dependency_check {
                        Some(true) => "pass",
                        Some(false) => "fail",
                        None => "",
                    }
                )
            },
        );
        let line = format!(
            "v2\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{stuck}",
            self.instance,
            self.state,
            self.in_state_ms,
            opt(self.open_spell_ms),
            self.calls,
            self.failures,
            self.short_circuited,
            self.fleet_action.as_deref().unwrap_or_default(),
            self.at_ms
        );
        line.chars().take(MAX_REPORT_LEN).collect()
    }

    /// Parses [`encode`](Self::encode)'s form, and `v1` (no flag).
    pub fn decode(s: &str) -> Option<Self> {
        let f: Vec<&str> = s.split('\t').collect();
        let stuck_open = match (f.first().copied(), f.len()) {
            (Some("v1"), 10) => None,
            (Some("v2"), 15) if f[10].is_empty() => None,
            (Some("v2"), 15) => Some(StuckOpen {
                cause: StuckCause::parse(f[10])?,
                open_for_ms: f[11].parse().ok()?,
                others_closed: f[12].parse().ok()?,
                others_open: f[13].parse().ok()?,
                dependency_check: match f[14] {
                    "pass" => Some(true),
                    "fail" => Some(false),
                    "" => None,
                    _ => return None,
                },
            }),
            _ => return None,
        };
        let opt = |v: &str| -> Option<Option<u64>> {
            if v.is_empty() {
                Some(None)
            } else {
                v.parse().ok().map(Some)
            }
        };
        Some(Self {
            instance: f[1].to_owned(),
            state: f[2].to_owned(),
            in_state_ms: f[3].parse().ok()?,
            open_spell_ms: opt(f[4])?,
            calls: f[5].parse().ok()?,
            failures: f[6].parse().ok()?,
            short_circuited: f[7].parse().ok()?,
            fleet_action: (!f[8].is_empty()).then(|| f[8].to_owned()),
            at_ms: f[9].parse().ok()?,
            stuck_open,
        })
    }

    /// Open in any way: what an operator looks at first.
    fn rank(&self) -> u8 {
        match self.state.as_str() {
            "open" | "forced_open" => 0,
            "half_open" => 1,
            "closed" => 3,
            _ => 2,
        }
    }
}

/// The fleet's reports on one breaker, the worst first (open, then half-open,
/// then overridden, then closed; the longest open first), with counts by state.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct FleetView {
    /// Instances reporting `closed`.
    pub closed: u32,
    /// Instances reporting `open`.
    pub open: u32,
    /// Instances reporting `half_open`.
    pub half_open: u32,
    /// Instances an operator holds (`forced_open`, `forced_closed`, `disabled`).
    pub forced: u32,
    /// Every fresh report, the worst first.
    pub instances: Vec<InstanceReport>,
    /// The age of each report, ms, in the same order (by the reader's clock).
    pub ages_ms: Vec<u64>,
}

impl FleetView {
    /// The view from `(instance, record)` pairs read at `now_ms`: reports
    /// older than [`REPORT_FRESH`] and malformed ones left out.
    pub(crate) fn from_reports(read: &[(String, String)], now_ms: u64) -> Self {
        let fresh = u64::try_from(REPORT_FRESH.as_millis()).unwrap_or(u64::MAX);
        let mut instances: Vec<InstanceReport> = read
            .iter()
            .filter_map(|(_, r)| InstanceReport::decode(r))
            .filter(|r| now_ms.saturating_sub(r.at_ms) <= fresh)
            .collect();
        instances.sort_by_key(|r| {
            (
                r.rank(),
                std::cmp::Reverse(r.open_spell_ms.unwrap_or(0)),
                r.instance.clone(),
            )
        });
        let mut view = FleetView::default();
        for r in &instances {
            match r.state.as_str() {
                "closed" => view.closed += 1,
                "open" => view.open += 1,
                "half_open" => view.half_open += 1,
                _ => view.forced += 1,
            }
        }
        view.ages_ms = instances
            .iter()
            .map(|r| now_ms.saturating_sub(r.at_ms))
            .collect();
        view.instances = instances;
        view
    }
}

/// Why a breaker is called stuck open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum StuckCause {
    /// Open here while the dependency answers: its direct check passes (when one
    /// is linked) and no other reporting instance is open for it, or, without a
    /// check, every other reporting instance is closed. Look at this instance (its
    /// network path, its configuration, a local resource), not at the dependency.
    LocalOnly,
    /// Open here while the dependency fails: its direct check fails too, or other
    /// instances are open for it as well. The dependency (or the path every
    /// instance shares to it) is failing; the breaker is doing its job.
    ExternalFailure,
    /// Held open by an operator for longer than [`FORCED_TOO_LONG`]: was it
    /// forgotten?
    Forced,
}

impl StuckCause {
    /// Every cause, in declaration order.
    pub const ALL: [StuckCause; 3] = [
        StuckCause::LocalOnly,
        StuckCause::ExternalFailure,
        StuckCause::Forced,
    ];

    /// The name the JSON answers and the store use.
    pub fn as_str(self) -> &'static str {
        match self {
            StuckCause::LocalOnly => "local_only",
            StuckCause::ExternalFailure => "external_failure",
            StuckCause::Forced => "forced",
        }
    }

    /// The cause [`as_str`](Self::as_str) names.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

/// A breaker open for long, with the evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct StuckOpen {
    /// Which case.
    pub cause: StuckCause,
    /// How long it has been open, ms.
    pub open_for_ms: u64,
    /// Other fresh reports closed / open (half-open counted as open) when
    /// decided; zero for [`StuckCause::Forced`].
    pub others_closed: u32,
    /// See `others_closed`.
    pub others_open: u32,
    /// The dependency's direct check when decided, if one is linked
    /// ([`Coordinated::link_dependency_check`](crate::Coordinated::link_dependency_check)):
    /// `Some(true)` it passed, `Some(false)` it failed.
    pub dependency_check: Option<bool>,
}

/// Whether this instance's breaker may be stuck: the store's view is needed
/// only once it has been open for three of its open intervals and at least
/// `stuck_after` ([`STUCK_AFTER`] by default); a breaker whose interval has passed
/// with no call to probe ("probe due") is not suspect.
pub(crate) fn suspect(snapshot: &Snapshot, stuck_after: Duration) -> bool {
    if snapshot.state != State::Open || snapshot.retry_after.is_some_and(|d| d.is_zero()) {
        return false;
    }
    let threshold = snapshot
        .open_for
        .map_or(stuck_after, |d| d.saturating_mul(3).max(stuck_after));
    snapshot.open_spell.is_some_and(|spell| spell >= threshold)
}

/// The flag for this instance, from its snapshot, (when suspect) the view, and
/// the dependency's direct check if one is linked (`Some(true)`: it passed).
///
/// The check decides when it has an answer: failing, the dependency is down
/// (external); passing, the dependency answers, so unless other instances are
/// open too the trouble is this instance's (local). Without a check the fleet
/// decides: open here alone while others are closed is local.
pub(crate) fn stuck(
    snapshot: &Snapshot,
    me: &str,
    view: Option<&FleetView>,
    dependency_check: Option<bool>,
    stuck_after: Duration,
) -> Option<StuckOpen> {
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    if snapshot.state == State::ForcedOpen && snapshot.in_state_for >= FORCED_TOO_LONG {
        return Some(StuckOpen {
            cause: StuckCause::Forced,
            open_for_ms: ms(snapshot.in_state_for),
            others_closed: 0,
            others_open: 0,
            dependency_check,
        });
    }
    if !suspect(snapshot, stuck_after) || (view.is_none() && dependency_check.is_none()) {
        return None;
    }
    let (mut closed, mut open) = (0, 0);
    for r in view.iter().flat_map(|v| &v.instances) {
        if r.instance == me {
            continue;
        }
        match r.state.as_str() {
            "closed" => closed += 1,
            "open" | "half_open" => open += 1,
            _ => {}
        }
    }
    let cause = match dependency_check {
        Some(false) => StuckCause::ExternalFailure,
        Some(true) if open == 0 => StuckCause::LocalOnly,
        None if closed > 0 && open == 0 => StuckCause::LocalOnly,
        _ => StuckCause::ExternalFailure,
    };
    Some(StuckOpen {
        cause,
        open_for_ms: snapshot.open_spell.map_or(0, ms),
        others_closed: closed,
        others_open: open,
        dependency_check,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(instance: &str, state: &str, spell: Option<u64>, at_ms: u64) -> InstanceReport {
        InstanceReport {
            instance: instance.to_owned(),
            state: state.to_owned(),
            in_state_ms: 10,
            open_spell_ms: spell,
            calls: 5,
            failures: 2,
            short_circuited: 1,
            fleet_action: None,
            at_ms,
            stuck_open: None,
        }
    }

    #[test]
    fn reports_survive_the_store_and_stay_bounded() {
        let mut r = report("ab", "open", Some(70_000), 1_000);
        r.fleet_action = Some("f".repeat(32));
        assert_eq!(InstanceReport::decode(&r.encode()), Some(r.clone()));
        r.fleet_action = None;
        r.open_spell_ms = None;
        assert_eq!(InstanceReport::decode(&r.encode()), Some(r.clone()));
        r.instance = "x".repeat(1000);
        assert!(r.encode().len() <= MAX_REPORT_LEN);
        assert!(InstanceReport::decode("v1\tjunk").is_none());
    }

    #[test]
    fn a_report_carries_the_stuck_flag_and_an_earlier_release_s_report_is_read() {
        let mut r = report("ab", "open", Some(70_000), 1_000);
        r.stuck_open = Some(StuckOpen {
            cause: StuckCause::LocalOnly,
            open_for_ms: 70_000,
            others_closed: 2,
            others_open: 0,
            dependency_check: Some(true),
        });
        let line = r.encode();
        assert!(line.starts_with("v2\t"), "{line}");
        assert!(line.ends_with("\tlocal_only\t70000\t2\t0\tpass"), "{line}");
        assert_eq!(InstanceReport::decode(&line), Some(r.clone()));
        for (check, written) in [(Some(false), "fail"), (None, "")] {
            let mut other = r.clone();
            if let Some(flag) = other.stuck_open.as_mut() {
                flag.dependency_check = check;
            }
            let line = other.encode();
            assert!(line.ends_with(&format!("\t0\t{written}")), "{line}");
            assert_eq!(InstanceReport::decode(&line), Some(other));
        }
        assert!(InstanceReport::decode(&line.replace("\tpass", "\tmaybe")).is_none());
        // As an instance of the earlier release writes it: no flag.
        let v1 = "v1\tab\topen\t10\t70000\t5\t2\t1\t\t1000";
        r.stuck_open = None;
        assert_eq!(InstanceReport::decode(v1), Some(r));
        assert!(InstanceReport::decode(&line.replace("local_only", "sideways")).is_none());
        for cause in [
            StuckCause::LocalOnly,
            StuckCause::ExternalFailure,
            StuckCause::Forced,
        ] {
            assert_eq!(StuckCause::parse(cause.as_str()), Some(cause));
        }
    }

    #[test]
    fn the_view_counts_fresh_reports_and_puts_the_worst_first() {
        let now = 100_000;
        let read: Vec<(String, String)> = [
            report("a", "closed", None, now - 1_000),
            report("b", "open", Some(5_000), now - 2_000),
            report("c", "open", Some(90_000), now - 3_000),
            report("d", "half_open", Some(1), now),
            report("e", "forced_closed", None, now),
            report("gone", "open", Some(1), now - 15_001),
        ]
        .iter()
        .map(|r| (r.instance.clone(), r.encode()))
        .chain([("junk".to_owned(), "junk".to_owned())])
        .collect();
        let view = FleetView::from_reports(&read, now);
        let order: Vec<&str> = view.instances.iter().map(|r| r.instance.as_str()).collect();
        assert_eq!(order, ["c", "b", "d", "e", "a"]);
        assert_eq!(
            (view.closed, view.open, view.half_open, view.forced),
            (1, 2, 1, 1)
        );
        assert_eq!(view.ages_ms, [3_000, 2_000, 0, 0, 1_000]);
    }
}
