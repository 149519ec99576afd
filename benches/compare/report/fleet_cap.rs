//! The capped bulkhead's row next to the plain bulkhead: the admitted path's cost
//! under a fleet-wide cap, and the store operations the calls made (none).

use tokio::runtime::Runtime;

use crate::subjects::fleet_cap::{store_ops_on_the_admitted_path, StoreOps};
use crate::subjects::{Id, Row};

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
    let shown = super::fleet::versus_plain(
        rows,
        Id::SwBulkheadFleet,
        Id::SwBulkhead,
        "Fleet-wide cap on the admitted path (the bulkhead above, capped through a `LocalStore`, measured under a granted allotment):",
        ["capped bulkhead", "plain bulkhead"],
    );
    if !shown {
        return;
    }
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
