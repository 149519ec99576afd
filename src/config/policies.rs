//! [`Policies`]: the layers built from a policy document, and their handles.

// With a policy crate left out, some helpers and bindings serve no section.
#![cfg_attr(
    not(all(
        feature = "bulkhead",
        feature = "circuit-breaker",
        feature = "degradation",
        feature = "fallback"
    )),
    allow(unused_variables, dead_code)
)]

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use seawall_core::{ConfigError, DeadlineLayer};

use super::document::{key, within, PolicyConfig, PolicyDocument};
use super::error::LoadError;
use super::layers::{differs, each_layer, EachLayer, Placed};
use crate::telemetry;

/// The layers built from a policy document, the handles of their shared state, and
/// the document in force.
///
/// Built from a validated [`PolicyDocument`] ([`load`](Self::load) from a file,
/// [`from_toml`](Self::from_toml)). Code decides the *shape* of each stack (which
/// layers, in which order, with which classifier, levels and fallback
/// strategies); the document gives the *numbers*. Ask for each layer by policy
/// name: [`deadline`](Self::deadline), [`bulkhead`](Self::bulkhead),
/// [`circuit_breaker`](Self::circuit_breaker), [`degradation`](Self::degradation),
/// [`fallback`](Self::fallback).
///
/// **Where state lives.** A policy has at most one bulkhead, one breaker, one
/// degradation machine and one fallback: asking twice for the same layer of a
/// policy is an error. To protect several routes with one bulkhead or breaker
/// (one dependency), clone the layer you got; for separate state, declare
/// separate policies. The state is per process: each instance of the service
/// has its own bulkheads and breakers (three instances with `max_concurrent = 8`
/// allow 24 concurrent calls).
///
/// **At run time** [`apply`](Self::apply) (or [`reload`](Self::reload) the file)
/// reconfigures every built layer through its handle, keeping its state: an open
/// breaker stays open, calls in a bulkhead keep their slots, the degradation
/// level stays. [`revert`](Self::revert) goes back to the document the service
/// started with. What cannot change at run time, and makes `apply` refuse the
/// whole document: adding or removing a policy or one of its sections, changing
/// a `deadline`, and changing `routes` or `dependencies` (they are wired into the
/// router and clients at start).
///
/// Cloning is cheap and shares everything (hand a clone to an admin route).
#[derive(Clone)]
pub struct Policies {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    file: Option<PathBuf>,
    pub(super) started: PolicyDocument,
    /// Serialises changes (apply, reload, revert). Held while the handles are
    /// reconfigured and events are emitted; `state` is not, so a subscriber that
    /// reads [`Policies::snapshot`] from inside one of those events never waits on
    /// the change that emitted it.
    changes: Mutex<()>,
    state: Mutex<State>,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) current: PolicyDocument,
    generation: u64,
    built: BTreeMap<String, PolicyHandles>,
    /// The coordinations and caps registered, by policy.
    #[cfg(feature = "fleet")]
    pub(super) fleet_parts: BTreeMap<String, super::fleet::FleetParts>,
}

impl fmt::Debug for Policies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("Policies")
            .field("file", &self.inner.file)
            .field("generation", &state.generation)
            .field("policies", &state.current.policies.keys())
            .finish_non_exhaustive()
    }
}

/// Everything an operator needs to see, at one moment: the document in force and
/// each built layer's snapshot. Serialises to JSON for an admin endpoint.
#[derive(Debug, Clone, Default, serde::Serialize)]
#[non_exhaustive]
pub struct PoliciesSnapshot {
    /// The file the policies were loaded from, if any.
    pub file: Option<String>,
    /// 0 at start, incremented by every document applied and every revert.
    pub generation: u64,
    /// Whether the document in force is the one the service started with.
    pub as_started: bool,
    /// Each policy, by name.
    pub policies: BTreeMap<String, PolicySnapshot>,
    /// Routes and the policy each uses.
    pub routes: BTreeMap<String, String>,
    /// Dependencies and the policy each uses.
    pub dependencies: BTreeMap<String, String>,
    /// The fleet settings in force, the store URL's password as `***`.
    #[cfg(feature = "fleet")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleet: Option<super::FleetSection>,
}

