//! A bulkhead for Tower services: a cap on concurrent calls to one dependency,
//! with a short, bounded, timed queue in front of it.
//!
//! The point of a bulkhead is that one slow dependency can use only its own
//! capacity: when the freight supplier hangs, at most `max_concurrent` calls wait
//! on it, at most `max_queue` more wait for a slot, and everyone else is told
//! at once ([`BulkheadFull`]) or after a short wait ([`BulkheadTimeout`]) — while
//! the rest of the service, with its own bulkheads, keeps working.
//!
//! The limit of active calls is fixed (`max_concurrent`) or **adaptive**: an
//! algorithm finds it from what the admitted calls say (see
//! [An adaptive limit](#an-adaptive-limit)).
//!
//! # Configuration
//!
//! | field | default | meaning |
//! |---|---|---|
//! | `max_concurrent` | 8 | calls in the inner service at once |
//! | `queue` | 10 waiting, 20 ms | the line in front of the slots: `max_queue` calls wait, each for at most `max_wait`, shortened by the request's [`Deadline`]; [`QueuePolicy`] lists its options |
//! | `adaptive` | none | an algorithm that sets the limit of active calls instead of `max_concurrent` ([`adaptive`]) |
//! | `shadow` | `false` | count what would be rejected, and let it through ([shadow mode](#shadow-mode-try-a-limit-on-live-traffic-first)) |
//!
//! **Limits are per instance.** A bulkhead counts the calls of the process it
//! runs in: three instances of a service, each with `max_concurrent = 8`, allow
//! up to **24** concurrent calls to the supplier, not 8. Divide what the supplier
//! can take by the number of instances, or cap it fleet-wide: `seawall-fleet`'s
//! `Fleet::cap` leases each instance a share of one cap through a shared store
//! and applies it with [`Handle::set_allotment`]. It also cannot limit remote work that
//! goes on after a caller gave up; it only stops counting when the local call
//! really ends (see below).
//!
//! **Services built from one layer share one bulkhead.** [`BulkheadLayer`]
//! creates its bulkhead when it is built; every service it builds and every clone
//! of them count against the same slots (like tower's
//! `GlobalConcurrencyLimitLayer`). Separate dependencies need separate layers
//! (per-dependency pools: payments 30, inventory 20, recommendations 10); for one
//! bulkhead per host, route or tenant, use [`KeyedBulkheadLayer`]
//! ([`BulkheadBuilder::keyed`]), which bounds the number of keys.
//!
//! # Example
//!
//! ```
//! use std::convert::Infallible;
//! use std::time::Duration;
//! use seawall_bulkhead::BulkheadLayer;
//! use seawall_core::{find_rejection, RejectionKind};
//! use tower::{service_fn, Layer, Service, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), seawall_core::BoxError> {
//! // One bulkhead per dependency, with the defaults spelled out.
//! let freight = BulkheadLayer::builder("freight")
//!     .max_concurrent(8)
//!     .max_queue(10)
//!     .max_wait(Duration::from_millis(20))
//!     .build()?;
//! let handle = freight.handle();
//!
//! let quote = service_fn(|req: http::Request<&'static str>| async move {
//!     Ok::<_, Infallible>(format!("quote for {}", req.into_body()))
//! });
//! let mut svc = freight.layer(quote);
//! let answer = svc.ready().await?.call(http::Request::new("01310-100")).await?;
//! assert_eq!(answer, "quote for 01310-100");
//!
//! let s = handle.snapshot();
//! assert_eq!((s.admitted, s.active, s.rejected_full), (1, 0, 0));
//!
//! // A bulkhead with no free slot and no room to wait answers at once.
//! let tight = BulkheadLayer::builder("tight").max_concurrent(1).max_queue(0).build()?;
//! let mut svc = tight.layer(service_fn(|_req: http::Request<()>| std::future::pending::<Result<(), Infallible>>()));
//! let mut busy = Box::pin(svc.ready().await?.call(http::Request::new(())));
//! assert!(futures_poll_once(busy.as_mut()).is_pending()); // holds the only slot
//! let err = svc.ready().await?.call(http::Request::new(())).await.unwrap_err();
//! assert_eq!(find_rejection(&*err).unwrap().kind(), RejectionKind::BulkheadFull);
//! # Ok(())
//! # }
//! # fn futures_poll_once<F: std::future::Future>(f: std::pin::Pin<&mut F>) -> std::task::Poll<F::Output> {
//! #     let waker = std::task::Waker::noop();
//! #     f.poll(&mut std::task::Context::from_waker(&waker))
//! # }
//! ```
//!
//! # An adaptive limit
//!
//! A fixed limit is wrong twice: too high, and the supplier's own queue hides in
//! our latency (it answers, slowly, then with 503s); too low, and healthy capacity
//! is refused. With [`BulkheadBuilder::adaptive`] an algorithm moves the limit
//! between its `min_limit` and `max_limit` from what the calls it admitted say;
//! everything else stays: the bounded, timed FIFO queue, the deadline bound, the
//! typed rejections, the permit held until the work ends.
//!
//! ```
//! use std::time::Duration;
//! use seawall_bulkhead::adaptive::AimdConfig;
//! use seawall_bulkhead::{BulkheadLayer, OverloadStatus};
//!
//! # fn main() -> Result<(), seawall_core::ConfigError> {
//! let freight = BulkheadLayer::builder("freight")
//!     .max_queue(10)
//!     .max_wait(Duration::from_millis(20))
//!     .adaptive(AimdConfig {
//!         min_limit: 2,
//!         max_limit: 100,
//!         // The supplier answers in about 100 ms when it is not queueing.
//!         timeout: Duration::from_millis(150),
//!         ..AimdConfig::default()
//!     })
//!     .build()?
//!     // HTTP and gRPC: 429, 503 and RESOURCE_EXHAUSTED are overload too.
//!     .overload(OverloadStatus::default());
//! assert_eq!(freight.handle().snapshot().limit, 20); // the initial limit
//! # Ok(())
//! # }
//! ```
//!
//! **Which algorithm.** [`Aimd`](adaptive::Aimd) when the supplier *says* it is
//! overloaded (it sheds with 429/503) or when you know its normal latency (its
//! `timeout`); [`Gradient`](adaptive::Gradient) when it queues quietly and you do
//! not know its latency, or it varies: the gradient learns a baseline and measures
//! it again on a jittered schedule. The [`adaptive`] module says more, and how each
//! one moves.
//!
//! **What feeds it.** Each response future reports its call once, classified by the
//! layer's overload classifier ([`BulkheadLayer::overload`]): *overloaded* (a
//! `429`, a `503`, gRPC `RESOURCE_EXHAUSTED`, a timeout from a breaker or deadline
//! below), *served* (any other answer, a `404` or a `500` included: the supplier
//! answered, and its latency is a fair sample), or *no evidence* (an inner
//! breaker's `CircuitOpen`, a transport error). The default classifier,
//! [`TimeoutsAsOverload`], works for any response type and sees only timeouts;
//! use [`OverloadStatus`] for HTTP and gRPC. The bulkhead's own rejections never
//! reach it: they are decided before the dependency is called. A cancelled call
//! (its future dropped) reports nothing. The latency is measured from admission
//! (in backpressure mode, from the slot's reservation in `poll_ready`) to the
//! inner future's completion, so the bulkhead's own queue never counts:
//! one fast-path admission in `sample_every` (default 8) and every call that waited
//! for its slot read the clock; the others read none.
//!
//! **The limit changes admission only.** When it falls, running calls finish (no
//! preemption) and nobody is admitted until active calls are below it; when it
//! rises, waiters are admitted at once. No call is ever admitted while active ≥
//! the limit in force, even with callers racing a change (a change invalidates the
//! fast path's compare-and-swap). `max_queue` and `max_wait` keep their meaning.
//!
//! **Reading the limit in an incident.** `seawall_bulkhead_limit` (and
//! [`Snapshot::limit`]) is what this instance currently lets through to the
//! supplier; sum it across instances for the fleet. Read it against
//! `seawall_bulkhead_active` and the rejections:
//!
//! - limit steady, active at the limit, some `rejected_total{reason="full"}`: the
//!   supplier serves about that many at once, and the bulkhead is keeping the
//!   excess out of its queue. Normal under load. (AIMD saws up and down by ~10 %;
//!   that is how it probes.)
//! - limit falling toward `min_limit`: the supplier is overloaded (or much slower)
//!   *now*; look at the supplier, not at the bulkhead. Raising the limit only
//!   rebuilds its queue.
//! - limit at `max_limit`: the algorithm sees no overload at all; `max_limit` is
//!   what bounds this instance.
//! - a gradient's limit dipping briefly every `min_rtt_every`: it is measuring its
//!   baseline ([`AdaptiveSnapshot::measuring_min_rtt`], [`AdaptiveSnapshot::min_rtt`]).
//!
//! To take the valve in hand, [`Handle::force`] holds the limit at a value
//! (the algorithm is not fed meanwhile) and [`Handle::release`] lets it go on
//! *from that value*, so the end of an incident does not jump back to a limit
//! learned before it.
//!
//! **Per key.** [`BulkheadBuilder::adaptive`] followed by
//! [`keyed`](BulkheadBuilder::keyed) gives every key of a
//! [`KeyedBulkheadLayer`] its own algorithm, fed only by that key's calls, so one
//! slow host shrinks its own limit and no other. A key forgotten at the bound on
//! keys forgets what it learned and comes back at the initial limit; in the
//! layer's metric series `seawall_bulkhead_limit` is then the sum of the live
//! keys' limits (as for a fixed keyed layer: each key adds its `max_concurrent`),
//! as `seawall_bulkhead_active` is the sum of their active calls.
//!
//! # The life of a call
//!
//! ```text
//!            call()
//!              │  slot free and nobody waiting? ── yes ──────────────┐
//!              │  (one compare-and-swap, no lock, no clock)           │
//!              ▼ no                                                   │
//!     queue full? ── yes ──► BulkheadFull (first poll, no timer)      │
//!              │ no                                                   │
//!              ▼                                                      ▼
//!        ┌──────────┐  slot handed over (FIFO)                  ┌──────────┐
//!        │ WAITING  │ ────────────────────────────────────────► │  READY   │ drive a clone of the
//!        └──────────┘                                           └──────────┘ inner service to readiness
//!         │        │                                                  │ call it
//!  max_wait or     dropped: leaves the line at once,                  ▼
//!  deadline        takes no slot                                ┌──────────┐
//!         ▼                                                     │ CALLING  │ holds the permit
//!   BulkheadTimeout (with how long it waited)                   └──────────┘
//!                                                                     │ inner future completes
//!                                                                     │ or is dropped
//!                                                                     ▼
//!                           slot freed ─► handed to the front of the line, if anyone waits
//! ```
//!
//! **Where admission happens.** In the default mode,
//! [`Service::poll_ready`](tower_service::Service::poll_ready)
//! is always ready and reserves nothing: no slot, no inner capacity (for the
//! opposite, see [backpressure mode](#backpressure-mode)).
//! [`call`](tower_service::Service::call) decides; a call that cannot go out at
//! once takes a clone of the inner service with it (hence `S: Clone`, as
//! hyper-util's client, tonic's `Channel` and axum's router are):
//!
//! - a slot is free and nobody waits: `call` takes it (one compare-and-swap), asks
//!   the inner service once whether it is ready, and if so calls it right there
//!   (no clone); if it is not ready, the [`ResponseFuture`] takes that service
//!   along, leaves a clone in its place, and keeps driving it, holding the slot;
//! - every slot is busy and the queue is full: the future fails with
//!   [`BulkheadFull`] on its first poll;
//! - otherwise the call joins the line with a clone taken at call time, and the
//!   future waits for its slot, then drives the clone to readiness and calls it.
//!
//! So a caller that polled readiness but never called holds nothing, and a waiting
//! caller holds no downstream capacity (no pooled connection).
//!
//! **When the slot is freed.** When the work really ends, not when the caller
//! stops waiting: the response future holds a [`Permit`] until the inner future
//! completes or the response future is dropped (a dropped future frees its slot;
//! it never leaks). Two opt-in extensions, free when not used:
//!
//! - [`BulkheadLayer::hold_until_body_end`] (feature `http`): the permit moves into
//!   the response body ([`Guarded`](seawall_core::http::Guarded)) and is freed when
//!   the body has been read to its end, has failed, or is dropped — the connection
//!   to the dependency is busy until then. The response type becomes
//!   `http::Response<Guarded<B, Permit>>`.
//! - [`BulkheadLayer::permit_in_extensions`] (requests with extensions, such as
//!   `http::Request`): a [`PermitHandle`] is placed in each admitted request's
//!   extensions; a handler that moves work into a spawned task keeps a clone there,
//!   and the slot stays taken until that work ends too.
//!
//! **Any request type.** Without those opt-ins the bulkhead takes any request
//! (`String`, a database query, `http::Request`), with no trait to implement.
//!
//! **Fairness and timing.** Waiters are admitted first in, first out; a newcomer
//! never overtakes them. A waiter leaves with [`BulkheadTimeout`] after `max_wait`
//! or when the current [`Deadline`] passes (it travels with the task; read in `call`,
//! or at the first poll when `call` ran in another task, as in tower's `Buffer`),
//! whichever is first (a request whose
//! deadline has already passed and finds no free slot is rejected on its first
//! poll). The bulkhead does not enforce the deadline on admitted calls: that is
//! [`DeadlineLayer`](seawall_core::DeadlineLayer)'s and the breaker's job. Waiting
//! needs a Tokio runtime with the time driver, as tower's `Timeout` does.
//!
//! # Classes: critical calls first under overload
//!
//! Without classes every call is equal: a full queue turns away the newest
//! arrival, whether it is a checkout's quote or a prefetch. With
//! [`BulkheadLayer::criticality`] each request gets a [`Criticality`]
//! (critical, default or sheddable) and the bulkhead sheds the least critical
//! first, as the Google SRE book's "Handling Overload" and Netflix's partitioned
//! concurrency limits do:
//!
//! - **Shares.** Each class may hold at most its share of the limit in force
//!   ([`Shares`]: critical all of it; default 90 % and sheddable 50 % unless
//!   configured), so a flood of sheddable calls cannot take the slots a critical
//!   call needs. Shares follow the limit (fixed, adaptive, forced or a fleet
//!   allotment); a lowered limit preempts no running call.
//! - **A line per class.** Waiters wait in their class's line, first in, first
//!   out; a freed slot goes to the front of the most critical line still under
//!   its share, so a sheddable call at the head holds up nobody more critical.
//! - **Displacement.** When the queue is full, a newcomer more critical than the
//!   least critical waiter takes its place: that waiter (the newest of its class,
//!   who has waited least) is turned away at once with [`BulkheadFull`], its
//!   [`cause`](BulkheadFull::cause) [`FullCause::Displaced`] and its class,
//!   instead of timing out later. A critical call is never turned away while a
//!   less critical one holds a place in the queue.
//! - **Bounds as before.** `max_queue` bounds all lines together; every wait is
//!   bounded by `max_wait` and the request's deadline.
//!
//! ```
//! use std::convert::Infallible;
//! use seawall_bulkhead::{BulkheadLayer, Criticality, QueuePolicy, Shares};
//! use tower::{service_fn, Layer, Service, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), seawall_core::BoxError> {
//! let freight = BulkheadLayer::builder("freight")
//!     .max_concurrent(10)
//!     .queue(QueuePolicy { shares: Shares { default: 90, sheddable: 30 }, ..QueuePolicy::default() })
//!     .build()?
//!     // Any request type: here the route decides.
//!     .criticality(|route: &&'static str| match *route {
//!         "/checkout" => Criticality::Critical,
//!         "/prefetch" => Criticality::Sheddable,
//!         _ => Criticality::Default,
//!     });
//! let mut svc = freight.layer(service_fn(|route: &'static str| async move {
//!     Ok::<_, Infallible>(route.len())
//! }));
//! assert_eq!(svc.ready().await?.call("/checkout").await?, 9);
//! # Ok(())
//! # }
//! ```
//!
//! **Where the class comes from.** A closure `Fn(&Req) -> Criticality` for any
//! request type; for HTTP and gRPC, [`CriticalityHeader`] reads a header
//! (`x-criticality`, or one you name; tonic sends metadata as headers). **An
//! inbound header is untrusted by default**: a client could mark every call
//! critical, so untrusted it may only lower a call below the default;
//! [`CriticalityHeader::trusted`] takes it as sent, for calls from your own
//! services, and [`CriticalityHeader::write`] writes a class into an outgoing
//! request for the next service.
//!
//! **When to use classes.** When one dependency serves calls that do not matter
//! equally and it is overloaded for minutes, not milliseconds: the classes decide
//! who gets its capacity. They gain little when the traffic is all one class,
//! when the dependency has spare capacity (nobody waits), or when every class
//! has its own dependency (separate bulkheads already keep them apart).
//!
//! **Where classes apply.** In the default mode's `call`. Not in
//! [backpressure mode](#backpressure-mode): its slot is reserved in `poll_ready`,
//! before there is a request. Not per key: a [`KeyedBulkheadLayer`] takes no
//! extractor (each key is a bulkhead of its own). A fleet cap
//! (`seawall-fleet`'s `Fleet::cap`) lowers the limit in force through the
//! allotment, and the shares are fractions of that allotted limit; the fleet
//! itself shares no classes.
//!
//! **What it costs.** Nothing for a layer without an extractor: its class is a
//! constant `None` and the test compiles away. With one, every call takes the
//! line's lock, reads the clock and the queue's bounds (a slot is freed under the
//! lock too): the class-aware decision needs per-class counts read together. In
//! the comparison benchmark (`benches/`, a quick run) an admitted call with a
//! class added about 115 ns where the plain bulkhead adds about 30, still with no
//! allocation; under 64 contending tasks on two cores it served about 2 million
//! calls a second where the plain one served about 8: the lock is the price.
//! Use classes where calls queue, not on a path that only ever takes free slots.
//!
//! # Controlled delay and adaptive LIFO: a standing queue
//!
//! A queue that empties now and then absorbs bursts; one that never empties is a
//! backlog, where every waiter pays the whole `max_wait` and the oldest, served
//! first, are the callers most likely to have given up. With
//! [`QueuePolicy::controlled_delay`] (off by default; [`ControlledDelay`]), once
//! the line has not been empty for longer than its `interval` (100 ms) it
//! **stands**: a newcomer then waits at most the short `target` (5 ms), and with
//! `lifo` a freed slot goes to the newest waiter, so the callers still waiting
//! are the ones served. When the line empties, the normal wait and first in,
//! first out are back. These are Facebook's controlled delay and adaptive LIFO
//! ("Fail at Scale", ACM Queue, 2015).
//!
//! - Every wait is still bounded by `max_wait` and the request's deadline; the
//!   queue is still bounded by `max_queue`.
//! - The line's state is decided by arrivals (a call that finds no free slot
//!   reads the clock anyway) and cleared when it empties. Waiters that came
//!   before it stood keep the wait they were given.
//! - With classes, the lines keep their order between classes; within a class,
//!   a standing line serves its newest first.
//! - [`Snapshot::standing`] says whether it stands now. Backpressure mode has no
//!   queue of its own and is not affected.
//! - **Cost:** none on the admitted path; a call that finds no free slot takes
//!   the line's lock once more to read and update its state.
//!
//! ```
//! use std::time::Duration;
//! use seawall_bulkhead::{BulkheadLayer, ControlledDelay, QueuePolicy};
//!
//! # fn main() -> Result<(), seawall_core::ConfigError> {
//! let freight = BulkheadLayer::builder("freight")
//!     .queue(QueuePolicy {
//!         max_wait: Duration::from_secs(1),
//!         controlled_delay: Some(ControlledDelay::default()), // 100 ms, 5 ms, LIFO
//!         ..QueuePolicy::default()
//!     })
//!     .build()?;
//! assert!(!freight.handle().snapshot().standing);
//! # Ok(())
//! # }
//! ```
//!
//! It gains most when `max_wait` is long next to the dependency's latency (a
//! long wait lets a backlog grow that LIFO then serves out of order); with the
//! default 20 ms `max_wait` a standing line already times its waiters out soon,
//! and the mechanism changes little.
//!
//! # Backpressure mode
//!
//! [`BulkheadLayer::backpressure`] gives the same bulkhead with the opposite
//! readiness ([`Backpressure`], as tower's `ConcurrencyLimit`): `poll_ready`
//! reserves the slot, and is **pending while the bulkhead is full**, woken when a
//! slot is handed to it; `call` uses the reserved slot.
//!
//! **When to use it:** when something in front of the bulkhead reads readiness and
//! can do better than a rejection — `tower::balance::p2c::Balance` and `ReadyCache`
//! choose only ready endpoints, so a replica whose bulkhead is full is skipped and
//! its traffic goes to the others; `tower::buffer::Buffer` stops taking requests
//! and its callers wait in `poll_ready`. Keep the default mode for a server route
//! or a single dependency, where a busy bulkhead should answer at once.
//!
//! What changes:
//! - **No queue:** `max_queue` and `max_wait` do not apply to these services (the
//!   waiting is done in `poll_ready`, by whoever polls: the balancer picks another
//!   endpoint; a `tower::load_shed` or timeout in front bounds it). A service
//!   waiting for readiness is counted in [`Snapshot::queued`] and served first in,
//!   first out with every other waiter of the bulkhead.
//! - **Reservation per service value:** a clone starts with no slot (principle: a
//!   `Clone` shares the bulkhead, not the reservation); dropping a service frees the
//!   slot it reserved but did not use, or leaves the line; an error from the inner
//!   `poll_ready` frees it too. The slot is held while the inner service is polled
//!   to readiness, and counts as admitted when it is reserved.
//! - The inner service is called directly, so it need not be `Clone`.
//!
//! Services of both modes built from one layer share its bulkhead. The default mode
//! pays nothing for this one: it is a different service type.
//!
//! ```
//! use std::convert::Infallible;
//! use std::task::{Context, Poll, Waker};
//! use seawall_bulkhead::BulkheadLayer;
//! use tower::{service_fn, Layer, Service, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), seawall_core::BoxError> {
//! let layer = BulkheadLayer::builder("freight").max_concurrent(1).build()?.backpressure();
//! let handle = layer.handle();
//! let mut a = layer.layer(service_fn(|cep: String| async move { Ok::<_, Infallible>(cep.len()) }));
//! let mut b = a.clone(); // the same bulkhead, no reservation of its own
//!
//! a.ready().await?; // reserves the only slot
//! assert_eq!(handle.snapshot().active, 1);
//! // So `b` is not ready: a balancer would choose another endpoint.
//! let mut cx = Context::from_waker(Waker::noop());
//! assert!(Service::<String>::poll_ready(&mut b, &mut cx).is_pending());
//!
//! assert_eq!(a.call("01310-100".to_owned()).await?, 9);
//! b.ready().await?; // the freed slot was handed to `b`
//! # Ok(())
//! # }
//! ```
//!
//! # Shadow mode: try a limit on live traffic first
//!
//! With [`BulkheadConfig::shadow`] (the builder's
//! [`shadow`](BulkheadBuilder::shadow), `shadow = true` in a policy file,
//! [`Handle::set_shadow`] at run time) the bulkhead admits, queues and times out
//! exactly as it would enforcing, but where it would reject a call it lets it
//! through **beyond the limit** and counts a **shadow rejection** by the reason it
//! would have given: `full` (every slot busy, the queue full), `timeout` (no slot
//! within `max_wait` or the deadline), `keys` (a keyed bulkhead with no room for a
//! new key). They are in the [`Snapshot`] (`shadow_rejected_full`,
//! `shadow_rejected_timeout`; [`KeyedSnapshot::shadow_rejected_key_limit`]) and in
//! `seawall_bulkhead_shadow_rejections_total{name, reason}`.
//!
//! - **Slot accounting is the enforcing one.** A call let through beyond the limit
//!   holds no slot: `active` counts only calls holding one, and `active ≤ limit`
//!   holds in shadow mode as it does enforcing (the limit is what is on trial; the
//!   dependency may see more). Such a call holds an *over-limit* permit instead,
//!   counted in [`Snapshot::over_limit`] and the `seawall_bulkhead_over_limit` gauge
//!   while it runs; when it ends it frees no slot and wakes no waiter. So the same
//!   sequence of calls leaves the same active and queued counts in both modes,
//!   and the shadow rejections are the rejections enforcement would have made.
//! - **It still waits.** Waiting in line is part of the policy under trial, so a
//!   call that finds every slot busy and room in the line waits as it would (at
//!   most `max_wait`, or until its deadline), and only then goes through beyond
//!   the limit. To try a limit without adding any wait, try it with no queue
//!   (`queue = { max_queue = 0 }`): every call over the limit is then a `full`
//!   shadow rejection, let through at once.
//! - An adaptive limit learns nothing from calls let through beyond it (an
//!   enforcing bulkhead would not have made them); `admitted` and the wait
//!   histogram do not count them.
//! - **Switching** ([`Handle::set_shadow`], or `reconfigure` with `shadow`) applies
//!   from the next call; calls already over the limit stay so until they end.
//!   [`Handle::revert`] returns to the built setting.
//! - In backpressure mode, `poll_ready` still waits for a slot (a readiness signal
//!   is not a rejection); only a call made without a reserved slot, which would
//!   fail with [`BulkheadFull`], goes through beyond the limit.
//! - **Cost:** none on the admitted path; a call that would be rejected reads the
//!   mode with one relaxed load and counts itself with two relaxed increments.
//!
//! # What it costs
//!
//! An admitted call when a slot is free: one compare-and-swap on the bulkhead's
//! word (which also counts the admission), one `Arc` clone into the permit, one
//! readiness poll of the inner service (no clone of it), and one `fetch_sub`
//! when the call ends. No lock, no allocation, no clock read; the response future
//! is the inner future plus a 16-byte permit (the slot's pointer, and beside it
//! the ticket an adaptive limit needs, packed into 7 bytes) and the classifier
//! (nothing, for the default one): 128 bytes over an answered `http::Response<()>`,
//! the size up to which moving a future is a few inline copies rather than a call
//! to `memcpy`. With an adaptive limit, admission also
//! reads a few relaxed atomics (is an algorithm fed, its generation, the sampling
//! rate, the admission count) and the completion classifies the result (a status
//! comparison); one admission in `sample_every` reads the clock at admission and
//! completion, and takes the algorithm's lock only if its sample can move the
//! limit (an AIMD limit less than half used, or at its maximum, learns nothing
//! from a call served in time: such a sample is dropped after two relaxed loads),
//! as does an overload answer of the current generation. Still no allocation.
//!
//! A rejection when full: a few loads, one counter, and the boxed
//! [`BulkheadFull`]; no lock, no timer, and the request is dropped where it was
//! received. Only a call that waits (for a slot, or for an inner service that was
//! not ready) takes the queue's lock, reads the clock, and parks its request in
//! one allocation (a call that finds no free slot also reads the queue's bounds
//! under the configuration's lock, held for a copy). The first call of a bulkhead
//! to wait for a slot also makes its line and its wait histogram, which a
//! bulkhead that never queues does without.
//!
//! `max_concurrent` and `max_queue` are at most 2^20 (1 048 576) each.
//!
//! # Observing and operating
//!
//! [`Handle::snapshot`] reports the limit in force, active and waiting calls,
//! admitted, rejected-full, rejected-timeout and abandoned counts, the admission
//! wait's p50, p99 and max (a fixed histogram of atomics; immediate admissions
//! count as zero), an adaptive algorithm's state, and with classes each class's
//! share in slots, active and waiting calls and rejections ([`ClassSnapshot`]).
//! [`Handle::reconfigure`] changes the limits at run time with validation:
//! growing admits waiters at once; shrinking never preempts a running call, it
//! only admits fewer. [`Handle::revert`] restores the built limits. Rejections
//! emit `tracing` events (target `seawall::bulkhead`); the `metrics` feature
//! exports gauges, counters and a histogram (see the names below).
//!
//! [`Handle::subscribe`] streams [`BulkheadEvent`]s, the bulkhead's counterpart
//! of a breaker's transitions: saturated (it began turning calls away), relieved
//! (nobody waits and half the limit is free again), the limit moving (by its
//! algorithm, a force or release, new limits) and new limits. They are
//! edge-triggered: a bulkhead that rejects ten thousand calls in a spell sends one
//! `Saturated`, not ten thousand events, so subscribing costs the hot path
//! nothing but a relaxed load when a slot is freed. See [`BulkheadEvent`] for
//! when each is sent.
//!
//! | metric (label `name`) | kind |
//! |---|---|
//! | `seawall_bulkhead_active`, `seawall_bulkhead_queued`, `seawall_bulkhead_max_concurrent` | gauge |
//! | `seawall_bulkhead_limit` (the limit in force: adaptive, forced or `max_concurrent`; a keyed layer's: summed over its live keys) | gauge |
//! | `seawall_bulkhead_admitted_total` | counter |
//! | `seawall_bulkhead_rejected_total{reason = "full" \| "timeout" \| "keys"}` | counter |
//! | `seawall_bulkhead_class_rejected_total{class, reason = "full" \| "displaced" \| "timeout"}` (with classes, from the first) | counter |
//! | `seawall_bulkhead_wait_seconds` | histogram |
//!
//! # Errors
//!
//! The service's error is [`BoxError`]: the inner service's error, or one of the
//! rejections re-exported here. Both are admission rejections
//! ([`Category::Admission`](seawall_core::Category::Admission)): decided locally,
//! no evidence about the dependency, so a circuit breaker ignores them. Find them
//! with [`find_rejection`](seawall_core::find_rejection).
//!
//! # Layout
//!
//! ```text
//! lib.rs              these docs, the re-exports
//! config.rs           BulkheadConfig: validated plain data (a leaf)
//! queue.rs            QueuePolicy, the pure queue policy and the one list of its options: who
//!                     takes a slot, who waits and until when, who is turned away; MAX_LIMIT;
//!                     Shares and the class-aware decisions (shares, lines, displacement);
//!                     ControlledDelay: the short wait and newest-first order of a standing line
//! layer.rs            BulkheadLayer and BulkheadBuilder: one bulkhead per layer, shared by
//!                     every service it builds
//! service.rs          Bulkhead, the Service: admission in `call`
//! future.rs           ResponseFuture: the wait, the inner service's readiness, the inner call
//! permit.rs           Permit and PermitHandle: the slot a call holds, freed on drop
//! hold.rs             Hold: how long a call keeps its permit (the response, its body, a handle)
//! semaphore.rs        the semaphore that applies the queue policy: slots and waiters counted
//!                     in one atomic word, the line (and the counts per class) behind a mutex
//! state.rs            what one bulkhead shares: the semaphore, the configuration in force,
//!                     the limit's feedback, shadow counts, events and telemetry; the
//!                     Snapshot and Demand read from it
//! feedback.rs         the limit in force: fixed, adaptive, forced by an operator, allotted
//! adaptive/mod.rs     AdaptiveConfig and the sealed LimitAlgorithm trait
//!   adaptive/aimd.rs      Aimd: additive increase, multiplicative decrease
//!   adaptive/gradient.rs  Gradient: latency against a baseline measured again on a schedule
//! handle.rs           Handle: the operator's view and controls
//! events.rs           BulkheadEvent and LimitCause: saturated, relieved, the limit moving
//! stats.rs            the admission-wait histogram
//! telemetry.rs        tracing events and metrics
//! keyed.rs            KeyedBulkheadLayer: one bulkhead per key, a bounded number of keys
//! backpressure.rs     BackpressureLayer: the slot reserved in `poll_ready`
//! sync.rs             std's atomics and mutex, or loom's in the loom models
//! loom_semaphore.rs   loom models of the semaphore (tests only)
//! ```
//!
//! A new option of the queue is a [`QueuePolicy`] field with its default, its check
//! in [`QueuePolicy::validate`], its row in the table there and its rule
//! (`queue.rs`): the configuration, the builder's [`queue`](BulkheadBuilder::queue),
//! the policy in force, the [`Snapshot`] and the policy file carry it unchanged.
//!
//! # Features
//!
//! - `http`: [`BulkheadLayer::hold_until_body_end`] and [`UntilBodyEnd`].
//! - `tracing` (default): events on rejections, limit changes, and each move of an
//!   adaptive or forced limit.
//! - `metrics`: the metrics above.
//! - `serde`: `Deserialize`/`Serialize` for [`BulkheadConfig`], its [`QueuePolicy`]
//!   and its [`AdaptiveConfig`] (durations as `"20ms"`; `queue = { max_queue = 10,
//!   max_wait = "20ms" }`; `adaptive = { algorithm = "aimd", … }`), `Serialize` for
//!   snapshots.
//!
//! [`Deadline`]: seawall_core::Deadline
//! [`Snapshot::queued`]: crate::Snapshot::queued
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod adaptive;
mod backpressure;
mod config;
mod events;
mod feedback;
mod future;
mod handle;
mod hold;
mod keyed;
mod layer;
#[cfg(all(test, loom))]
mod loom_semaphore;
mod permit;
pub mod queue;
mod semaphore;
mod service;
mod state;
mod stats;
mod sync;
mod telemetry;

