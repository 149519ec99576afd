//! The incident dashboard: one page, its script and style, and a live stream of
//! snapshots as Server-Sent Events.
//!
//! During an incident operators look rather than read JSON, so the admin router
//! serves a page that shows every policy at a glance and steers it with the same
//! requests as the JSON routes. Everything is embedded in the crate (no CDN, no
//! build step), and the page is served with a strict Content-Security-Policy: its
//! script and style are separate routes, nothing is inline.
//!
//! | method and path | what |
//! |---|---|
//! | `GET /` | the page (nested at `/admin`, it is `/admin`; its links are relative to it) |
//! | `GET /dashboard.js`, `GET /dashboard.css` | its script and style |
//! | `GET /events` | `text/event-stream`: one frame a second, and one at every breaker transition, degradation level change and bulkhead event |
//!
//! **A frame** is one JSON object: the instance, a sequence number, whether changes
//! are enabled, the document's generation, and for each policy its routes and
//! dependencies, its [`PolicySnapshot`] exactly as `GET /policies/{name}` serves
//! it, the last breaker transition, level change and bulkhead change seen (with
//! their causes; a bulkhead's is a saturation, a relief or a move of its limit),
//! and a minute of per-second history (failure rate and calls, short-circuits,
//! bulkhead rejections, fallback answers by source). One sampler per router
//! builds the frames, whoever watches: a stream costs a clone of the latest frame
//! per event, not a snapshot per viewer.
//!
//! Transitions made before the first viewer are not lost: the router subscribes
//! to every built breaker, degradation layer and bulkhead when it is built (their
//! channels keep the last 64 changes), and the sampler reads them when it starts.

// Without a breaker, a degradation layer or a bulkhead, only the tick wakes the sampler.
#![cfg_attr(
    not(any(
        feature = "circuit-breaker",
        feature = "degradation",
        feature = "bulkhead"
    )),
    allow(unused_imports, unused_mut, dead_code, clippy::needless_pass_by_value)
)]

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use ::axum::body::Body;
use ::axum::extract::{OriginalUri, State};
use ::axum::http::{header, HeaderValue};
use ::axum::response::sse::{Event, Sse};
use ::axum::response::{IntoResponse, Response};
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

use super::Admin;
use crate::config::{Policies, PoliciesSnapshot, PolicySnapshot};

const PAGE: &str = include_str!("dashboard/index.html");
const SCRIPT: &str = include_str!("dashboard/dashboard.js");
const STYLE: &str = include_str!("dashboard/dashboard.css");

/// The page's policy: its own script, style and stream, nothing else; no framing.
/// (`base-uri 'self'` allows the page's own `<base>`, which makes its links
/// relative to where the router is nested.)
pub(super) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'self'; \
     form-action 'none'; frame-ancestors 'none'";

/// A frame at least this often; also the period of the history samples.
const INTERVAL: Duration = Duration::from_secs(1);
/// Samples of history kept: one minute.
const HISTORY: usize = 60;

fn with_headers(body: impl Into<Body>, content_type: &'static str) -> Response {
    let mut res = Response::new(body.into());
    let h = res.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // An upgraded crate serves an upgraded page: never a stale script from a cache.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    res
}

/// The page's base, relative to its own address: the last segment of the path
/// with a slash (`admin/` for `/admin`; `./` at the root or after a slash), so
/// that its links resolve under the router wherever it is nested, behind a proxy
/// that strips a prefix included.
fn base(path: &str) -> String {
    match path.rsplit('/').next() {
        Some(last) if !last.is_empty() => format!("{last}/"),
        _ => "./".to_owned(),
    }
}