macro_rules! policy_handles_and_snapshot {
    ($($field:ident {
        feature: $feature:literal, section: $section:ident, module: $module:ident,
        config: $config:ident, config_doc: $config_doc:literal,
        handle_doc: $handle_doc:literal, snapshot_doc: $snapshot_doc:literal,
    })*) => {
        /// The handles of the layers built for one policy (the ones not built yet are `None`).
        #[derive(Debug, Clone, Default)]
        #[non_exhaustive]
        pub struct PolicyHandles {
            /// The deadline's handle (its shadow switch), once [`Policies::deadline`] was
            /// called: every layer it returns for the policy shares it.
            pub deadline: Option<seawall_core::DeadlineHandle>,
            $(
                #[doc = $handle_doc]
                #[cfg(feature = $feature)]
                pub $field: Option<crate::$module::Handle>,
            )*
        }

        /// One policy's configuration in force and its layers' snapshots.
        #[derive(Debug, Clone, Default, serde::Serialize)]
        #[non_exhaustive]
        pub struct PolicySnapshot {
            /// The configuration in force.
            pub config: PolicyConfig,
            /// Whether it differs from the start-up document.
            pub changed_at_run_time: bool,
            /// The deadline's shadow setting and count, once built.
            #[serde(skip_serializing_if = "Option::is_none")]
            pub deadline: Option<seawall_core::DeadlineSnapshot>,
            /// The policy's coordination and cap, once registered
            /// ([`Policies::register_coordination`], [`Policies::register_cap`]).
            #[cfg(feature = "fleet")]
            #[serde(skip_serializing_if = "Option::is_none")]
            pub fleet: Option<super::PolicyFleetSnapshot>,
            $(
                #[doc = $snapshot_doc]
                #[cfg(feature = $feature)]
                #[serde(skip_serializing_if = "Option::is_none")]
                pub $field: Option<crate::$module::Snapshot>,
            )*
        }
    };
}

policy_layers!(policy_handles_and_snapshot);

fn section_path(name: &str, section: &str) -> String {
    format!("policies.{}.{section}", key(name))
}

fn built_twice(name: &str, section: &str) -> ConfigError {
    ConfigError::new(
        section_path(name, section),
        "already built: clone the layer built first to share its state, or declare another policy",
    )
}

impl Policies {
    /// Runtime policies from a document, after validating it.
    pub fn new(document: PolicyDocument) -> Result<Self, LoadError> {
        document
            .validate()
            .map_err(|errors| LoadError::Invalid { path: None, errors })?;
        Ok(Self::from_valid(document, None))
    }

    /// Parses and validates a TOML document.
    pub fn from_toml(text: &str) -> Result<Self, LoadError> {
        Ok(Self::from_valid(PolicyDocument::from_toml(text)?, None))
    }

    /// Reads, parses and validates the TOML file at `path`, and remembers the
    /// path for [`reload`](Self::reload).
    pub fn load(path: impl AsRef<Path>) -> Result<Self, LoadError> {
        let path = path.as_ref().to_path_buf();
        let document = read(&path)?;
        Ok(Self::from_valid(document, Some(path)))
    }

