//! A 300 ms budget for a dependency segment: a fast supplier answers, a slow one is
//! cut off at the deadline with seawall's `DeadlineExceeded`, rendered the way a
//! server would answer (503).
//!
//! Run with `cargo run --example deadline_budget`.
#![allow(clippy::print_stdout)]

#[path = "shared/logs.rs"]
mod logs;

use std::time::Duration;

use seawall::core::{find_rejection, BoxError, DeadlineLayer};
use tower::{service_fn, ServiceBuilder, ServiceExt};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    logs::install();
    let budget = Duration::from_millis(300);
    for supplier_takes in [Duration::from_millis(20), Duration::from_millis(900)] {
        let supplier = service_fn(move |_req: http::Request<()>| async move {
            tokio::time::sleep(supplier_takes).await;
            Ok::<_, BoxError>("quote: 12.50 EUR")
        });
        let stack = ServiceBuilder::new()
            .layer(DeadlineLayer::new(budget)?)
            .service(supplier);
        let started = tokio::time::Instant::now();
        let answer = stack.oneshot(http::Request::new(())).await;
        let took = started.elapsed();
        match answer {
            Ok(quote) => println!("supplier takes {supplier_takes:?}: {quote} (after {took:?})"),
            Err(e) => match find_rejection(&*e) {
                Some(r) => println!(
                    "supplier takes {supplier_takes:?}: rejected as {} ({:?}) after {took:?}",
                    r.kind(),
                    r.category()
                ),
                None => println!("supplier takes {supplier_takes:?}: failed: {e}"),
            },
        }
    }
    Ok(())
}
