//! The only place with `cfg(feature = "tracing")` and `cfg(feature = "metrics")`.
//!
//! Metrics (feature `metrics`), all labelled with the fallback's `name`:
//!
//! | metric | kind | meaning |
//! |---|---|---|
//! | `seawall_fallback_triggered_total{trigger}` | counter | fallbacks started, per [`Trigger`] label |
//! | `seawall_fallback_steps_total{step, outcome="served"}` | counter | a step answered |
//! | `seawall_fallback_steps_total{step, outcome="failed"}` | counter | a step failed with an error |
//! | `seawall_fallback_steps_total{step, outcome="timed_out"}` | counter | a step ran out of time (its timeout or the request's deadline) |
//! | `seawall_fallback_steps_total{step, outcome="unavailable"}` | counter | a step declined to invent an answer |
//! | `seawall_fallback_exhausted_total` | counter | every step failed |
//! | `seawall_fallback_passed_through_total` | counter | primary errors that fired no trigger |
//! | `seawall_fallback_rendered_total{cause}` | counter | HTTP server mode: an error rendered as a response (`rejection`, `exhausted`, `unavailable`, `failure`) |
//!
//! The counters are registered once, when the layer is built, with the recorder
//! installed at that time; an event then costs a dynamic call, no allocation. The
//! primary-succeeds path emits nothing.
//!
//! Tracing (feature `tracing`, target `seawall::fallback`): `debug` events when a
//! fallback fires and when a step serves, `warn` when a step fails, the chain is
//! exhausted or an error is rendered (with the cause, which never reaches an HTTP body).

use std::error::Error;

use seawall_core::{Name, RejectionKind};

use crate::machine::Trigger;

/// Gives the fallback's metrics their help text and unit.
#[cfg(feature = "metrics")]
pub(crate) fn describe() {
    use metrics::Unit;
    metrics::describe_counter!(
        "seawall_fallback_triggered_total",
        Unit::Count,
        "Fallbacks started, by the one cause that triggered each (trigger)."
    );
    metrics::describe_counter!(
        "seawall_fallback_steps_total",
        Unit::Count,
        "Each fallback step's result: served, failed, timed_out, unavailable (declined to invent an answer)."
    );
    metrics::describe_counter!(
        "seawall_fallback_exhausted_total",
        Unit::Count,
        "Triggered fallbacks whose every step failed."
    );
    metrics::describe_counter!(
        "seawall_fallback_passed_through_total",
        Unit::Count,
        "Primary errors that fired no trigger and went to the caller as they were."
    );
    metrics::describe_counter!(
        "seawall_fallback_rendered_total",
        Unit::Count,
        "Errors answered as a response in the HTTP server mode, by cause."
    );
}

/// How an error was rendered in the HTTP server mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "http"), allow(dead_code))]
pub(crate) enum Rendered {
    /// A seawall rejection of a kind not selected as a trigger, kept apart by kind.
    Rejection(RejectionKind),
    Exhausted,
    Unavailable,
    Failure,
}

impl Rendered {
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    const COUNT: usize = RejectionKind::COUNT + 3;

    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    const ALL: [Rendered; Rendered::COUNT] = {
        let mut all = [Rendered::Failure; Rendered::COUNT];
        let mut i = 0;
        while i < RejectionKind::COUNT {
            all[i] = Rendered::Rejection(RejectionKind::ALL[i]);
            i += 1;
        }
        all[i] = Rendered::Exhausted;
        all[i + 1] = Rendered::Unavailable;
        all[i + 2] = Rendered::Failure;
        all
    };

    /// The position in [`Rendered::ALL`].
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    fn index(self) -> usize {
        const N: usize = RejectionKind::COUNT;
        match self {
            Rendered::Rejection(kind) => kind.index(),
            Rendered::Exhausted => N,
            Rendered::Unavailable => N + 1,
            Rendered::Failure => N + 2,
        }
    }

    #[cfg_attr(not(any(feature = "metrics", feature = "tracing")), allow(dead_code))]
    fn as_str(self) -> &'static str {
        match self {
            Rendered::Rejection(kind) => kind.as_str(),
            Rendered::Exhausted => "exhausted",
            Rendered::Unavailable => "unavailable",
            Rendered::Failure => "failure",
        }
    }
}

/// The outcome of one step, for the per-step counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StepOutcome {
    Served,
    Failed,
    TimedOut,
    Unavailable,
}

impl StepOutcome {
    #[cfg_attr(not(any(feature = "metrics", feature = "tracing")), allow(dead_code))]
    fn as_str(self) -> &'static str {
        match self {
            StepOutcome::Served => "served",
            StepOutcome::Failed => "failed",
            StepOutcome::TimedOut => "timed_out",
            StepOutcome::Unavailable => "unavailable",
        }
    }

    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    fn index(self) -> usize {
        match self {
            StepOutcome::Served => 0,
            StepOutcome::Failed => 1,
            StepOutcome::TimedOut => 2,
            StepOutcome::Unavailable => 3,
        }
    }
}

