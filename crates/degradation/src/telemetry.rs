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

#![cfg_attr(
    not(all(feature = "tracing", feature = "metrics")),
    allow(unused_variables)
)]

use seawall_core::{Name, Outcome};

use crate::machine::Change;

/// The level in force when a layer is built.
pub(crate) fn initial_level(name: &Name, level: usize) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("seawall_degradation_level", "name" => name.clone()).set(level as f64);
}

/// A level change: a `tracing` event (warn going down, info going up) and metrics.
/// Called after the lock is released, so the level gauge is set to `in_force` (read
/// then) rather than to `change.to`: two changes logged out of order still leave the
/// gauge at the level really in force.
pub(crate) fn level_changed(name: &Name, from: &str, to: &str, change: &Change, in_force: usize) {
    #[cfg(feature = "tracing")]
    match change.direction() {
        crate::machine::Direction::Down => tracing::warn!(
            target: "seawall::degradation",
            name = %name,
            from,
            to,
            from_level = change.from,
            to_level = change.to,
            reason = change.reason.as_str(),
            "degradation level went down"
        ),
        crate::machine::Direction::Up => tracing::info!(
            target: "seawall::degradation",
            name = %name,
            from,
            to,
            from_level = change.from,
            to_level = change.to,
            reason = change.reason.as_str(),
            "degradation level went up"
        ),
    }
    #[cfg(feature = "metrics")]
    {
        metrics::gauge!("seawall_degradation_level", "name" => name.clone()).set(in_force as f64);
        metrics::counter!(
            "seawall_degradation_changes_total",
            "name" => name.clone(),
            "direction" => change.direction().as_str()
        )
        .increment(1);
    }
}

/// The outcome of one recovery probe.
pub(crate) fn probe(name: &Name, outcome: Outcome) {
    #[cfg(feature = "tracing")]
    tracing::trace!(target: "seawall::degradation", name = %name, ?outcome, "probe finished");
    #[cfg(feature = "metrics")]
    {
        let result = match outcome {
            Outcome::Success => "success",
            Outcome::Failure => "failure",
            Outcome::Ignore => "ignored",
        };
        metrics::counter!(
            "seawall_degradation_probes_total",
            "name" => name.clone(),
            "result" => result
        )
        .increment(1);
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