pub use adaptive::AdaptiveConfig;
pub use backpressure::{Backpressure, BackpressureLayer};
pub use config::BulkheadConfig;
pub use events::{BulkheadEvent, LimitCause};
pub use future::ResponseFuture;
pub use handle::Handle;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub use hold::UntilBodyEnd;
pub use hold::{Hold, Lend, UntilResponse, WithPermitHandle};
pub use keyed::{
    KeyedBulkhead, KeyedBulkheadBuilder, KeyedBulkheadLayer, KeyedHandle, KeyedSnapshot,
};
pub use layer::{BulkheadBuilder, BulkheadLayer};
pub use permit::{Permit, PermitHandle};
pub use queue::{ControlledDelay, QueuePolicy, Shares};
pub use seawall_core::DEFAULT_MAX_KEYS;
pub use service::Bulkhead;
pub use state::{AdaptiveSnapshot, ClassSnapshot, Demand, Snapshot, WaitStats};

pub use seawall_core::{
    BoxError, BulkheadFull, BulkheadTimeout, Criticality, CriticalityHeader, CriticalityOf,
    FullCause, OverloadStatus, TimeoutsAsOverload, Unclassed,
};
pub use telemetry::WAIT_SECONDS_BUCKETS;

/// Gives the bulkhead's metrics their help text and unit.
///
/// A description given before a recorder is installed is lost, so call this (or the
/// facade's `seawall::metrics::describe()`) after installing the recorder.
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub fn describe_metrics() {
    telemetry::describe();
}