/// Metric handles of one fallback layer (empty without the `metrics` feature).
#[derive(Debug)]
pub(crate) struct Telemetry {
    #[cfg(feature = "metrics")]
    m: Metrics,
}

#[cfg(feature = "metrics")]
#[derive(Debug)]
struct Metrics {
    triggered: Vec<metrics::Counter>,
    steps: Vec<[metrics::Counter; 4]>,
    exhausted: metrics::Counter,
    passed_through: metrics::Counter,
    rendered: Vec<metrics::Counter>,
}

impl Telemetry {
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn new(name: &Name, steps: &[Name]) -> Self {
        #[cfg(feature = "metrics")]
        {
            let label = metrics::SharedString::from(name.clone());
            let step_counters = steps
                .iter()
                .map(|step| {
                    let step = metrics::SharedString::from(step.clone());
                    [
                        StepOutcome::Served,
                        StepOutcome::Failed,
                        StepOutcome::TimedOut,
                        StepOutcome::Unavailable,
                    ]
                    .map(|o| {
                        metrics::counter!("seawall_fallback_steps_total",
                            "name" => label.clone(), "step" => step.clone(), "outcome" => o.as_str())
                    })
                })
                .collect();
            Self {
                m: Metrics {
                    triggered: Trigger::ALL
                        .iter()
                        .map(|t| {
                            metrics::counter!("seawall_fallback_triggered_total",
                                "name" => label.clone(), "trigger" => t.as_str())
                        })
                        .collect(),
                    steps: step_counters,
                    exhausted: metrics::counter!("seawall_fallback_exhausted_total", "name" => label.clone()),
                    passed_through: metrics::counter!("seawall_fallback_passed_through_total", "name" => label.clone()),
                    rendered: Rendered::ALL
                        .iter()
                        .map(|r| {
                            metrics::counter!("seawall_fallback_rendered_total",
                                "name" => label.clone(), "cause" => r.as_str())
                        })
                        .collect(),
                },
            }
        }
        #[cfg(not(feature = "metrics"))]
        Self {}
    }

    #[cfg_attr(
        not(all(feature = "metrics", feature = "tracing")),
        allow(unused_variables)
    )]
    pub(crate) fn triggered(&self, name: &str, trigger: Trigger) {
        #[cfg(feature = "tracing")]
        tracing::debug!(target: "seawall::fallback", name, trigger = trigger.as_str(), "fallback triggered");
        #[cfg(feature = "metrics")]
        if let Some(c) = self.m.triggered.get(trigger.index()) {
            c.increment(1);
        }
    }

    #[cfg_attr(
        not(all(feature = "metrics", feature = "tracing")),
        allow(unused_variables)
    )]
    pub(crate) fn step(
        &self,
        name: &str,
        index: usize,
        step: &str,
        outcome: StepOutcome,
        cause: Option<&(dyn Error + 'static)>,
    ) {
        #[cfg(feature = "tracing")]
        match (outcome, cause) {
            (StepOutcome::Failed | StepOutcome::TimedOut, Some(cause)) => {
                tracing::warn!(target: "seawall::fallback", name, step, outcome = outcome.as_str(), error = %cause, "fallback step failed");
            }
            _ => {
                tracing::debug!(target: "seawall::fallback", name, step, outcome = outcome.as_str(), "fallback step");
            }
        }
        #[cfg(feature = "metrics")]
        if let Some(c) = self.m.steps.get(index).and_then(|s| s.get(outcome.index())) {
            c.increment(1);
        }
    }

    #[cfg_attr(
        not(all(feature = "metrics", feature = "tracing")),
        allow(unused_variables)
    )]
    pub(crate) fn exhausted(&self, name: &str, cause: &(dyn Error + 'static)) {
        #[cfg(feature = "tracing")]
        tracing::warn!(target: "seawall::fallback", name, error = %cause, "every fallback step failed");
        #[cfg(feature = "metrics")]
        self.m.exhausted.increment(1);
    }

    #[cfg_attr(
        not(all(feature = "metrics", feature = "tracing")),
        allow(unused_variables)
    )]
    pub(crate) fn passed_through(&self, name: &str, cause: &(dyn Error + 'static)) {
        #[cfg(feature = "tracing")]
        tracing::debug!(target: "seawall::fallback", name, error = %cause, "error passed through (no trigger)");
        #[cfg(feature = "metrics")]
        self.m.passed_through.increment(1);
    }

    #[cfg_attr(
        not(all(feature = "metrics", feature = "tracing")),
        allow(unused_variables)
    )]
    pub(crate) fn rendered(&self, name: &str, how: Rendered, cause: &(dyn Error + 'static)) {
        #[cfg(feature = "tracing")]
        tracing::warn!(target: "seawall::fallback", name, rendered = how.as_str(), error = %cause, "error answered with a rendered response");
        #[cfg(feature = "metrics")]
        if let Some(c) = self.m.rendered.get(how.index()) {
            c.increment(1);
        }
    }
}
