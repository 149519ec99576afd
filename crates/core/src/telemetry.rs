//! Where core's tracing events and metrics are emitted, so call sites carry no `cfg`.

pub(crate) fn deadline_exceeded() {
    #[cfg(feature = "tracing")]
    tracing::debug!(target: "seawall::deadline", "deadline exceeded");
    #[cfg(feature = "metrics")]
    metrics::counter!("seawall_deadline_exceeded_total").increment(1);
}

#[cfg(feature = "http")]
pub(crate) fn rendered_error(error: &(dyn std::error::Error + 'static)) {
    #[cfg(feature = "tracing")]
    tracing::debug!(target: "seawall::http", error = %error, "error rendered as a response");
    #[cfg(not(feature = "tracing"))]
    let _ = error;
}
