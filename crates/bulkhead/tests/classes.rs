//! Classes through the service, with a paused clock: shares, a line per class,
//! displacement, and the class carried by every rejection.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use seawall_bulkhead::{
    Bulkhead, BulkheadLayer, Criticality, CriticalityHeader, FullCause, Handle, QueuePolicy, Shares,
};
use seawall_core::{find_rejection, BoxError, RejectionKind};
use tokio_test::{assert_pending, assert_ready, task};
use tower::{Layer, Service};
use tower_test::mock;

type Req = http::Request<&'static str>;
type Mock = mock::Mock<Req, &'static str>;
type MockHandle = mock::Handle<Req, &'static str>;
type ByBody = fn(&Req) -> Criticality;
type Svc =
    Bulkhead<Mock, seawall_bulkhead::UntilResponse, seawall_bulkhead::TimeoutsAsOverload, ByBody>;
type Call = task::Spawn<<Svc as Service<Req>>::Future>;

const C: Criticality = Criticality::Critical;
const D: Criticality = Criticality::Default;
const S: Criticality = Criticality::Sheddable;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The class is the body's first letter: `c…` critical, `s…` sheddable, else default.
fn by_body(req: &Req) -> Criticality {
    match req.body().as_bytes().first() {
        Some(b'c') => C,
        Some(b's') => S,
        _ => D,
    }
}

fn layer(limit: usize, max_queue: usize, shares: Shares) -> (BulkheadLayer, Handle) {
    let l = BulkheadLayer::builder("freight")
        .max_concurrent(limit)
        .queue(QueuePolicy {
            max_queue,
            max_wait: ms(20),
            shares,
            ..QueuePolicy::default()
        })
        .build()
        .unwrap();
    let h = l.handle();
    (l, h)
}

fn pair(l: BulkheadLayer) -> (Svc, MockHandle) {
    let (svc, handle) = mock::pair::<Req, &'static str>();
    (l.criticality(by_body as ByBody).layer(svc), handle)
}

fn start(svc: &mut Svc, body: &'static str) -> Call {
    let mut call = task::spawn(svc.call(http::Request::new(body)));
    assert_pending!(call.poll());
    call
}

fn counts(h: &Handle) -> (usize, usize) {
    let s = h.snapshot();
    (s.active, s.queued)
}

