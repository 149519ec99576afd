//! Fleet coordination for seawall's circuit breakers and bulkheads: one probe per
//! open interval across every instance of a service, a recovery seen by one
//! instance taught to all of them, and a concurrency cap that holds across the
//! fleet (see [the cap](#a-fleet-wide-concurrency-cap)), without a store round
//! trip on any call.
//!
//! Without coordination every replica's breaker is an island. A hundred replicas
//! that tripped together on a failing supplier send it a hundred probes the moment
//! their intervals end, and when one of them finds the supplier healthy again the
//! other ninety-nine learn nothing and keep failing fast until their own probes.
//! A distributed lock around every call would fix that at the price of serializing
//! the fleet's calls and failing them when the lock's store is down. This crate
//! shares *verdicts* instead, and never touches the hot path: a closed breaker's
//! call reads nothing but local memory.
//!
//! # Example
//!
//! Two instances of a service (here, in one process for the sake of the
//! example), each with its own `freight` breaker, coordinated through one store:
//!
//! ```
//! use std::sync::atomic::{AtomicBool, Ordering};
//! use std::sync::Arc;
//! use std::time::Duration;
//! use seawall_circuit_breaker::{CircuitBreakerLayer, State};
//! use seawall_core::BoxError;
//! use seawall_fleet::{Fleet, LocalStore};
//! use tower::{service_fn, Layer, Service, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), BoxError> {
//! // The supplier both instances call: down for now.
//! let healthy = Arc::new(AtomicBool::new(false));
//! let supplier = {
//!     let healthy = healthy.clone();
//!     service_fn(move |_: http::Request<()>| {
//!         let ok = healthy.load(Ordering::SeqCst);
//!         async move { if ok { Ok("quote") } else { Err::<_, BoxError>("down".into()) } }
//!     })
//! };
//!
//! // In-process here; every instance of a real fleet points at one shared store.
//! let fleet = Fleet::builder(LocalStore::new()).prefix("shop").build()?;
//! let mut instances = Vec::new();
//! let mut coordination = Vec::new();
//! for _ in 0..2 {
//!     let layer = CircuitBreakerLayer::builder("freight")
//!         .consecutive_failures(3)
//!         .open_for(Duration::from_secs(10))
//!         .build()?;
//!     coordination.push(fleet.coordinate(&layer.handle())?);
//!     instances.push((layer.handle(), layer.layer(supplier.clone())));
//! }
//!
//! // Both trip.
//! for (_, svc) in &mut instances {
//!     for _ in 0..3 {
//!         let _ = svc.ready().await?.call(http::Request::new(())).await;
//!     }
//! }
//! assert!(instances.iter().all(|(h, _)| h.state() == State::Open));
//!
//! // The supplier recovers; each instance takes a call every 100 ms. Past the
//! // open intervals (jittered by up to 20 % in fleet mode) one instance holds the
//! // probe lease and probes; its success is pushed to the other, which closes
//! // without probing. (The clock is paused: this sleeps no real time.)
//! healthy.store(true, Ordering::SeqCst);
//! for _ in 0..150 {
//!     tokio::time::sleep(Duration::from_millis(100)).await;
//!     for (_, svc) in &mut instances {
//!         let _ = svc.ready().await?.call(http::Request::new(())).await;
//!     }
//! }
//! let probes: u64 = instances
//!     .iter()
//!     .map(|(h, _)| h.snapshot().counters)
//!     .map(|c| c.probe_successes + c.probe_failures)
//!     .sum();
//! assert_eq!(probes, 1);
//! assert!(instances.iter().all(|(h, _)| h.state() == State::Closed));
//! let applied: u64 = coordination.iter().map(|c| c.snapshot().verdicts_applied).sum();
//! assert_eq!(applied, 1);
//! # Ok(())
//! # }
//! ```
//!
//! # The protocol
//!
//! ```text
//!   instance A (first interval end)     store                      instance B (and C, …)
//!   ───────────────────────────────     ─────                      ─────────────────────
//!   trip ─ read verdict ──────────────► GET verdict                trip ─ read verdict
//!          (what is stored is not newer than this trip)
//!   … open interval, jittered …                                    … open interval …
//!   interval ends:
//!   reconcile ────────────────────────► GET verdict
//!   take lease(token, TTL, seen) ─────► epoch := max(counter, seen) + 1
//!                                       SET lease NX PX TTL
//!   ◄──────────────────────── Taken(e)
//!   gate: Allow (for probe_window)                                 interval ends:
//!   probe ──► dependency                 ◄──────────────────────── reconcile, take lease
//!                                        ───── Held(e, remaining) ►
//!                                                                  gate: HoldOff(remaining)
//!   probe ok:                                                      (rejects as open; no call
//!   publish(token, Succeeded) ────────► lease has token? then       reaches the dependency
//!                                       verdict := (e, Succeeded)   or the store)
//!                                       PUBLISH ─────────────────► e newer than the trip:
//!   release(token) ───────────────────► DEL lease if token         Verdict::Close → ramp
//!   (probe failed: publish Failed,                                 (Failed: Verdict::Reopen,
//!    release; reopen locally)                                       interval from now, backoff)
//! ```
//!
//! - **Lease.** When an instance's open interval ends, its coordinator reads the
//!   latest verdict (the reconcile), then tries to take the breaker's probe
//!   lease: a random [`Token`] and a TTL of the breaker's `half_open_timeout` plus
//!   `probe_window`; the store answers with a [`FleetEpoch`], a counter it
//!   increments for every lease. The holder's breaker may start a probe during
//!   the first `probe_window` of the lease, so its probe has finished (or counts
//!   as failed) before the store can give the lease to anyone else; the holder
//!   measures the lease with its own timer from the instant it *sent* the take,
//!   which ends before the store's TTL does. Every other instance's gate holds the
//!   probe off with a retry-after of what remains of the lease as last seen: its
//!   breaker keeps rejecting as open and touches neither the dependency nor the
//!   store per call.
//! - **Verdict.** The holder publishes what its probe found; the store keeps it
//!   with the lease's epoch and pushes it to every subscriber. Publish and release
//!   compare the token, so a stale holder cannot speak for, or end, a newer lease.
//!   Another instance applies a verdict whose epoch is above its *trip baseline*
//!   (the highest verdict epoch it knew of when its breaker tripped, raised by a
//!   read right after the trip) and above anything it already acted on: a success
//!   closes its breaker through its ramp ([`Verdict::Close`](seawall_circuit_breaker::Verdict::Close));
//!   a failure restarts its open interval from now, with the backoff
//!   ([`Verdict::Reopen`](seawall_circuit_breaker::Verdict::Reopen)). The breaker
//!   applies a verdict only to the trip it names (by the breaker's own epoch), so
//!   no clock is ever compared across hosts: order comes from the store's counter.
//! - **No call awaits the store.** The lease, the reads and the reconciles run in
//!   one background task per coordinated breaker; the gate, asked under the
//!   breaker's lock only when a probe is due, reads that task's last view. A
//!   closed-path call makes zero store operations ([`FleetSnapshot::store_ops`]
//!   counts them). Every operation runs under `store_timeout`; a write that timed
//!   out may still be applied, so writes are idempotent, and a take that timed out
//!   counts as *maybe held*: the instance does not probe until its TTL has run out.
//! - **Delivery.** Verdicts are pushed, and every instance also reconciles by a
//!   read at its own interval end, when a lease it saw elsewhere runs out, and
//!   after every reconnect, so a lost push delays an instance by at most one open
//!   interval (one lease TTL for an instance already waiting on the lease, if
//!   that is longer), never for good.
//! - **Store trouble never fails a call.** A failed or timed-out operation is
//!   retried after a short jittered pause while probes wait; a connected
//!   coordinator with nothing to send checks every `health_every` that the store
//!   still answers ([`Store::touch`], which also keeps the breaker's keys alive and the epoch
//!   counter above what the instance has seen), so an idle breaker notices a dead or frozen
//!   store too; after `disconnect_after` failures in a row (or the subscription
//!   ending: a dropped connection ends it) the
//!   instance falls back to its own breaker, with jitter: it waits out one lease
//!   TTL (a lease may be held where it can no longer see it), then probes alone.
//!   It reports this in [`FleetSnapshot::connected`] and `store_errors`, the
//!   `seawall_fleet_connected` gauge and `seawall_fleet_store_errors_total`
//!   counter (feature `metrics`), and a `warn` event (feature `tracing`, target
//!   `seawall::fleet`), and rejoins by itself: resubscribe, then reconcile.
//! - **Versioned keys.** Every key starts with the prefix and
//!   [`SCHEMA_VERSION`]: `seawall:v1:breaker:{freight}:lease` (see [`Keys`]), so
//!   instances of two releases with different layouts share a store without
//!   misreading each other. The fleet-wide cap's layout 2
//!   ([`CAP_SCHEMA_VERSION`]) also reads and writes layout 1's record while an
//!   older instance still claims in it, so a rolling upgrade keeps one cap, not
//!   one per release (see [`CapKeys::v1_claims`]).
//! - **Fleet defaults.** A coordinated breaker gets a ramp and jitter if it has
//!   none (see [`FleetConfig`]): without a ramp, one successful probe would be
//!   followed by the whole fleet's load at once; without jitter, instances that
//!   fell back to local mode together would probe together.
//! - **Fleet trip (optional, off by default).** With
//!   [`FleetBuilder::trip_together`], each instance records its own trips in the
//!   store (an instance id, the store's clock); once `k` distinct instances tripped
//!   within the window, the store starts a fleet trip, an epoch from the same
//!   counter, pushed to everyone and read by closed instances every half window.
//!   A closed instance that learns of a fleet trip newer than every verdict it
//!   knows opens (reason `PeersTripped`) and recovers with the others: one probe
//!   under the lease, its verdict for all. A successful verdict forgets the trips.
//!   It is off by default, and `k` must be at least 2, because one instance's trip
//!   may say more about that instance (a bad local network, a bad deploy on one
//!   replica) than about the dependency: one sick client must not open a healthy
//!   fleet. Operators win: a forced or disabled breaker is left alone, and an
//!   operator's `force(Forced::Open)` is no trip to count.
//! - **A rehearsal stays on its instance.** Fault injection runs per instance, so
//!   what it causes is no news for the fleet: a trip that an injected outcome
//!   completed ([`Snapshot::rehearsal_trip`](seawall_circuit_breaker::Snapshot::rehearsal_trip))
//!   is not recorded as a trip to count, and a probe that an injected outcome
//!   answered ends its lease without a verdict, so another instance probes the real
//!   dependency instead. The rehearsing instance itself trips and probes as it would
//!   in an incident.
//!
//! ## When two probes can overlap
//!
//! While the store answers every instance, never: one live lease at a time, and
//! its holder's probe ends before the lease can pass on. The exceptions, and
//! their bounds:
//!
//! - **The store loses its data during a lease** (a flush, a failover to a replica
//!   that had not seen the lease): the new store may grant a second lease while
//!   the first holder still probes. At most two probes at once, for at most one
//!   lease TTL, per loss of data. Epochs stay ordered for instances that saw the
//!   old ones, because every take carries the highest epoch its taker has seen.
//! - **An instance cannot reach the store while others can**: it falls back to
//!   local mode and, one lease TTL later, probes on its own. At most one probe
//!   per interval from each instance in local mode, plus the lease holder's.
//! - **A probe outlives its half-open timeout**: its breaker counts it as failed
//!   and the lease passes on, but the request itself runs until the caller's
//!   deadline. Bound the dependency segment with a
//!   [`DeadlineLayer`](seawall_core::DeadlineLayer) no longer than the half-open
//!   timeout.
//! - **Clocks at different rates**: the holder's fence and the store's TTL are
//!   both durations of a few seconds; a drift large enough to matter over that
//!   span would be a broken host.
//!
//! A take that timed out but was applied later costs a lost interval (nobody
//! probes until its TTL ends), not an overlap.
//!
//! # A fleet-wide concurrency cap
//!
//! A bulkhead's limit is per instance: three instances of 8 let 24 calls reach
//! the supplier. [`Fleet::cap`] makes the limit the fleet's: every instance's
//! bulkhead of one name shares G calls, whatever the number of replicas, and
//! still no call touches the store.
//!
//! ```
//! use std::time::Duration;
//! use seawall_bulkhead::BulkheadLayer;
//! use seawall_core::BoxError;
//! use seawall_fleet::{CapConfig, Fleet, LocalStore};
//! use tower::{service_fn, Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), BoxError> {
//! // The supplier takes 200 ms a call.
//! let supplier = service_fn(|()| async {
//!     tokio::time::sleep(Duration::from_millis(200)).await;
//!     Ok::<_, BoxError>(())
//! });
//! let fleet = Fleet::builder(LocalStore::new()).prefix("shop").build()?;
//! let config = CapConfig::new(4) // G: 4 calls at the supplier, fleet-wide
//!     .renew_every(Duration::from_millis(100))
//!     .ttl(Duration::from_millis(300));
//! let mut shops = Vec::new();
//! for _ in 0..2 {
//!     let layer = BulkheadLayer::builder("freight").max_concurrent(8).max_queue(0).build()?;
//!     let capped = fleet.cap(&layer.handle(), config)?; // keep it alive
//!     shops.push((capped, layer.layer(supplier)));
//! }
//! // Both shops want more than the cap, for two seconds (paused time: no real wait).
//! for _ in 0..40 {
//!     for (_, svc) in &shops {
//!         for _ in 0..4 {
//!             tokio::spawn(svc.clone().oneshot(()));
//!         }
//!     }
//!     tokio::time::sleep(Duration::from_millis(50)).await;
//! }
//! // Max-min fair: two each, never more than 4 in all.
//! for (capped, _) in &shops {
//!     assert_eq!(capped.snapshot().allotment, 2);
//!     assert_eq!(capped.handle().snapshot().limit, 2);
//! }
//! # Ok(())
//! # }
//! ```
//!
//! ## The allotment protocol
//!
//! ```text
//!   instance A (every T)                     store (one atomic step per claim)
//!   ────────────────────                     ─────────────────────────────────
//!   demand := peak active at admissions
//!             + peak waiting + BulkheadFull
//!             over the last T (≤ own limit)
//!   give back what the period did not use:
//!     ceiling := max(active, min(ceiling, demand))
//!   held := max(ceiling, active)
//!   sent := now ─── claim(A, seq, demand, held, TTL, G) ──►  now := TIME
//!                                            G stored once (first claim), else kept
//!                                            drop claims past their expiry
//!                                            fair := max-min share of G over demands
//!                                            grant := min(fair, G - others' reserved)
//!                                            (a new or wiped record: ≤ held, for one TTL)
//!                                            reserve max(grant, held) until now + TTL
//!   ◄──────────────────────────── grant ───
//!   ceiling := grant, lease until sent + TTL - longest_call (A's own clock)
//!   no answer by then: divided → max(floor, G / N), strict → 0, available → local share
//!                                            the reservations fell while another
//!                                            claim wants more than it holds:
//!   instance B (short of its demand)         PUBLISH …:freed  SlotsFreed(A)
//!   ◄──────────────────────────────── push ───
//!   at once (early claims: four back to back, then one per T/4):
//!     demand := max(last period's, this period's so far)
//!   ─── claim(B, seq, demand, held, TTL, G) ──►  the same step: B takes what A freed
//! ```
//!
//! - **Leased allotments, not per-call locks.** A call takes a local permit from
//!   the bulkhead as always (its own limit, queue, `max_wait`, deadline and
//!   `BulkheadFull`/`BulkheadTimeout` stay); the cap only lowers the limit to the
//!   allotment through [`Handle::set_allotment`](seawall_bulkhead::Handle::set_allotment).
//!   An allotment of 0 rejects at once with `BulkheadFull`: a fleet may have more
//!   instances than G.
//! - **Max-min fairness over demand.** Instances wanting less than an equal
//!   share get what they want; the rest is split evenly among the others. The
//!   division is computed by the store in one atomic step ([`CapStore`]'s
//!   contract; a Lua script on Redis, on the server's `TIME`), over the live
//!   claims only: a dead instance's claim expires with its TTL and its share
//!   comes back with no operator step.
//! - **Nothing handed on while it may be in use.** The store reserves for each
//!   instance the larger of its grant and what it `held` when it claimed (its
//!   ceiling and its active calls), so a lowered allotment frees its slots only as
//!   the instance's calls end, and the reservations never sum above G while
//!   every instance renews within its TTL. A store that lost its record (a flush,
//!   a failover, a restart without persistence) cannot know which leases are still
//!   in use, so for one TTL it grants nobody more than it holds. A fleet's very
//!   first start looks the same to it: the cap is handed out one TTL after the
//!   first claim (until then, capped calls are refused as full).
//! - **Fencing by the instance's own clock.** An instance admits under an
//!   answer only until `sent + ttl - longest_call`, measured from when it *sent*
//!   the claim: before the store (whose expiry counts from when it applied the
//!   claim) can hand its share to another, and early enough that a call admitted
//!   just before has ended. No clocks are compared across hosts.
//! - **Follows demand** within **2T plus the longest call plus three store round
//!   trips**, in the worst alignment of the renewals. Say demand moves from A to
//!   B at `t0`. A's first renewal after `t0` still measures a period that began
//!   before it (demand is the peak over the last T), so it keeps its slots; its
//!   second, before `t0 + 2T`, sees no demand and gives back all but the calls
//!   still running; should calls admitted before `t0` still run then, the first
//!   renewal after they end (before `t0 + T + longest call`) gives back the rest.
//!   A claim that gives slots back while B wants more makes the store push
//!   [`FleetEvent::SlotsFreed`] in the same atomic step, and B claims at once
//!   instead of at its next renewal: A's claim, the push, B's claim are the
//!   three round trips. So B holds its share by `t0 + max(2T, T + longest call)`
//!   plus those round trips, within 2T + longest call. (If other instances' slots
//!   freed just before made B spend its four early claims, the pace of one per
//!   T/4 may add up to T/4 when the longest call is shorter than that.) A lost push, or a
//!   subscription being renewed, costs B at most one period: its next renewal
//!   takes the slots. In the simulation (T = 500 ms, 100 instances): see the
//!   example `fleet_sim`.
//! - **Why a push and not an earlier release.** Demand is measured at the
//!   renewals only, over whole periods, so that a claim never understates it;
//!   what waited a period before was the *new* holder's next claim, and the
//!   push removes exactly that wait at the cost of one message per freeing claim,
//!   nothing on the call path. Giving slots back as soon as the last old call
//!   ends would need the bulkhead to signal the renewal task from every call's
//!   end, and would only turn `T + longest call` into `longest call`, which the
//!   bound above already covers.
//! - **Store load.** One claim per instance per T; an instance short of its
//!   demand also claims early on a push: four back to back at most, then one per
//!   T/4 (so a fleet whose demand flaps cannot multiply the load): at most 5
//!   claims per instance per T on average while demand moves (9 in the worst
//!   single period), 1 under steady demand (the store pushes only when
//!   reservations fall while someone wants more), plus one subscription per
//!   instance. [`CapSnapshot::early_claims`] counts the early ones.
//! - **G lives in the store**, set by the first instance to claim. An instance
//!   configured with another G follows the store's, counts it
//!   ([`CapSnapshot::cap_disagreements`]) and warns; [`Fleet::set_cap`] changes it
//!   for the fleet.
//! - **No call waits on the store.** Claims run in one background task per
//!   capped bulkhead, each under the fleet's `store_timeout`; a call reads only
//!   the bulkhead's local state ([`CapSnapshot::store_ops`] counts the task's
//!   operations; calls make none).
//!
//! ## The bounds
//!
//! - **`divided` (the default, [`CapMode::Divided`]):** without a live lease an
//!   instance admits into `max(floor, ⌊G / N⌋)`, N the live claims in the last
//!   answer it had (itself included), G the store's cap as last answered; one
//!   that never reached the store admits `floor` (default 1). Calls go on
//!   through a store outage, and the fleet stays within **G** while the whole
//!   fleet is cut off and no instance started since (`N × ⌊G/N⌋ ≤ G`), once the
//!   calls admitted under the last leases ended (within `longest_call`). Each
//!   instance started during the outage adds `floor`; each instance cut off
//!   while the rest still reach the store adds its `⌊G/N⌋` (the others share G
//!   once its claim expired): at most **G + c × ⌊G/N⌋ + k × floor**, with `c`
//!   instances cut off from a store the others reach and `k` started during the
//!   outage.
//! - **`strict`:** without a live lease an instance admits
//!   nothing (calls are refused at once as full). While clocks run at the same
//!   rate and calls end within `longest_call`, the fleet never has more than G
//!   calls at the supplier: not when the store is slow, partitioned, paused,
//!   killed, flushed or failed over. With `longest_call` at zero (calls not
//!   bounded), add the calls in flight at a lapse.
//! - **`available`:** without a live lease an instance admits into its
//!   `local_share`. The fleet then has at most **G plus the local shares of the
//!   instances cut off** from the store (all of them: `instances × local_share`
//!   when the store is gone for everyone). A store that lost its record keeps G
//!   for the instances that reach it (the record's settling above); without that
//!   step it would be 2G.
//!
//! ## Choosing the settings
//!
//! - **G** (`cap`): the calls the supplier can serve at once, as measured or as
//!   agreed with its owners, across every caller fleet that shares this prefix. A
//!   bulkhead's own `max_concurrent` still applies: set it to what one instance
//!   may use at most (often G itself, or a little above G / instances for headroom).
//! - **T** (`renew_every`): how fast the cap follows demand (within 2T plus the
//!   longest call and three store round trips) against store load (one claim per
//!   instance per T under steady demand, at most five while demand moves: 100
//!   instances at 500 ms is 200 claims a second, at most 1000). 100 ms–1 s suits
//!   most fleets.
//! - **TTL**: how many renewals may fail before a lapse; TTL − longest call
//!   above 2T rides out one lost renewal, above 3T two (an early claim renews the
//!   lease too, but is not to be counted on). It is also how long a dead
//!   instance's share stays away, whatever T: 3–5 × T is typical.
//! - **`longest_call`**: the deadline of the calls behind the bulkhead (bound them
//!   with a [`DeadlineLayer`](seawall_core::DeadlineLayer)); it shortens every lease
//!   by as much, so keep it well under TTL − T.
//! - **Mode:** `divided` (the default) serves through a store outage within the
//!   bound above; `strict` when exceeding G hurts more than refusing calls (a
//!   supplier that falls over, a contractual limit); `available` when refusing is
//!   worse and the supplier has headroom. **`local_share`**: what the supplier can
//!   absorb from each instance cut off; with `k` instances at risk of being cut
//!   off together, the supplier must take G + k × `local_share`.
//!
//! # Stores
//!
//! [`Store`] is five operations, and two more for the fleet trip; see its module
//! docs for the contract. The cap's [`CapStore`] is three more (claim, set the
//! cap, watch for freed slots), implemented by both stores.
//! [`LocalStore`] keeps everything in process (TTLs on Tokio's clock, so paused
//! time drives them) and injects delay, loss and outages for tests and
//! simulations; it is also the embedded default when all instances live in one
//! process. `RedisStore` (feature `redis`) keeps them on a Redis or Valkey server
//! shared by the fleet: one Lua script per write, verdicts as RESP3 pushes, and a
//! lazy connection, so a server that is down when the application starts leaves its
//! instances in local mode until it answers instead of failing their start. It
//! follows Sentinel and Cluster deployments and speaks TLS (see its module docs
//! for what holds across a failover, and for the eviction policy it needs).
//!
//! # Fleet-wide operator actions
//!
//! [`Fleet::act`] forces a breaker open or closed on every instance, resets
//! it, or reverts an earlier action, with a reason and a mandatory expiry (at
//! most [`MAX_ACTION_TTL`]) that every instance enforces by its own timer,
//! also one that joins later. Actions are signed with a fleet secret from the
//! instances' environment ([`FleetSecret::from_env`]), never kept in the
//! store: an instance applies only what the secret signed, and refuses,
//! counts and audits the rest (the threat model and the clock rules are in
//! the `actions` module's docs, [`FleetAction`]). Without a secret, fleet
//! actions are off. Every step is in the breaker's audit log in the store
//! ([`Fleet::audit_log`]) and in the instance's log.
//!
//! # Where state lives
//!
//! A [`Fleet`] holds the store and the settings; cloning it shares both. Each
//! [`Fleet::coordinate`] call spawns one task for one breaker and returns its
//! [`Coordinated`]; dropping that stops the task and hands the breaker back to
//! itself. Each [`Fleet::cap`] call spawns one renewal task for one bulkhead and
//! returns its [`Capped`]; dropping that stops the renewals and leaves the
//! bulkhead at what its mode gives an instance without a lease.
//!
//! # Layout
//!
//! ```text
//! lib.rs          these docs, the re-exports
//! config.rs       FleetConfig and TripTogether, validated
//! coordinator.rs  Fleet, FleetBuilder and Coordinated: a probe gate and a background task per
//!                 coordinated breaker, driven through its public handle
//!   coordinator/gate.rs      the probe gate, and the view it shares with the task
//!   coordinator/task.rs      the background task: lease, verdicts, fleet trip, local mode
//!   coordinator/snapshot.rs  FleetSnapshot and LeaseStatus
//! cap.rs          a fleet-wide cap: CapConfig, CapMode, Capped, the renewal task that applies
//!                 an instance's allotment to its bulkhead; CapSnapshot
//! ledger.rs       the division of a cap as plain code (no clock, no I/O), as both stores run it
//! actions.rs      operators' fleet actions: signed, expiring, audited (FleetAction, FleetSecret)
//!                 and the applier each coordinator runs
//! operator.rs     the operator's verbs on Fleet and Coordinated: act, actions, audit_log,
//!                 fleet_view
//! floor.rs        fleet-wide degradation floors: FloorTarget, Fleet::follow_floor, FloorFollower
//! store.rs        Store and CapStore: all a coordinator asks of the shared store; keys,
//!                 leases, verdicts, claims, StoreError
//! local.rs        LocalStore: the in-process store, with Faults to inject
//! redis.rs        RedisStore: one Lua script per write, RESP3 pushes (feature `redis`)
//! view.rs         one view of every replica: InstanceReport, FleetView, and the stuck-open flag
//! telemetry.rs    tracing events and metrics
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod actions;
mod cap;
mod config;
mod coordinator;
mod floor;
mod ledger;
mod local;
mod operator;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;
mod store;
mod telemetry;
mod view;

