//! Proactive health checks of named dependencies, on tokio.
//!
//! A [`HealthMonitor`] runs one check per dependency every `interval`, each bounded by
//! `timeout` (a check that overruns is a failure). A dependency is
//! [`Healthy`](HealthStatus::Healthy) after a passing check,
//! [`Degraded`](HealthStatus::Degraded) after `degraded_after` consecutive failures
//! (default 1) and [`Unhealthy`](HealthStatus::Unhealthy) after `unhealthy_after`
//! (default 3). A degraded dependency still counts as healthy for a
//! [`FeaturePlan`]; an unhealthy or not-yet-checked one does not.
//!
//! The monitor can drive a degradation machine's floor
//! ([`HealthMonitorBuilder::drive_floor`]) so traffic moves off a dependency the checks
//! see failing before users do, and it publishes a [`FeaturePlan`]'s modes for
//! [`FeaturesLayer`].
//!
//! The checks run in tasks owned by the monitor: [`HealthMonitor::stop`] ends them,
//! and so does dropping the monitor. No task outlives it.
//!
//! ```
//! use std::time::Duration;
//! use seawall_degradation::health::{CheckConfig, HealthMonitor, HealthStatus};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let monitor = HealthMonitor::builder()
//!     .check("model-provider", CheckConfig::default(), || async {
//!         Err::<(), _>("connection refused")
//!     })
//!     .start()
//!     .unwrap();
//! tokio::time::sleep(Duration::from_secs(25)).await; // checks at 0 s, 10 s and 20 s
//! assert_eq!(monitor.report().status("model-provider"), Some(HealthStatus::Unhealthy));
//! # }
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use seawall_core::{check_duration, BoxError, ConfigError, Name};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};

use crate::features::{FeatureModes, FeaturePlan, FeaturesLayer};
use crate::handle::Handle;
use crate::telemetry;

/// What the checks say about one dependency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum HealthStatus {
    /// Not checked yet.
    #[default]
    Unknown,
    /// The last check passed.
    Healthy,
    /// At least `degraded_after` consecutive checks failed (still counted as healthy).
    Degraded,
    /// At least `unhealthy_after` consecutive checks failed.
    Unhealthy,
}

impl HealthStatus {
    /// A short, stable, lower-case label.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Unknown => "unknown",
            Self::Healthy => "healthy",
            Self::Degraded => "degraded",
            Self::Unhealthy => "unhealthy",
        }
    }

    /// Whether a feature plan may count on the dependency: healthy or degraded.
    pub const fn is_usable(self) -> bool {
        matches!(self, Self::Healthy | Self::Degraded)
    }
}

/// How one dependency is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
pub struct CheckConfig {
    /// Time between checks (default 10 s). The first check runs at start.
    #[cfg_attr(feature = "serde", serde(with = "seawall_core::duration_format"))]
    pub interval: Duration,
    /// Longest a check may take before it counts as failed (default 5 s).
    #[cfg_attr(feature = "serde", serde(with = "seawall_core::duration_format"))]
    pub timeout: Duration,
    /// Consecutive failures that make the dependency degraded (default 1).
    pub degraded_after: u32,
    /// Consecutive failures that make it unhealthy (default 3).
    pub unhealthy_after: u32,
}

impl Default for CheckConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(10),
            timeout: Duration::from_secs(5),
            degraded_after: 1,
            unhealthy_after: 3,
        }
    }
}

impl CheckConfig {
    /// Checks every field, naming the first one at fault.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_duration("interval", self.interval)?;
        check_duration("timeout", self.timeout)?;
        if self.degraded_after == 0 {
            return Err(ConfigError::new("degraded_after", "must be at least 1"));
        }
        if self.unhealthy_after < self.degraded_after {
            return Err(ConfigError::new(
                "unhealthy_after",
                "must be at least degraded_after",
            ));
        }
        Ok(())
    }

    fn status_after(&self, consecutive_failures: u32) -> HealthStatus {
        if consecutive_failures >= self.unhealthy_after {
            HealthStatus::Unhealthy
        } else if consecutive_failures >= self.degraded_after {
            HealthStatus::Degraded
        } else {
            HealthStatus::Healthy
        }
    }
}

/// One dependency's latest check.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct DependencyHealth {
    /// Its status.
    pub status: HealthStatus,
    /// Failed checks in a row.
    pub consecutive_failures: u32,
    /// How long the last check took.
    pub latency: Option<Duration>,
    /// When the last check finished.
    #[cfg_attr(feature = "serde", serde(skip))]
    pub last_checked: Option<Instant>,
    /// The last failure's message (for operators; never sent to clients).
    pub last_error: Option<String>,
}

