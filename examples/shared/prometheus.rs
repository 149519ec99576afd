//! The Prometheus recorder as a service should install it.
#![allow(dead_code)] // shared by examples and tests, each using a part

use std::time::Duration;

use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};

/// How often the recorder's upkeep runs when nobody scrapes.
pub(crate) const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// The exporter's builder with seawall's histogram buckets, so that
/// `seawall_bulkhead_wait_seconds` is exported as a histogram (without buckets the
/// exporter writes a summary).
pub(crate) fn builder() -> Result<PrometheusBuilder, BuildError> {
    let mut builder = PrometheusBuilder::new();
    for (name, buckets) in seawall::metrics::histograms() {
        builder = builder.set_buckets_for_metric(Matcher::Full(name.to_owned()), buckets)?;
    }
    Ok(builder)
}

/// Installs the recorder (before any layer is built: layers register their series
/// when built), gives every seawall metric its help text, and runs the recorder's
/// upkeep every [`UPKEEP_EVERY`] on the current tokio runtime.
///
/// The upkeep is what keeps memory bounded: the recorder buffers every histogram
/// sample until upkeep (or a scrape) folds it into the buckets, so a service that
/// nobody scrapes — Prometheus down, `/metrics` not exposed — would grow without it.
pub(crate) fn install() -> Result<PrometheusHandle, BuildError> {
    let handle = builder()?.install_recorder()?;
    seawall::metrics::describe();
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(UPKEEP_EVERY);
        loop {
            every.tick().await;
            upkeep.run_upkeep();
        }
    });
    Ok(handle)
}
