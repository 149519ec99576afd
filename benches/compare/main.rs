//! Side-by-side cost of seawall's layers and of their peers, in one run, as one report.
//!
//! ```text
//! cargo bench -p seawall-benches                      # full run
//! cargo bench -p seawall-benches -- --quick           # smoke run (well under a minute)
//! cargo bench -p seawall-benches -- --rounds 2000 --runs 7 breaker   # only rows matching "breaker"
//! cargo bench -p seawall-benches -- --spin 5 --awaited --second "seawall breaker"   # for `perf`
//! ```
//!
//! # Layout
//!
//! - [`harness`]: timing, batching, calibration, quartiles, allocation counting and
//!   contended throughput, over any `Service<Req>`; the two ways of calling.
//! - [`subjects`]: each of seawall's layers and each peer crate set up as a user
//!   would, one row each, with the second path (open, full, serving) prepared.
//! - [`report`]: the tables and the verdicts against the targets.
//!
//! # Why a custom harness and not criterion
//!
//! The question is "what does each layer add per call, compared with the others, on
//! the same machine at the same moment". criterion answers a different one well
//! (how long does *one* function take, with a careful statistical model), and it
//! cannot give what the comparison needs:
//!
//! - **Interleaving.** criterion measures one benchmark to completion, then the next.
//!   On a shared 2-core machine the clock speed and the neighbours' load drift over
//!   seconds, so two subjects measured a minute apart differ by more than the few
//!   nanoseconds we compare. Here every round runs a short batch of *every* path in
//!   both modes, in rotating order, and each figure is compared with its baseline
//!   and its peers within the round: drift hits all subjects alike and cancels out
//!   of the differences and ratios, whose quartiles over rounds are reported.
//! - **Two ways of calling.** Hand-driven (`poll_ready`, `call`, one `poll` with a
//!   no-op waker) isolates the layer's own code; awaited (`ready().await`,
//!   `call().await` on a `current_thread` runtime, between two thin adapters) is
//!   how a user's code runs it. Both are measured in the same rounds.
//! - **Allocations.** A counting global allocator gives allocations per call and
//!   heap bytes per instance, which criterion does not measure.
//! - **Contended throughput.** 1, 2 and 64 tasks on a 2-worker multi-thread runtime
//!   call clones of one shared instance for a fixed time, in several interleaved
//!   runs; ratios to peers are computed within each run.
//! - **One report.** The output is the markdown the README shows, with the
//!   verdicts against issue 17's targets.
//!
//! No timing is asserted anywhere: this prints figures, it does not judge a build.

mod harness;
mod options;
mod report;
mod subjects;

use std::time::Instant;

use harness::Probe;
use options::Options;

fn main() {
    let o = Options::from_args();
    let load_before = report::loadavg();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("current-thread runtime");
    let mt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(harness::WORKERS)
        .enable_time()
        .build()
        .expect("multi-thread runtime");
    let _guard = rt.enter();

    let mut rows = subjects::rows(&rt);
    if let Some(filter) = &o.filter {
        rows.retain(|r| r.id == subjects::Id::Bare || options::matches(filter, &r.label));
    }

    if let Some(spin) = o.spin {
        // With a filter, the bare row (always kept for the tables) runs only if it matches.
        let wanted = |r: &subjects::Row| match &o.filter {
            Some(f) if r.id == subjects::Id::Bare => options::matches(f, &r.label),
            _ => true,
        };
        for row in rows.iter_mut().filter(|r| wanted(r)) {
            let label = row.label.clone();
            for (i, probe) in row.probes_mut().enumerate() {
                if spin.second.is_some_and(|second| second != (i > 0)) {
                    continue;
                }
                let (ns, calls) = harness::spin(probe, spin.mode, &rt, spin.length);
                let path = if i == 0 { "admitted" } else { "second path" };
                println!(
                    "{label}, {path}, {}: {ns:.1} ns/call, {calls} calls",
                    spin.mode
                );
            }
        }
        return;
    }

    let started = Instant::now();
    {
        let mut probes: Vec<&mut Probe> = rows.iter_mut().flat_map(|r| r.probes_mut()).collect();
        let single = &o.single;
        if single.child {
            harness::single_task(&mut probes, &rt, single.rounds);
            print!("{}", harness::export(&probes));
            return;
        }
        if single.processes > 1 {
            harness::pooled(&mut probes, single.rounds, single.processes);
        } else {
            harness::single_task(&mut probes, &rt, single.rounds);
        }
    }
    for row in &mut rows {
        row.heap.measure(&rt);
    }
    if !o.contended.tasks.is_empty() {
        let mut contenders: Vec<_> = rows.iter_mut().map(|r| &mut r.contender).collect();
        harness::throughput(&mut contenders, &mt, &o.contended);
    }
    report::print(&rows, &o, &load_before);
    if rows.iter().any(|r| r.id == subjects::Id::SwBreakerFleet) {
        let ops = subjects::fleet::store_ops_on_the_closed_path(&rt, 100_000);
        report::fleet::print(&rows, Some(&ops));
    }
    report::fleet_cap::print_with_count(&rows, &rt);
    eprintln!("(took {:.1} s)", started.elapsed().as_secs_f64());
}
