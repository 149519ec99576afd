//! The fallback's shared runtime state and its operator [`Handle`].

use std::error::Error;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use seawall_core::{
    layer_handle_by_inherent_methods, BoxError, ConfigError, FallbacksExhausted, Name, StepFailure,
};
use tokio::sync::broadcast;

use crate::config::{FallbackConfig, StepTimeout};
use crate::error::{Origin, Served, Unavailable};
use crate::machine::{Rejections, Trigger};
use crate::telemetry::{Rendered, StepOutcome, Telemetry};

/// The hook told of each failed step: `(step name, cause)`.
pub(crate) type StepHook = Arc<dyn Fn(&str, &(dyn Error + 'static)) + Send + Sync>;

const NO_TIMEOUT: u64 = u64::MAX;

fn encode(timeout: Option<Duration>) -> u64 {
    timeout.map_or(NO_TIMEOUT, |d| {
        u64::try_from(d.as_nanos()).unwrap_or(NO_TIMEOUT - 1)
    })
}

fn decode(nanos: u64) -> Option<Duration> {
    (nanos != NO_TIMEOUT).then(|| Duration::from_nanos(nanos))
}

#[derive(Debug)]
struct StepState {
    name: Name,
    origin: Arc<Origin>,
    timeout: AtomicU64,
    served: AtomicU64,
    failed: AtomicU64,
    timed_out: AtomicU64,
    unavailable: AtomicU64,
}

/// Something that happened in a fallback layer, for [`Handle::subscribe`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FallbackEvent {
    /// A trigger fired the fallback.
    Triggered {
        /// Why the primary's answer was not used.
        trigger: Trigger,
    },
    /// A step answered.
    Served {
        /// The step.
        step: Name,
        /// Why the primary's answer was not used.
        trigger: Trigger,
    },
    /// A step failed (or ran out of time); the chain goes on to its next step.
    StepFailed {
        /// The step.
        step: Name,
        /// Whether it ran out of time (its timeout or the request's deadline).
        timed_out: bool,
    },
    /// A step declined to invent an answer.
    Unavailable {
        /// The step.
        step: Name,
    },
    /// Every step failed.
    Exhausted,
    /// An operator control changed.
    Control {
        /// Whether the fallback is enabled.
        enabled: bool,
        /// Whether the fallback is forced (the primary is not called).
        forced: bool,
    },
}

/// The state every service built from one layer shares (counters, controls,
/// live configuration). Opaque; reached through [`Handle`].
pub struct Runtime {
    pub(crate) name: Name,
    enabled: AtomicBool,
    forced: AtomicBool,
    rejections: AtomicU8,
    other_triggers: bool,
    built: FallbackConfig,
    triggered: [AtomicU64; Trigger::COUNT],
    passed_through: AtomicU64,
    exhausted: AtomicU64,
    steps: Box<[StepState]>,
    hook: Option<StepHook>,
    events: OnceLock<broadcast::Sender<FallbackEvent>>,
    telemetry: Telemetry,
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("name", &self.name)
            .field("enabled", &self.enabled)
            .field("forced", &self.forced)
            .field("rejections", &self.rejections())
            .field("steps", &self.steps)
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// `steps` are `(name, timeout)` in order; `other_triggers` tells whether a
    /// classifier or an error type can fire the fallback besides rejections.
    pub(crate) fn new(
        name: Name,
        steps: &[(Name, Option<Duration>)],
        other_triggers: bool,
        config: &FallbackConfig,
        hook: Option<StepHook>,
    ) -> Result<Self, ConfigError> {
        let names: Vec<Name> = steps.iter().map(|(n, _)| n.clone()).collect();
        let rt = Self {
            telemetry: Telemetry::new(&name, &names),
            enabled: AtomicBool::new(true),
            forced: AtomicBool::new(false),
            rejections: AtomicU8::new(0),
            other_triggers,
            built: FallbackConfig::default(),
            triggered: Default::default(),
            passed_through: AtomicU64::new(0),
            exhausted: AtomicU64::new(0),
            steps: steps
                .iter()
                .map(|(n, t)| StepState {
                    name: n.clone(),
                    origin: Origin::new(name.clone(), n.clone()),
                    timeout: AtomicU64::new(encode(*t)),
                    served: AtomicU64::new(0),
                    failed: AtomicU64::new(0),
                    timed_out: AtomicU64::new(0),
                    unavailable: AtomicU64::new(0),
                })
                .collect(),
            hook,
            events: OnceLock::new(),
            name,
        };
        rt.apply(config)?;
        let built = rt.current_config();
        Ok(Self { built, ..rt })
    }

    /// Checks `config` against this layer (steps exist, something can still
    /// trigger) and applies it.
    fn apply(&self, config: &FallbackConfig) -> Result<(), ConfigError> {
        config.validate()?;
        if config.on_rejections.is_empty() && !self.other_triggers {
            return Err(ConfigError::new(
                "on_rejections",
                "no trigger would be left: select rejections, or build with a failure classifier or an error type",
            ));
        }
        let mut updates = Vec::with_capacity(config.step_timeouts.len());
        for st in &config.step_timeouts {
            let Some(i) = self.steps.iter().position(|s| *s.name == *st.step) else {
                return Err(ConfigError::new(
                    "step_timeouts",
                    format!("no step named `{}`", st.step),
                ));
            };
            updates.push((i, st.timeout));
        }
        self.rejections
            .store(config.on_rejections.bits(), Ordering::Relaxed);
        for (i, t) in updates {
            if let Some(s) = self.steps.get(i) {
                s.timeout.store(encode(t), Ordering::Relaxed);
            }
        }
        self.enabled.store(config.enabled, Ordering::Relaxed);
        Ok(())
    }

    fn current_config(&self) -> FallbackConfig {
        FallbackConfig {
            on_rejections: self.rejections(),
            step_timeouts: self
                .steps
                .iter()
                .map(|s| StepTimeout {
                    step: s.name.to_string(),
                    timeout: decode(s.timeout.load(Ordering::Relaxed)),
                })
                .collect(),
            enabled: self.enabled.load(Ordering::Relaxed),
        }
    }

    #[inline]
    pub(crate) fn rejections(&self) -> Rejections {
        Rejections::from_bits(self.rejections.load(Ordering::Relaxed))
    }

    #[inline]
    pub(crate) fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    #[inline]
    pub(crate) fn forced(&self) -> bool {
        self.forced.load(Ordering::Relaxed) && self.enabled()
    }

    pub(crate) fn step_name(&self, index: usize) -> Name {
        self.steps
            .get(index)
            .map_or_else(|| self.name.clone(), |s| s.name.clone())
    }

    pub(crate) fn step_timeout(&self, index: usize) -> Option<Duration> {
        self.steps
            .get(index)
            .and_then(|s| decode(s.timeout.load(Ordering::Relaxed)))
    }

    fn emit(&self, event: impl FnOnce() -> FallbackEvent) {
        if let Some(tx) = self.events.get() {
            if tx.receiver_count() > 0 {
                let _ = tx.send(event());
            }
        }
    }

    pub(crate) fn triggered(&self, trigger: Trigger) {
        if let Some(c) = self.triggered.get(trigger.index()) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        self.telemetry.triggered(&self.name, trigger);
        self.emit(|| FallbackEvent::Triggered { trigger });
    }

    pub(crate) fn passed_through(&self, cause: &(dyn Error + 'static)) {
        self.passed_through.fetch_add(1, Ordering::Relaxed);
        self.telemetry.passed_through(&self.name, cause);
    }

    /// Records an answer served by step `index` and makes its marker.
    #[inline]
    pub(crate) fn served(&self, index: usize, trigger: Trigger) -> Served {
        let Some(s) = self.steps.get(index) else {
            // Not reached: plans report their own step indices.
            return Served::new(self.name.clone(), self.name.clone(), trigger);
        };
        s.served.fetch_add(1, Ordering::Relaxed);
        self.telemetry
            .step(&self.name, index, &s.name, StepOutcome::Served, None);
        self.emit(|| FallbackEvent::Served {
            step: s.name.clone(),
            trigger,
        });
        Served::from_origin(Arc::clone(&s.origin), trigger)
    }

    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn rendered(&self, how: Rendered, cause: &(dyn Error + 'static)) {
        self.telemetry.rendered(&self.name, how, cause);
    }

    /// Records a failed step, tells the hook, and returns its [`StepFailure`].
    pub(crate) fn step_failed(&self, index: usize, cause: BoxError) -> StepFailure {
        let step = self.step_name(index);
        let timed_out = is_timeout(&*cause);
        let outcome = if timed_out {
            StepOutcome::TimedOut
        } else {
            StepOutcome::Failed
        };
        if let Some(s) = self.steps.get(index) {
            let counter = if timed_out { &s.timed_out } else { &s.failed };
            counter.fetch_add(1, Ordering::Relaxed);
        }
        let dyn_cause: &(dyn Error + 'static) = &*cause;
        self.telemetry
            .step(&self.name, index, &step, outcome, Some(dyn_cause));
        if let Some(hook) = &self.hook {
            hook(&step, dyn_cause);
        }
        self.emit(|| FallbackEvent::StepFailed {
            step: step.clone(),
            timed_out,
        });
        StepFailure::new(step, cause)
    }

    /// Records a step that declined, and locates its answer.
    pub(crate) fn declined(
        &self,
        index: usize,
        answer: Unavailable,
        trigger: Trigger,
    ) -> Unavailable {
        let step = self.step_name(index);
        if let Some(s) = self.steps.get(index) {
            s.unavailable.fetch_add(1, Ordering::Relaxed);
        }
        self.telemetry
            .step(&self.name, index, &step, StepOutcome::Unavailable, None);
        let answer = answer.located(&self.name, &step, trigger);
        self.emit(|| FallbackEvent::Unavailable { step });
        answer
    }

    /// Records an exhausted chain and makes its error.
    pub(crate) fn exhausted(&self, failures: Vec<StepFailure>) -> BoxError {
        self.exhausted.fetch_add(1, Ordering::Relaxed);
        let err = FallbacksExhausted::new(self.name.clone(), failures);
        self.telemetry.exhausted(&self.name, &err);
        self.emit(|| FallbackEvent::Exhausted);
        Box::new(err)
    }

    /// Concludes a failed step of a single (one-step) fallback: an explicit
    /// [`Unavailable`] is located, anything else exhausts the fallback.
    pub(crate) fn conclude_step(
        &self,
        index: usize,
        error: BoxError,
        trigger: Trigger,
    ) -> BoxError {
        match error.downcast::<Unavailable>() {
            Ok(answer) => Box::new(self.declined(index, *answer, trigger)),
            Err(cause) => {
                let failure = self.step_failed(index, cause);
                self.exhausted(vec![failure])
            }
        }
    }
}

/// Whether a step's cause means it ran out of time.
fn is_timeout(cause: &(dyn Error + 'static)) -> bool {
    cause.is::<crate::error::StepTimedOut>() || cause.is::<seawall_core::DeadlineExceeded>()
}

/// Counters and controls of one fallback layer, shared by every service built
/// from it. Cheap to clone.
///
/// - [`snapshot`](Self::snapshot): counters per trigger and per step, always on
///   (atomics, touched only when the fallback is used — never on the
///   primary-succeeds path).
/// - [`subscribe`](Self::subscribe): a stream of [`FallbackEvent`]s (the channel is
///   allocated when first asked for).
/// - [`disable`](Self::disable) / [`enable`](Self::enable): let everything pass
///   through untouched; [`force`](Self::force): skip the primary and answer from the
///   fallback (a drill, or a supplier known to be down), until
///   [`release`](Self::release).
/// - [`reconfigure`](Self::reconfigure) the rejection kinds and step timeouts at
///   run time, [`revert`](Self::revert) to the built configuration.
///
/// Its name, configuration, snapshot and operator verbs are those of every seawall
/// layer's handle ([`LayerHandle`](seawall_core::LayerHandle), implemented by delegating to the methods here;
/// there `force` takes `()`, a fallback having one forced state).
#[derive(Clone)]
pub struct Handle {
    rt: Arc<Runtime>,
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("name", &self.rt.name)
            .finish()
    }
}

impl Handle {
    pub(crate) fn new(rt: Arc<Runtime>) -> Self {
        Self { rt }
    }

    /// The layer's name.
    pub fn name(&self) -> &str {
        &self.rt.name
    }

    /// Counters and controls, now.
    pub fn snapshot(&self) -> Snapshot {
        let rt = &*self.rt;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let steps: Vec<StepSnapshot> = rt
            .steps
            .iter()
            .map(|s| StepSnapshot {
                name: s.name.to_string(),
                timeout: decode(load(&s.timeout)),
                served: load(&s.served),
                failed: load(&s.failed),
                timed_out: load(&s.timed_out),
                unavailable: load(&s.unavailable),
            })
            .collect();
        Snapshot {
            name: rt.name.to_string(),
            enabled: rt.enabled(),
            forced: rt.forced.load(Ordering::Relaxed),
            on_rejections: rt.rejections(),
            triggered: Trigger::ALL
                .iter()
                .zip(rt.triggered.iter())
                .map(|(t, c)| TriggerCount {
                    trigger: *t,
                    count: load(c),
                })
                .collect(),
            passed_through: load(&rt.passed_through),
            served: steps.iter().map(|s| s.served).sum(),
            unavailable: steps.iter().map(|s| s.unavailable).sum(),
            exhausted: load(&rt.exhausted),
            steps,
        }
    }

    /// Events from now on. The channel holds 64 events; a slow receiver loses the
    /// oldest (`RecvError::Lagged`).
    pub fn subscribe(&self) -> broadcast::Receiver<FallbackEvent> {
        self.rt
            .events
            .get_or_init(|| broadcast::channel(64).0)
            .subscribe()
    }

    fn control(&self) {
        let enabled = self.rt.enabled();
        let forced = self.rt.forced.load(Ordering::Relaxed);
        self.rt.emit(|| FallbackEvent::Control { enabled, forced });
    }

    /// Lets every call pass through untouched (the fallback is never used).
    pub fn disable(&self) {
        self.rt.enabled.store(false, Ordering::Relaxed);
        self.control();
    }

    /// Uses the fallback again (undoes [`disable`](Self::disable)).
    pub fn enable(&self) {
        self.rt.enabled.store(true, Ordering::Relaxed);
        self.control();
    }

    /// Forces the fallback until [`release`](Self::release): the primary is not
    /// called at all, every call is answered by the fallback with
    /// [`Trigger::Forced`]. Takes effect from the next `poll_ready`. A disabled
    /// fallback is never forced.
    pub fn force(&self) {
        self.set_forced(true);
    }

    /// Calls the primary again after [`force`](Self::force).
    pub fn release(&self) {
        self.set_forced(false);
    }

    fn set_forced(&self, forced: bool) {
        self.rt.forced.store(forced, Ordering::Relaxed);
        self.control();
    }

    /// The live configuration.
    pub fn config(&self) -> FallbackConfig {
        self.rt.current_config()
    }

    /// Applies `config` (rejection kinds, step timeouts, enabled), keeping counters.
    /// Nothing changes if it is invalid.
    #[allow(clippy::needless_pass_by_value)] // by value, as every seawall handle's
    pub fn reconfigure(&self, config: FallbackConfig) -> Result<(), ConfigError> {
        self.rt.apply(&config)?;
        self.control();
        Ok(())
    }

    /// Returns to the configuration the layer was built with.
    pub fn revert(&self) {
        // The built configuration was validated against this layer when it was built.
        let _ = self.rt.apply(&self.rt.built);
        self.control();
    }
}

layer_handle_by_inherent_methods!(Handle {
    Config = FallbackConfig,
    Snapshot = Snapshot,
    /// A fallback has one forced state: answering every call.
    Forced = (),
    force = |handle, forced| {
        let () = forced;
        handle.force();
        Ok(())
    },
});

/// How often one trigger fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct TriggerCount {
    /// The trigger.
    pub trigger: Trigger,
    /// How often it fired the fallback.
    pub count: u64,
}

/// One step's counters.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct StepSnapshot {
    /// The step's name.
    pub name: String,
    /// Its current timeout (`None`: bounded only by the request's deadline).
    #[cfg_attr(
        feature = "serde",
        serde(with = "seawall_core::duration_format::option")
    )]
    pub timeout: Option<Duration>,
    /// Answers it served.
    pub served: u64,
    /// Times it failed with an error.
    pub failed: u64,
    /// Times it ran out of time.
    pub timed_out: u64,
    /// Times it declined to answer.
    pub unavailable: u64,
}

/// A fallback layer's counters and controls at one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Snapshot {
    /// The layer's name.
    pub name: String,
    /// Whether the fallback is enabled.
    pub enabled: bool,
    /// Whether the fallback is forced.
    pub forced: bool,
    /// The rejection kinds that fire it.
    pub on_rejections: Rejections,
    /// How often each trigger fired, in [`Trigger::ALL`] order.
    pub triggered: Vec<TriggerCount>,
    /// Primary errors that fired no trigger and passed through.
    pub passed_through: u64,
    /// Answers served (all steps).
    pub served: u64,
    /// Explicit no-answers (all steps).
    pub unavailable: u64,
    /// Times every step failed.
    pub exhausted: u64,
    /// Per step, in order.
    pub steps: Vec<StepSnapshot>,
}

impl Snapshot {
    /// How often `trigger` fired.
    pub fn triggered(&self, trigger: Trigger) -> u64 {
        self.triggered
            .iter()
            .find(|c| c.trigger == trigger)
            .map_or(0, |c| c.count)
    }

    /// The counters of the step named `name`.
    pub fn step(&self, name: &str) -> Option<&StepSnapshot> {
        self.steps.iter().find(|s| s.name == name)
    }
}
