//! The subjects: each of seawall's layers and each peer crate, set up as a user
//! would, over the trivial services of [`inner`], one [`Row`] each.
//!
//! A row has an admitted path (every call answers `Ok`) and may have a second one
//! (rejected, served by a fallback, probing) on an instance put in that state:
//! breakers opened by real failures with an open interval of an hour, bulkheads
//! filled by calls to an inner service that never answers.

mod breakers;
mod bulkheads;
mod degradation;
mod fallbacks;
pub(crate) mod fleet;
pub(crate) mod fleet_cap;
pub(crate) mod inner;
mod reference;
mod stacks;

use std::sync::Arc;

use tokio::runtime::Runtime;
use tower::Service;

use crate::harness::{Build, Contender, Heap, Probe, Req};
use inner::{Prepared, INNER_POLLS};
pub(crate) use reference::Ingredient;

/// What the second path is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Path {
    Open,
    Full,
    Served,
    OpenServed,
    Probing,
}

impl Path {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Path::Open => "open",
            Path::Full => "full",
            Path::Served => "serving the fallback",
            Path::OpenServed => "breaker open, fallback serves",
            Path::Probing => "probing: 5 % of calls try the level above",
        }
    }

    /// Whether a call on this path must not reach the inner service.
    fn leaves_inner_alone(self) -> bool {
        matches!(self, Path::Open | Path::OpenServed)
    }
}

/// Stable identifiers the report's targets look rows up by.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Id {
    Bare,
    TowerLimit,
    TowerShed,
    TrBreaker,
    TrBulkhead,
    TrFallback,
    Failsafe,
    Recloser,
    Deadline,
    /// The hedging layer, on calls that answer before any hedge is due.
    SwHedge,
    /// The fault layer with nothing injected: what leaving it in a build costs.
    SwFault,
    SwBreaker,
    /// The same breaker, coordinated by a fleet over an in-process store.
    SwBreakerFleet,
    SwBulkhead,
    /// The same bulkhead, capped across a fleet over an in-process store.
    SwBulkheadFleet,
    /// The bulkhead with an adaptive (AIMD) limit.
    SwBulkheadAdaptive,
    /// The bulkhead with classes: every call critical, admitted under the line's lock.
    SwBulkheadClasses,
    SwDegradation,
    SwFallback,
    /// The same fallback in the generic mode, its marker in the response's extensions.
    SwFallbackExtensions,
    /// The recommended stack: deadline → bulkhead → breaker.
    SwStack,
    SwDeadlineBreaker,
    SwDeadlineBulkhead,
    SwBulkheadBreaker,
    SwStackFallback,
    SwStackDegradation,
    Reference(Ingredient),
}

impl Id {
    /// What the targets' lines call this row.
    pub(crate) fn short_name(self) -> &'static str {
        match self {
            Id::Bare => "bare",
            Id::TowerLimit => "ConcurrencyLimit",
            Id::TowerShed => "LoadShed",
            Id::TrBreaker | Id::TrBulkhead | Id::TrFallback => "tower-resilience",
            Id::Failsafe => "failsafe",
            Id::Recloser => "recloser",
            Id::Deadline => "deadline",
            Id::SwHedge => "hedge",
            Id::SwFault => "fault layer, nothing injected",
            Id::SwBreaker => "breaker",
            Id::SwBreakerFleet => "breaker in a fleet",
            Id::SwBulkhead => "bulkhead",
            Id::SwBulkheadFleet => "bulkhead in a fleet",
            Id::SwBulkheadAdaptive => "adaptive bulkhead",
            Id::SwBulkheadClasses => "bulkhead with classes",
            Id::SwDegradation => "degradation",
            Id::SwFallback => "fallback",
            Id::SwFallbackExtensions => "fallback, generic mode",
            Id::SwStack => "stack",
            Id::SwDeadlineBreaker => "deadline → breaker",
            Id::SwDeadlineBulkhead => "deadline → bulkhead",
            Id::SwBulkheadBreaker => "bulkhead → breaker",
            Id::SwStackFallback => "stack with fallback",
            Id::SwStackDegradation => "stack with degradation",
            Id::Reference(_) => "reference",
        }
    }
}

