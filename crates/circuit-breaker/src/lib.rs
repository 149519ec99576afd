//! A circuit breaker for Tower services: stop calling a dependency that is failing,
//! probe it carefully, and take the load back gradually.
//!
//! Each call to a struggling dependency adds latency, holds a connection and may
//! slow its recovery. While the breaker is open every call fails at once with
//! [`CircuitOpen`] (carrying a retry-after), and the dependency receives nothing —
//! not even a `poll_ready`. After the open interval a few probes test it; success
//! closes the breaker, failure reopens it.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use seawall_circuit_breaker::{CircuitBreakerLayer, State};
//! use seawall_core::{find_rejection, BoxError, RejectionKind};
//! use tower::{service_fn, Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), BoxError> {
//! // The last 10 outcomes, at least 10 of them: 5 failures open it for 10 s.
//! let layer = CircuitBreakerLayer::builder("freight")
//!     .count_window(10, 10, 0.5)
//!     .open_for(Duration::from_secs(10))
//!     .build()?;
//! let handle = layer.handle();
//!
//! let supplier = service_fn(|_req: http::Request<&str>| async {
//!     Err::<&str, BoxError>("connection refused".into())
//! });
//! let quotes = layer.layer(supplier);
//!
//! for _ in 0..10 {
//!     let err = quotes.clone().oneshot(http::Request::new("SP -> RJ")).await.unwrap_err();
//!     assert!(find_rejection(&*err).is_none()); // the supplier's own error
//! }
//! assert_eq!(handle.state(), State::Open);
//!
//! // Now calls fail fast, without reaching the supplier, and say when to come back.
//! let err = quotes.clone().oneshot(http::Request::new("SP -> RJ")).await.unwrap_err();
//! let rejection = find_rejection(&*err).unwrap();
//! assert_eq!(rejection.kind(), RejectionKind::CircuitOpen);
//! // 10 s, stretched by up to 20 % so that replicas which tripped together do not
//! // all probe at once (`jitter`, on by default).
//! assert!(rejection.retry_after().unwrap() <= Duration::from_secs(12));
//! assert_eq!(handle.snapshot().counters.short_circuited, 1);
//! # Ok(())
//! # }
//! ```
//!
//! # The state machine
//!
//! ```text
//!                            (1) trip
//!        +-------------+ ------------------------------> +-------------+
//!   +--> |   CLOSED    |                                 |    OPEN     | <-----+
//!   |    | (R) ramp    | <-------------+                 |             |       |
//!   |    +-------------+               |                 +-------------+       |
//!   |                                  |                        |              |
//!   |                 (3) enough probes succeeded     (2) interval elapsed     |
//!   |                                  |                    (lazy)             |
//!   |                                  |                        v              |
//!   |                                  |                 +-------------+       |
//!   |                                  +---------------- |  HALF-OPEN  | ------+
//!   |                                                    |  (probes)   |  (4) probe failed
//!   |                                                    | (G) gate    |  (5) probe timed out
//!   |                                                    +-------------+
//!   |
//!   |   verdicts, from open or half-open, about the current trip only:
//!   |                               (V1) close   -> CLOSED (through the ramp)
//!   |                               (V2) reopen  -> OPEN   (interval from now, backoff)
//!   |
//!   |   operators, from any state:  (6) force(Open)   -> FORCED_OPEN
//!   |                               (7) force(Closed) -> FORCED_CLOSED
//!   |                               (8) disable       -> DISABLED
//!   +------------------------------ (9) reset         -> CLOSED (fresh)
//!                                       (release: reset, from 6, 7 or 8 only)
//! ```
//!
//! The policy itself is [`CircuitBreakerMachine`], a pure state machine (no clock,
//! no lock, no counters: each step takes `now` and returns what happened), public
//! so that a configuration can be tried on a sequence of outcomes in a test.
//!
//! Every transition increments the breaker's *epoch*. Each admitted call carries
//! the epoch it was admitted in; an outcome from an older epoch is counted
//! (`stale`) but never drives a transition nor enters the window, so a slow call
//! admitted while closed that succeeds while a probe is in flight cannot close the
//! breaker.
//!
//! 1. **Closed → Open (trip).** Guard, evaluated when a failure (or, with slow-call
//!    detection, a slow call) of the current epoch is recorded — a success alone
//!    never trips: consecutive failures `>=` threshold; or, for a count or time
//!    window, `calls >= min_calls` and (`failure rate >= failure_rate` or
//!    `slow rate >= slow_call.rate`). The open interval starts at the trip
//!    (`opened_at = now`), not at the last call. The window is kept until closing.
//! 2. **Open → Half-open (interval elapsed).** Guard: `now >= opened_at + open_for`.
//!    Lazy: no timer; [`Handle::state`] reports it as soon as it is due, and the
//!    next call makes it (dated when it became due) and becomes the first probe.
//!    While open, every call is rejected with `retry_after = opened_at + open_for - now`.
//! 3. **Half-open → Closed (probes succeeded).** Guard: `probes_to_close` probes of
//!    this half-open period succeeded. In the same step the window is emptied and
//!    the failed-probe count cleared, so the next N failures trip from zero; the
//!    backoff is forgotten (after the ramp, if there is one).
//! 4. **Half-open → Open (probe failed).** Guard: a probe of this period
//!    classified as a failure (a deadline expiry included). The timer restarts at
//!    `now`, with the interval grown by the backoff.
//! 5. **Half-open → Open (probe timed out).** Guard: a probe neither finished nor
//!    dropped within `half_open_timeout` of its start counts as failed; the open
//!    interval counts from that instant. Lazy, like (2). Except a probe held until
//!    its body ends (see [Streams](#streams-reporting-when-the-body-ends)) whose
//!    response looked healthy and whose body is still streaming: it is judged a
//!    success at that instant, towards (3).
//! 6. – 9. **Operators.** Forced open rejects everything, with no retry-after
//!    (only an operator ends it, so no instant can be promised), and nothing but
//!    an operator moves it; forced closed admits everything and
//!    records the window but never trips; disabled admits everything and only
//!    counts; reset empties the window, forgets the backoff and the failed probes.
//!
//! Inside half-open (no transition):
//! - at most `half_open_max` probes are in flight; **a caller arriving while they
//!   are all taken is rejected** with [`CircuitOpen`] and a positive retry-after
//!   (what remains of the oldest probe's half-open timeout), never made to wait;
//! - a probe classified [`Outcome::Ignore`](seawall_core::Outcome) (say, an inner
//!   bulkhead's rejection) frees its slot, no transition;
//! - a probe dropped before finishing (**cancelled**) frees its slot, is not recorded.
//!
//! In every state, **a call whose dependency panics** (in `call` or while its future
//! is polled) is recorded as a **failure**, as a probe's too, and frees any slot it
//! held: the mark is made while the panic unwinds through the breaker, so it counts
//! even when the panic is caught further out (`catch_unwind`, tower-http's
//! `CatchPanicLayer`, a spawned task's `JoinError`), where the future is dropped
//! only after unwinding has ended and would otherwise look cancelled.
//!
//! **(G) The probe gate** (optional, [`ProbeGate`], installed with
//! [`Handle::set_probe_gate`]): asked, synchronously and under the breaker's lock,
//! just before a half-open breaker would admit a probe — never on the closed path,
//! never while the open interval runs. [`ProbeDecision::Allow`] admits the probe;
//! [`ProbeDecision::HoldOff`] rejects the call as [`CircuitOpen`] with the gate's
//! retry-after and nothing reaches the dependency (not even `poll_ready`). While no
//! probe is in flight the hold is remembered: calls are rejected without the lock
//! until it ends, or until [`Handle::recheck_probe_gate`]. Holding is no
//! transition: the breaker stays half-open, its epoch unchanged. A fleet
//! coordinator uses it so that only the holder of a fleet-wide lease probes.
//!
//! **(V1), (V2) Verdicts** ([`Handle::apply_verdict`]): what an outside
//! coordinator learned from a probe elsewhere. Each names the trip it is about by
//! the breaker's own epoch ([`Snapshot::trip_epoch`], the epoch of the closed →
//! open transition), and is applied only while the breaker is still open or
//! half-open in that trip: a verdict about an older trip is [`VerdictOutcome::Stale`]
//! and changes nothing, so the coordinator decides what "newer" means in its own
//! terms (a fleet epoch) and the breaker needs no clock from another host.
//! [`Verdict::Close`] leaves open at once and takes the load back through the
//! ramp (reason [`Reason::VerdictClosed`]); [`Verdict::Reopen`] restarts the open
//! interval from now, grown by the backoff (reason [`Reason::VerdictReopened`]),
//! making probes in flight stale. Forced and disabled breakers ignore verdicts
//! ([`VerdictOutcome::Overridden`]).
//!
//! Inside closed, **(R) the ramp** (optional): for `ramp.duration` after closing,
//! only a share of calls growing linearly from `ramp.start_share` to 100 % is
//! admitted (the first call always is); the rest are rejected with a retry-after
//! of what remains of the ramp. A trip during the ramp counts as a re-trip for the
//! backoff.
//!
//! **Open interval.** `open_for`, multiplied by `backoff_multiplier` for each
//! re-trip (a failed or timed-out probe, a trip during the ramp) up to
//! `max_open_for`, then stretched by a random fraction in `[0, jitter)` of itself,
//! drawn from an injectable [`RandomSource`](seawall_core::RandomSource) (see
//! [`CircuitBreakerBuilder::random_source`]), so a fleet whose breakers opened
//! together does not probe in lockstep. With jitter the interval is never shorter
//! than configured. The jitter is on by default ([`DEFAULT_JITTER`], 20 %): set it
//! with `jitter(..)` (`jitter(0.0)` for exact intervals); a breaker that sets none
//! and is coordinated by a fleet takes the fleet's.
//!
//! # Classification
//!
//! Any seawall-core classifier or per-request factory
//! ([`CircuitBreakerBuilder::classifier`]); the default is
//! [`ErrorsAsFailures`](seawall_core::ErrorsAsFailures). All provided classifiers
//! *ignore* seawall admission rejections from inner layers (a full bulkhead says
//! nothing about the supplier) and count a deadline expiry as a failure.
//!
//! # Deadlines
//!
//! When a seawall [`Deadline`](seawall_core::Deadline) is current (set by a
//! [`DeadlineLayer`](seawall_core::DeadlineLayer) further out; it travels with the
//! task, not the request), the breaker bounds the inner call by it. Running out is
//! recorded as a failure — a slow dependency trips the breaker instead of merely
//! being cancelled from outside — and answered with [`DeadlineExceeded`]. The
//! deadline is read in `call`, or at the response future's first poll when `call`
//! ran in another task (tower's `Buffer`).
//!
//! # Any request type
//!
//! The service accepts any request type, with no trait to implement:
//!
//! ```
//! use seawall_circuit_breaker::CircuitBreakerLayer;
//! use seawall_core::BoxError;
//! use tower::{service_fn, Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), BoxError> {
//! let redis = service_fn(|key: String| async move { Ok::<_, BoxError>(format!("value of {key}")) });
//! let guarded = CircuitBreakerLayer::builder("redis").build()?.layer(redis);
//! assert_eq!(guarded.oneshot("user:1".to_owned()).await?, "value of user:1");
//! # Ok(())
//! # }
//! ```
//!
//! # Readiness mode, for balancers
//!
//! By default an open breaker answers `poll_ready` with ready and rejects in the
//! response future: right for a single dependency (the caller gets
//! [`CircuitOpen`] at once, with a retry-after), wrong under a load balancer —
//! `tower::balance::p2c::Balance` and `ReadyCache` choose among *ready*
//! endpoints, so they keep sending a share of the traffic to the replica whose
//! breaker is open, only to collect rejections.
//!
//! [`CircuitBreakerLayer::pending_while_open`] gives the same breaker in readiness
//! mode ([`PendingWhileOpen`]): `poll_ready` is **pending while the breaker would
//! turn a call away**, so the balancer stops choosing that endpoint, and is woken
//! when that ends — at the end of the open interval (a timer set in `poll_ready`),
//! when a probe ends (a transition, or a probe slot freed), or on any operator
//! change. Half-open admits its probes as usual: the first service polled after the
//! interval sends one. Forced open never ends by itself: a waiting service is woken
//! by the operator's change at once, and looks again every `open_for` meanwhile.
//! The ramp after closing is no wait (its share is of the calls that ask).
//!
//! Use it for each endpoint under a balancer (one breaker per replica), or under
//! `tower::buffer::Buffer` when callers should wait for the breaker rather than be
//! rejected. If every endpoint may be open at once, bound the wait in front
//! (`tower::load_shed`, a timeout). The default mode pays nothing for it: it is a
//! different service type, and a breaker notifies waiters only once a service in
//! readiness mode has waited on it (a transition then costs one more lock).
//!
//! ```
//! use std::task::{Context, Poll, Waker};
//! use std::time::Duration;
//! use seawall_circuit_breaker::{CircuitBreakerLayer, State};
//! use seawall_core::BoxError;
//! use tower::{service_fn, Layer, Service, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), BoxError> {
//! let layer = CircuitBreakerLayer::builder("replica-a")
//!     .consecutive_failures(1)
//!     .open_for(Duration::from_secs(10))
//!     .build()?
//!     .pending_while_open();
//! let handle = layer.handle();
//! let mut replica = layer.layer(service_fn(|_key: String| async {
//!     Err::<String, BoxError>("connection refused".into())
//! }));
//!
//! assert!(replica.ready().await?.call("user:1".to_owned()).await.is_err());
//! assert_eq!(handle.state(), State::Open);
//! // Open: not ready, so a balancer picks another replica.
//! let mut cx = Context::from_waker(Waker::noop());
//! assert!(Service::<String>::poll_ready(&mut replica, &mut cx).is_pending());
//! # Ok(())
//! # }
//! ```
//!
//! # Streams: reporting when the body ends
//!
//! By default a call is reported when its response arrives. A gRPC stream (or any
//! streamed HTTP body) can fail long after that: a server-streaming RPC sends
//! `grpc-status` in the trailers that end its body, after its messages. With the
//! `http` feature, [`CircuitBreakerLayer::hold_until_body_end`] gives the same
//! breaker as [`UntilBodyEnd`]: a call whose response looks healthy by its headers
//! keeps its ticket in the response body ([`HeldTicket`], in seawall-core's
//! `Guarded` body, as the bulkhead's `UntilBodyEnd` keeps its permit) and is
//! reported when the body ends — by the trailers' `grpc-status` with
//! [`GrpcStatus`](seawall_core::GrpcStatus), as a failure if the body errors, as
//! cancelled if it is dropped first. A failure visible in the headers
//! (trailers-only gRPC, HTTP 5xx) is reported at once, as in the default mode. The
//! request's deadline, if one is current, bounds the body too: a body still
//! streaming when it passes ends with a [`DeadlineExceeded`] error and the call is
//! recorded as a timeout failure. The response type becomes
//! `http::Response<`[`HeldBody`]`<B, _>>` (that is `Guarded<BoundedBody<B>,
//! HeldTicket<_>>`, its body error boxed), which is why the mode is a choice.
//! [`KeyedCircuitBreakerLayer::hold_until_body_end`] gives the same mode to a
//! breaker per key.
//!
//! **Clients hold, servers choose.** For a client stack (a hyper-util `Client`, a
//! tonic `Channel`) hold until the body ends, with the bulkhead's
//! `hold_until_body_end` too: the connection to the dependency is busy, and its
//! answer can still fail, until then. This is what seawall's examples do. For a
//! server route that streams to its own caller (server-sent events, long polling,
//! a slow reader), holding would let the caller's reading pace pin a slot and a
//! ticket; keep the default there, which ends the call at the response's headers.
//!
//! **The long-stream rule.** A half-open probe whose response looked healthy and
//! whose body is still streaming without error at its half-open timeout is judged
//! by what it has shown so far: a success, at the timeout. A long-lived stream (a
//! price feed, a watch) would otherwise keep the breaker half-open for as long as it
//! lasts, or fail a dependency that has answered and kept answering. The verdict is
//! given once: when the stream ends later, its call is counted (as stale) and never
//! acted on. A probe still waiting for its response at the timeout fails, as always.
//!
//! ```
//! use std::time::Duration;
//! use seawall_circuit_breaker::CircuitBreakerLayer;
//! use seawall_core::{BoxError, GrpcStatus};
//! use tower::{service_fn, Layer, ServiceExt};
//!
//! # #[cfg(not(feature = "http"))]
//! # fn main() {}
//! # #[cfg(feature = "http")]
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), BoxError> {
//! let layer = CircuitBreakerLayer::builder("prices")
//!     .classifier(GrpcStatus::default())
//!     .half_open_timeout(Duration::from_secs(30))
//!     .build()?
//!     .hold_until_body_end(); // feature `http`
//! let handle = layer.handle();
//! let feed = layer.layer(service_fn(|_req: http::Request<()>| async {
//!     Ok::<_, BoxError>(http::Response::new(http_body_util::Full::new(bytes::Bytes::from("tick"))))
//! }));
//! let response = feed.oneshot(http::Request::new(())).await?;
//! assert_eq!(handle.snapshot().counters.successes, 0); // the body is still to be read
//! drop(response); // dropped before its end: cancelled
//! assert_eq!(handle.snapshot().counters.cancelled, 1);
//! # Ok(())
//! # }
//! ```
//! # Shadow mode: try a policy on live traffic first
//!
//! With [`CircuitBreakerConfig::shadow`] (the builder's
//! [`shadow`](CircuitBreakerBuilder::shadow), `shadow = true` in a policy file,
//! [`Handle::set_shadow`] at run time), the breaker decides every call exactly as
//! it would enforcing, but a call it would turn away goes to the dependency
//! instead and is counted as a **shadow rejection**, by the cause it would have
//! been rejected for (`open`, `probe_slots_full`, `ramping`):
//! [`Counters::shadow_rejections`] and
//! `seawall_breaker_shadow_rejections_total{name, cause}`.
//!
//! - **The machine runs as if enforcing.** It trips, opens, half-opens on
//!   schedule, admits probes into its probe slots, ramps up, and counts its window
//!   as it would; a call let through in shadow consumes what the rejection would
//!   have (the ramp's share, the probe gate's hold) and nothing more.
//! - **What is let through changes nothing.** It carries a shadow ticket: never a
//!   probe, never recorded in the window, never a transition, so a success let
//!   through while open does not close the breaker, and a failure let through
//!   while half-open does not reopen it. Its outcome is still counted in the
//!   breaker's counters by how it ended (`successes`, `failures`, `timeouts`, …;
//!   in metrics `calls_total{outcome}`), because the dependency really answered it,
//!   and never in `short_circuited`. The same sequence of calls therefore goes
//!   through the same states in both modes, and the shadow rejections equal the
//!   rejections enforcement would have made.
//! - **Forced open is obeyed.** An operator's [`Handle::force`]`(Forced::Open)` is a decision,
//!   not a limit being tried: it rejects in shadow mode too.
//! - **Switching** takes effect on the next call and keeps the state: switch it off
//!   while open and the next call is rejected. [`Handle::set_shadow`] changes the
//!   configuration in force, so [`Handle::revert`] returns to the built one.
//! - A call whose `poll_ready` ran before shadow mode was switched on, and found the
//!   breaker open, did not poll the inner service; it is turned away (and counted
//!   short-circuited) even though its `call` came after the switch.
//! - **Cost:** the mode is a bit of the word the closed path already loads, so a
//!   closed call pays nothing for it; an open call let through pays what an
//!   admitted call pays, plus one relaxed increment.
//!
//! # Where state lives, and what `Clone` shares
//!
//! A [`CircuitBreakerLayer`] owns one breaker, created when it is built: every
//! service it builds (in either mode), every clone of those services and every
//! clone of the layer share it; a readiness-mode service's wait is its own. A service clone does not share the inner service's reserved
//! readiness. Breakers are per process. For one breaker per host, route or tenant,
//! with a bound on the number of keys, use [`KeyedCircuitBreakerLayer`]
//! ([`CircuitBreakerBuilder::keyed`]).
//!
//! # Cost
//!
//! A closed call takes no lock: admission is one atomic load; the response future
//! (a concrete type) holds one `Arc` to the lane of the breaker its thread takes;
//! a success is one compare-and-swap on that lane's own line, folded into the
//! window by whoever next takes the lock (a failure, a snapshot, an operator), so
//! the window sees the same sequence as if each success had been recorded on its
//! own. Calls through different lanes thus write no line in common, whether they
//! succeed, are ignored, cancelled or turned away while open (threads beyond the
//! lanes share them, and the `metrics` feature's counters are the recorder's); a
//! keyed layer's key is one lane that owns its breaker and counts in it. No allocation, no span, and no clock read unless slow-call
//! detection or a time window needs one (a time window records every outcome under
//! the lock). Failures, probes, the ramp and operators take a short uncontended
//! mutex (its holder reads each lane's line). An open rejection takes no lock and
//! reads the clock once, in `poll_ready` (to know whether a probe is due and the
//! inner service must be polled). `call` then needs no clock: the inner service
//! was not polled, so the call cannot go out whenever it comes, and the
//! [`CircuitOpen`] it gets carries the end of the open interval and measures its
//! retry-after when read (a call made long after its `poll_ready` is never given a
//! stale remainder). That boxed rejection, copied from one the breaker built with
//! its name, is its one allocation.
//!
//! Memory is fixed by the configuration and the machine, never by traffic: a
//! breaker with a 100-call count window takes under 600 bytes (one byte per
//! count-window slot, 12 bytes per time-window bucket), plus its lanes when a
//! layer's services share it (twice the cores, as a power of two, at most 32, of
//! about 450 bytes each with its tally line: 2.4 KB in all on a 2-core machine).
//! What only matters once it has tripped, been forced or reconfigured (probe
//! slots, transition counts, the backoff state, the subscription channel) is
//! allocated then, about 600 bytes, and kept.
//!
//! # Layout
//!
//! ```text
//! lib.rs              these docs, the re-exports
//! config.rs           CircuitBreakerConfig and its parts, as plain validated data (a leaf)
//! layer.rs            CircuitBreakerLayer and its builder
//! service.rs          CircuitBreaker, the Service: asks the shared state, calls the inner service
//! future.rs           ResponseFuture: holds the ticket, reports the call once (or its cancellation)
//! readiness.rs        PendingWhileOpen: poll_ready pending while open, for balancers
//! body.rs             UntilBodyEnd: the ticket held until the response body ends (feature `http`)
//! keyed.rs            KeyedCircuitBreakerLayer: one breaker per key, a bounded number of keys
//! handle.rs           Handle, Snapshot, Counters: the operator's view and controls
//! hooks.rs            ProbeGate and Verdict: what an outside coordinator asks and tells
//! machine.rs          CircuitBreakerMachine, the pure policy: its phases, lazy transitions,
//!                     backoff and jitter, operators, reconfiguration, verdicts
//!   machine/transition.rs State, Reason, Transition and the events the machine returns
//!   machine/window.rs     the counting windows behind the trip policies, and when they trip
//!   machine/admission.rs  tickets, admission, the ramp, half-open probes and the probe gate
//!   machine/report.rs     outcomes in: completion, cancellation, stale results, probe verdicts
//! state.rs            the shared state: the atomic word of the lock-free paths, the machine
//!                     behind a mutex
//!   state/driven.rs       what the machine leaves to its driver: counters, subscribers,
//!                         the random source, the lock-free mode
//!   state/lane.rs         Lane, what an admitted call holds: a keyed breaker of its own,
//!                         or one lane of a shared breaker, a thread's own cache lines
//! telemetry.rs        tracing events and metrics
//! sync.rs             std's atomics and mutex, or loom's in the loom models
//! loom_breaker.rs     loom models of the word and the lanes' lines (tests only)
//! ```
//!
//! A new trip condition is a [`TripPolicy`] variant and its validation
//! (`config.rs`), its window and its trip rule (`machine/window.rs`), and, if it
//! needs one, its [`Reason`] (`machine/transition.rs`); the compiler points at each
//! place.
//!
//! # Observability
//!
//! [`Handle`] gives a [`Snapshot`] (state, how long, window counts, retry-after,
//! counters, and what shows a breaker stuck open: `Open` (tripped) versus
//! `ForcedOpen`, consecutive failed probes, time spent open), a subscription to
//! [`Transition`]s, and the operator controls. `tracing` events (target
//! `seawall::circuit_breaker`) are emitted on every transition (`WARN` when
//! opening) and rejection (`DEBUG`); the `metrics` feature exports counters and a
//! state gauge (names in the `telemetry` module source, all prefixed
//! `seawall_breaker_`).
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "http")]
mod body;
mod config;
mod future;
mod handle;
mod hooks;
mod keyed;
mod layer;
#[cfg(all(test, loom))]
mod loom_breaker;
mod machine;
mod readiness;
mod service;
mod state;
mod sync;
mod telemetry;