    fn from_valid(document: PolicyDocument, file: Option<PathBuf>) -> Self {
        Self {
            inner: Arc::new(Inner {
                file,
                started: document.clone(),
                changes: Mutex::new(()),
                state: Mutex::new(State {
                    current: document,
                    ..State::default()
                }),
            }),
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The right to change the policies, one change at a time.
    fn changing(&self) -> MutexGuard<'_, ()> {
        self.inner
            .changes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The document in force and the handles built so far, copied out so that no
    /// lock on the state is held while handles are reconfigured.
    fn current_and_built(&self) -> (PolicyDocument, BTreeMap<String, PolicyHandles>) {
        let state = self.lock();
        (state.current.clone(), state.built.clone())
    }

    /// Makes `next` the document in force; the new generation.
    fn install(&self, next: PolicyDocument) -> u64 {
        let mut state = self.lock();
        state.current = next;
        state.generation += 1;
        state.generation
    }

    /// The file the policies were loaded from.
    pub fn file(&self) -> Option<&Path> {
        self.inner.file.as_deref()
    }

    /// The document in force.
    pub fn document(&self) -> PolicyDocument {
        self.lock().current.clone()
    }

    /// The document the service started with ([`revert`](Self::revert) returns to it).
    pub fn started_with(&self) -> &PolicyDocument {
        &self.inner.started
    }

    /// 0 at start, incremented by every document applied and every revert.
    pub fn generation(&self) -> u64 {
        self.lock().generation
    }

    /// The policy a route uses, if any.
    pub fn policy_for_route(&self, route: &str) -> Option<String> {
        self.inner
            .started
            .policy_for_route(route)
            .map(str::to_owned)
    }

    /// The policy a dependency uses, if any.
    pub fn policy_for_dependency(&self, dependency: &str) -> Option<String> {
        self.inner
            .started
            .policy_for_dependency(dependency)
            .map(str::to_owned)
    }

    /// The handles of the layers built so far for policy `name`.
    pub fn handles(&self, name: &str) -> Option<PolicyHandles> {
        self.lock().built.get(name).cloned()
    }

    /// The section a layer is built from: from the start-up document (so that a
    /// handle's `revert` returns to it), plus what is in force now, if different.
    fn sections<T: Clone + PartialEq>(
        &self,
        name: &str,
        section: &'static str,
        pick: impl Fn(&PolicyConfig) -> Option<&T>,
    ) -> Result<(T, Option<T>), ConfigError> {
        let Some(started) = self.inner.started.policies.get(name) else {
            return Err(ConfigError::new(
                format!("policies.{}", key(name)),
                "no such policy in the document",
            ));
        };
        let Some(first) = pick(started) else {
            return Err(ConfigError::new(
                section_path(name, section),
                "missing: this stack needs it",
            ));
        };
        let state = self.lock();
        let now = state
            .current
            .policies
            .get(name)
            .and_then(&pick)
            .filter(|c| *c != first)
            .cloned();
        Ok((first.clone(), now))
    }

    /// Records a handle once the layer is built; refuses a second one.
    fn register(
        &self,
        name: &str,
        section: &'static str,
        slot: impl FnOnce(&mut PolicyHandles) -> bool,
    ) -> Result<(), ConfigError> {
        let mut state = self.lock();
        let handles = state.built.entry(name.to_owned()).or_default();
        if slot(handles) {
            Ok(())
        } else {
            Err(built_twice(name, section))
        }
    }

    /// Builds the layer of kind `H` of policy `name`, once: from the start-up
    /// section (so that its handle's `revert` returns to it), then reconfigured to
    /// the section in force if that differs; then registers its handle.
    pub(super) fn build_layer<H: Placed, L>(
        &self,
        name: &str,
        build: impl FnOnce(H::Config) -> Result<L, ConfigError>,
        handle: impl FnOnce(&L) -> H,
    ) -> Result<L, ConfigError> {
        let key = H::SECTION.key();
        let (first, now) = self.sections(name, key, H::section_of)?;
        if self
            .handles(name)
            .is_some_and(|mut h| H::handle_slot(&mut h).is_some())
        {
            return Err(built_twice(name, key));
        }
        let at = |e| within(e, &section_path(name, key));
        let layer = build(first).map_err(at)?;
        let handle = handle(&layer);
        if let Some(now) = now {
            handle.reconfigure(now).map_err(at)?;
        }
        self.register(name, key, |h| fill(H::handle_slot(h), handle))?;
        Ok(layer)
    }

    /// The [`DeadlineLayer`] of policy `name`. Call it as often as needed: every
    /// layer it returns for a policy shares one shadow switch and counter
    /// (`deadline_shadow`), whose handle is in [`PolicyHandles::deadline`].
    pub fn deadline(&self, name: &str) -> Result<DeadlineLayer, ConfigError> {
        const S: &str = "deadline";
        let (budget, _) = self.sections(name, S, |p| p.deadline.as_ref())?;
        if let Some(handle) = self.handles(name).and_then(|h| h.deadline) {
            return Ok(handle.layer());
        }
        let shadow = |p: &PolicyConfig| p.deadline_shadow;
        let started = self.inner.started.policies.get(name).is_some_and(shadow);
        let now = self.lock().current.policies.get(name).is_some_and(shadow);
        let layer = DeadlineLayer::new(budget)
            .map_err(|e| within(e, &section_path(name, S)))?
            .shadow(started);
        let handle = layer.handle();
        handle.set_shadow(now);
        let mut state = self.lock();
        let handles = state.built.entry(name.to_owned()).or_default();
        // Built meanwhile by another caller: share theirs.
        Ok(match &handles.deadline {
            Some(theirs) => theirs.layer(),
            None => {
                handles.deadline = Some(handle);
                layer
            }
        })
    }

    /// The policy's [`Hold`](super::Hold): when an HTTP call ends for its HTTP
    /// constructors.
    pub(super) fn hold(&self, name: &str) -> super::Hold {
        self.inner
            .started
            .policies
            .get(name)
            .map(|p| p.hold)
            .unwrap_or_default()
    }

    /// The document in force and every built layer's snapshot.
    pub fn snapshot(&self) -> PoliciesSnapshot {
        let state = self.lock();
        let policies = state
            .current
            .policies
            .iter()
            .map(|(name, config)| {
                let mut built = state.built.get(name).cloned().unwrap_or_default();
                let mut snapshot = PolicySnapshot {
                    config: config.clone(),
                    changed_at_run_time: self.inner.started.policies.get(name) != Some(config),
                    deadline: built.deadline.as_ref().map(|h| h.snapshot()),
                    ..PolicySnapshot::default()
                };
                // Snapshots take no error.
                let _ = each_layer(&mut built, &mut Snapshots(&mut snapshot));
                (name.clone(), snapshot)
            })
            .collect();
        let snapshot = PoliciesSnapshot {
            file: self.inner.file.as_ref().map(|p| p.display().to_string()),
            generation: state.generation,
            as_started: state.current == self.inner.started,
            policies,
            routes: state.current.routes.clone(),
            dependencies: state.current.dependencies.clone(),
            ..PoliciesSnapshot::default()
        };
        #[cfg(feature = "fleet")]
        let snapshot = super::fleet::fill_snapshot(&state, snapshot);
        snapshot
    }

    /// Applies a changed document to every built layer, keeping their state; all
    /// or nothing.
    ///
    /// The document is validated first; then it is refused as a whole
    /// ([`LoadError::NeedsRestart`]) if it changes what cannot change at run time
    /// (a policy or a section added or removed, a deadline, the routes or
    /// dependencies). Each changed section is then handed to its layer's handle
    /// (`reconfigure`): limits, thresholds, windows, intervals, probe settings,
    /// fallback triggers and step timeouts. State is kept: an open breaker stays
    /// open until its current interval ends (a changed window shape starts a new,
    /// empty window), calls holding bulkhead slots keep them (a smaller limit
    /// admits fewer until enough have finished), the degradation level, floor and
    /// forced level stay. If a handle refuses its section, those already changed
    /// are put back and nothing is applied.
    pub fn apply(&self, next: PolicyDocument) -> Result<(), LoadError> {
        self.apply_from(next, None)
    }

    fn apply_from(&self, next: PolicyDocument, file: Option<&Path>) -> Result<(), LoadError> {
        let with_file = |e: LoadError| match file {
            Some(f) => e.in_file(f.to_path_buf()),
            None => e,
        };
        next.validate()
            .map_err(|errors| with_file(LoadError::Invalid { path: None, errors }))?;
        let _changing = self.changing();
        let (current, mut built) = self.current_and_built();
        let blocked = current.unchangeable_at_run_time(&next);
        if !blocked.is_empty() {
            let e = with_file(LoadError::NeedsRestart {
                path: None,
                errors: blocked,
            });
            telemetry::refused(&e);
            return Err(e);
        }
        let problems = preflight(&built, &next);
        if !problems.is_empty() {
            let e = with_file(LoadError::Invalid {
                path: None,
                errors: problems,
            });
            telemetry::refused(&e);
            return Err(e);
        }
        if let Err(problem) = reconfigure(&mut built, &current, &next) {
            // Put back what was changed before the refusal (those sections were
            // accepted by the same handles a moment ago).
            let _ = reconfigure(&mut built, &next, &current);
            let e = with_file(LoadError::Invalid {
                path: None,
                errors: vec![problem],
            });
            telemetry::refused(&e);
            return Err(e);
        }
        let changed = changed_sections(&current, &next);
        let generation = self.install(next);
        telemetry::applied(generation, &changed);
        Ok(())
    }

    /// Parses, validates and [`apply`](Self::apply)s a TOML document.
    pub fn apply_toml(&self, text: &str) -> Result<(), LoadError> {
        self.apply(PolicyDocument::from_toml(text)?)
    }

    /// Reads the file again and [`apply`](Self::apply)s it.
    pub fn reload(&self) -> Result<(), LoadError> {
        let file = self.inner.file.as_deref().ok_or(LoadError::NoFile)?;
        let next = read(file)?;
        self.apply_from(next, Some(file))
    }

    /// Goes back to the document the service started with: every built layer's
    /// handle reverts to the configuration it was built with, keeping its state.
    /// Operator overrides are not configuration and stay until undone (a forced
    /// open breaker until `reset`, a degradation floor until `clear_floor`, a
    /// forced level until `release`, a forced fallback until `release`).
    pub fn revert(&self) {
        let _changing = self.changing();
        let (_, built) = self.current_and_built();
        for mut handles in built.into_values() {
            if let Some(h) = &handles.deadline {
                h.revert();
            }
            let _ = each_layer(&mut handles, &mut Revert);
        }
        let generation = self.install(self.inner.started.clone());
        telemetry::reverted(generation);
    }
}

/// Puts `value` in an empty `slot`; `false` if it was taken.
fn fill<T>(slot: &mut Option<T>, value: T) -> bool {
    if slot.is_some() {
        return false;
    }
    *slot = Some(value);
    true
}

fn read(path: &Path) -> Result<PolicyDocument, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    PolicyDocument::from_toml(&text).map_err(|e| e.in_file(path.to_path_buf()))
}

/// What the handles would refuse, checked before anything changes (the fallback's
/// step timeouts must name steps the built fallback has).
fn preflight(built: &BTreeMap<String, PolicyHandles>, next: &PolicyDocument) -> Vec<ConfigError> {
    let mut problems = Vec::new();
    for (name, handles) in built {
        let Some(policy) = next.policies.get(name) else {
            continue;
        };
        let _ = each_layer(
            &mut handles.clone(),
            &mut Refused {
                name,
                policy,
                problems: &mut problems,
            },
        );
    }
    problems
}

/// Collects what each built layer of policy `name` would refuse of `policy`.
struct Refused<'a> {
    name: &'a str,
    policy: &'a PolicyConfig,
    problems: &'a mut Vec<ConfigError>,
}

