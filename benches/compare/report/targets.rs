//! The verdicts: issue 17's targets, as ratios to the peers measured in the same
//! run, in both modes.
//!
//! A ratio is taken round by round (or run by run for throughput), and a verdict
//! is given only where the whole p25–p75 spread of those ratios is on one side of
//! the threshold; otherwise the line says the run cannot tell. Allocation targets
//! are counts and need no spread.

use crate::harness::stats::{median, Spread};
use crate::harness::{Mode, Probe, WORKERS};
use crate::options::Options;
use crate::subjects::{Id, Row};

use super::{fmt, Net};

#[derive(Clone, Copy)]
enum Verdict {
    Reached,
    Missed,
    /// The spread straddles the threshold.
    Unclear,
    /// The contended runs had fewer cores than their tasks could use (median).
    Starved(f64),
}

impl Verdict {
    fn text(self) -> String {
        match self {
            Verdict::Reached => "reached".to_owned(),
            Verdict::Missed => "**missed**".to_owned(),
            Verdict::Unclear => "spread straddles the threshold: no verdict".to_owned(),
            Verdict::Starved(cores) => {
                format!("the process had {cores:.2} cores of {WORKERS}: no verdict")
            }
        }
    }

    /// For a ratio that must stay at most `limit`.
    fn at_most(s: Spread, limit: f64) -> Verdict {
        if s.p75 <= limit {
            Verdict::Reached
        } else if s.p25 > limit {
            Verdict::Missed
        } else {
            Verdict::Unclear
        }
    }

    /// For a ratio that must reach at least `limit`.
    fn at_least(s: Spread, limit: f64) -> Verdict {
        if s.p25 >= limit {
            Verdict::Reached
        } else if s.p75 < limit {
            Verdict::Missed
        } else {
            Verdict::Unclear
        }
    }

    fn exact(reached: bool) -> Verdict {
        if reached {
            Verdict::Reached
        } else {
            Verdict::Missed
        }
    }
}

/// Which figure of a row a target reads.
#[derive(Clone, Copy)]
enum At {
    /// The admitted path.
    Main(Id),
    /// The second path (rejected, served).
    Second(Id),
}

/// How the peers' figures of one round (or run) combine into the reference.
#[derive(Clone, Copy)]
enum Combine {
    Only,
    Fastest,
    Sum,
}

impl Combine {
    fn apply(self, v: &[f64]) -> f64 {
        match self {
            Combine::Only => v.first().copied().unwrap_or(f64::NAN),
            Combine::Fastest => v.iter().copied().fold(f64::INFINITY, f64::min),
            Combine::Sum => v.iter().sum(),
        }
    }
}

/// How far seawall's added cost may be from the peers' (combined).
#[derive(Clone, Copy)]
enum Bound {
    /// At most this many times theirs.
    Ratio(f64),
    /// At most this many nanoseconds more than theirs.
    Nanos(f64),
}

/// How a target is judged.
#[derive(Clone, Copy)]
enum Rule {
    /// Seawall's added cost over the peers' (combined), round by round, at most this.
    AtMost(f64, Combine),
    /// Seawall's added cost over the peers' (combined), round by round, at most
    /// this many nanoseconds more.
    Plus(f64, Combine),
    /// Allocations per call at most this.
    Allocs(f64),
    /// Calls per second at the most tasks over the best peer's, run by run, at least this.
    Throughput(f64),
}

use At::{Main, Second};
use Combine::{Fastest, Only, Sum};
use Id::*;
use Rule::{Allocs, AtMost, Plus, Throughput};

/// Issue 17's targets (and issue 20's adaptive bulkhead): what, how, seawall's
/// figure, the peers' (or parts').
const TARGETS: [(&str, Rule, At, &[At]); 12] = [
    (
        "breaker closed: added ≤ 1.0× recloser's",
        AtMost(1.0, Only),
        Main(SwBreaker),
        &[Main(Recloser)],
    ),
    (
        "breaker contended: ≥ 2× the best peer breaker",
        Throughput(2.0),
        Main(SwBreaker),
        &[Main(TrBreaker), Main(Failsafe), Main(Recloser)],
    ),
    (
        "breaker open: ≤ 1.0× the faster of failsafe and recloser",
        AtMost(1.0, Fastest),
        Second(SwBreaker),
        &[Second(Failsafe), Second(Recloser)],
    ),
    (
        "breaker open: at most one allocation",
        Allocs(1.0),
        Second(SwBreaker),
        &[Second(Failsafe), Second(Recloser)],
    ),
    (
        "bulkhead admitted: ≤ 0.8× ConcurrencyLimit",
        AtMost(0.8, Only),
        Main(SwBulkhead),
        &[Main(TowerLimit)],
    ),
    (
        "adaptive bulkhead admitted: ≤ +25 ns over the fixed bulkhead",
        Plus(25.0, Only),
        Main(SwBulkheadAdaptive),
        &[Main(SwBulkhead)],
    ),
    (
        "bulkhead with classes admitted: no allocation per call",
        Allocs(0.0),
        Main(SwBulkheadClasses),
        &[Main(SwBulkhead)],
    ),
    (
        "adaptive bulkhead admitted: no allocation per call",
        Allocs(0.0),
        Main(SwBulkheadAdaptive),
        &[Main(SwBulkhead)],
    ),
    (
        "bulkhead full: rejection ≤ LoadShed's",
        AtMost(1.0, Only),
        Second(SwBulkhead),
        &[Second(TowerShed)],
    ),
    (
        "fallback serving a value into an `http::Response`: no allocation",
        Allocs(0.0),
        Second(SwFallback),
        &[Second(TrFallback)],
    ),
    (
        "recommended stack: no allocation per admitted call",
        Allocs(0.0),
        Main(SwStack),
        &[],
    ),
    (
        "recommended stack: ≤ the sum of its layers alone",
        AtMost(1.0, Sum),
        Main(SwStack),
        &[Main(Deadline), Main(SwBulkhead), Main(SwBreaker)],
    ),
];