/// Escapes text for an HTML attribute value.
fn attribute(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// `GET /`: the page.
pub(super) async fn page(OriginalUri(uri): OriginalUri) -> Response {
    let html = PAGE.replace("{{base}}", &attribute(&base(uri.path())));
    let mut res = with_headers(html, "text/html; charset=utf-8");
    res.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    res
}

/// `GET /dashboard.js`.
pub(super) async fn script() -> Response {
    with_headers(SCRIPT, "text/javascript; charset=utf-8")
}

/// `GET /dashboard.css`.
pub(super) async fn style() -> Response {
    with_headers(STYLE, "text/css; charset=utf-8")
}

/// `GET /events`: the latest frame at once, then every new one.
pub(super) async fn events(State(admin): State<Arc<Admin>>) -> Response {
    let mut frames = admin.dashboard.frames(&admin);
    frames.mark_changed();
    let stream = futures_util::stream::unfold(frames, |mut frames| async move {
        frames.changed().await.ok()?;
        let data = Arc::clone(&frames.borrow_and_update());
        // `retry`: the browser reconnects a second after the stream breaks.
        let event = Event::default().retry(INTERVAL).data(&*data);
        Some((Ok::<_, Infallible>(event), frames))
    });
    let mut res = Sse::new(stream).into_response();
    // Proxies that buffer responses would hold the frames back.
    res.headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    res
}

/// The dashboard's part of the admin router's state.
pub(super) struct Hub {
    /// Tells a restarted server from the same one reconnecting.
    instance: u64,
    /// The latest frame, shared by every stream; `None` until a first stream opened.
    frames: Mutex<Option<watch::Receiver<Arc<str>>>>,
    /// Subscriptions taken when the router was built, for the first sampler.
    early: Mutex<Option<Watched>>,
}

impl Hub {
    pub(super) fn new(policies: &Policies) -> Self {
        let mut early = Watched::default();
        early.follow(policies);
        let instance = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ u64::from(std::process::id()).rotate_left(32);
        Self {
            instance,
            frames: Mutex::new(None),
            early: Mutex::new(Some(early)),
        }
    }

    /// A receiver of the frames, starting the sampler if none runs (the first
    /// viewer, or the first since the runtime that ran the last one ended).
    fn frames(&self, admin: &Arc<Admin>) -> watch::Receiver<Arc<str>> {
        let mut slot = self.frames.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(rx) = slot.as_ref() {
            if rx.has_changed().is_ok() {
                return rx.clone();
            }
        }
        let watched = self
            .early
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .unwrap_or_default();
        let mut book = Book::new(self.instance, admin.token.is_some(), Instant::now());
        let mut watched = watched;
        watched.follow(&admin.policies);
        let first = book.next_frame(&admin.policies, Instant::now(), &mut watched);
        let (tx, rx) = watch::channel(first);
        tokio::spawn(sample(Arc::downgrade(admin), tx, book, watched));
        *slot = Some(rx.clone());
        rx
    }
}

/// Samples and publishes frames until the router is dropped.
async fn sample(
    admin: Weak<Admin>,
    tx: watch::Sender<Arc<str>>,
    mut book: Book,
    mut watched: Watched,
) {
    loop {
        let wake = watched.next(book.next_sample).await;
        let Some(admin) = admin.upgrade() else {
            return;
        };
        let now = Instant::now();
        watched.record(wake);
        watched.follow(&admin.policies);
        tx.send_replace(book.next_frame(&admin.policies, now, &mut watched));
    }
}

/// What woke the sampler.
#[derive(Debug)]
enum Wake {
    Tick,
    #[cfg(feature = "circuit-breaker")]
    Breaker(
        String,
        Result<crate::circuit_breaker::CircuitBreakerEvent, broadcast::error::RecvError>,
    ),
    #[cfg(feature = "degradation")]
    Level(
        String,
        Result<crate::degradation::DegradationEvent, broadcast::error::RecvError>,
    ),
    #[cfg(feature = "bulkhead")]
    Bulkhead(
        String,
        Result<crate::bulkhead::BulkheadEvent, broadcast::error::RecvError>,
    ),
}

/// The last change of one layer, as the page shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
struct Change {
    from: String,
    to: String,
    cause: &'static str,
    /// The outcome that completed it was injected by a rehearsal.
    rehearsal: bool,
    /// How long ago, when the frame was built.
    ago_ms: u64,
    #[serde(skip)]
    at: Instant,
}

impl Change {
    fn aged(&self, now: Instant) -> Self {
        let ago = now.saturating_duration_since(self.at);
        Self {
            ago_ms: u64::try_from(ago.as_millis()).unwrap_or(u64::MAX),
            ..self.clone()
        }
    }
}

/// The subscriptions the sampler waits on, and the last change each brought.
#[derive(Default)]
struct Watched {
    followed: BTreeSet<(String, &'static str)>,
    #[cfg(feature = "circuit-breaker")]
    breakers: Vec<(
        String,
        broadcast::Receiver<crate::circuit_breaker::CircuitBreakerEvent>,
    )>,
    #[cfg(feature = "degradation")]
    levels: Vec<(
        String,
        broadcast::Receiver<crate::degradation::DegradationEvent>,
    )>,
    #[cfg(feature = "bulkhead")]
    bulkheads: Vec<(String, broadcast::Receiver<crate::bulkhead::BulkheadEvent>)>,
    last_breaker: BTreeMap<String, Change>,
    last_level: BTreeMap<String, Change>,
    last_bulkhead: BTreeMap<String, Change>,
}

impl Watched {
    /// Subscribes to the layers built since the last call.
    fn follow(&mut self, policies: &Policies) {
        for name in policies.document().policies.keys() {
            let Some(handles) = policies.handles(name) else {
                continue;
            };
            #[cfg(feature = "circuit-breaker")]
            if let Some(h) = &handles.breaker {
                if self.followed.insert((name.clone(), "breaker")) {
                    self.breakers.push((name.clone(), h.subscribe()));
                }
            }
            #[cfg(feature = "degradation")]
            if let Some(h) = &handles.degradation {
                if self.followed.insert((name.clone(), "degradation")) {
                    self.levels.push((name.clone(), h.subscribe()));
                }
            }
            #[cfg(feature = "bulkhead")]
            if let Some(h) = &handles.bulkhead {
                if self.followed.insert((name.clone(), "bulkhead")) {
                    self.bulkheads.push((name.clone(), h.subscribe()));
                }
            }
            let _ = handles;
        }
    }

    /// The first of: `deadline`, a transition, a level change, a bulkhead event.
    async fn next(&mut self, deadline: Instant) -> Wake {
        type Waiting<'a> = Pin<Box<dyn Future<Output = Wake> + Send + 'a>>;
        let mut waits: Vec<Waiting<'_>> = vec![Box::pin(async move {
            tokio::time::sleep_until(deadline).await;
            Wake::Tick
        })];
        #[cfg(feature = "circuit-breaker")]
        for (name, rx) in &mut self.breakers {
            waits.push(Box::pin(async move {
                let got = rx.recv().await;
                Wake::Breaker(name.clone(), got)
            }));
        }
        #[cfg(feature = "degradation")]
        for (name, rx) in &mut self.levels {
            waits.push(Box::pin(async move {
                let got = rx.recv().await;
                Wake::Level(name.clone(), got)
            }));
        }
        #[cfg(feature = "bulkhead")]
        for (name, rx) in &mut self.bulkheads {
            waits.push(Box::pin(async move {
                let got = rx.recv().await;
                Wake::Bulkhead(name.clone(), got)
            }));
        }
        futures_util::future::select_all(waits).await.0
    }

    fn record(&mut self, wake: Wake) {
        #[cfg(any(
            feature = "circuit-breaker",
            feature = "degradation",
            feature = "bulkhead"
        ))]
        use broadcast::error::RecvError;
        match wake {
            Wake::Tick => {}
            #[cfg(feature = "circuit-breaker")]
            Wake::Breaker(name, Ok(t)) => {
                let change = Change {
                    from: t.from.as_str().to_owned(),
                    to: t.to.as_str().to_owned(),
                    cause: t.cause.as_str(),
                    rehearsal: t.rehearsal,
                    ago_ms: 0,
                    at: t.at,
                };
                self.last_breaker.insert(name, change);
            }
            #[cfg(feature = "circuit-breaker")]
            Wake::Breaker(name, Err(RecvError::Closed)) => {
                self.breakers.retain(|(n, _)| *n != name);
            }
            #[cfg(feature = "degradation")]
            Wake::Level(name, Ok(c)) => {
                let change = Change {
                    from: c.from.name.to_string(),
                    to: c.to.name.to_string(),
                    cause: c.cause.as_str(),
                    rehearsal: c.rehearsal,
                    ago_ms: 0,
                    at: c.at,
                };
                self.last_level.insert(name, change);
            }
            #[cfg(feature = "degradation")]
            Wake::Level(name, Err(RecvError::Closed)) => {
                self.levels.retain(|(n, _)| *n != name);
            }
            #[cfg(feature = "bulkhead")]
            Wake::Bulkhead(name, Ok(event)) => {
                if let Some(change) = bulkhead_change(&event) {
                    self.last_bulkhead.insert(name, change);
                }
            }
            #[cfg(feature = "bulkhead")]
            Wake::Bulkhead(name, Err(RecvError::Closed)) => {
                self.bulkheads.retain(|(n, _)| *n != name);
            }
            // Lagged: older changes were dropped; the next receive has the newest.
            #[allow(unreachable_patterns)]
            _ => {}
        }
    }
}

