//! The capped bulkhead's row next to the plain bulkhead: the admitted path's cost
//! under a fleet-wide cap, and the store operations the calls made (none).

use tokio::runtime::Runtime;

use crate::harness::stats::{paired, Spread};
use crate::harness::Mode;
use crate::subjects::fleet_cap::{store_ops_on_the_admitted_path, StoreOps};
use crate::subjects::{Id, Row};

use super::{fmt, Net};

/// Awaited calls counted for the store operations.
const COUNTED_CALLS: u64 = 5_000_000;

/// Prints the section, if both rows ran, with the store operations counted on `rt`.
pub(crate) fn print_with_count(rows: &[Row], rt: &Runtime) {
    if rows.iter().any(|r| r.id == Id::SwBulkheadFleet) {
        let ops = store_ops_on_the_admitted_path(rt, COUNTED_CALLS);
        print(rows, &ops);
    }
}

fn print(rows: &[Row], ops: &StoreOps) {
    let net = Net::new(rows);
    let find = |id| rows.iter().find(|r| r.id == id).map(|r| &r.main);
    let (Some(capped), Some(plain)) = (find(Id::SwBulkheadFleet), find(Id::SwBulkhead)) else {
        return;
    };
    println!();
    println!("Fleet-wide cap on the admitted path (the bulkhead above, capped through a `LocalStore`, measured under a granted allotment):");
    println!();
    println!("| | hand-driven | awaited |");
    println!("|---|---:|---:|");
    let cells = |f: &dyn Fn(Mode) -> String| [Mode::Hand, Mode::Awaited].map(f);
    let added = |probe, mode| Spread::of(&net.added(probe, mode));
    let show = |s: Option<Spread>| s.map_or("?".to_owned(), fmt::added_spread);
    let [h, a] = cells(&|m| show(added(plain, m)));
    println!("| plain bulkhead, +ns | {h} | {a} |");
    let [h, a] = cells(&|m| show(added(capped, m)));
    println!("| capped bulkhead, +ns | {h} | {a} |");
    let diff = |m| {
        Spread::of(&paired(
            &capped.figures(m).samples,
            &plain.figures(m).samples,
            |x, y| x - y,
        ))
    };
    let [h, a] = cells(&|m| show(diff(m)));
    println!("| capped − plain, per round, ns | {h} | {a} |");
    let within = |m| match (added(capped, m), added(plain, m)) {
        (Some(c), Some(p)) if c.median >= p.p25 && c.median <= p.p75 => {
            "yes: its median is within the plain row's p25–p75".to_owned()
        }
        (Some(c), Some(p)) => format!(
            "no: its median {:.1} is outside the plain row's p25–p75 ({:.1}–{:.1})",
            c.median, p.p25, p.p75
        ),
        _ => "?".to_owned(),
    };
    let [h, a] = cells(&|m| within(m));
    println!("| same cost as the plain bulkhead? | {h} | {a} |");
    println!();
    println!(
        "Store operations on the admitted path: {} while {} awaited calls ran under an \
         allotment of {}, {} of them the renewal task's own: {} by the calls ({} per call).",
        ops.during_calls,
        ops.calls,
        ops.allotment,
        ops.by_renewals,
        ops.during_calls - ops.by_renewals,
        (ops.during_calls - ops.by_renewals) as f64 / ops.calls as f64,
    );
}
