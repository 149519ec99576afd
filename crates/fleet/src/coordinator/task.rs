//! The background task of one coordinated breaker: a state machine driven by
//! the breaker's transitions, the store's pushes, its own timers and the gate's
//! wake-ups. It alone talks to the store; what it learns it writes to the view
//! the gate reads.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use seawall_circuit_breaker::{Cause, CircuitBreakerEvent, Handle, State, Verdict, VerdictOutcome};
use seawall_core::later;
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;

use super::gate::{LeaseView, Shared};
use super::FleetInner;
use crate::actions::{Applier, AuditEntry};
use crate::config::FleetConfig;
use crate::store::{
    FleetEpoch, FleetEvent, FleetVerdict, Keys, LeaseReply, LeaseRequest, ProbeResult, Store,
    StoreError, Subscription, Token, TripRecord,
};
use crate::view::{stuck, suspect, FleetView, InstanceReport, REPORT_EVERY, REPORT_FRESH};

#[derive(Debug, Clone, Copy)]
struct Trip {
    /// The breaker's epoch at the trip.
    epoch: u32,
    /// Verdicts up to this fleet epoch are not newer than the trip.
    baseline: FleetEpoch,
}

/// One coordinated breaker's background task: what it knows of the fleet and
/// what is due when.
pub(super) struct Task<S> {
    /// The operators' fleet actions on this breaker.
    actions: Applier<State>,
    /// When this instance next reports its breaker to the fleet's view.
    report_at: Instant,
    shared: Arc<Shared>,
    store: Arc<S>,
    keys: Keys,
    handle: Handle,
    config: FleetConfig,
    ttl: Duration,
    rng: fastrand::Rng,
    transitions: broadcast::Receiver<CircuitBreakerEvent>,
    feed: Option<Subscription>,
    connected: bool,
    announced_local: bool,
    /// Store operations failed in a row.
    failures: u32,
    reconnect_at: Option<Instant>,
    reconnect_delay: Duration,
    /// When the next health check is due (while connected).
    health_at: Option<Instant>,
    /// When to reconcile (and take the lease if a probe is wanted).
    due: Option<Instant>,
    /// The breaker wants to probe: its interval ended, or its gate was asked.
    want_probe: bool,
    trip: Option<Trip>,
    /// The read that fixes the trip's baseline is due.
    baseline_due: bool,
    /// The highest verdict epoch seen.
    last_verdict: FleetEpoch,
    /// The highest verdict epoch acted on (or published by this instance).
    applied: FleetEpoch,
    /// The highest fleet epoch seen (sent with every take).
    seen: FleetEpoch,
    /// This instance's id in the store's record of trips (fleet trip only).
    instance: Token,
    /// When to record the current trip (fleet trip only; retried on failure).
    record_at: Option<Instant>,
    /// When a closed breaker next reads the fleet trip (fleet trip only).
    poll_at: Option<Instant>,
    /// The highest fleet trip epoch seen (acted on or not).
    fleet_trip_seen: FleetEpoch,
    /// The fleet trip that has just opened the breaker: the trip it starts is
    /// not recorded, and only verdicts newer than the fleet trip apply to it.
    peer_trip: Option<FleetEpoch>,
}

/// The next push of `feed`; never, without one.
pub(crate) async fn next_push(feed: &mut Option<Subscription>) -> Option<FleetEvent> {
    match feed {
        Some(feed) => feed.next().await,
        None => std::future::pending().await,
    }
}

