//! The report: one table of every row in both modes, one of contended throughput,
//! and the verdicts against the targets ([`targets`]), printed as markdown.
//!
//! Every single-task figure is net of the bare row measured in the same round and
//! mode, and is given as its median with the quartiles over rounds.

mod composition;
pub(crate) mod fleet;
pub(crate) mod fleet_cap;
mod fmt;
mod targets;

pub(crate) use fmt::loadavg;

use std::time::Duration;

use crate::harness::stats::{median, paired, Spread};
use crate::harness::{Mode, Probe, WORKERS};
use crate::options::Options;
use crate::subjects::{Id, Row};

/// The bare row's figures, which every other figure is net of.
pub(crate) struct Net<'a> {
    bare: Option<&'a Probe>,
}

impl<'a> Net<'a> {
    fn new(rows: &'a [Row]) -> Self {
        Net {
            bare: rows.iter().find(|r| r.id == Id::Bare).map(|r| &r.main),
        }
    }

    fn bare_samples(&self, mode: Mode) -> &'a [f64] {
        self.bare.map_or(&[], |b| &b.figures(mode).samples)
    }

    /// The bare row's own per-call time in `mode`.
    fn bare_ns(&self, mode: Mode) -> f64 {
        median(self.bare_samples(mode))
    }

    /// What `probe` adds to the bare row in `mode`, round by round.
    pub(crate) fn added(&self, probe: &Probe, mode: Mode) -> Vec<f64> {
        paired(
            &probe.figures(mode).samples,
            self.bare_samples(mode),
            |x, b| x - b,
        )
    }

    /// Allocations per call `probe` adds to the bare row in `mode`.
    pub(crate) fn allocs(&self, probe: &Probe, mode: Mode) -> Option<f64> {
        let bare = self
            .bare
            .and_then(|b| b.figures(mode).allocs)
            .unwrap_or(0.0);
        probe.figures(mode).allocs.map(|a| a - bare)
    }

    /// The cell for `probe` in `mode`: added ns with quartiles, or the whole time
    /// of a call that waited on the runtime.
    fn cell(&self, probe: &Probe, mode: Mode) -> String {
        let f = probe.figures(mode);
        if f.waited {
            let whole = median(&f.samples).max(0.0);
            return format!("{} (waits)", fmt::time(Duration::from_nanos(whole as u64)));
        }
        let Some(added) = Spread::of(&self.added(probe, mode)) else {
            return "?".to_owned();
        };
        if f.pending > 0.0 {
            format!(
                "{} (pending in {:.1} % of calls)",
                fmt::added_spread(added),
                100.0 * f.pending
            )
        } else {
            fmt::added_spread(added)
        }
    }
}

fn allocs_cell(net: &Net<'_>, row: &Row) -> String {
    let of = |mode| {
        let a = net.allocs(&row.main, mode);
        let s = row.second.as_ref().and_then(|(_, p)| net.allocs(p, mode));
        match (a, s) {
            (Some(a), Some(s)) => format!("{} / {}", fmt::allocs(a), fmt::allocs(s)),
            (Some(a), None) => fmt::allocs(a),
            _ => "?".to_owned(),
        }
    };
    let (hand, awaited) = (of(Mode::Hand), of(Mode::Awaited));
    if hand == awaited {
        hand
    } else {
        format!("{hand} (awaited: {awaited})")
    }
}

fn print_single_task(rows: &[Row], net: &Net<'_>) {
    println!(
        "| configuration | +ns admitted, hand-driven | +ns admitted, awaited | second path | +ns second path, hand-driven | +ns second path, awaited | allocs per call (admitted / second) | response future B | heap B per instance |"
    );
    println!("|---|---:|---:|---|---:|---:|---:|---:|---:|");
    for row in rows {
        let main = |mode| {
            if row.id == Id::Bare {
                format!("+0 ({} ns)", fmt::ns(net.bare_ns(mode)))
            } else {
                net.cell(&row.main, mode)
            }
        };
        let (path, second) = match &row.second {
            Some((path, p)) => (
                path.label(),
                [Mode::Hand, Mode::Awaited].map(|m| net.cell(p, m)),
            ),
            None => ("–", ["–".to_owned(), "–".to_owned()]),
        };
        let heap = row
            .heap
            .bytes
            .map_or_else(|| "?".to_owned(), |h| h.to_string());
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            row.label,
            main(Mode::Hand),
            main(Mode::Awaited),
            path,
            second[0],
            second[1],
            allocs_cell(net, row),
            row.main.future_size(),
            heap,
        );
    }
}

