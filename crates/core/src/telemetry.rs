//! Where core's tracing events and metrics are emitted, so call sites carry no `cfg`.

pub(crate) fn deadline_exceeded() {
    #[cfg(feature = "tracing")]
    tracing::debug!(target: "seawall::deadline", "deadline exceeded");
    #[cfg(feature = "metrics")]
    metrics::counter!("seawall_deadline_exceeded_total").increment(1);
}