impl EachLayer for Refused<'_> {
    fn layer<H: Placed>(&mut self, handle: &H) -> Result<(), ConfigError> {
        if let Some(config) = H::section_of(self.policy) {
            let at = section_path(self.name, H::SECTION.key());
            let refused = handle.refused(config).into_iter();
            self.problems.extend(refused.map(|e| within(e, &at)));
        }
        Ok(())
    }
}

/// Hands each section that differs between `from` and `to` to its handle.
fn reconfigure(
    built: &mut BTreeMap<String, PolicyHandles>,
    from: &PolicyDocument,
    to: &PolicyDocument,
) -> Result<(), ConfigError> {
    for (name, handles) in built {
        let (Some(from), Some(to)) = (from.policies.get(name), to.policies.get(name)) else {
            continue;
        };
        if let Some(h) = &handles.deadline {
            if from.deadline_shadow != to.deadline_shadow {
                h.set_shadow(to.deadline_shadow);
            }
        }
        each_layer(handles, &mut Reconfigure { name, from, to })?;
    }
    Ok(())
}

/// Goes back to the built configuration.
struct Revert;

impl EachLayer for Revert {
    fn layer<H: Placed>(&mut self, handle: &H) -> Result<(), ConfigError> {
        handle.revert();
        Ok(())
    }
}

