//! The fleet row next to the plain breaker: the closed path's cost with
//! coordination on, and the store operations it made (none).

use crate::harness::stats::{paired, Spread};
use crate::harness::Mode;
use crate::subjects::fleet::StoreOps;
use crate::subjects::{Id, Row};

use super::{fmt, Net};

/// Prints the section, if both rows ran.
pub(crate) fn print(rows: &[Row], ops: Option<&StoreOps>) {
    let shown = versus_plain(
        rows,
        Id::SwBreakerFleet,
        Id::SwBreaker,
        "Fleet coordination on the closed path (the breaker above, coordinated through a `LocalStore`):",
        ["coordinated breaker", "plain breaker"],
    );
    if !shown {
        return;
    }
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

/// Prints a fleet row's cost against its plain layer's (`labels`: the fleet row's,
/// then the plain one's), the paired difference per round, and whether the fleet
/// row's median is within the plain row's p25–p75; `false` if either row did not run.
pub(crate) fn versus_plain(
    rows: &[Row],
    subject: Id,
    plain: Id,
    heading: &str,
    [subject_label, plain_label]: [&str; 2],
) -> bool {
    let net = Net::new(rows);
    let find = |id| rows.iter().find(|r| r.id == id).map(|r| &r.main);
    let (Some(subject), Some(plain)) = (find(subject), find(plain)) else {
        return false;
    };
    println!();
    println!("{heading}");
    println!();
    println!("| | hand-driven | awaited |");
    println!("|---|---:|---:|");
    let cells = |f: &dyn Fn(Mode) -> String| [Mode::Hand, Mode::Awaited].map(f);
    let added = |probe, mode| Spread::of(&net.added(probe, mode));
    let show = |s: Option<Spread>| s.map_or("?".to_owned(), fmt::added_spread);
    let [h, a] = cells(&|m| show(added(plain, m)));
    println!("| {plain_label}, +ns | {h} | {a} |");
    let [h, a] = cells(&|m| show(added(subject, m)));
    println!("| {subject_label}, +ns | {h} | {a} |");
    let diff = |m| {
        Spread::of(&paired(
            &subject.figures(m).samples,
            &plain.figures(m).samples,
            |x, y| x - y,
        ))
    };
    let [h, a] = cells(&|m| show(diff(m)));
    let short = |label: &str| label.split(' ').next().unwrap_or(label).to_owned();
    println!(
        "| {} − {}, per round, ns | {h} | {a} |",
        short(subject_label),
        short(plain_label)
    );
    let within = |m| match (added(subject, m), added(plain, m)) {
        (Some(s), Some(p)) if s.median >= p.p25 && s.median <= p.p75 => {
            "yes: its median is within the plain row's p25–p75".to_owned()
        }
        (Some(s), Some(p)) => format!(
            "no: its median {:.1} is outside the plain row's p25–p75 ({:.1}–{:.1})",
            s.median, p.p25, p.p75
        ),
        _ => "?".to_owned(),
    };
    let [h, a] = cells(&|m| within(m));
    println!("| same cost as the {plain_label}? | {h} | {a} |");
    true
}
