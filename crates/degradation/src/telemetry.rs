//! Where the degradation layer's tracing events and metrics are emitted, so call
//! sites carry no `cfg`.
//!
//! Metrics (feature `metrics`), each with a `name` label (the layer's name):
//!
//! - `seawall_degradation_level` (gauge): the level in force, 0 being the best;
//! - `seawall_degradation_changes_total{direction="down"|"up"}`: level changes;
//! - `seawall_degradation_probes_total{result="success"|"failure"|"ignored"}`: recovery
//!   probe outcomes;
//! - `seawall_degradation_health_changes_total{name, to}` (`name` is the dependency): health status changes.
//!
//! A layer's series are registered when it is built, a health monitor's when it
//! starts (for each checked dependency), so all are exported at zero from the start.

#![cfg_attr(
    not(all(feature = "tracing", feature = "metrics")),
    allow(unused_variables)
)]

use seawall_core::{Name, Outcome};

use crate::machine::Change;

/// Pre-registered metric handles of one layer (nothing without the `metrics` feature).
#[derive(Debug)]
pub(crate) struct Telemetry {
    #[cfg(feature = "metrics")]
    m: Metrics,
}

#[cfg(feature = "metrics")]
#[derive(Debug)]
struct Metrics {
    level: metrics::Gauge,
    down: metrics::Counter,
    up: metrics::Counter,
    /// By outcome: success, failure, ignored.
    probes: [metrics::Counter; 3],
    shadow: metrics::Counter,
}

impl Telemetry {
    /// Registers the layer's series, the level gauge at `level`.
    pub(crate) fn new(name: &Name, level: usize) -> Self {
        #[cfg(feature = "metrics")]
        {
            let changes = |direction: &'static str| metrics::counter!("seawall_degradation_changes_total", "name" => name.clone(), "direction" => direction);
            let m = Metrics {
                level: metrics::gauge!("seawall_degradation_level", "name" => name.clone()),
                down: changes("down"),
                up: changes("up"),
                probes: [Outcome::Success, Outcome::Failure, Outcome::Ignore].map(|o| {
                    metrics::counter!("seawall_degradation_probes_total", "name" => name.clone(), "result" => o.as_str())
                }),
                shadow: metrics::counter!("seawall_degradation_shadow_rejections_total", "name" => name.clone()),
            };
            m.level.set(level as f64);
            Self { m }
        }
        #[cfg(not(feature = "metrics"))]
        Self {}
    }

    /// A request the machine sent to `level` was served by the best level (shadow mode).
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    pub(crate) fn shadow_served(&self, name: &Name, level: usize) {
        #[cfg(feature = "tracing")]
        tracing::trace!(
            target: "seawall::degradation",
            name = %name,
            level,
            "served by the best level in shadow mode instead of a lower one"
        );
        #[cfg(feature = "metrics")]
        self.m.shadow.increment(1);
    }

    /// A level change: a `tracing` event (warn going down, info going up) and metrics.
    /// Called after the lock is released, so the level gauge is set to `in_force` (read
    /// then) rather than to `change.to`: two changes logged out of order still leave the
    /// gauge at the level really in force.
    pub(crate) fn level_changed(
        &self,
        name: &Name,
        from: &str,
        to: &str,
        change: &Change,
        in_force: usize,
    ) {
        let down = change.direction() == crate::machine::Direction::Down;
        #[cfg(feature = "tracing")]
        {
            // One event, at warn going down and info going up: a callsite's level is
            // fixed when it is compiled.
            macro_rules! changed {
                ($level:ident, $message:literal) => {
                    tracing::$level!(
                        target: "seawall::degradation",
                        name = %name,
                        from,
                        to,
                        from_level = change.from,
                        to_level = change.to,
                        cause = change.cause.as_str(),
                        rehearsal = change.rehearsal,
                        $message
                    )
                };
            }
            if down {
                changed!(warn, "degradation level went down");
            } else {
                changed!(info, "degradation level went up");
            }
        }
        #[cfg(feature = "metrics")]
        {
            self.m.level.set(in_force as f64);
            if down {
                self.m.down.increment(1);
            } else {
                self.m.up.increment(1);
            }
        }
    }

    /// The outcome of one recovery probe.
    pub(crate) fn probe(&self, name: &Name, outcome: Outcome) {
        #[cfg(feature = "tracing")]
        tracing::trace!(target: "seawall::degradation", name = %name, ?outcome, "probe finished");
        #[cfg(feature = "metrics")]
        {
            let i = match outcome {
                Outcome::Success => 0,
                Outcome::Failure => 1,
                Outcome::Ignore => 2,
            };
            self.m.probes[i].increment(1);
        }
    }
}

/// Gives the degradation layer's and the health monitor's metrics their help text.
#[cfg(feature = "metrics")]
pub(crate) fn describe() {
    use metrics::Unit;
    metrics::describe_gauge!(
        "seawall_degradation_level",
        "The degradation level in force (0 is the best)."
    );
    metrics::describe_counter!(
        "seawall_degradation_changes_total",
        Unit::Count,
        "Degradation level changes by direction (down, up)."
    );
    metrics::describe_counter!(
        "seawall_degradation_probes_total",
        Unit::Count,
        "Recovery probes to the level above, by result (success, failure, ignored)."
    );
    metrics::describe_counter!(
        "seawall_degradation_shadow_rejections_total",
        Unit::Count,
        "Shadow mode: requests the machine would have served at a lower level, served by the best level instead."
    );
    metrics::describe_counter!(
        "seawall_degradation_health_changes_total",
        Unit::Count,
        "Health status changes of a checked dependency (name), by the status entered."
    );
}

/// The statuses a checked dependency can enter after a check.
#[cfg(feature = "metrics")]
const HEALTH_TO: [&str; 3] = ["healthy", "degraded", "unhealthy"];

/// A health monitor started checking `dependency`: its series exist from now on.
pub(crate) fn health_checked(dependency: &str) {
    #[cfg(feature = "metrics")]
    for to in HEALTH_TO {
        let _ = metrics::counter!(
            "seawall_degradation_health_changes_total",
            "name" => dependency.to_owned(),
            "to" => to
        );
    }
}

/// An operator or health signal changed the floor or the forced level.
pub(crate) fn control(name: &Name, action: &'static str, level: Option<&str>) {
    #[cfg(feature = "tracing")]
    tracing::info!(target: "seawall::degradation", name = %name, action, level, "degradation control");
}

/// The configuration was replaced at run time.
pub(crate) fn reconfigured(name: &Name) {
    #[cfg(feature = "tracing")]
    tracing::info!(target: "seawall::degradation", name = %name, "degradation reconfigured");
}

/// A health check changed a dependency's status.
pub(crate) fn health_changed(
    dependency: &str,
    from: &'static str,
    to: &'static str,
    failures: u32,
) {
    #[cfg(feature = "tracing")]
    tracing::info!(
        target: "seawall::health",
        dependency,
        from,
        to,
        consecutive_failures = failures,
        "dependency health changed"
    );
    #[cfg(feature = "metrics")]
    metrics::counter!(
        "seawall_degradation_health_changes_total",
        "name" => dependency.to_owned(),
        "to" => to
    )
    .increment(1);
}