/// A bulkhead event as the page shows a change: saturation as `room -> saturated`
/// (the cause is the rejection that began it) and back, a limit as its numbers.
/// New limits alone are not a change of condition: the frame they wake shows them,
/// and the limit move they cause, if any, follows.
#[cfg(feature = "bulkhead")]
fn bulkhead_change(event: &crate::bulkhead::BulkheadEvent) -> Option<Change> {
    use crate::bulkhead::BulkheadEvent;
    let change = |from: String, to: String, cause: &'static str, at: Instant| Change {
        from,
        to,
        cause,
        rehearsal: false,
        ago_ms: 0,
        at,
    };
    match *event {
        BulkheadEvent::Saturated { rejection, at, .. } => Some(change(
            "room".to_owned(),
            "saturated".to_owned(),
            rejection.as_str(),
            at,
        )),
        BulkheadEvent::Relieved { at, .. } => Some(change(
            "saturated".to_owned(),
            "room".to_owned(),
            "drained",
            at,
        )),
        BulkheadEvent::LimitChanged {
            from,
            to,
            cause,
            at,
        } => Some(change(from.to_string(), to.to_string(), cause.as_str(), at)),
        _ => None,
    }
}

/// The counters a sample is the difference of.
#[derive(Debug, Clone, Default, PartialEq)]
struct Totals {
    successes: u64,
    failures: u64,
    short_circuited: u64,
    rejected: u64,
    /// Answers (served or an explicit "unavailable") by fallback step.
    answers: BTreeMap<String, u64>,
}

impl Totals {
    fn of(p: &PolicySnapshot) -> Self {
        #[allow(unused_mut)]
        let mut t = Self::default();
        #[cfg(feature = "circuit-breaker")]
        if let Some(b) = &p.breaker {
            t.successes = b.counters.successes;
            t.failures = b.counters.failures;
            t.short_circuited = b.counters.short_circuited;
        }
        #[cfg(feature = "bulkhead")]
        if let Some(b) = &p.bulkhead {
            t.rejected = b.rejected_full + b.rejected_timeout;
        }
        #[cfg(feature = "fallback")]
        if let Some(f) = &p.fallback {
            t.answers = f
                .steps
                .iter()
                .map(|s| (s.name.clone(), s.served + s.unavailable))
                .collect();
        }
        let _ = p;
        t
    }
}

/// One second of one policy.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    /// Failures among the calls that ended, `None` when none did.
    failure_rate: Option<f64>,
    calls: f64,
    short_circuits: f64,
    rejected: f64,
    answers: BTreeMap<String, f64>,
}

impl Sample {
    fn between(before: &Totals, after: &Totals, secs: f64) -> Self {
        let per_s = |a: u64, b: u64| round(a.saturating_sub(b) as f64 / secs);
        let failures = after.failures.saturating_sub(before.failures);
        let calls = failures + after.successes.saturating_sub(before.successes);
        Self {
            failure_rate: (calls > 0).then(|| round(failures as f64 / calls as f64)),
            calls: round(calls as f64 / secs),
            short_circuits: per_s(after.short_circuited, before.short_circuited),
            rejected: per_s(after.rejected, before.rejected),
            answers: after
                .answers
                .iter()
                .map(|(step, n)| {
                    let was = before.answers.get(step).copied().unwrap_or(*n);
                    (step.clone(), per_s(*n, was))
                })
                .collect(),
        }
    }
}

/// Three decimals are plenty for a sparkline, and keep frames short.
fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// A minute of samples, as columns (oldest first), as the page draws them.
#[derive(Debug, Default, serde::Serialize)]
struct HistoryView {
    interval_ms: u64,
    failure_rate: Vec<Option<f64>>,
    calls: Vec<f64>,
    short_circuits: Vec<f64>,
    rejected: Vec<f64>,
    answers: BTreeMap<String, Vec<f64>>,
}

impl HistoryView {
    fn of(samples: Option<&VecDeque<Sample>>) -> Self {
        let mut v = Self {
            interval_ms: INTERVAL.as_millis() as u64,
            ..Self::default()
        };
        for s in samples.into_iter().flatten() {
            v.failure_rate.push(s.failure_rate);
            v.calls.push(s.calls);
            v.short_circuits.push(s.short_circuits);
            v.rejected.push(s.rejected);
            for (step, n) in &s.answers {
                v.answers.entry(step.clone()).or_default().push(*n);
            }
        }
        v
    }
}

/// The last changes of a policy's layers.
#[derive(Debug, serde::Serialize)]
struct LastChanges {
    breaker: Option<Change>,
    degradation: Option<Change>,
    bulkhead: Option<Change>,
}

/// One policy in a frame.
#[derive(Debug, serde::Serialize)]
struct PolicyFrame {
    name: String,
    routes: Vec<String>,
    dependencies: Vec<String>,
    /// The degradation levels' names, best first (empty without a degradation layer).
    levels: Vec<String>,
    /// Exactly what `GET /policies/{name}` answers.
    snapshot: PolicySnapshot,
    last: LastChanges,
    history: HistoryView,
}

/// One event of the stream.
#[derive(Debug, serde::Serialize)]
struct Frame {
    instance: u64,
    seq: u64,
    uptime_ms: u64,
    interval_ms: u64,
    /// Whether a token was configured (without one every change is refused).
    changes_allowed: bool,
    generation: u64,
    as_started: bool,
    /// The policy file, by name only (the stream is anonymous).
    file: Option<String>,
    policies: Vec<PolicyFrame>,
}