/// Hands policy `name`'s section to its layer where it differs between `from` and `to`.
struct Reconfigure<'a> {
    name: &'a str,
    from: &'a PolicyConfig,
    to: &'a PolicyConfig,
}

impl EachLayer for Reconfigure<'_> {
    fn layer<H: Placed>(&mut self, handle: &H) -> Result<(), ConfigError> {
        let Some(to) = H::section_of(self.to) else {
            return Ok(());
        };
        if H::section_of(self.from) == Some(to) {
            return Ok(());
        }
        handle
            .reconfigure(to.clone())
            .map_err(|e| within(e, &section_path(self.name, H::SECTION.key())))
    }
}

/// Fills a policy's snapshot with its layers'.
struct Snapshots<'a>(&'a mut PolicySnapshot);

impl EachLayer for Snapshots<'_> {
    fn layer<H: Placed>(&mut self, handle: &H) -> Result<(), ConfigError> {
        *H::snapshot_slot(self.0) = Some(handle.snapshot());
        Ok(())
    }
}

/// The sections that differ, as `policies.<name>.<section>` paths.
fn changed_sections(from: &PolicyDocument, to: &PolicyDocument) -> Vec<String> {
    let mut out = Vec::new();
    for (name, new) in &to.policies {
        let Some(old) = from.policies.get(name) else {
            continue;
        };
        if old == new {
            continue;
        }
        let (o, n) = (old.sections(), new.sections());
        for s in n.into_iter().chain(o) {
            let path = section_path(name, s.key());
            if !out.contains(&path) && section_differs(old, new, s) {
                out.push(path);
            }
        }
    }
    out
}

fn section_differs(old: &PolicyConfig, new: &PolicyConfig, s: super::Section) -> bool {
    match s {
        super::Section::Deadline => {
            old.deadline != new.deadline || old.deadline_shadow != new.deadline_shadow
        }
        layer => differs(old, new, layer),
    }
}
