//! The scripted phases the client examples walk through, one after the other.

use std::time::Duration;

/// The phase in which the supplier answers again while the breaker is still open.
pub(crate) const RECOVERED: &str = "supplier recovered";

/// Prints `phase`'s heading; at [`RECOVERED`], waits out the breaker's 1 s open
/// interval first, so that the phase's first call is the breaker's probe.
pub(crate) async fn begin(phase: &str) {
    println!("-- {phase}");
    if phase == RECOVERED {
        println!("   (waiting out the breaker's 1 s open interval; the next call is its probe)");
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
}
