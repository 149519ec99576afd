//! An adaptive bulkhead as a Tower service, driven by hand with a paused clock, and
//! its algorithms fed random samples.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use proptest::prelude::*;
use seawall_bulkhead::adaptive::{AimdConfig, Gradient, GradientConfig, LimitAlgorithm, Sample};
use seawall_bulkhead::{Bulkhead, BulkheadLayer, Handle, OverloadStatus, UntilResponse};
use seawall_core::{find_rejection, BoxError, CircuitOpen, DeadlineExceeded, RejectionKind};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_test::{assert_pending, assert_ready, task};
use tower::{service_fn, Layer, Service};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// How the supplier answers one call.
#[derive(Debug)]
enum Reply {
    Status(u16),
    Grpc(&'static str),
    Error(BoxError),
}

type Req = http::Request<oneshot::Receiver<Reply>>;
type Res = http::Response<()>;
type Call = task::Spawn<Pin<Box<dyn Future<Output = Result<Res, BoxError>> + Send>>>;

/// A supplier that answers each call with what the test sends it.
async fn supplier(req: Req) -> Result<Res, BoxError> {
    match req.into_body().await {
        Ok(Reply::Status(code)) => {
            let mut res = http::Response::new(());
            *res.status_mut() = http::StatusCode::from_u16(code).unwrap();
            Ok(res)
        }
        Ok(Reply::Grpc(code)) => Ok(http::Response::builder()
            .header("grpc-status", code)
            .body(())
            .unwrap()),
        Ok(Reply::Error(e)) => Err(e),
        Err(_) => Err("the test dropped the call".into()),
    }
}

type Svc<S> = Bulkhead<S, UntilResponse, OverloadStatus>;

fn layer(
    b: seawall_bulkhead::BulkheadBuilder,
) -> (BulkheadLayer<UntilResponse, OverloadStatus>, Handle) {
    let l = b.build().unwrap().overload(OverloadStatus::default());
    let h = l.handle();
    (l, h)
}

fn aimd(initial: usize, max_queue: usize) -> seawall_bulkhead::BulkheadBuilder {
    BulkheadLayer::builder("freight")
        .max_queue(max_queue)
        .max_wait(ms(20))
        .adaptive(AimdConfig {
            initial_limit: initial,
            min_limit: 1,
            max_limit: 20,
            sample_every: 1,
            timeout: Duration::from_secs(1),
            ..AimdConfig::default()
        })
}

/// Calls the bulkhead; the call's sender answers it.
fn call<S>(svc: &mut Svc<S>) -> (Call, oneshot::Sender<Reply>)
where
    S: Service<Req, Response = Res, Error = BoxError> + Clone + Send + 'static,
    S::Future: Send,
{
    let (tx, rx) = oneshot::channel();
    let fut: Pin<Box<dyn Future<Output = _> + Send>> = Box::pin(svc.call(http::Request::new(rx)));
    let mut call = task::spawn(fut);
    assert_pending!(call.poll());
    (call, tx)
}

fn answer(mut call: Call, tx: oneshot::Sender<Reply>, reply: Reply) -> Result<Res, BoxError> {
    tx.send(reply).unwrap();
    assert_ready!(call.poll())
}

fn counts(h: &Handle) -> (usize, usize, usize) {
    let s = h.snapshot();
    (s.active, s.queued, s.limit)
}

#[tokio::test(start_paused = true)]
async fn overload_answers_shrink_an_aimd_limit_and_other_answers_do_not() {
    let cases: Vec<(&str, Reply, usize)> = vec![
        ("503", Reply::Status(503), 9),
        ("429", Reply::Status(429), 9),
        ("RESOURCE_EXHAUSTED", Reply::Grpc("8"), 9),
        (
            "a timeout",
            Reply::Error(Box::new(DeadlineExceeded::new())),
            9,
        ),
        ("200", Reply::Status(200), 10),
        ("404", Reply::Status(404), 10),
        ("500", Reply::Status(500), 10),
        ("502", Reply::Status(502), 10),
        ("gRPC UNAVAILABLE", Reply::Grpc("14"), 10),
        (
            "an inner breaker open",
            Reply::Error(Box::new(CircuitOpen::new(
                "inner".into(),
                Duration::from_secs(5),
            ))),
            10,
        ),
        (
            "a transport error",
            Reply::Error("connection reset".into()),
            10,
        ),
    ];
    for (what, reply, expected) in cases {
        let (l, h) = layer(aimd(10, 0));
        let mut svc = l.layer(service_fn(supplier));
        assert_eq!(h.snapshot().limit, 10);
        let (c, tx) = call(&mut svc);
        let _ = answer(c, tx, reply);
        assert_eq!(h.snapshot().limit, expected, "after {what}");
    }
}

#[tokio::test(start_paused = true)]
async fn the_bulkheads_own_rejections_never_shrink_the_limit() {
    let (l, h) = layer(aimd(2, 1));
    let mut svc = l.layer(service_fn(supplier));
    let (_a, _ta) = call(&mut svc);
    let (_b, _tb) = call(&mut svc);
    let (mut waiting, _tw) = call(&mut svc);
    assert_eq!(counts(&h), (2, 1, 2));
    // Full: turned away at once, many times.
    for _ in 0..20 {
        let (tx, rx) = oneshot::channel::<Reply>();
        drop(tx);
        let err = svc.call(http::Request::new(rx)).await.unwrap_err();
        assert_eq!(
            find_rejection(&*err).unwrap().kind(),
            RejectionKind::BulkheadFull
        );
    }
    // Timed out in the queue.
    tokio::time::advance(ms(21)).await;
    let err = assert_ready!(waiting.poll()).unwrap_err();
    assert_eq!(
        find_rejection(&*err).unwrap().kind(),
        RejectionKind::BulkheadTimeout
    );
    let s = h.snapshot();
    assert_eq!((s.limit, s.rejected_full, s.rejected_timeout), (2, 20, 1));
    assert_eq!(
        s.adaptive.unwrap().generation,
        0,
        "the algorithm heard nothing"
    );
}

#[tokio::test(start_paused = true)]
async fn a_falling_limit_preempts_nothing_and_admits_nobody_until_below_it() {
    let (l, h) = layer(aimd(4, 4));
    let mut svc = l.layer(service_fn(supplier));
    let mut running: Vec<_> = (0..4).map(|_| call(&mut svc)).collect();
    let mut queued: Vec<_> = (0..2).map(|_| call(&mut svc)).collect();
    assert_eq!(counts(&h), (4, 2, 4));

    // One 503: the limit falls to 3; its slot is freed, but 3 are still running.
    let (c, tx) = running.remove(0);
    assert_eq!(answer(c, tx, Reply::Status(503)).unwrap().status(), 503);
    assert_eq!(counts(&h), (3, 2, 3));
    // Another 503 of the same round trip (admitted before the decrease) changes
    // nothing more; its slot goes to the first waiter.
    let (c, tx) = running.remove(0);
    let _ = answer(c, tx, Reply::Status(503));
    assert_eq!(counts(&h), (3, 1, 3));
    // The call that got that slot was admitted after the decrease: its 503 counts.
    let (mut first, tx) = queued.remove(0);
    assert_pending!(first.poll());
    let _ = answer(first, tx, Reply::Status(503));
    assert_eq!(counts(&h), (2, 1, 2));
    // Nobody was preempted: the two left from the start still run and answer.
    for (c, tx) in running.drain(..) {
        assert_eq!(answer(c, tx, Reply::Status(200)).unwrap().status(), 200);
    }
    assert_eq!(counts(&h).0, 1);
}

#[tokio::test(start_paused = true)]
async fn a_forced_limit_overrides_the_algorithm_and_release_continues_from_it() {
    let (l, h) = layer(aimd(10, 5));
    let mut svc = l.layer(service_fn(supplier));
    h.force(2).unwrap();
    let s = h.snapshot();
    assert_eq!((s.limit, s.limit_forced), (2, true));
    let mut calls: Vec<_> = (0..3).map(|_| call(&mut svc)).collect();
    assert_eq!(counts(&h), (2, 1, 2));
    // While forced the algorithm learns nothing.
    let (c, tx) = calls.remove(0);
    let _ = answer(c, tx, Reply::Status(503));
    assert_eq!(counts(&h), (2, 0, 2));
    assert_eq!(h.snapshot().adaptive.unwrap().generation, 0);

    h.release();
    let s = h.snapshot();
    assert_eq!((s.limit, s.limit_forced), (2, false));
    // The algorithm goes on from the forced limit: a 503 from a call admitted
    // after the release takes it to 1.
    let (c, tx) = calls.remove(0);
    let _ = answer(c, tx, Reply::Status(200));
    let (c, tx) = call(&mut svc);
    let _ = answer(c, tx, Reply::Status(503));
    assert_eq!(h.snapshot().limit, 1);

    assert_eq!(h.force(0).unwrap_err().field(), "limit");
    assert_eq!(h.force((1 << 20) + 1).unwrap_err().field(), "limit");
    // A forced limit raises the limit of a fixed bulkhead too; release restores max_concurrent.
    let fixed = BulkheadLayer::builder("fixed")
        .max_concurrent(3)
        .build()
        .unwrap();
    let fh = fixed.handle();
    fh.force(7).unwrap();
    assert_eq!(fh.snapshot().limit, 7);
    fh.release();
    let s = fh.snapshot();
    assert_eq!((s.limit, s.max_concurrent, s.limit_forced), (3, 3, false));
    assert!(s.adaptive.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_gradient_measures_its_baseline_then_shrinks_when_latency_grows() {
    let (l, h) = layer(
        BulkheadLayer::builder("freight")
            .max_queue(0)
            .seed(1)
            .adaptive(GradientConfig {
                initial_limit: 8,
                min_limit: 2,
                max_limit: 20,
                min_rtt_samples: 2,
                window_samples: 4,
                window: ms(50),
                sample_every: 1,
                ..GradientConfig::default()
            }),
    );
    let mut svc = l.layer(service_fn(supplier));
    let a = h.snapshot().adaptive.unwrap();
    assert_eq!(
        (h.snapshot().limit, a.algorithm, a.measuring_min_rtt),
        (2, "gradient", true)
    );
    // An inner breaker's instant rejection is no latency of the supplier.
    let (c, tx) = call(&mut svc);
    let open = CircuitOpen::new("inner".into(), Duration::from_secs(1));
    let _ = answer(c, tx, Reply::Error(Box::new(open)));
    assert!(h.snapshot().adaptive.unwrap().measuring_min_rtt);

    // Two calls of 100 ms: the baseline.
    let pair: Vec<_> = (0..2).map(|_| call(&mut svc)).collect();
    tokio::time::advance(ms(100)).await;
    for (c, tx) in pair {
        let _ = answer(c, tx, Reply::Status(200));
    }
    let a = h.snapshot().adaptive.unwrap();
    assert_eq!((a.min_rtt, a.measuring_min_rtt), (Some(ms(100)), false));
    assert_eq!(h.snapshot().limit, 8);

    // The supplier queues: calls take 400 ms. One window halves the limit.
    let calls: Vec<_> = (0..8).map(|_| call(&mut svc)).collect();
    tokio::time::advance(ms(400)).await;
    for (c, tx) in calls {
        let _ = answer(c, tx, Reply::Status(200));
    }
    assert_eq!(h.snapshot().limit, 4);
}

#[tokio::test(start_paused = true)]
async fn backpressure_mode_feeds_the_same_algorithm() {
    let (l, h) = layer(aimd(3, 0));
    let mut svc = l.backpressure().layer(service_fn(supplier));
    let mut ready = task::spawn(std::future::poll_fn(|cx| svc.poll_ready(cx)));
    assert!(assert_ready!(ready.poll()).is_ok());
    drop(ready);
    let (tx, rx) = oneshot::channel();
    let mut call = task::spawn(svc.call(http::Request::new(rx)));
    assert_pending!(call.poll());
    tx.send(Reply::Status(429)).unwrap();
    assert_eq!(assert_ready!(call.poll()).unwrap().status(), 429);
    assert_eq!(counts(&h), (0, 0, 2));
}

#[test]
fn a_keyed_bulkhead_names_an_invalid_adaptive_field() {
    let e = seawall_bulkhead::BulkheadLayer::builder("hosts")
        .adaptive(AimdConfig {
            min_limit: 5,
            initial_limit: 2,
            ..AimdConfig::default()
        })
        .keyed(|r: &http::Request<()>| r.uri().host().map(str::to_owned))
        .build()
        .err()
        .unwrap();
    assert_eq!(e.field(), "adaptive.initial_limit");
}

#[test]
fn the_builder_names_an_invalid_adaptive_field() {
    let e = BulkheadLayer::builder("x")
        .adaptive(AimdConfig {
            min_limit: 5,
            initial_limit: 2,
            ..AimdConfig::default()
        })
        .build()
        .unwrap_err();
    assert_eq!(e.field(), "adaptive.initial_limit");
    let e = BulkheadLayer::builder("x")
        .adaptive(GradientConfig {
            tolerance: f64::NAN,
            ..GradientConfig::default()
        })
        .build()
        .unwrap_err();
    assert_eq!(e.field(), "adaptive.tolerance");
}

// ---- the algorithms alone, fed anything --------------------------------------

#[derive(Debug, Clone)]
enum Fed {
    Served {
        latency_ms: u64,
        inflight: usize,
        stale: bool,
    },
    Overloaded {
        inflight: usize,
        stale: bool,
    },
    Restart(usize),
}

fn fed() -> impl Strategy<Value = Fed> {
    prop_oneof![
        6 => (0..2_000u64, 0..300usize, any::<bool>())
            .prop_map(|(latency_ms, inflight, stale)| Fed::Served { latency_ms, inflight, stale }),
        2 => (0..300usize, any::<bool>()).prop_map(|(inflight, stale)| Fed::Overloaded { inflight, stale }),
        1 => (0..1_000usize).prop_map(Fed::Restart),
    ]
}

/// An algorithm's limits: `(min, max, initial)`, with `min <= initial <= max`.
fn limits() -> impl Strategy<Value = (usize, usize, usize)> {
    (1..20usize, 0..50usize, 0..50usize)
        .prop_map(|(min, span, at)| (min, min + span, min + at.min(span)))
}

/// What the algorithm is fed: a pause in ms before each step, and the step.
fn steps() -> impl Strategy<Value = Vec<(u64, Fed)>> {
    proptest::collection::vec((0..500u64, fed()), 1..300)
}

fn check<A: LimitAlgorithm>(
    mut a: A,
    min: usize,
    max: usize,
    steps: &[(u64, Fed)],
) -> Result<(), TestCaseError> {
    let mut now = Instant::now();
    let mut generation = a.generation();
    prop_assert!((min..=max).contains(&a.limit()));
    for (advance, f) in steps {
        now += ms(*advance);
        let current = a.generation();
        let g = |stale: bool| {
            if stale {
                current.saturating_sub(1)
            } else {
                current
            }
        };
        let limit = match *f {
            Fed::Served {
                latency_ms,
                inflight,
                stale,
            } => a.on_sample(now, Sample::served(ms(latency_ms), inflight, g(stale))),
            Fed::Overloaded { inflight, stale } => {
                a.on_sample(now, Sample::overloaded(inflight, g(stale)))
            }
            Fed::Restart(n) => {
                a.restart_from(now, n);
                a.limit()
            }
        };
        prop_assert_eq!(limit, a.limit());
        prop_assert!(
            (min..=max).contains(&limit),
            "{limit} outside {min}..={max}: {a:?}"
        );
        prop_assert!(a.generation() >= generation, "generations only grow");
        generation = a.generation();
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn aimd_stays_within_its_bounds(
        (min, max, initial) in limits(),
        backoff in 0.5..0.99f64,
        timeout_ms in 1..1_000u64,
        steps in steps(),
    ) {
        let config = AimdConfig {
            min_limit: min,
            max_limit: max,
            initial_limit: initial,
            backoff,
            timeout: ms(timeout_ms),
            ..AimdConfig::default()
        };
        config.validate().unwrap();
        check(seawall_bulkhead::adaptive::Aimd::new(config), min, max, &steps)?;
    }

    #[test]
    fn gradient_stays_within_its_bounds(
        (min, max, initial) in limits(),
        tolerance in 0.0..1.0f64,
        samples in 1..32usize,
        seed in any::<u64>(),
        steps in steps(),
    ) {
        let config = GradientConfig {
            min_limit: min,
            max_limit: max,
            initial_limit: initial,
            tolerance,
            window_samples: samples,
            min_rtt_samples: samples,
            window: ms(100),
            min_rtt_every: Duration::from_secs(5),
            ..GradientConfig::default()
        };
        config.validate().unwrap();
        check(Gradient::with_seed(config, seed), min, max, &steps)?;
    }
}

#[test]
fn an_overload_signal_in_a_full_queue_is_still_one_signal() {
    // The same overloaded round trip, reported by many calls: one decrease.
    let mut a = seawall_bulkhead::adaptive::Aimd::new(AimdConfig {
        initial_limit: 50,
        ..AimdConfig::default()
    });
    let now = Instant::now();
    let g = a.generation();
    for _ in 0..100 {
        a.on_sample(now, Sample::overloaded(50, g));
    }
    assert_eq!(a.limit(), 45);
}