/// Every dependency's latest check.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct HealthReport {
    dependencies: BTreeMap<String, DependencyHealth>,
}

impl HealthReport {
    /// The status of `dependency`, if it is monitored.
    pub fn status(&self, dependency: &str) -> Option<HealthStatus> {
        self.dependencies.get(dependency).map(|d| d.status)
    }

    /// The latest check of `dependency`.
    pub fn get(&self, dependency: &str) -> Option<&DependencyHealth> {
        self.dependencies.get(dependency)
    }

    /// Whether `dependency` is healthy or degraded (the "healthy set").
    pub fn is_usable(&self, dependency: &str) -> bool {
        self.status(dependency).is_some_and(HealthStatus::is_usable)
    }

    /// The healthy set: dependencies healthy or degraded.
    pub fn usable(&self) -> impl Iterator<Item = &str> {
        self.dependencies
            .iter()
            .filter(|(_, d)| d.status.is_usable())
            .map(|(n, _)| n.as_str())
    }

    /// Every dependency and its latest check.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &DependencyHealth)> {
        self.dependencies.iter().map(|(n, d)| (n.as_str(), d))
    }
}

type CheckFuture = Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send>>;
type Check = Box<dyn FnMut() -> CheckFuture + Send>;
type FloorRule = Box<dyn Fn(&HealthReport) -> Option<usize> + Send>;

/// Builds a [`HealthMonitor`].
#[derive(Default)]
pub struct HealthMonitorBuilder {
    checks: Vec<(Name, CheckConfig, Check)>,
    floor: Option<(Handle, FloorRule)>,
    plan: Option<FeaturePlan>,
}

impl fmt::Debug for HealthMonitorBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HealthMonitorBuilder")
            .field(
                "checks",
                &self
                    .checks
                    .iter()
                    .map(|(n, c, _)| (n, c))
                    .collect::<Vec<_>>(),
            )
            .field("plan", &self.plan)
            .finish_non_exhaustive()
    }
}

impl HealthMonitorBuilder {
    /// Checks `dependency` with `check` (a passing check returns `Ok`).
    pub fn check<F, Fut, E>(
        mut self,
        dependency: impl Into<Name>,
        config: CheckConfig,
        mut check: F,
    ) -> Self
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        let check: Check = Box::new(move || {
            let fut = check();
            Box::pin(async move { fut.await.map_err(Into::into) })
        });
        self.checks.push((dependency.into(), config, check));
        self
    }

    /// After every check, sets the floor of the degradation machine behind `handle` to
    /// what `rule` returns (`None` clears it). The floor is only touched when the rule's
    /// answer changes, so an operator's floor stands until the health changes.
    ///
    /// For example, no level better than "reduced" while the large model's provider is
    /// unhealthy: `|r| (!r.is_usable("provider-a")).then_some(1)`.
    pub fn drive_floor(
        mut self,
        handle: Handle,
        rule: impl Fn(&HealthReport) -> Option<usize> + Send + 'static,
    ) -> Self {
        self.floor = Some((handle, Box::new(rule)));
        self
    }

    /// Publishes `plan`'s feature modes after every check (see [`HealthMonitor::features_layer`]).
    pub fn plan(mut self, plan: FeaturePlan) -> Self {
        self.plan = Some(plan);
        self
    }

    /// Validates the checks and starts them, on the current tokio runtime.
    pub fn start(self) -> Result<HealthMonitor, ConfigError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            ConfigError::new(
                "runtime",
                "a health monitor must be started inside a tokio runtime",
            )
        })?;
        if self.checks.is_empty() {
            return Err(ConfigError::new("checks", "add at least one check"));
        }
        let mut report = HealthReport::default();
        for (name, config, _) in &self.checks {
            config
                .validate()
                .map_err(|e| e.within(&format!("checks.{name}")))?;
            if report
                .dependencies
                .insert(name.to_string(), DependencyHealth::default())
                .is_some()
            {
                return Err(ConfigError::new(
                    "checks",
                    format!("`{name}` is checked twice"),
                ));
            }
        }
        let (report_tx, report_rx) = watch::channel(Arc::new(report.clone()));
        let features = self.plan.map(|plan| {
            let modes = plan.modes(|d| report.is_usable(d));
            let (tx, rx) = watch::channel(Arc::new(modes));
            (plan, tx, rx)
        });
        let features_rx = features.as_ref().map(|(_, _, rx)| rx.clone());
        let shared = Arc::new(Mutex::new(MonitorState {
            report,
            report_tx,
            features: features.map(|(plan, tx, _)| (plan, tx)),
            floor: self.floor.map(|(handle, rule)| FloorDriver {
                handle,
                rule,
                applied: None,
            }),
        }));
        let mut tasks = JoinSet::new();
        for (name, config, check) in self.checks {
            telemetry::health_checked(&name);
            tasks.spawn_on(run_check(name, config, check, shared.clone()), &runtime);
        }
        Ok(HealthMonitor {
            tasks,
            report: report_rx,
            features: features_rx,
        })
    }
}