/// The sampler's memory: the last totals, the history, the next sample's time.
struct Book {
    instance: u64,
    changes_allowed: bool,
    started: Instant,
    seq: u64,
    next_sample: Instant,
    last: Option<(Instant, BTreeMap<String, Totals>)>,
    history: BTreeMap<String, VecDeque<Sample>>,
}

impl Book {
    fn new(instance: u64, changes_allowed: bool, now: Instant) -> Self {
        Self {
            instance,
            changes_allowed,
            started: now,
            seq: 0,
            next_sample: now,
            last: None,
            history: BTreeMap::new(),
        }
    }

    /// The frame at `now` as JSON, after taking the second's sample if it is due.
    fn next_frame(&mut self, policies: &Policies, now: Instant, watched: &mut Watched) -> Arc<str> {
        let snapshot = policies.snapshot();
        if now >= self.next_sample {
            self.sample(&snapshot, now);
            // After a stall, a full second from now: never a burst of tiny samples.
            let next = self.next_sample + INTERVAL;
            self.next_sample = if next > now { next } else { now + INTERVAL };
        }
        let levels = level_names(policies);
        let frame = self.frame(snapshot, &levels, watched, now);
        serde_json::to_string(&frame)
            .unwrap_or_else(|_| "{}".to_owned())
            .into()
    }

    fn sample(&mut self, snapshot: &PoliciesSnapshot, now: Instant) {
        let totals: BTreeMap<String, Totals> = snapshot
            .policies
            .iter()
            .map(|(name, p)| (name.clone(), Totals::of(p)))
            .collect();
        if let Some((then, before)) = &self.last {
            let secs = now.saturating_duration_since(*then).as_secs_f64();
            for (name, after) in totals.iter().filter(|_| secs > 0.0) {
                // A layer built since the last sample has no difference yet.
                let Some(before) = before.get(name) else {
                    continue;
                };
                let samples = self.history.entry(name.clone()).or_default();
                samples.push_back(Sample::between(before, after, secs));
                while samples.len() > HISTORY {
                    samples.pop_front();
                }
            }
        }
        self.last = Some((now, totals));
    }

    fn frame(
        &mut self,
        snapshot: PoliciesSnapshot,
        levels: &BTreeMap<String, Vec<String>>,
        watched: &Watched,
        now: Instant,
    ) -> Frame {
        self.seq += 1;
        let users = |map: &BTreeMap<String, String>, name: &str| -> Vec<String> {
            map.iter()
                .filter(|(_, p)| *p == name)
                .map(|(k, _)| k.clone())
                .collect()
        };
        let policies = snapshot
            .policies
            .into_iter()
            .map(|(name, p)| PolicyFrame {
                routes: users(&snapshot.routes, &name),
                dependencies: users(&snapshot.dependencies, &name),
                levels: levels.get(&name).cloned().unwrap_or_default(),
                last: LastChanges {
                    breaker: watched.last_breaker.get(&name).map(|c| c.aged(now)),
                    degradation: watched.last_level.get(&name).map(|c| c.aged(now)),
                    bulkhead: watched.last_bulkhead.get(&name).map(|c| c.aged(now)),
                },
                history: HistoryView::of(self.history.get(&name)),
                snapshot: p,
                name,
            })
            .collect();
        Frame {
            instance: self.instance,
            seq: self.seq,
            uptime_ms: u64::try_from(now.saturating_duration_since(self.started).as_millis())
                .unwrap_or(u64::MAX),
            interval_ms: INTERVAL.as_millis() as u64,
            changes_allowed: self.changes_allowed,
            generation: snapshot.generation,
            as_started: snapshot.as_started,
            file: snapshot.file.as_deref().map(super::file_name),
            policies,
        }
    }
}

/// Each degradation layer's level names, best first, by policy.
fn level_names(policies: &Policies) -> BTreeMap<String, Vec<String>> {
    #[allow(unused_mut)]
    let mut out = BTreeMap::new();
    #[cfg(feature = "degradation")]
    for name in policies.document().policies.keys() {
        if let Some(h) = policies.handles(name).and_then(|h| h.degradation) {
            out.insert(
                name.clone(),
                h.levels().iter().map(|l| l.to_string()).collect(),
            );
        }
    }
    let _ = policies;
    out
}

#[cfg(all(
    test,
    feature = "circuit-breaker",
    feature = "bulkhead",
    feature = "degradation",
    feature = "fallback"
))]
mod tests {
    // The helpers below are test code too.
    #![allow(clippy::unwrap_used, clippy::panic)]

    use std::collections::BTreeMap;

    use ::axum::http::{Request, StatusCode};
    use ::axum::Router;
    use http_body_util::BodyExt;
    use serde_json::Value;
    use tower::{service_fn, Layer, ServiceExt};

    use super::*;
    use crate::circuit_breaker::State as BreakerState;
    use crate::core::BoxError;
    use crate::degradation::Fixed;

    const DOCUMENT: &str = r#"
[policies.freight]
bulkhead = { max_concurrent = 2, queue = { max_queue = 1, max_wait = "10ms" } }
breaker = { policy = { kind = "count_window", size = 4, min_calls = 4, failure_rate = 0.5 }, open_for = "60s" }
fallback = { on_rejections = ["circuit_open"] }

[policies.recommendations]
breaker = { policy = { kind = "consecutive_failures", threshold = 3 }, open_for = "60s" }

[policies.assistant]
degradation = { failures_to_degrade = 2 }

[routes]
"/quote" = "freight"
"/assistant" = "assistant"

[dependencies]
freight-supplier = "freight"
language-model = "assistant"
"#;

    type Stack = tower::util::BoxCloneSyncService<Request<()>, http::Response<()>, BoxError>;

    /// The document's policies with every layer built, and a way to make the
    /// freight dependency fail `n` times through fallback → bulkhead → breaker.
    struct Shop {
        policies: Policies,
        freight: Stack,
        recommendations: Stack,
    }