pub use actions::{
    wall_ms, ActionError, ActionKind, ActionRefusal, AppliedAction, AuditEntry, FleetAction,
    FleetSecret, WallClock, CLOCK_SKEW, DEFAULT_ACTION_TTL, MAX_ACTION_TTL, MAX_TEXT_LEN,
    MIN_SECRET_LEN, PREVIOUS_SECRET_ENV, SECRET_ENV,
};
pub use cap::{CapConfig, CapError, CapMode, CapSnapshot, Capped, CAP_SIGNED_FOR, MAX_CAP};
pub use config::{FleetConfig, TripTogether, MAX_SETTING};
pub use coordinator::{Coordinated, Fleet, FleetBuilder, FleetSnapshot, LeaseStatus, Shutdown};
pub use floor::{FloorFollower, FloorSnapshot, FloorTarget};
pub use local::{Faults, LocalStore, StoredClaim};
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use redis::{RedisStore, RedisStoreBuilder};
pub use store::{
    CapKeys, CapSignature, CapStore, Claim, ClaimReply, FleetEpoch, FleetEvent, FleetVerdict,
    InstanceId, Keys, LeaseReply, LeaseRequest, OperatorCap, ProbeResult, Store, StoreError,
    Subscription, Token, TripRecord, TripReply, AUDIT_KEPT, CAP_SCHEMA_VERSION, MAX_ACTIONS,
    MAX_PREFIX_LEN, SCHEMA_VERSION,
};
pub use view::{
    FleetView, InstanceReport, StuckCause, StuckOpen, FORCED_TOO_LONG, MAX_REPORT_LEN,
    REPORT_EVERY, REPORT_FRESH, STUCK_AFTER,
};
