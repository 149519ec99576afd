//! What composing adds: a stack's added cost minus the sum of its layers measured
//! alone, round by round. In company a layer may do what it skips alone (honour
//! the deadline an outer layer put in the request, clone the service below it).

use crate::harness::stats::Spread;
use crate::harness::Mode;
use crate::subjects::{Id, Row};

use super::{fmt, Net};

/// Each composition and the rows of its layers.
const COMPOSITIONS: [(Id, &[Id]); 5] = [
    (Id::SwDeadlineBreaker, &[Id::Deadline, Id::SwBreaker]),
    (Id::SwDeadlineBulkhead, &[Id::Deadline, Id::SwBulkhead]),
    (Id::SwBulkheadBreaker, &[Id::SwBulkhead, Id::SwBreaker]),
    (Id::SwStack, &[Id::Deadline, Id::SwBulkhead, Id::SwBreaker]),
    (Id::SwStackFallback, &[Id::SwFallback, Id::SwStack]),
];

pub(super) fn print(rows: &[Row], net: &Net<'_>) {
    let find = |id: Id| rows.iter().find(|r| r.id == id);
    let mut lines = Vec::new();
    for (whole, parts) in COMPOSITIONS {
        let Some(whole) = find(whole) else { continue };
        let Some(parts) = parts.iter().map(|&id| find(id)).collect::<Option<Vec<_>>>() else {
            continue;
        };
        let cells = Mode::ALL.map(|mode| {
            let own = net.added(&whole.main, mode);
            let theirs: Vec<Vec<f64>> = parts.iter().map(|p| net.added(&p.main, mode)).collect();
            let extra: Vec<f64> = (0..own.len())
                .map(|r| own[r] - theirs.iter().map(|v| v[r]).sum::<f64>())
                .collect();
            let allocs = net.allocs(&whole.main, mode).unwrap_or(f64::NAN)
                - parts
                    .iter()
                    .map(|p| net.allocs(&p.main, mode).unwrap_or(f64::NAN))
                    .sum::<f64>();
            let ns = Spread::of(&extra).map_or_else(String::new, fmt::added_spread);
            format!("{ns}, {}", fmt::allocs_counted(allocs))
        });
        let names: Vec<&str> = parts.iter().map(|p| p.label.as_str()).collect();
        lines.push(format!(
            "| {} | {} | {} | {} |",
            whole.label,
            names.join(" + "),
            cells[0],
            cells[1]
        ));
    }
    if lines.is_empty() {
        return;
    }
    println!();
    println!("What composing adds (the composition's added cost minus its parts', per round):");
    println!();
    println!("| composition | parts measured alone | hand-driven | awaited |");
    println!("|---|---|---:|---:|");
    for l in lines {
        println!("{l}");
    }
}