    impl Shop {
        fn new() -> Self {
            // Loaded from a file, as a service does, so that frames name it.
            static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let file = std::env::temp_dir().join(format!(
                "seawall-dashboard-{}-{}.toml",
                std::process::id(),
                N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            ));
            // With the feature, freight may be rehearsed: its fault layer is built below.
            #[cfg(feature = "fault")]
            let document = format!("{DOCUMENT}\n[policies.freight.fault]\n");
            #[cfg(not(feature = "fault"))]
            let document = DOCUMENT;
            std::fs::write(&file, document).unwrap();
            let policies = Policies::load(&file).unwrap();
            std::fs::remove_file(&file).unwrap();
            let failing = service_fn(|_req: Request<()>| async {
                Err::<http::Response<()>, BoxError>("503".into())
            });
            let breaker = policies.circuit_breaker("freight", |b| b).unwrap();
            // With classes, so that the frames show them.
            let bulkhead = policies
                .bulkhead("freight")
                .unwrap()
                .criticality(crate::core::CriticalityHeader::new());
            let fallback = policies
                .fallback("freight", |b| {
                    b.unavailable::<http::Response<()>>("no quote")
                })
                .unwrap();
            #[cfg(not(feature = "fault"))]
            let freight = fallback.layer(bulkhead.layer(breaker.layer(failing)));
            // A rehearsal in force on freight, on one route and key, so the frames
            // show every field of an injection.
            #[cfg(feature = "fault")]
            let freight = {
                use crate::fault::{Fault, InjectionConfig};
                let faults = policies.fault("freight", |b| b).unwrap();
                let injection = InjectionConfig::lasting(&Fault::Refused, Duration::from_secs(600))
                    .route("/quote")
                    .key("freight.internal");
                faults.handle().inject(injection).unwrap();
                fallback.layer(bulkhead.layer(breaker.layer(faults.layer(failing))))
            };
            let recs = policies.circuit_breaker("recommendations", |b| b).unwrap();
            let recommendations = recs.layer(failing);
            let _levels = policies
                .degradation::<Request<()>, String, _, _>("assistant", |b| {
                    b.level("canned", Fixed::new("canned".to_owned()))
                })
                .unwrap()
                .layer(service_fn(|_req: Request<()>| async {
                    Ok::<_, BoxError>("full".to_owned())
                }));
            Self {
                policies,
                freight: tower::util::BoxCloneSyncService::new(freight),
                recommendations: tower::util::BoxCloneSyncService::new(recommendations),
            }
        }

        async fn fail(&self, n: usize) {
            for _ in 0..n {
                let _ = self.freight.clone().oneshot(Request::new(())).await;
                let _ = self.recommendations.clone().oneshot(Request::new(())).await;
            }
        }

        fn handles(&self, name: &str) -> crate::config::PolicyHandles {
            self.policies.handles(name).unwrap()
        }
    }

    fn parse(frame: &str) -> Value {
        serde_json::from_str(frame).unwrap()
    }