/// One configuration: its paths, its contended throughput and its heap.
pub(crate) struct Row {
    pub(crate) id: Id,
    pub(crate) label: String,
    pub(crate) main: Probe,
    pub(crate) second: Option<(Path, Probe)>,
    pub(crate) contender: Contender,
    pub(crate) heap: Heap,
}

impl Row {
    /// A row whose admitted path calls an instance made by `build` (which also
    /// makes the fresh instances of the contended runs and the heap count).
    fn new<S, F>(id: Id, label: impl Into<String>, build: F) -> Row
    where
        S: Service<Req> + Clone + Send + 'static,
        S::Future: Send + 'static,
        S::Response: Send + 'static,
        S::Error: Send + 'static,
        F: Fn() -> S + 'static,
    {
        let label = label.into();
        let build: Build<S> = Arc::new(build);
        Row {
            id,
            main: Probe::new(label.clone(), build(), Vec::new(), Some(true), None),
            label,
            second: None,
            contender: Contender::new(Arc::clone(&build)),
            heap: Heap::new(build),
        }
    }

    /// Adds the second path, on an instance already put in that state; each call
    /// on it must end as `expect_ok` says (`None`: mixed).
    fn second<S>(mut self, path: Path, expect_ok: Option<bool>, prepared: Prepared<S>) -> Row
    where
        S: Service<Req> + 'static,
    {
        let probe = Probe::new(
            format!("{} ({})", self.label, path.label()),
            prepared.svc,
            prepared.keep,
            expect_ok,
            path.leaves_inner_alone().then_some(&INNER_POLLS),
        );
        self.second = Some((path, probe));
        self
    }

    /// Adds the open path: `svc` (over [`inner::counted_failing`]) is tripped by
    /// real failures, and no call may reach its inner service.
    fn open<S: Service<Req> + 'static>(self, rt: &Runtime, svc: S) -> Row {
        self.second(Path::Open, Some(false), inner::trip(rt, svc))
    }

    /// Adds the full path: `svc` (over [`inner::pending`]) has its one slot taken.
    fn full<S>(self, svc: S) -> Row
    where
        S: Service<Req> + Clone + 'static,
        S::Future: 'static,
    {
        self.second(Path::Full, Some(false), inner::fill(svc, 1))
    }

    /// Adds the served path: `svc`'s primary fails, its fallback answers.
    fn served<S: Service<Req> + 'static>(self, svc: S) -> Row {
        self.second(Path::Served, Some(true), Prepared::plain(svc))
    }

    /// The row's paths.
    pub(crate) fn probes_mut(&mut self) -> impl Iterator<Item = &mut Probe> {
        std::iter::once(&mut self.main).chain(self.second.as_mut().map(|(_, p)| p))
    }
}

/// Every row, in the table's order: the bare service first (every figure is net
/// of it), then the peers, seawall's layers, its stacks and the reference rows.
pub(crate) fn rows(rt: &Runtime) -> Vec<Row> {
    let mut rows = vec![Row::new(
        Id::Bare,
        "bare service_fn (behind a thin adapter)",
        inner::ok,
    )];
    rows.extend(bulkheads::peers());
    rows.extend(breakers::peers(rt));
    rows.extend(fallbacks::peers());
    rows.extend(bulkheads::seawall());
    rows.extend(breakers::seawall(rt));
    rows.extend(fleet::rows(rt));
    rows.extend(fleet_cap::rows(rt));
    rows.extend(fallbacks::seawall());
    rows.extend(degradation::rows(rt));
    rows.extend(stacks::rows(rt));
    rows.extend(reference::rows());
    rows
}