/// One line of the targets table.
struct Line {
    target: &'static str,
    mode: String,
    seawall: String,
    peers: String,
    ratio: String,
    verdict: Verdict,
}

/// Looks figures up and turns them into lines.
struct Judge<'a> {
    rows: &'a [Row],
    net: &'a Net<'a>,
    o: &'a Options,
}

/// `numerator / denominator`, round by round; a round whose denominator is not
/// positive says nothing and is left out.
fn ratios(numerator: &[f64], denominator: &[f64]) -> Vec<f64> {
    numerator
        .iter()
        .zip(denominator)
        .map(|(&n, &d)| if d > 0.0 { n / d } else { f64::NAN })
        .collect()
}

impl<'a> Judge<'a> {
    fn row(&self, id: Id) -> Option<&'a Row> {
        self.rows.iter().find(|r| r.id == id)
    }

    fn probe(&self, at: At) -> Option<(Id, &'a Probe)> {
        match at {
            Main(id) => Some((id, &self.row(id)?.main)),
            Second(id) => Some((id, &self.row(id)?.second.as_ref()?.1)),
        }
    }

    /// The lines of one target, or none if a row it needs is not in this run.
    fn judge(&self, target: &'static str, rule: Rule, at: At, peers: &[At]) -> Vec<Line> {
        let Some((id, own)) = self.probe(at) else {
            return Vec::new();
        };
        let Some(peers) = peers
            .iter()
            .map(|&p| self.probe(p))
            .collect::<Option<Vec<_>>>()
        else {
            return Vec::new();
        };
        match rule {
            AtMost(limit, combine) => Mode::ALL
                .into_iter()
                .filter_map(|mode| {
                    self.compare(target, own, &peers, mode, combine, Bound::Ratio(limit))
                })
                .collect(),
            Plus(ns, combine) => Mode::ALL
                .into_iter()
                .filter_map(|mode| {
                    self.compare(target, own, &peers, mode, combine, Bound::Nanos(ns))
                })
                .collect(),
            Allocs(limit) => Mode::ALL
                .into_iter()
                .filter_map(|mode| self.allocs(target, own, &peers, mode, limit))
                .collect(),
            Throughput(limit) => {
                let rows = |ids: &[Id]| ids.iter().filter_map(|&id| self.row(id)).collect();
                let own: Vec<&Row> = rows(&[id]);
                let peers: Vec<&Row> = rows(&peers.iter().map(|(id, _)| *id).collect::<Vec<_>>());
                own.first()
                    .map(|own| self.throughput(target, own, &peers, limit))
                    .unwrap_or_default()
            }
        }
    }

    /// `name +32 (29–35)` for each probe.
    fn describe(&self, probes: &[(Id, &Probe)], mode: Mode) -> String {
        probes
            .iter()
            .filter_map(|(id, p)| {
                let s = Spread::of(&self.net.added(p, mode))?;
                Some(format!("{} {}", id.short_name(), fmt::added_spread(s)))
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Seawall's added cost against the peers' (combined), round by round, within
    /// `bound`.
    fn compare(
        &self,
        target: &'static str,
        own: &Probe,
        peers: &[(Id, &Probe)],
        mode: Mode,
        combine: Combine,
        bound: Bound,
    ) -> Option<Line> {
        let mine = self.net.added(own, mode);
        let theirs: Vec<Vec<f64>> = peers.iter().map(|(_, p)| self.net.added(p, mode)).collect();
        let reference: Vec<f64> = (0..mine.len())
            .map(|r| combine.apply(&theirs.iter().map(|v| v[r]).collect::<Vec<_>>()))
            .collect();
        let (spread, shown, limit) = match bound {
            Bound::Ratio(limit) => {
                let spread = Spread::of(&ratios(&mine, &reference))?;
                (spread, fmt::ratio_spread(spread), limit)
            }
            Bound::Nanos(ns) => {
                let more: Vec<f64> = mine.iter().zip(&reference).map(|(m, r)| m - r).collect();
                let spread = Spread::of(&more)?;
                (spread, format!("{} ns", fmt::added_spread(spread)), ns)
            }
        };
        Some(Line {
            target,
            mode: mode.to_string(),
            seawall: fmt::added_spread(Spread::of(&mine)?),
            peers: self.describe(peers, mode),
            ratio: shown,
            verdict: if own.figures(mode).waited {
                Verdict::Missed
            } else {
                Verdict::at_most(spread, limit)
            },
        })
    }

    fn allocs(
        &self,
        target: &'static str,
        own: &Probe,
        peers: &[(Id, &Probe)],
        mode: Mode,
        limit: f64,
    ) -> Option<Line> {
        let a = self.net.allocs(own, mode)?;
        let with_ns = |p: &Probe| {
            let ns = Spread::of(&self.net.added(p, mode)).map_or(f64::NAN, |s| s.median);
            let allocs = self.net.allocs(p, mode).unwrap_or(f64::NAN);
            format!("{}, {} ns", fmt::allocs_counted(allocs), fmt::ns(ns))
        };
        let theirs: Vec<String> = peers
            .iter()
            .map(|(id, p)| format!("{} {}", id.short_name(), with_ns(p)))
            .collect();
        Some(Line {
            target,
            mode: mode.to_string(),
            seawall: with_ns(own),
            peers: theirs.join("; "),
            ratio: format!("≤ {} allowed", fmt::allocs(limit)),
            verdict: Verdict::exact(a <= limit + 0.005),
        })
    }

    /// Two lines: calls per second, and calls per CPU-second of the process (which
    /// a neighbour taking a core disturbs less).
    fn throughput(&self, target: &'static str, own: &Row, peers: &[&Row], limit: f64) -> Vec<Line> {
        [false, true]
            .into_iter()
            .filter_map(|per_core| self.throughput_line(target, own, peers, limit, per_core))
            .collect()
    }

    fn throughput_line(
        &self,
        target: &'static str,
        own: &Row,
        peers: &[&Row],
        limit: f64,
        per_core: bool,
    ) -> Option<Line> {
        let tasks = &self.o.contended.tasks;
        let (i, &most) = tasks.iter().enumerate().max_by_key(|(_, &t)| t)?;
        let rates = |r| rates_at(r, i, per_core);
        let mine = rates(own);
        let theirs: Vec<Vec<f64>> = peers.iter().map(|p| rates(p)).collect();
        let best: Vec<f64> = (0..mine.len())
            .map(|run| {
                let v = theirs.iter().filter_map(|t| t.get(run).copied());
                v.fold(f64::NAN, f64::max)
            })
            .collect();
        let spread = Spread::of(&ratios(&mine, &best))?;
        let named: Vec<String> = peers
            .iter()
            .zip(&theirs)
            .map(|(p, t)| format!("{} {}", p.id.short_name(), fmt::rate(median(t))))
            .collect();
        let unit = if per_core {
            "per CPU-second"
        } else {
            "per second"
        };
        let cores: Vec<f64> = std::iter::once(own)
            .chain(peers.iter().copied())
            .filter_map(|r| r.contender.by_tasks.get(i))
            .flat_map(|t| t.cores.iter().copied())
            .collect();
        let had = median(&cores);
        let verdict = if had < 0.8 * most.min(WORKERS) as f64 {
            Verdict::Starved(had)
        } else {
            Verdict::at_least(spread, limit)
        };
        Some(Line {
            target,
            mode: format!("{most} tasks, 2 workers, calls {unit}"),
            seawall: fmt::rate(median(&mine)),
            peers: named.join(", "),
            ratio: fmt::ratio_spread(spread),
            verdict,
        })
    }
}

/// A row's calls per second (or per CPU-second of the process) at the `i`th number
/// of tasks, run by run.
fn rates_at(row: &Row, i: usize, per_core: bool) -> Vec<f64> {
    let Some(t) = row.contender.by_tasks.get(i) else {
        return Vec::new();
    };
    if per_core {
        t.rates.iter().zip(&t.cores).map(|(r, c)| r / c).collect()
    } else {
        t.rates.clone()
    }
}

pub(super) fn print(rows: &[Row], net: &Net<'_>, o: &Options) {
    let j = Judge { rows, net, o };
    let lines: Vec<Line> = TARGETS
        .iter()
        .flat_map(|&(target, rule, own, peers)| j.judge(target, rule, own, peers))
        .collect();
    println!();
    if lines.is_empty() {
        println!("No target of issue 17 has its rows in this run.");
        return;
    }
    println!("Targets of issue 17 (ratios to the peers in this run, round by round):");
    println!();
    println!("| target | mode | seawall | peers in this run | ratio, median (p25–p75) | verdict |");
    println!("|---|---|---:|---|---:|---|");
    for l in &lines {
        println!(
            "| {} | {} | {} | {} | {} | {} |",
            l.target,
            l.mode,
            l.seawall,
            l.peers,
            l.ratio,
            l.verdict.text()
        );
    }
}