/// Sleeps until `at`; never, without one.
pub(crate) async fn sleep_until_due(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl<S: Store> Task<S> {
    /// A task for the breaker behind `handle`, not yet connected (it joins on
    /// its first step), with its own generator seeded by `seed`.
    pub(super) fn new(
        fleet: &FleetInner<S>,
        handle: &Handle,
        shared: Arc<Shared>,
        keys: Keys,
        ttl: Duration,
        seed: u64,
    ) -> Self {
        let config = &fleet.config;
        let mut rng = fastrand::Rng::with_seed(seed);
        let instance = Token::random(&mut rng);
        Task {
            actions: Applier::new(
                fleet.secret.clone(),
                &config.prefix,
                instance.to_string(),
                fleet.clock,
            ),
            instance,
            report_at: Instant::now(),
            shared,
            store: Arc::clone(&fleet.store),
            keys,
            handle: handle.clone(),
            config: config.clone(),
            ttl,
            rng,
            transitions: handle.subscribe(),
            feed: None,
            connected: false,
            announced_local: false,
            failures: 0,
            reconnect_at: Some(Instant::now()),
            health_at: None,
            reconnect_delay: config.reconnect_min,
            due: None,
            want_probe: false,
            trip: None,
            baseline_due: false,
            last_verdict: FleetEpoch::ZERO,
            applied: FleetEpoch::ZERO,
            seen: FleetEpoch::ZERO,
            record_at: None,
            poll_at: None,
            fleet_trip_seen: FleetEpoch::ZERO,
            peer_trip: None,
        }
    }

    /// Runs until the breaker is gone (or the task is aborted).
    pub(super) async fn run(mut self) {
        self.resync();
        loop {
            self.step().await;
            let wake = self.next_wake();
            tokio::select! {
                biased;
                t = self.transitions.recv() => match t {
                    Ok(t) => self.on_transition(Some(t)).await,
                    Err(RecvError::Lagged(_)) => self.on_transition(None).await,
                    // The breaker is gone.
                    Err(RecvError::Closed) => return,
                },
                pushed = next_push(&mut self.feed) => match pushed {
                    Some(FleetEvent::Verdict(verdict)) => {
                        self.consider(verdict);
                    }
                    Some(FleetEvent::Tripped(epoch)) => {
                        self.consider_fleet_trip(epoch);
                    }
                    // A cap's news, never pushed on a breaker's channel.
                    Some(FleetEvent::SlotsFreed(_)) => {}
                    None => {
                        self.feed = None;
                        let e = StoreError::Unavailable("the subscription ended".into());
                        self.count_error("subscription", &e);
                        if self.connected {
                            self.go_local(&e);
                        }
                    }
                },
                () = self.shared.wake.notified() => self.on_asked(),
                () = sleep_until_due(wake) => {}
            }
        }
    }

    /// Does whatever is due now: rejoin, the trip's baseline read, the window's end,
    /// a reconcile (and lease take).
    async fn step(&mut self) {
        for _ in 0..8 {
            let now = Instant::now();
            self.expire_view(now);
            self.expire_actions(now).await;
            if !self.connected {
                if self.reconnect_at.is_some_and(|at| at <= now) {
                    self.reconnect().await;
                    continue;
                }
                return;
            }
            if self.baseline_due {
                self.baseline_due = false;
                self.read_baseline().await;
                continue;
            }
            if self.health_at.is_some_and(|at| at <= now) {
                self.health_at = Some(later(now, self.config.health_every));
                self.health_check().await;
                continue;
            }
            if let LeaseView::Holding {
                token,
                probe_until,
                window_over: false,
                ..
            } = self.lease()
            {
                if now >= probe_until {
                    self.window_ended(token).await;
                    continue;
                }
            }
            if self.due.is_some_and(|at| at <= now) {
                self.due = None;
                self.attempt().await;
                continue;
            }
            if self.record_at.is_some_and(|at| at <= now) {
                self.record_at = None;
                self.record_trip().await;
                continue;
            }
            if self.trip.is_none() && self.poll_at.is_some_and(|at| at <= now) {
                self.poll_at = Some(later(now, self.poll_delay()));
                self.poll_fleet_trip().await;
                continue;
            }
            return;
        }
    }

    fn next_wake(&self) -> Option<Instant> {
        let mut wake: Option<Instant> = None;
        let mut at = |t: Option<Instant>| {
            if let Some(t) = t {
                wake = Some(wake.map_or(t, |w| w.min(t)));
            }
        };
        at(self.actions.due());
        if self.connected {
            at(self.due);
            at(self.record_at);
            at(self.health_at);
            if self.trip.is_none() {
                at(self.poll_at);
            }
            if self.baseline_due {
                at(Some(Instant::now()));
            }
        } else {
            at(self.reconnect_at);
        }
        let lease = self.lease();
        at(lease.until());
        if let LeaseView::Holding {
            probe_until,
            window_over: false,
            ..
        } = lease
        {
            at(Some(probe_until));
        }
        wake
    }

    // ----- events ----------------------------------------------------------------

    async fn on_transition(&mut self, t: Option<CircuitBreakerEvent>) {
        if let LeaseView::Holding { token, .. } = self.lease() {
            let finished = match t {
                // A probe a rehearsal's fault answered says nothing of the
                // dependency: the lease ends without a verdict for the fleet.
                Some(t) if t.from == State::HalfOpen && t.rehearsal => Some(None),
                Some(t) if t.from == State::HalfOpen => match (t.to, t.cause) {
                    (State::Closed, Cause::ProbesSucceeded) => Some(Some(ProbeResult::Succeeded)),
                    (State::Open, Cause::ProbeFailed | Cause::ProbeTimedOut) => {
                        Some(Some(ProbeResult::Failed))
                    }
                    (State::ForcedOpen | State::ForcedClosed | State::Disabled, _)
                    | (_, Cause::Reset) => Some(None),
                    _ => None,
                },
                Some(t) if t.to.is_forced() || t.cause == Cause::Reset => Some(None),
                Some(_) => None,
                // Missed transitions: judge by the state the probe left behind.
                None => match self.handle.state() {
                    State::Closed => Some(Some(ProbeResult::Succeeded)),
                    State::Open => Some(Some(ProbeResult::Failed)),
                    State::HalfOpen => None,
                    State::ForcedOpen | State::ForcedClosed | State::Disabled => Some(None),
                },
            };
            if let Some(result) = finished {
                self.finish_lease(token, result).await;
            }
        }
        self.resync();
    }

    fn on_asked(&mut self) {
        self.want_probe = true;
        if self.connected && self.due.is_none() && self.trip.is_some() {
            self.due = Some(Instant::now());
        }
    }

    /// Applies `verdict` if it is newer than the trip and than anything acted on.
    /// Returns whether it changed the breaker.
    fn consider(&mut self, verdict: FleetVerdict) -> bool {
        self.see(verdict.epoch);
        self.last_verdict = self.last_verdict.max(verdict.epoch);
        let Some(trip) = self.trip else {
            return false;
        };
        if verdict.epoch <= trip.baseline.max(self.applied) {
            return false;
        }
        self.applied = verdict.epoch;
        match self.lease() {
            LeaseView::Elsewhere { epoch, .. } if epoch <= verdict.epoch => {
                self.set_lease(LeaseView::Unknown);
            }
            LeaseView::Holding { epoch, .. } if epoch < verdict.epoch => {
                // Only after the store lost our lease: it ends by its TTL.
                self.set_lease(LeaseView::Unknown);
            }
            _ => {}
        }
        let outcome = self.handle.apply_verdict(
            match verdict.result {
                ProbeResult::Succeeded => Verdict::Close,
                ProbeResult::Failed => Verdict::Reopen,
            },
            trip.epoch,
        );
        let applied = outcome == VerdictOutcome::Applied;
        if applied {
            self.shared.applied.fetch_add(1, Ordering::Relaxed);
        }
        self.resync();
        applied
    }

    /// Follows the breaker: its trip, and when its open interval ends.
    fn resync(&mut self) {
        let snap = self.handle.snapshot();
        let now = Instant::now();
        match snap.trip_epoch {
            Some(epoch) => {
                if self.trip.map(|t| t.epoch) != Some(epoch) {
                    // Opened by a fleet trip: verdicts from before it are old news,
                    // and the trip is the fleet's, not one to count.
                    let peer_trip = self.peer_trip.take();
                    self.trip = Some(Trip {
                        epoch,
                        baseline: self.last_verdict.max(peer_trip.unwrap_or_default()),
                    });
                    self.baseline_due = true;
                    // A rehearsal's trip is this instance's alone: no evidence for
                    // tripping the fleet together.
                    self.record_at = match (peer_trip, self.config.trip_together) {
                        (None, Some(_)) if !snap.rehearsal_trip => Some(now),
                        _ => None,
                    };
                }
                match snap.state {
                    State::Open => {
                        let end = later(now, snap.retry_after.unwrap_or_default());
                        self.due = Some(end);
                        self.want_probe = true;
                    }
                    State::HalfOpen if self.due.is_none() && self.lease() == LeaseView::Unknown => {
                        self.due = Some(now);
                        self.want_probe = true;
                    }
                    _ => {}
                }
            }
            None => {
                self.trip = None;
                self.due = None;
                self.want_probe = false;
                self.baseline_due = false;
                self.record_at = None;
                self.peer_trip = None;
                if self.config.trip_together.is_some() && self.poll_at.is_none() {
                    self.poll_at = Some(later(now, self.poll_delay()));
                }
                if !matches!(self.lease(), LeaseView::Holding { .. }) {
                    self.set_lease(LeaseView::Unknown);
                }
            }
        }
    }

    /// Opens the closed breaker if `epoch` is a fleet trip newer than every
    /// verdict and fleet trip seen. Returns whether it did.
    fn consider_fleet_trip(&mut self, epoch: FleetEpoch) -> bool {
        self.see(epoch);
        if self.config.trip_together.is_none()
            || epoch <= self.fleet_trip_seen.max(self.last_verdict)
        {
            return false;
        }
        self.fleet_trip_seen = epoch;
        if self.trip.is_some() || self.handle.trip_with_peers() != VerdictOutcome::Applied {
            // Already in a trip of its own, or held by an operator.
            return false;
        }
        self.shared
            .fleet_trips_applied
            .fetch_add(1, Ordering::Relaxed);
        self.peer_trip = Some(epoch);
        self.resync();
        true
    }

    // ----- protocol steps --------------------------------------------------------

    /// Records this instance's trip (made on its own evidence) for the fleet trip.
    async fn record_trip(&mut self) {
        let Some(together) = self.config.trip_together else {
            return;
        };
        let record = TripRecord::new(
            self.instance,
            together.within,
            together.instances,
            self.seen,
        );
        match self.op(self.store.record_trip(&self.keys, record)).await {
            Ok(reply) => {
                self.ok();
                self.shared.trips_recorded.fetch_add(1, Ordering::Relaxed);
                if let Some(epoch) = reply.fleet_trip {
                    self.see(epoch);
                    self.fleet_trip_seen = self.fleet_trip_seen.max(epoch);
                }
            }
            Err(e) => {
                // Retried while the trip lasts: recording is idempotent, so a
                // timed-out record applied later counts once.
                if self.trip.is_some() {
                    let pause = self.jittered(self.config.store_timeout);
                    self.record_at = Some(later(Instant::now(), pause));
                }
                self.failed("record_trip", &e);
            }
        }
    }

    /// A closed breaker's periodic read of the fleet trip, for a push it missed.
    async fn poll_fleet_trip(&mut self) {
        match self.op(self.store.read_fleet_trip(&self.keys)).await {
            Ok(fleet_trip) => {
                self.ok();
                if let Some(epoch) = fleet_trip {
                    self.consider_fleet_trip(epoch);
                }
            }
            Err(e) => self.failed("read_fleet_trip", &e),
        }
    }

    /// Between a quarter and a half of the fleet trip's window: a fleet trip,
    /// kept a whole window, is read at least once by every closed breaker.
    fn poll_delay(&mut self) -> Duration {
        let within = self
            .config
            .trip_together
            .map_or(Duration::from_secs(1), |t| t.within);
        (within / 4).mul_f64(1.0 + self.rng.f64())
    }

    /// At the end of the local interval (or when asked): reconcile by a read, then
    /// take the lease if a probe is wanted.
    async fn attempt(&mut self) {
        let read = self.op(self.store.read_verdict(&self.keys)).await;
        match read {
            Ok(verdict) => {
                // Not counted as the store working again: a store that answers
                // reads but never a take must still end in local mode.
                if let Some(verdict) = verdict {
                    if self.consider(verdict) {
                        return;
                    }
                }
            }
            Err(e) => return self.failed("read_verdict", &e),
        }
        let now = Instant::now();
        if self.trip.is_none()
            || !self.want_probe
            || self.lease().until().is_some_and(|until| now < until)
        {
            return;
        }
        if self.handle.state() != State::HalfOpen {
            // Not due yet (or no longer tripped).
            return self.resync();
        }
        let token = Token::random(&mut self.rng);
        let sent = Instant::now();
        let request = LeaseRequest::new(token, self.ttl, self.seen);
        match self.op(self.store.take_lease(&self.keys, request)).await {
            Ok(LeaseReply::Taken { epoch }) => {
                self.ok();
                self.see(epoch);
                self.want_probe = false;
                self.shared.leases_taken.fetch_add(1, Ordering::Relaxed);
                self.set_lease(LeaseView::Holding {
                    token,
                    epoch,
                    probe_until: later(sent, self.config.probe_window),
                    until: later(sent, self.ttl),
                    window_over: false,
                });
            }
            Ok(LeaseReply::Held { epoch, remaining }) => {
                self.ok();
                self.see(epoch);
                self.want_probe = false;
                // A store (or an instance of another release) may answer any
                // remaining time: never wait longer than a lease of ours lives.
                let now = Instant::now();
                self.set_lease(LeaseView::Elsewhere {
                    epoch,
                    until: later(now, remaining.min(self.ttl)),
                });
            }
            Err(StoreError::TimedOut) => {
                // Maybe applied: maybe ours. Do not probe; let its TTL run out.
                self.set_lease(LeaseView::Maybe {
                    until: later(sent, self.ttl),
                });
                self.failed("take_lease", &StoreError::TimedOut);
            }
            Err(e) => self.failed("take_lease", &e),
        }
        self.handle.recheck_probe_gate();
    }

    /// The holder's probe finished: publish what it found, then release the lease.
    async fn finish_lease(&mut self, token: Token, result: Option<ProbeResult>) {
        let epoch = match self.lease() {
            LeaseView::Holding { epoch, .. } => epoch,
            _ => return,
        };
        self.set_lease(LeaseView::Unknown);
        // Our own verdict, pushed back to us, must not act twice.
        self.applied = self.applied.max(epoch);
        self.last_verdict = self.last_verdict.max(epoch);
        if let Some(result) = result {
            match self
                .op(self.store.publish_verdict(&self.keys, token, result))
                .await
            {
                Ok(published) => {
                    self.ok();
                    if published.is_some() {
                        self.shared.published.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Err(e) => self.failed("publish_verdict", &e),
            }
        }
        match self.op(self.store.release_lease(&self.keys, token)).await {
            Ok(_) => self.ok(),
            Err(e) => self.failed("release_lease", &e),
        }
    }

    /// The holder's probe window passed: if no probe went out (no call came), give
    /// the lease back so another instance can probe.
    async fn window_ended(&mut self, token: Token) {
        if let LeaseView::Holding {
            token,
            epoch,
            probe_until,
            until,
            ..
        } = self.lease()
        {
            self.set_lease(LeaseView::Holding {
                token,
                epoch,
                probe_until,
                until,
                window_over: true,
            });
        }
        let snap = self.handle.snapshot();
        if snap.probes_in_flight > 0 || snap.state != State::HalfOpen {
            return;
        }
        self.set_lease(LeaseView::Unknown);
        match self.op(self.store.release_lease(&self.keys, token)).await {
            Ok(_) => self.ok(),
            Err(e) => self.failed("release_lease", &e),
        }
        self.handle.recheck_probe_gate();
    }

    /// After a trip: verdicts already stored are not newer than it.
    async fn read_baseline(&mut self) {
        match self.op(self.store.read_verdict(&self.keys)).await {
            Ok(verdict) => {
                if let Some(v) = verdict {
                    self.see(v.epoch);
                    self.last_verdict = self.last_verdict.max(v.epoch);
                    if let Some(trip) = &mut self.trip {
                        trip.baseline = trip.baseline.max(v.epoch);
                    }
                }
            }
            Err(e) => self.failed("read_verdict", &e),
        }
    }

    /// Subscribes (if the subscription is gone) and reconciles by a read; on
    /// success the instance coordinates again.
    async fn reconnect(&mut self) {
        self.reconnect_at = None;
        if self.feed.is_none() {
            match self.op(self.store.subscribe(&self.keys)).await {
                Ok(feed) => self.feed = Some(feed),
                Err(e) => return self.rejoin_failed("subscribe", &e),
            }
        }
        match self.op(self.store.read_verdict(&self.keys)).await {
            Ok(verdict) => {
                self.connected = true;
                self.announced_local = false;
                self.failures = 0;
                self.reconnect_delay = self.config.reconnect_min;
                self.shared.view().connected = true;
                self.shared.connected.store(true, Ordering::Relaxed);
                self.shared.telemetry.joined(&self.shared.name);
                self.health_at = Some(later(Instant::now(), self.config.health_every));
                if let Some(verdict) = verdict {
                    self.consider(verdict);
                }
                self.resync();
                if self.lease() == LeaseView::Unknown && self.trip.is_some() {
                    self.due = Some(Instant::now());
                }
                if self.config.trip_together.is_some() {
                    // A fleet trip pushed while away: read it now.
                    self.poll_at = Some(Instant::now());
                }
                self.handle.recheck_probe_gate();
            }
            Err(e) => self.rejoin_failed("read_verdict", &e),
        }
    }

    /// Whether the store still answers ([`Store::touch`]: it also keeps the
    /// keys alive, raises the epoch counter to what this instance has seen, and
    /// reconciles). A failure counts as any failed operation (`disconnect_after`
    /// of them in a row: local mode). An answer ends a run of failures only
    /// while the breaker is closed: a store that answers these but never a take
    /// must still end in local mode.
    async fn health_check(&mut self) {
        self.shared.health_checks.fetch_add(1, Ordering::Relaxed);
        let touch = self.store.touch(&self.keys, self.seen);
        let answer = tokio::time::timeout(self.config.store_timeout, touch).await;
        match answer.unwrap_or(Err(StoreError::TimedOut)) {
            Ok(verdict) => {
                if self.trip.is_none() {
                    self.ok();
                }
                *self
                    .shared
                    .store_warning
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = self.store.warning();
                if let Some(verdict) = verdict {
                    self.consider(verdict);
                }
                self.read_actions().await;
                if Instant::now() >= self.report_at {
                    self.report_at = later(Instant::now(), REPORT_EVERY);
                    self.report().await;
                }
            }
            Err(e) => self.failed("touch", &e),
        }
    }

    /// Reports this instance's breaker to the fleet's view, and decides
    /// whether it is stuck open (reading the view only when it is suspect).
    async fn report(&mut self) {
        let snapshot = self.handle.snapshot();
        let me = self.instance.to_string();
        let now_ms = self.actions.now_ms();
        let stuck_after = self.config.stuck_after;
        let (view, check) = if suspect(&snapshot, stuck_after) {
            let read = self.store.read_reports(&self.keys);
            let read = self.beside("read_reports", read).await;
            let view = read.map(|read| FleetView::from_reports(&read, now_ms));
            (view, self.shared.dependency_check())
        } else {
            (None, None)
        };
        // Decided first, so that the report carries the flag to the fleet's view.
        let flag = stuck(&snapshot, &me, view.as_ref(), check, stuck_after);
        let action = self.actions.in_force().map(|held| held.action.id);
        let record =
            InstanceReport::of(me.clone(), &snapshot, action, flag.clone(), now_ms).encode();
        let fresh = u64::try_from(REPORT_FRESH.as_millis()).unwrap_or(u64::MAX);
        let write = self.store.report(
            &self.keys,
            &me,
            record,
            now_ms,
            now_ms.saturating_sub(fresh),
        );
        self.beside("report", write).await;
        let was = std::mem::replace(
            &mut *self
                .shared
                .stuck_open
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
            flag.clone(),
        );
        self.shared
            .telemetry
            .stuck_open(&self.shared.name, was.as_ref(), flag.as_ref());
    }

    /// Reads the operators' fleet actions (when this fleet has a secret to
    /// check them with) and applies the new valid ones; writes the audit.
    async fn read_actions(&mut self) {
        if self.actions.off() {
            return;
        }
        let read = self.store.read_actions(&self.keys);
        let Some(read) = self.beside("read_actions", read).await else {
            return;
        };
        let audit = self.actions.consider(&self.handle, read);
        self.actions_changed(audit).await;
    }

    /// Ends the fleet action in force if it is due.
    async fn expire_actions(&mut self, now: Instant) {
        if let Some(entry) = self.actions.expire(&self.handle, now) {
            self.actions_changed(vec![entry]).await;
        }
    }

    /// Publishes the fleet action in force to the snapshot, logs and audits.
    async fn actions_changed(&mut self, audit: Vec<AuditEntry>) {
        *self
            .shared
            .fleet_action
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = self.actions.in_force();
        self.shared
            .actions_refused
            .store(self.actions.refused, Ordering::Relaxed);
        for entry in audit {
            self.shared
                .telemetry
                .fleet_action(&self.shared.name, &entry);
            let write = self.store.audit(&self.keys, entry.encode());
            self.beside("audit", write).await;
        }
    }

    fn rejoin_failed(&mut self, op: &'static str, e: &StoreError) {
        self.count_error(op, e);
        if !self.announced_local {
            self.announced_local = true;
            self.shared.telemetry.went_local(&self.shared.name, e);
        }
        let delay = self.reconnect_delay;
        self.reconnect_delay = delay.saturating_mul(2).min(self.config.reconnect_max);
        self.reconnect_at = Some(later(Instant::now(), self.jittered(delay)));
    }

    // ----- store trouble ---------------------------------------------------------

    fn ok(&mut self) {
        self.failures = 0;
    }

    fn count_error(&self, op: &'static str, e: &StoreError) {
        self.shared.errors.fetch_add(1, Ordering::Relaxed);
        self.shared.telemetry.store_error(&self.shared.name, op, e);
    }

    fn failed(&mut self, op: &'static str, e: &StoreError) {
        self.count_error(op, e);
        self.failures = self.failures.saturating_add(1);
        if !self.connected {
            return;
        }
        if self.failures >= self.config.disconnect_after {
            self.go_local(e);
        } else if self.trip.is_some() {
            let pause = self.jittered(self.config.store_timeout);
            self.due = Some(later(Instant::now(), pause));
        }
    }

    /// Falls back to the local breaker: its own interval, its own probe, with jitter.
    fn go_local(&mut self, e: &StoreError) {
        self.connected = false;
        self.health_at = None;
        self.shared.view().connected = false;
        self.shared.connected.store(false, Ordering::Relaxed);
        if !self.announced_local {
            self.announced_local = true;
            self.shared.telemetry.went_local(&self.shared.name, e);
        }
        self.due = None;
        self.reconnect_delay = self.config.reconnect_min;
        let pause = self.jittered(self.config.reconnect_min);
        self.reconnect_at = Some(later(Instant::now(), pause));
        // Another instance may have taken the lease where we can no longer see it:
        // wait out one TTL before probing alone.
        if self.trip.is_some() && self.lease() == LeaseView::Unknown {
            self.set_lease(LeaseView::Maybe {
                until: later(Instant::now(), self.ttl),
            });
        }
        self.handle.recheck_probe_gate();
    }

    // ----- small helpers ---------------------------------------------------------

    async fn op<T>(
        &self,
        op: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        self.shared.ops.fetch_add(1, Ordering::Relaxed);
        match tokio::time::timeout(self.config.store_timeout, op).await {
            Ok(result) => result,
            Err(_) => Err(StoreError::TimedOut),
        }
    }

    /// An operation beside the protocol (reports, fleet actions, audit), under
    /// the store timeout: like a health check, not counted in `store_ops`, and
    /// a failure is counted and logged but changes no mode (the health check
    /// decides whether the store is gone).
    async fn beside<T>(
        &self,
        what: &'static str,
        op: impl Future<Output = Result<T, StoreError>>,
    ) -> Option<T> {
        let result = tokio::time::timeout(self.config.store_timeout, op)
            .await
            .unwrap_or(Err(StoreError::TimedOut));
        result.map_err(|e| self.count_error(what, &e)).ok()
    }

    fn see(&mut self, epoch: FleetEpoch) {
        self.seen = self.seen.max(epoch);
        self.shared
            .fleet_epoch
            .fetch_max(epoch.0, Ordering::Relaxed);
    }

    /// `d` stretched or shrunk by up to half, at random.
    fn jittered(&mut self, d: Duration) -> Duration {
        d.mul_f64(0.5 + self.rng.f64())
    }

    fn lease(&self) -> LeaseView {
        self.shared.view().lease
    }

    fn set_lease(&self, lease: LeaseView) {
        self.shared.view().lease = lease;
    }

    /// A lease view that has run out is forgotten; a reconcile follows.
    fn expire_view(&mut self, now: Instant) {
        if let Some(until) = self.lease().until() {
            if now >= until {
                self.set_lease(LeaseView::Unknown);
                if self.trip.is_some() {
                    self.due = Some(now);
                }
            }
        }
    }
}