struct FloorDriver {
    handle: Handle,
    rule: FloorRule,
    applied: Option<Option<usize>>,
}

struct MonitorState {
    report: HealthReport,
    report_tx: watch::Sender<Arc<HealthReport>>,
    features: Option<(FeaturePlan, watch::Sender<Arc<FeatureModes>>)>,
    floor: Option<FloorDriver>,
}

impl MonitorState {
    fn record(
        &mut self,
        dependency: &str,
        config: &CheckConfig,
        result: Result<(), BoxError>,
        latency: Duration,
    ) {
        let Some(dep) = self.report.dependencies.get_mut(dependency) else {
            return;
        };
        let before = dep.status;
        match result {
            Ok(()) => {
                dep.consecutive_failures = 0;
                dep.last_error = None;
            }
            Err(e) => {
                dep.consecutive_failures = dep.consecutive_failures.saturating_add(1);
                dep.last_error = Some(e.to_string());
            }
        }
        dep.status = config.status_after(dep.consecutive_failures);
        dep.latency = Some(latency);
        dep.last_checked = Some(Instant::now());
        if dep.status != before {
            telemetry::health_changed(
                dependency,
                before.as_str(),
                dep.status.as_str(),
                dep.consecutive_failures,
            );
        }
        self.report_tx.send_replace(Arc::new(self.report.clone()));
        if let Some((plan, tx)) = &self.features {
            let report = &self.report;
            let modes = plan.modes(|d| report.is_usable(d));
            tx.send_if_modified(|current| {
                if **current == modes {
                    false
                } else {
                    *current = Arc::new(modes);
                    true
                }
            });
        }
        if let Some(driver) = &mut self.floor {
            let wanted = (driver.rule)(&self.report);
            if driver.applied != Some(wanted) {
                let applied = match wanted {
                    Some(level) => driver.handle.set_floor(level).is_ok(),
                    None => {
                        driver.handle.clear_floor();
                        true
                    }
                };
                if applied {
                    driver.applied = Some(wanted);
                }
            }
        }
    }
}

async fn run_check(
    name: Name,
    config: CheckConfig,
    mut check: Check,
    shared: Arc<Mutex<MonitorState>>,
) {
    let mut interval = tokio::time::interval(config.interval);
    interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let started = Instant::now();
        let result = match tokio::time::timeout(config.timeout, check()).await {
            Ok(result) => result,
            Err(_) => Err(format!("health check timed out after {:?}", config.timeout).into()),
        };
        let latency = started.elapsed();
        shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .record(&name, &config, result, latency);
    }
}

/// Periodic health checks of named dependencies; see the [module docs](self).
///
/// Owns its tasks: dropping the monitor (or calling [`stop`](Self::stop)) ends them.
pub struct HealthMonitor {
    tasks: JoinSet<()>,
    report: watch::Receiver<Arc<HealthReport>>,
    features: Option<watch::Receiver<Arc<FeatureModes>>>,
}

impl fmt::Debug for HealthMonitor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HealthMonitor")
            .field("running", &self.is_running())
            .field("report", &*self.report.borrow())
            .finish_non_exhaustive()
    }
}

impl HealthMonitor {
    /// Starts a builder.
    pub fn builder() -> HealthMonitorBuilder {
        HealthMonitorBuilder::default()
    }

    /// The latest report.
    pub fn report(&self) -> Arc<HealthReport> {
        self.report.borrow().clone()
    }

    /// A receiver of every new report (after each check). It keeps the last report
    /// readable after the monitor stops.
    pub fn subscribe(&self) -> watch::Receiver<Arc<HealthReport>> {
        self.report.clone()
    }

    /// The feature plan's modes, following the checks (if a plan was given).
    pub fn features(&self) -> Option<watch::Receiver<Arc<FeatureModes>>> {
        self.features.clone()
    }

    /// A layer that puts the plan's current modes into each request's extensions.
    pub fn features_layer(&self) -> Option<FeaturesLayer> {
        self.features.clone().map(FeaturesLayer::new)
    }

    /// Whether the checks are still running.
    pub fn is_running(&self) -> bool {
        !self.tasks.is_empty()
    }

    /// Stops every check. The last report stays readable.
    pub fn stop(&mut self) {
        self.tasks.abort_all();
        // Aborted tasks are removed from the set as they finish; forget them now.
        while self.tasks.try_join_next().is_some() {}
        self.tasks.detach_all();
    }
}
