//! The fleet row next to the plain breaker: the closed path's cost with
//! coordination on, and the store operations it made (none).

use crate::harness::stats::{paired, Spread};
use crate::harness::Mode;
use crate::subjects::fleet::StoreOps;
use crate::subjects::{Id, Row};

use super::{fmt, Net};

/// Prints the section, if both rows ran.
pub(crate) fn print(rows: &[Row], ops: Option<&StoreOps>) {
    let net = Net::new(rows);
    let find = |id| rows.iter().find(|r| r.id == id).map(|r| &r.main);
    let (Some(fleet), Some(plain)) = (find(Id::SwBreakerFleet), find(Id::SwBreaker)) else {
        return;
    };
    println!();
    println!("Fleet coordination on the closed path (the breaker above, coordinated through a `LocalStore`):");
    println!();
    println!("| | hand-driven | awaited |");
    println!("|---|---:|---:|");
    let cells = |f: &dyn Fn(Mode) -> String| [Mode::Hand, Mode::Awaited].map(f);
    let added = |probe, mode| Spread::of(&net.added(probe, mode));
    let show = |s: Option<Spread>| s.map_or("?".to_owned(), fmt::added_spread);
    let [h, a] = cells(&|m| show(added(plain, m)));
    println!("| plain breaker, +ns | {h} | {a} |");
    let [h, a] = cells(&|m| show(added(fleet, m)));
    println!("| coordinated breaker, +ns | {h} | {a} |");
    let diff = |m| {
        Spread::of(&paired(
            &fleet.figures(m).samples,
            &plain.figures(m).samples,
            |x, y| x - y,
        ))
    };
    let [h, a] = cells(&|m| show(diff(m)));
    println!("| coordinated − plain, per round, ns | {h} | {a} |");
    let within = |m| match (added(fleet, m), added(plain, m)) {
        (Some(f), Some(p)) if f.median >= p.p25 && f.median <= p.p75 => {
            "yes: its median is within the plain row's p25–p75".to_owned()
        }
        (Some(f), Some(p)) => format!(
            "no: its median {:.1} is outside the plain row's p25–p75 ({:.1}–{:.1})",
            f.median, p.p25, p.p75
        ),
        _ => "?".to_owned(),
    };
    let [h, a] = cells(&|m| within(m));
    println!("| same cost as the plain breaker? | {h} | {a} |");
    if let Some(ops) = ops {
        println!();
        println!(
            "Store operations on the closed path: {} in {} awaited calls ({} per call); \
             {} before them, when the coordinator joined (subscribe, read).",
            ops.during_calls,
            ops.calls,
            ops.during_calls as f64 / ops.calls as f64,
            ops.to_join,
        );
    }
}