fn print_contended(rows: &[Row], o: &Options) {
    let Some(&most) = o.contended.tasks.iter().max() else {
        return;
    };
    let tasks = |t: usize| format!("{t} task{}", if t == 1 { "" } else { "s" });
    let head: Vec<String> = o.contended.tasks.iter().map(|&t| tasks(t)).collect();
    println!(
        "| configuration | {} | {} ÷ 1 task | cores the process had at {} |",
        head.join(" | "),
        tasks(most),
        tasks(most)
    );
    println!("|---|{}---:|---:|", "---:|".repeat(o.contended.tasks.len()));
    for row in rows {
        let cells: Vec<String> = row
            .contender
            .by_tasks
            .iter()
            .map(|t| Spread::of(&t.rates).map_or_else(|| "–".to_owned(), fmt::rate_spread))
            .collect();
        let at = |n: usize| {
            o.contended
                .tasks
                .iter()
                .position(|&t| t == n)
                .and_then(|i| row.contender.by_tasks.get(i))
        };
        let growth = match (at(most), at(1)) {
            (Some(m), Some(one)) if median(&one.rates) > 0.0 => {
                format!("{:.2}×", median(&m.rates) / median(&one.rates))
            }
            _ => "–".to_owned(),
        };
        let cores = at(most).and_then(|t| Spread::of(&t.cores)).map_or_else(
            || "–".to_owned(),
            |c| format!("{:.2} ({:.2}–{:.2})", c.median, c.p25, c.p75),
        );
        println!(
            "| {} | {} | {growth} | {cores} |",
            row.label,
            cells.join(" | ")
        );
    }
    let mut short = 0;
    let mut total = 0;
    for row in rows {
        for (t, &tasks) in row.contender.by_tasks.iter().zip(&o.contended.tasks) {
            let want = 0.8 * tasks.min(WORKERS) as f64;
            total += t.cores.len();
            short += t.cores.iter().filter(|&&c| c < want).count();
        }
    }
    println!();
    println!(
        "Calls per second through clones of one shared instance on a {WORKERS}-worker runtime, \
         median (p25–p75) of {} runs of {} ms; {short} of {total} measurements had fewer \
         cores than their tasks could use even after three tries (another process held a \
         core: such a figure is closer to one core without cache-line bouncing), so compare \
         rows of one run, not across runs.",
        o.contended.runs,
        o.contended.measure.as_millis()
    );
}

/// Prints the whole report.
pub(crate) fn print(rows: &[Row], o: &Options, load_before: &str) {
    let net = Net::new(rows);
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!();
    let contended = if o.contended.tasks.is_empty() {
        "no contended runs".to_owned()
    } else {
        let tasks: Vec<String> = o.contended.tasks.iter().map(ToString::to_string).collect();
        format!(
            "{} contended runs of {} ms at {} tasks",
            o.contended.runs,
            o.contended.measure.as_millis(),
            tasks.join(", ")
        )
    };
    let quick = if o.quick {
        " (--quick: indicative only)"
    } else {
        ""
    };
    println!(
        "Measured {} at commit `{}` on {} ({} cores), load average {} before / {} after; \
         {} single-task rounds (each path once per round in each mode) spread over {} \
         processes, {contended}{quick}.",
        fmt::today(),
        fmt::commit(),
        fmt::cpu_model(),
        cores,
        load_before,
        fmt::loadavg(),
        o.single.rounds,
        o.single.processes,
    );
    println!();
    print_single_task(rows, &net);
    println!();
    println!(
        "\"+ns\": median (p25–p75 over rounds) of the per-call time minus the bare row's in \
         the same round. Hand-driven: `poll_ready`, `call`, one `poll` with a no-op waker \
         (bare: {} ns). Awaited: `ready().await`, `call().await` in a loop on a \
         `current_thread` runtime, the layer between two thin adapters (bare, the adapters \
         alone: {} ns). \"waits\": the call did not complete on its first poll (the whole \
         call is given). Allocations are net of the bare row; heap per instance: live bytes \
         after building one instance and calling it once.",
        fmt::ns(net.bare_ns(Mode::Hand)),
        fmt::ns(net.bare_ns(Mode::Awaited)),
    );
    if !o.contended.tasks.is_empty() {
        println!();
        print_contended(rows, o);
    }
    composition::print(rows, &net);
    targets::print(rows, &net, o);
}