#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub use body::{
    HeldBody, HeldTicket, KeyedUntilBodyEnd, KeyedUntilBodyEndLayer, UntilBodyEnd,
    UntilBodyEndFuture, UntilBodyEndLayer,
};
pub use config::{
    CircuitBreakerConfig, RampConfig, SlowCallConfig, TripPolicy, DEFAULT_JITTER, MAX_COUNT_WINDOW,
    MAX_HALF_OPEN_PROBES,
};
pub use future::ResponseFuture;
pub use handle::{Counters, Forced, Handle, Snapshot, TransitionCount};
pub use hooks::{ProbeDecision, ProbeGate, ProbeRequest, Verdict, VerdictOutcome};
pub use keyed::{
    KeyedCircuitBreaker, KeyedCircuitBreakerBuilder, KeyedCircuitBreakerLayer, KeyedHandle,
    KeyedSnapshot,
};
pub use layer::{CircuitBreakerBuilder, CircuitBreakerLayer};
pub use machine::{
    Admission, CircuitBreakerEvent, CircuitBreakerMachine, Reason, Recorded, Report, State, Ticket,
    Transition,
};
pub use readiness::{PendingWhileOpen, PendingWhileOpenLayer};
pub use seawall_core::{CircuitOpen, DeadlineExceeded, DEFAULT_MAX_KEYS};
pub use service::CircuitBreaker;

/// Gives the breaker's metrics their help text and unit.
///
/// A description given before a recorder is installed is lost, so call this (or the
/// facade's `seawall::metrics::describe()`) after installing the recorder.
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub fn describe_metrics() {
    telemetry::describe();
}
