//! The only place with `cfg(feature = "tracing")` and `cfg(feature = "metrics")`.
//!
//! Everything the fault layer reports says it is a rehearsal, so that dashboards and
//! alerts can tell an injected failure from a real one:
//!
//! | metric | kind | meaning |
//! |---|---|---|
//! | `seawall_fault_injected_total{name, fault, rehearsal="true"}` | counter | calls that got an injected fault, per kind |
//! | `seawall_fault_injections_active{name, rehearsal="true"}` | gauge | injections in force |
//!
//! Tracing (target `seawall::fault`), every event with the field `rehearsal = true`:
//! `warn` when an injection starts (so it stands out in the logs for as long as it
//! runs), `info` when one ends (`why`: `expired`, `stopped`, `replaced`), `debug` for
//! each injected fault.

#[cfg(feature = "tracing")]
use crate::config::describe_time;
use crate::fault::FaultKind;
use crate::machine::Entry;

#[cfg(feature = "metrics")]
#[derive(Debug)]
struct Series {
    injected: [metrics::Counter; FaultKind::ALL.len()],
    active: metrics::Gauge,
}

/// A layer's telemetry: its name, and its metrics registered once.
#[derive(Debug)]
pub(crate) struct Telemetry {
    #[cfg(feature = "tracing")]
    name: std::sync::Arc<str>,
    #[cfg(feature = "metrics")]
    series: Series,
}

impl Telemetry {
    pub(crate) fn new(name: &std::sync::Arc<str>) -> Self {
        #[cfg(feature = "metrics")]
        describe();
        let _ = name;
        Self {
            #[cfg(feature = "tracing")]
            name: name.clone(),
            #[cfg(feature = "metrics")]
            series: Series {
                injected: FaultKind::ALL.map(|k| {
                    metrics::counter!("seawall_fault_injected_total",
                        "name" => name.to_string(), "fault" => k.as_str(), "rehearsal" => "true")
                }),
                active: metrics::gauge!("seawall_fault_injections_active",
                    "name" => name.to_string(), "rehearsal" => "true"),
            },
        }
    }

    pub(crate) fn injected(&self, kind: FaultKind, injection: u64) {
        #[cfg(feature = "metrics")]
        if let Some(i) = FaultKind::ALL.iter().position(|k| *k == kind) {
            self.series.injected[i].increment(1);
        }
        #[cfg(feature = "tracing")]
        tracing::debug!(target: "seawall::fault", name = %self.name, injection, fault = kind.as_str(), rehearsal = true, "fault injected");
        let _ = (kind, injection);
    }

    pub(crate) fn active(&self, n: usize) {
        #[cfg(feature = "metrics")]
        self.series.active.set(n as f64);
        let _ = n;
    }

    pub(crate) fn started(&self, e: &Entry) {
        #[cfg(feature = "tracing")]
        tracing::warn!(
            target: "seawall::fault",
            name = %self.name,
            injection = e.id,
            fault = e.fault.kind().as_str(),
            percent = e.config.percent,
            route = e.config.route.as_deref().unwrap_or("*"),
            key = e.config.key.as_deref().unwrap_or("*"),
            until = %describe_time(e.config.until),
            origin = ?e.origin,
            rehearsal = true,
            "fault injection started"
        );
        let _ = e;
    }

    pub(crate) fn stopped(&self, e: &Entry, why: &'static str) {
        #[cfg(feature = "tracing")]
        tracing::info!(
            target: "seawall::fault",
            name = %self.name,
            injection = e.id,
            fault = e.fault.kind().as_str(),
            injected = e.injected,
            why,
            rehearsal = true,
            "fault injection ended"
        );
        let _ = (e, why);
    }
}

/// Gives the fault layer's metrics their help text and unit (also done when a layer
/// is built).
#[cfg(feature = "metrics")]
pub fn describe() {
    use metrics::Unit;
    metrics::describe_counter!(
        "seawall_fault_injected_total",
        Unit::Count,
        "Calls that got an injected fault (a rehearsal, not an incident), by kind of fault."
    );
    metrics::describe_gauge!(
        "seawall_fault_injections_active",
        Unit::Count,
        "Fault injections in force (a rehearsal is running while above zero)."
    );
}
