//! What the application does once, after installing its metrics recorder.
//!
//! seawall reports through the [`metrics`](https://docs.rs/metrics) facade. Two
//! things a recorder needs cannot come from the layers themselves:
//!
//! - **Help text and units.** A `describe_*` call made while no recorder is
//!   installed is lost, and the layers may be built in any order around the
//!   recorder's installation; so the application calls [`describe`] after
//!   installing its recorder. Without it, an exporter writes no `# HELP` lines and
//!   `promtool check metrics` fails.
//! - **Histogram buckets.** An exporter that must choose buckets up front (the
//!   Prometheus exporter exports a histogram without buckets as a summary) gets them
//!   from [`histograms`].
//!
//! ```
//! # fn build() -> Result<(), Box<dyn std::error::Error>> {
//! use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
//!
//! let mut builder = PrometheusBuilder::new();
//! for (name, buckets) in seawall::metrics::histograms() {
//!     builder = builder.set_buckets_for_metric(Matcher::Full(name.to_owned()), buckets)?;
//! }
//! let handle = builder.install_recorder()?;
//! seawall::metrics::describe();
//! // Then build the layers, and run `handle.run_upkeep()` every few seconds.
//! # drop(handle);
//! # Ok(()) }
//! ```
//!
//! `docs/metrics.md` lists every series, and why the upkeep matters.

/// Gives every seawall metric its help text and unit, through the recorder
/// installed now. Call it once, after installing the recorder; calling it again
/// does no harm.
pub fn describe() {
    seawall_core::describe_metrics();
    #[cfg(feature = "circuit-breaker")]
    seawall_circuit_breaker::describe_metrics();
    #[cfg(feature = "bulkhead")]
    seawall_bulkhead::describe_metrics();
    #[cfg(feature = "degradation")]
    seawall_degradation::describe_metrics();
    #[cfg(feature = "fallback")]
    seawall_fallback::describe_metrics();
    #[cfg(feature = "fault")]
    seawall_fault::describe_metrics();
}

/// Every seawall histogram with the upper bounds of its buckets, for an exporter
/// that needs them before the first sample.
pub fn histograms() -> impl Iterator<Item = (&'static str, &'static [f64])> {
    [
        #[cfg(feature = "bulkhead")]
        (
            "seawall_bulkhead_wait_seconds",
            seawall_bulkhead::WAIT_SECONDS_BUCKETS,
        ),
    ]
    .into_iter()
}