    fn policy<'a>(frame: &'a Value, name: &str) -> &'a Value {
        frame["policies"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_frame_carries_each_policy_exactly_as_the_json_api_serves_it() {
        let shop = Shop::new();
        shop.fail(4).await;
        let now = Instant::now();
        let mut watched = Watched::default();
        let mut book = Book::new(7, true, now);
        let frame = parse(&book.next_frame(&shop.policies, now, &mut watched));

        // The clock is paused: the API's snapshot is taken at the same instant.
        let api = serde_json::to_value(shop.policies.snapshot()).unwrap();
        let names: Vec<&str> = frame["policies"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["assistant", "freight", "recommendations"]);
        for name in names {
            assert_eq!(
                policy(&frame, name)["snapshot"],
                api["policies"][name],
                "{name}"
            );
        }
        let freight = policy(&frame, "freight");
        assert_eq!(freight["snapshot"]["breaker"]["state"], "open");
        assert_eq!(freight["routes"], serde_json::json!(["/quote"]));
        assert_eq!(
            freight["dependencies"],
            serde_json::json!(["freight-supplier"])
        );
        assert_eq!(
            policy(&frame, "assistant")["levels"],
            serde_json::json!(["full", "canned"])
        );
        assert_eq!(
            policy(&frame, "recommendations")["dependencies"],
            serde_json::json!([])
        );
        assert_eq!(frame["instance"], 7);
        assert_eq!(frame["seq"], 1);
        assert_eq!(frame["changes_allowed"], true);
        assert_eq!(frame["generation"], api["generation"]);
        // The stream is anonymous: the policy file by name, never its path.
        let file = frame["file"].as_str().unwrap();
        assert!(
            file.starts_with("seawall-dashboard-") && !file.contains('/'),
            "{file}"
        );
        assert_eq!(frame["interval_ms"], 1000);
    }

    #[tokio::test(start_paused = true)]
    async fn the_history_is_the_counters_difference_per_second_for_one_minute() {
        let shop = Shop::new();
        let start = Instant::now();
        let mut watched = Watched::default();
        let mut book = Book::new(1, false, start);
        book.next_frame(&shop.policies, start, &mut watched);

        // Second one: four failures trip the breaker; the fallback answers from then on.
        shop.fail(6).await;
        let frame = parse(&book.next_frame(&shop.policies, start + INTERVAL, &mut watched));
        let history = &policy(&frame, "freight")["history"];
        assert_eq!(history["failure_rate"], serde_json::json!([1.0]));
        assert_eq!(history["calls"], serde_json::json!([4.0]));
        assert_eq!(history["short_circuits"], serde_json::json!([2.0]));
        assert_eq!(history["answers"]["unavailable"], serde_json::json!([2.0]));
        assert_eq!(history["rejected"], serde_json::json!([0.0]));
        // A frame between samples (a transition's) adds no sample.
        let frame = parse(&book.next_frame(
            &shop.policies,
            start + INTERVAL + INTERVAL / 2,
            &mut watched,
        ));
        assert_eq!(
            policy(&frame, "freight")["history"]["calls"],
            serde_json::json!([4.0])
        );

        // Two quiet seconds: no calls ended, so no failure rate; rates per second.
        let frame = parse(&book.next_frame(&shop.policies, start + INTERVAL * 3, &mut watched));
        let history = &policy(&frame, "freight")["history"];
        assert_eq!(history["failure_rate"], serde_json::json!([1.0, null]));
        assert_eq!(history["calls"], serde_json::json!([4.0, 0.0]));
        shop.fail(3).await;
        let frame = parse(&book.next_frame(&shop.policies, start + INTERVAL * 5, &mut watched));
        assert_eq!(
            policy(&frame, "freight")["history"]["short_circuits"],
            serde_json::json!([2.0, 0.0, 1.5])
        );

        // A late sampler takes one sample, then waits a full second: no burst of
        // samples over a few milliseconds, whose rates would be meaningless.
        let late = start + INTERVAL * 5 + INTERVAL * 5 / 2;
        book.next_frame(&shop.policies, late, &mut watched);
        assert_eq!(book.next_sample, late + INTERVAL);
        let frame = parse(&book.next_frame(&shop.policies, late + INTERVAL / 100, &mut watched));
        assert_eq!(
            policy(&frame, "freight")["history"]["calls"]
                .as_array()
                .unwrap()
                .len(),
            4
        );

        // A minute is kept, no more.
        for s in 8..100 {
            book.next_frame(&shop.policies, start + INTERVAL * s, &mut watched);
        }
        let frame = parse(&book.next_frame(&shop.policies, start + INTERVAL * 100, &mut watched));
        let history = &policy(&frame, "freight")["history"];
        assert_eq!(history["calls"].as_array().unwrap().len(), HISTORY);
        assert_eq!(
            history["answers"]["unavailable"].as_array().unwrap().len(),
            HISTORY
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_last_transition_and_level_change_are_kept_with_their_causes() {
        let shop = Shop::new();
        let mut watched = Watched::default();
        watched.follow(&shop.policies);
        shop.fail(4).await;
        let far = Instant::now() + Duration::from_secs(3600);
        let wake = watched.next(far).await;
        assert!(
            matches!(wake, Wake::Breaker(ref name, Ok(_)) if name == "freight"),
            "{wake:?}"
        );
        watched.record(wake);
        shop.handles("assistant")
            .degradation
            .unwrap()
            .set_floor("canned")
            .unwrap();
        // The recommendations breaker tripped too; read until the level change.
        loop {
            let wake = watched.next(far).await;
            let level = matches!(wake, Wake::Level(..));
            watched.record(wake);
            if level {
                break;
            }
        }
        tokio::time::advance(Duration::from_secs(5)).await;
        let now = Instant::now();
        let frame = parse(&Book::new(1, true, now).next_frame(&shop.policies, now, &mut watched));
        assert_eq!(
            policy(&frame, "freight")["last"]["breaker"],
            serde_json::json!({"from": "closed", "to": "open", "cause": "failure_rate", "rehearsal": false, "ago_ms": 5000})
        );
        assert_eq!(
            policy(&frame, "assistant")["last"]["degradation"],
            serde_json::json!({"from": "full", "to": "canned", "cause": "floor", "rehearsal": false, "ago_ms": 5000})
        );
        assert_eq!(policy(&frame, "assistant")["last"]["breaker"], Value::Null);
    }

    /// The `const NAME = { key: "path", … };` table of the page's script.
    fn table(name: &str) -> BTreeMap<String, String> {
        let start = SCRIPT
            .find(&format!("const {name} = {{"))
            .unwrap_or_else(|| panic!("no table {name} in dashboard.js"));
        let body = &SCRIPT[start..];
        let body = &body[..body.find("};").unwrap()];
        body.lines()
            .skip(1)
            .filter_map(|l| {
                let (k, v) = l.trim().trim_end_matches(',').split_once(':')?;
                let v = v.trim().strip_prefix('"')?.strip_suffix('"')?;
                Some((k.trim().to_owned(), v.to_owned()))
            })
            .collect()
    }

    /// The keys the script passes to `function(…, "key")`, in order of appearance.
    fn keys_read_by(function: &str) -> Vec<String> {
        let needle = format!("{function}(");
        let mut out = Vec::new();
        for (at, _) in SCRIPT.match_indices(&needle) {
            let before = SCRIPT[..at].chars().next_back().unwrap_or(' ');
            if before.is_alphanumeric() || before == '_' || before == '.' {
                continue;
            }
            let call = &SCRIPT[at + needle.len()..];
            let call = &call[..call.find(')').unwrap()];
            // The definitions (`(frame, key) =>`) name no field.
            if !call.contains('"') {
                assert!(
                    call.contains("key"),
                    "`{function}({call})` names no field literally"
                );
                continue;
            }
            let key = call.split('"').nth(1).unwrap();
            out.push(key.to_owned());
        }
        out
    }

    /// Every value `path` reaches in `v` ("[]" walks into each item).
    fn resolve<'a>(v: &'a Value, path: &str) -> Vec<&'a Value> {
        let mut here = vec![v];
        for step in path.split('.') {
            let (name, each) = match step.strip_suffix("[]") {
                Some(name) => (name, true),
                None => (step, false),
            };
            here = here
                .into_iter()
                .filter_map(|v| v.get(name))
                .flat_map(|v| match (each, v.as_array()) {
                    (true, Some(items)) => items.iter().collect(),
                    (true, None) => Vec::new(),
                    (false, _) => vec![v],
                })
                .collect();
        }
        here
    }

    /// Frames that between them show every field with a value: a breaker open and
    /// one consecutive, a floor set, transitions seen, a history.
    async fn frames_of_every_kind() -> (Vec<Value>, Vec<Value>) {
        let shop = Shop::new();
        let mut watched = Watched::default();
        watched.follow(&shop.policies);
        let start = Instant::now();
        let mut book = Book::new(1, true, start);
        let mut frames = vec![parse(&book.next_frame(&shop.policies, start, &mut watched))];
        shop.fail(6).await;
        shop.handles("assistant")
            .degradation
            .unwrap()
            .set_floor(1)
            .unwrap();
        for _ in 0..3 {
            let wake = watched.next(start + Duration::from_secs(3600)).await;
            watched.record(wake);
        }
        frames.push(parse(&book.next_frame(
            &shop.policies,
            start + INTERVAL,
            &mut watched,
        )));
        let answers = vec![
            serde_json::to_value(shop.policies.snapshot()).unwrap(),
            serde_json::to_value(&shop.policies.snapshot().policies["assistant"]).unwrap(),
            serde_json::to_value(&shop.policies.snapshot().policies["freight"]).unwrap(),
        ];
        (frames, answers)
    }

    #[tokio::test(start_paused = true)]
    async fn every_field_the_page_reads_is_in_the_frames_and_the_answers() {
        let (frames, answers) = frames_of_every_kind().await;
        let policies: Vec<&Value> = frames
            .iter()
            .flat_map(|f| f["policies"].as_array().unwrap())
            .collect();
        let check = |table: &str, roots: &[&Value]| {
            for (key, path) in self::table(table) {
                let found = roots
                    .iter()
                    .flat_map(|root| resolve(root, &path))
                    .any(|v| !v.is_null());
                assert!(
                    found,
                    "dashboard.js reads {table}.{key} = `{path}`, which no frame has"
                );
            }
        };
        check("FRAME", &frames.iter().collect::<Vec<_>>());
        check("POLICY", &policies);
        check("ANSWER", &answers.iter().collect::<Vec<_>>());
    }

    /// The fleet page's reads, resolved as the frames' are: in a frame of a
    /// policy coordinated with a fleet and one whose floor follows it, and in the
    /// fleet's answers (its view with an instance held by an action and one
    /// flagged stuck, the actions and audit, an issued action).
    #[cfg(feature = "fleet")]
    #[tokio::test(start_paused = true)]
    async fn every_field_the_fleet_page_reads_is_in_the_frames_and_the_fleet_s_answers() {
        use crate::fleet::{ActionKind, Fleet, FleetSecret, Keys, LocalStore, Store};
        let shop = Shop::new();
        let store = LocalStore::new();
        let fleet = Fleet::builder(store.clone())
            .prefix("shop")
            .secret(Some(FleetSecret::new(vec![1; 32]).unwrap()))
            .build()
            .unwrap();
        let breaker = shop.handles("freight").breaker.unwrap();
        let coordinated = Arc::new(fleet.coordinate(&breaker).unwrap());
        shop.policies
            .register_coordination(Arc::clone(&coordinated))
            .unwrap();
        shop.policies
            .follow_fleet_floor(&fleet, "assistant")
            .unwrap();
        let action = coordinated
            .act(
                ActionKind::ForceOpen,
                "drill",
                "ops",
                Duration::from_secs(600),
            )
            .await
            .unwrap();
        // Applied at the next health check, reported within 5 s.
        tokio::time::sleep(Duration::from_secs(6)).await;
        // An instance flagged stuck, as it reports itself.
        let (now, stuck) = (fleet.wall_ms(), "f".repeat(32));
        store
            .report(
                &Keys::new("shop", "freight").unwrap(),
                &stuck,
                format!(
                    "v2\t{stuck}\topen\t70000\t70000\t40\t40\t12\t\t{now}\tlocal_only\t70000\t2\t0\tpass"
                ),
                now,
                now - 15_000,
            )
            .await
            .unwrap();
        let view = serde_json::to_value(coordinated.fleet_view().await.unwrap()).unwrap();
        let listing = serde_json::json!({
            "actions": coordinated.fleet_actions().await.unwrap(),
            "audit": coordinated.audit_log(50).await.unwrap(),
        });
        let answer = serde_json::to_value(&action).unwrap();
        let mut watched = Watched::default();
        watched.follow(&shop.policies);
        let at = Instant::now();
        let frame = parse(&Book::new(1, true, at).next_frame(&shop.policies, at, &mut watched));
        let mut roots: Vec<&Value> = frame["policies"].as_array().unwrap().iter().collect();
        roots.extend([&view, &listing, &answer]);
        for (key, path) in table("FLEET") {
            let found = roots
                .iter()
                .flat_map(|root| resolve(root, &path))
                .any(|v| !v.is_null());
            assert!(
                found,
                "dashboard.js reads FLEET.{key} = `{path}`, which no frame or fleet answer has"
            );
        }
    }

    #[test]
    fn the_page_reads_only_listed_fields_and_names_every_breaker_state() {
        for (function, table) in [
            ("readFrame", "FRAME"),
            ("read", "POLICY"),
            ("readItem", "POLICY"),
            ("readAnswer", "ANSWER"),
            ("readFleet", "FLEET"),
            ("readFleetItem", "FLEET"),
        ] {
            let listed = self::table(table);
            for key in keys_read_by(function) {
                let path = listed
                    .get(&key)
                    .unwrap_or_else(|| panic!("{function}(…, \"{key}\") is not in {table}"));
                assert_eq!(
                    function.ends_with("Item"),
                    path.contains("[]."),
                    "{function} reads `{path}`"
                );
            }
        }
        // Nothing listed is left unread: the tables are the page's reads.
        let mut used: Vec<String> = [
            "readFrame",
            "read",
            "readItem",
            "readAnswer",
            "readFleet",
            "readFleetItem",
        ]
        .iter()
        .flat_map(|f| keys_read_by(f))
        .collect();
        used.sort();
        used.dedup();
        for table in ["FRAME", "POLICY", "ANSWER", "FLEET"] {
            for key in self::table(table).keys() {
                assert!(used.contains(key), "{table}.{key} is listed but never read");
            }
        }
        let labels = self::table("BREAKER_LABELS");
        for state in BreakerState::ALL {
            assert!(labels.contains_key(state.as_str()), "no label for {state}");
        }
        // Durations arrive in the API's format; the page knows each of its units.
        for unit in ["ns", "us", "ms", "s", "m", "h"] {
            assert!(
                SCRIPT.contains(&format!("|{unit}|"))
                    || SCRIPT.contains(&format!("({unit}|"))
                    || SCRIPT.contains(&format!("|{unit})")),
                "{unit}"
            );
        }
    }

    fn router(policies: Policies) -> Router {
        Router::new().nest("/admin", super::super::router(policies, None))
    }

    #[tokio::test]
    async fn the_page_is_served_under_a_strict_policy_with_nothing_inline() {
        let app = router(Shop::new().policies);
        let get = |path: &str| Request::get(path).body(Body::empty()).unwrap();
        let page = app.clone().oneshot(get("/admin")).await.unwrap();
        assert_eq!(page.status(), StatusCode::OK);
        let csp = page.headers()[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap();
        assert_eq!(csp, CONTENT_SECURITY_POLICY);
        for directive in [
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
        ] {
            assert!(csp.contains(directive), "{csp}");
        }
        assert!(!csp.contains("unsafe"), "{csp}");
        assert_eq!(
            page.headers()[header::CONTENT_TYPE],
            "text/html; charset=utf-8"
        );
        let html = page.into_body().collect().await.unwrap().to_bytes();
        let html = std::str::from_utf8(&html).unwrap();
        // Nested at /admin, the page's links resolve under /admin/.
        assert!(html.contains(r#"<base href="admin/">"#), "{html}");
        assert!(!html.contains("style="), "inline style");
        assert!(!html.contains("<style"), "inline style");
        let handler = html.split(" on").skip(1).any(|rest| {
            let name: String = rest.chars().take_while(char::is_ascii_lowercase).collect();
            !name.is_empty() && rest[name.len()..].starts_with('=')
        });
        assert!(!handler, "inline handler");
        for script in html.split("<script").skip(1) {
            let tag = &script[..script.find('>').unwrap()];
            assert!(tag.contains("src="), "inline script");
            assert!(script[script.find('>').unwrap() + 1..].starts_with("</script>"));
        }
        // The script asks for nothing the policy forbids, and keeps the token in memory.
        for forbidden in [
            "eval(",
            "new Function",
            "innerHTML",
            "localStorage",
            "sessionStorage",
            "document.cookie",
            ".style.",
        ] {
            assert!(!SCRIPT.contains(forbidden), "dashboard.js uses {forbidden}");
        }
        for (path, kind) in [
            ("/admin/dashboard.js", "text/javascript; charset=utf-8"),
            ("/admin/dashboard.css", "text/css; charset=utf-8"),
        ] {
            let res = app.clone().oneshot(get(path)).await.unwrap();
            assert_eq!(res.status(), StatusCode::OK, "{path}");
            assert_eq!(res.headers()[header::CONTENT_TYPE], kind, "{path}");
            assert_eq!(res.headers()[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        }
    }

    #[test]
    fn the_base_is_relative_to_where_the_page_is_served() {
        assert_eq!(base("/admin"), "admin/");
        assert_eq!(base("/ops/admin"), "admin/");
        assert_eq!(base("/"), "./");
        assert_eq!(base("/admin/"), "./");
        assert_eq!(attribute("a\"<b>&"), "a&quot;&lt;b&gt;&amp;");
    }

    /// The next event of a stream, as its JSON frame.
    async fn next_event(body: &mut Body) -> Value {
        let mut text = String::new();
        while !text.contains("\n\n") {
            let frame = body.frame().await.unwrap().unwrap();
            text.push_str(std::str::from_utf8(frame.data_ref().unwrap()).unwrap());
        }
        let data = text.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
        parse(data)
    }

    #[tokio::test(start_paused = true)]
    async fn the_stream_sends_a_frame_at_a_bulkhead_event_with_its_last_change() {
        let shop = Shop::new();
        let app = router(shop.policies.clone());
        let req = Request::get("/admin/events").body(Body::empty()).unwrap();
        // The router is kept: the stream ends when it is dropped.
        let mut body = app.clone().oneshot(req).await.unwrap().into_body();
        let started = Instant::now();
        let first = next_event(&mut body).await;
        assert_eq!(policy(&first, "freight")["last"]["bulkhead"], Value::Null);

        let bulkhead = shop.handles("freight").bulkhead.unwrap();
        bulkhead.force(1).unwrap();
        let next = next_event(&mut body).await;
        assert_eq!(
            policy(&next, "freight")["last"]["bulkhead"],
            serde_json::json!({"from": "2", "to": "1", "cause": "forced", "rehearsal": false, "ago_ms": 0})
        );
        assert_eq!(policy(&next, "freight")["snapshot"]["bulkhead"]["limit"], 1);
        // Sent for the event, not for the tick.
        assert_eq!(Instant::now(), started);

        bulkhead.release();
        let released = next_event(&mut body).await;
        assert_eq!(
            policy(&released, "freight")["last"]["bulkhead"]["cause"],
            "released"
        );
        assert_eq!(Instant::now(), started);
    }

    #[tokio::test(start_paused = true)]
    async fn a_bulkhead_saturation_and_its_relief_are_the_last_bulkhead_change() {
        use crate::bulkhead::BulkheadEvent;
        let at = Instant::now();
        let saturated = BulkheadEvent::Saturated {
            rejection: crate::core::RejectionKind::BulkheadTimeout,
            active: 2,
            queued: 1,
            at,
        };
        let change = bulkhead_change(&saturated).unwrap();
        assert_eq!(
            (change.from.as_str(), change.to.as_str(), change.cause),
            ("room", "saturated", "bulkhead_timeout")
        );
        let relieved = BulkheadEvent::Relieved {
            active: 1,
            limit: 2,
            at,
        };
        let change = bulkhead_change(&relieved).unwrap();
        assert_eq!(
            (change.from.as_str(), change.to.as_str(), change.cause),
            ("saturated", "room", "drained")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_stream_sends_a_frame_at_once_and_one_at_a_transition_before_the_next_second() {
        let shop = Shop::new();
        let app = router(shop.policies.clone());
        let req = Request::get("/admin/events").body(Body::empty()).unwrap();
        let res = app.clone().oneshot(req).await.unwrap();
        assert_eq!(res.headers()[header::CONTENT_TYPE], "text/event-stream");
        let mut body = res.into_body();
        let started = Instant::now();
        let first = next_event(&mut body).await;
        assert_eq!(
            policy(&first, "freight")["snapshot"]["breaker"]["state"],
            "closed"
        );
        assert_eq!(first["changes_allowed"], false);

        shop.fail(4).await;
        let next = next_event(&mut body).await;
        assert_eq!(
            policy(&next, "freight")["snapshot"]["breaker"]["state"],
            "open"
        );
        assert_eq!(policy(&next, "freight")["last"]["breaker"]["to"], "open");
        assert!(next["seq"].as_u64() > first["seq"].as_u64());
        // Sent for the transition, not for the tick (the paused clock has not moved).
        assert_eq!(Instant::now(), started);

        // Without transitions, one a second; a second viewer shares the sampler.
        let tick = next_event(&mut body).await;
        assert_eq!(Instant::now(), started + INTERVAL);
        let req = Request::get("/admin/events").body(Body::empty()).unwrap();
        let mut other = app.oneshot(req).await.unwrap().into_body();
        let seen = next_event(&mut other).await;
        assert_eq!(seen["instance"], tick["instance"]);
        assert_eq!(seen["seq"], tick["seq"]);
    }
}