/// Polls the mock until `body` arrives; what lets it answer.
async fn arrives(inner: &mut MockHandle, body: &'static str) -> mock::SendResponse<&'static str> {
    let (seen, send) = inner.next_request().await.unwrap();
    assert_eq!(*seen.body(), body);
    send
}

fn rejection(err: &BoxError) -> (RejectionKind, Option<FullCause>, Option<Criticality>) {
    let r = find_rejection(&**err).expect("a seawall rejection");
    (r.kind(), r.full_cause(), r.criticality())
}

#[tokio::test(start_paused = true)]
async fn a_critical_arrival_displaces_a_sheddable_waiter_which_is_told_at_once() {
    let (l, h) = layer(1, 1, Shares::default());
    let (mut svc, mut inner) = pair(l);
    inner.allow(10);
    // Critical holds the only slot (sheddable and default shares of 1 are 0 slots).
    let mut held = start(&mut svc, "c-hold");
    let send = arrives(&mut inner, "c-hold").await;
    let mut shed = start(&mut svc, "s-prefetch");
    assert_eq!(counts(&h), (1, 1));

    // The queue is full: the critical newcomer takes the sheddable's place.
    let mut critical = start(&mut svc, "c-checkout");
    assert!(
        shed.is_woken(),
        "the displaced waiter is woken, not left to time out"
    );
    let err = assert_ready!(shed.poll()).unwrap_err();
    assert_eq!(
        rejection(&err),
        (
            RejectionKind::BulkheadFull,
            Some(FullCause::Displaced),
            Some(S)
        )
    );
    assert_eq!(counts(&h), (1, 1));
    assert_eq!(h.snapshot().rejected_full, 1);

    // A sheddable newcomer now finds it full: nobody less critical waits.
    let err = task::spawn(svc.call(http::Request::new("s-more")))
        .await
        .unwrap_err();
    assert_eq!(
        rejection(&err),
        (RejectionKind::BulkheadFull, Some(FullCause::Full), Some(S))
    );

    send.send_response("quote");
    assert_eq!(assert_ready!(held.poll()).unwrap(), "quote");
    assert_pending!(critical.poll());
    let send = arrives(&mut inner, "c-checkout").await;
    send.send_response("booked");
    assert_eq!(assert_ready!(critical.poll()).unwrap(), "booked");
    assert_eq!(counts(&h), (0, 0));
    let s = h.snapshot();
    assert_eq!((s.admitted, s.rejected_full, s.rejected_timeout), (2, 2, 0));
    // Per class: the shares of the limit of 1, and who was turned away how.
    let classes: Vec<_> = s
        .classes
        .iter()
        .map(|c| (c.criticality, c.slots, c.rejected_full, c.displaced))
        .collect();
    assert_eq!(classes, [(C, 1, 0, 0), (D, 0, 0, 0), (S, 0, 1, 1)]);
}

#[tokio::test(start_paused = true)]
async fn the_snapshot_shows_each_class_once_one_has_come() {
    let (l, h) = layer(
        10,
        2,
        Shares {
            default: 80,
            sheddable: 30,
        },
    );
    assert!(h.snapshot().classes.is_empty(), "no class yet");
    let (mut svc, mut inner) = pair(l);
    inner.allow(10);
    let mut calls: Vec<_> = ["s1", "s2", "s3", "s4", "d1", "c1"]
        .into_iter()
        .map(|b| start(&mut svc, b))
        .collect();
    let s = h.snapshot();
    let rows: Vec<_> = s
        .classes
        .iter()
        .map(|c| (c.criticality, c.slots, c.active, c.queued))
        .collect();
    assert_eq!(rows, [(C, 10, 1, 0), (D, 8, 1, 0), (S, 3, 3, 1)]);
    assert_eq!(s.queue.shares.sheddable, 30);
    // The sheddable waiter times out: counted against its class.
    tokio::time::advance(ms(20)).await;
    let err = assert_ready!(calls[3].poll()).unwrap_err();
    assert_eq!(rejection(&err).2, Some(S));
    let s = h.snapshot();
    assert_eq!(s.classes[S.index()].rejected_timeout, 1);
    assert_eq!(s.rejected_timeout, 1);
}

#[tokio::test(start_paused = true)]
async fn sheddable_calls_hold_at_most_their_share_and_critical_ones_go_through() {
    let (l, h) = layer(
        4,
        10,
        Shares {
            default: 100,
            sheddable: 50,
        },
    );
    let (mut svc, mut inner) = pair(l);
    inner.allow(10);
    let first = start(&mut svc, "s1");
    let _second = start(&mut svc, "s2");
    let _ = arrives(&mut inner, "s1").await;
    let _ = arrives(&mut inner, "s2").await;
    // Two of four slots: the next sheddable calls wait with two slots free.
    let mut third = start(&mut svc, "s3");
    let _fourth = start(&mut svc, "s4");
    assert_eq!(counts(&h), (2, 2));
    // A critical and a default call go straight in.
    let _crit = start(&mut svc, "c1");
    let _def = start(&mut svc, "d1");
    assert_eq!(counts(&h), (4, 2));
    let _ = arrives(&mut inner, "c1").await;
    let _ = arrives(&mut inner, "d1").await;

    // A sheddable slot freed goes to the first sheddable waiter.
    drop(first);
    assert_eq!(counts(&h), (4, 1));
    assert_pending!(third.poll());
    let _ = arrives(&mut inner, "s3").await;
}

#[tokio::test(start_paused = true)]
async fn a_freed_slot_goes_to_the_critical_waiter_that_came_after_a_sheddable_one() {
    let all = Shares {
        default: 100,
        sheddable: 100,
    };
    let (l, h) = layer(1, 10, all);
    let (mut svc, mut inner) = pair(l);
    inner.allow(10);
    let holder = start(&mut svc, "d-hold");
    let _ = arrives(&mut inner, "d-hold").await;
    let mut shed = start(&mut svc, "s-early");
    let mut def = start(&mut svc, "d-mid");
    let mut crit = start(&mut svc, "c-late");
    assert_eq!(counts(&h), (1, 3));

    drop(holder);
    assert!(crit.is_woken());
    assert!(!shed.is_woken() && !def.is_woken());
    assert_pending!(crit.poll());
    let _ = arrives(&mut inner, "c-late").await;
    drop(crit);
    assert!(def.is_woken());
    assert_pending!(def.poll());
    assert_pending!(shed.poll());
    let _ = arrives(&mut inner, "d-mid").await;
    assert_eq!(counts(&h), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_waiter_with_a_class_is_timed_out_at_max_wait_with_its_class() {
    let (l, h) = layer(1, 2, Shares::default());
    let (mut svc, mut inner) = pair(l);
    inner.allow(10);
    let _holder = start(&mut svc, "c-hold");
    let _ = arrives(&mut inner, "c-hold").await;
    let mut waiter = start(&mut svc, "c-wait");
    tokio::time::advance(ms(19)).await;
    assert_pending!(waiter.poll());
    tokio::time::advance(ms(1)).await;
    let err = assert_ready!(waiter.poll()).unwrap_err();
    assert_eq!(
        rejection(&err),
        (RejectionKind::BulkheadTimeout, None, Some(C))
    );
    assert_eq!(h.snapshot().rejected_timeout, 1);
}

#[tokio::test(start_paused = true)]
async fn a_displaced_waiter_dropped_before_it_looks_is_counted_once() {
    let (l, h) = layer(1, 1, Shares::default());
    let (mut svc, mut inner) = pair(l);
    inner.allow(10);
    let holder = start(&mut svc, "c-hold");
    let _ = arrives(&mut inner, "c-hold").await;
    let shed = start(&mut svc, "s");
    let mut crit = start(&mut svc, "c");
    drop(shed);
    let s = h.snapshot();
    assert_eq!((s.rejected_full, s.abandoned, s.queued), (1, 0, 1));
    drop(holder);
    assert_pending!(crit.poll());
    let _ = arrives(&mut inner, "c").await;
    drop(crit);
    assert_eq!(counts(&h), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn an_untrusted_header_cannot_raise_a_call_above_the_default() {
    let half = Shares {
        default: 50,
        sheddable: 0,
    };
    let claim = |v: &'static str| {
        http::Request::builder()
            .header("x-criticality", v)
            .body("x")
            .unwrap()
    };
    for trusted in [false, true] {
        let (l, h) = layer(2, 1, half);
        let (svc, mut inner) = mock::pair::<Req, &'static str>();
        let mut svc = l
            .criticality(CriticalityHeader::new().trusted(trusted))
            .layer(svc);
        inner.allow(10);
        let mut first = task::spawn(svc.call(claim("critical")));
        let mut second = task::spawn(svc.call(claim("critical")));
        assert_pending!(first.poll());
        assert_pending!(second.poll());
        if trusted {
            assert_eq!(counts(&h), (2, 0), "two critical calls");
        } else {
            // Taken as default: one slot of two, the other waits.
            assert_eq!(counts(&h), (1, 1));
            // A sheddable claim is believed, and displaces nobody more critical.
            let err = task::spawn(svc.call(claim("sheddable"))).await.unwrap_err();
            assert_eq!(
                rejection(&err),
                (RejectionKind::BulkheadFull, Some(FullCause::Full), Some(S))
            );
        }
    }
}
