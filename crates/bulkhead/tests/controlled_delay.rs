//! Controlled delay and adaptive LIFO through the service, with a paused clock:
//! a standing line gives newcomers the short target and serves the newest first;
//! a drained one is back to the normal wait, first in, first out.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use seawall_bulkhead::{Bulkhead, BulkheadLayer, ControlledDelay, Handle, QueuePolicy};
use seawall_core::{find_rejection, BoxError, BulkheadTimeout, Deadline, RejectionKind};
use tokio_test::{assert_pending, assert_ready, task};
use tower::{Layer, Service};
use tower_test::mock;

type Req = http::Request<&'static str>;
type Mock = mock::Mock<Req, &'static str>;
type MockHandle = mock::Handle<Req, &'static str>;
type Call = task::Spawn<<Bulkhead<Mock> as Service<Req>>::Future>;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// One slot, room for ten, a second at most; standing after 100 ms, then 5 ms.
fn layer(lifo: bool) -> (Bulkhead<Mock>, MockHandle, Handle) {
    let l = BulkheadLayer::builder("freight")
        .max_concurrent(1)
        .queue(QueuePolicy {
            max_queue: 10,
            max_wait: ms(1000),
            controlled_delay: Some(ControlledDelay {
                interval: ms(100),
                target: ms(5),
                lifo,
            }),
            ..QueuePolicy::default()
        })
        .build()
        .unwrap();
    let h = l.handle();
    let (svc, mut inner) = mock::pair::<Req, &'static str>();
    inner.allow(100);
    (l.layer(svc), inner, h)
}

fn start(svc: &mut Bulkhead<Mock>, body: &'static str) -> Call {
    let mut call = task::spawn(svc.call(http::Request::new(body)));
    assert_pending!(call.poll());
    call
}

async fn arrives(inner: &mut MockHandle, body: &'static str) -> mock::SendResponse<&'static str> {
    let (seen, send) = inner.next_request().await.unwrap();
    assert_eq!(*seen.body(), body);
    send
}

fn waited(err: &BoxError) -> Duration {
    assert_eq!(
        find_rejection(&**err).unwrap().kind(),
        RejectionKind::BulkheadTimeout
    );
    err.downcast_ref::<BulkheadTimeout>().unwrap().waited()
}

/// One call holding the only slot, and two waiting 150 ms apart: the line has
/// stood past its 100 ms interval when the newest arrives.
async fn standing_line(
    svc: &mut Bulkhead<Mock>,
    inner: &mut MockHandle,
    h: &Handle,
) -> (Call, Call, Call) {
    let holder = start(svc, "holder");
    let _ = arrives(inner, "holder").await;
    let oldest = start(svc, "oldest");
    tokio::time::advance(ms(150)).await;
    let newest = start(svc, "newest");
    assert!(h.snapshot().standing);
    (holder, oldest, newest)
}

#[test]
fn the_feature_is_off_by_default() {
    assert_eq!(QueuePolicy::default().controlled_delay, None);
    let d = ControlledDelay::default();
    assert_eq!((d.interval, d.target, d.lifo), (ms(100), ms(5), true));
}

#[tokio::test(start_paused = true)]
async fn a_line_standing_past_the_interval_gives_newcomers_the_short_target() {
    let (mut svc, mut inner, h) = layer(true);
    let _holder = start(&mut svc, "holder");
    let _ = arrives(&mut inner, "holder").await;
    // Arrives to an empty line: the normal wait.
    let mut early = start(&mut svc, "early");
    tokio::time::advance(ms(100)).await;
    // Non-empty for exactly the interval: not standing yet.
    let mut at_interval = start(&mut svc, "at-interval");
    assert!(!h.snapshot().standing);
    tokio::time::advance(ms(1)).await;
    let mut late = start(&mut svc, "late");
    assert!(h.snapshot().standing);
    tokio::time::advance(ms(4)).await;
    assert_pending!(late.poll());
    tokio::time::advance(ms(1)).await;
    assert_eq!(waited(&assert_ready!(late.poll()).unwrap_err()), ms(5));
    // Those who came before it stood keep their normal wait.
    assert_pending!(early.poll());
    assert_pending!(at_interval.poll());
    tokio::time::advance(ms(894)).await;
    assert_eq!(waited(&assert_ready!(early.poll()).unwrap_err()), ms(1000));
    assert_pending!(at_interval.poll());
}

#[tokio::test(start_paused = true)]
async fn a_standing_line_serves_the_newest_first_and_a_drained_one_first_in_first_out() {
    let (mut svc, mut inner, h) = layer(true);
    let (holder, mut oldest, mut newest) = standing_line(&mut svc, &mut inner, &h).await;

    drop(holder);
    assert!(newest.is_woken());
    assert!(!oldest.is_woken());
    assert_pending!(newest.poll());
    let send = arrives(&mut inner, "newest").await;
    send.send_response("ok");
    assert_eq!(assert_ready!(newest.poll()).unwrap(), "ok");
    // The oldest got the slot next; the line is empty: back to normal.
    assert_pending!(oldest.poll());
    let _ = arrives(&mut inner, "oldest").await;
    assert!(!h.snapshot().standing);

    // A new line: the normal wait, and first in, first out.
    let mut first = start(&mut svc, "first");
    let mut second = start(&mut svc, "second");
    assert!(!h.snapshot().standing);
    tokio::time::advance(ms(50)).await;
    drop(oldest);
    assert!(first.is_woken());
    assert!(!second.is_woken());
    assert_pending!(first.poll());
    let _ = arrives(&mut inner, "first").await;
    assert_pending!(second.poll());
}

#[tokio::test(start_paused = true)]
async fn without_lifo_a_standing_line_keeps_its_order_but_still_shortens_the_wait() {
    let (mut svc, mut inner, h) = layer(false);
    let (holder, mut oldest, mut newest) = standing_line(&mut svc, &mut inner, &h).await;
    drop(holder);
    assert!(oldest.is_woken());
    assert!(!newest.is_woken());
    assert_pending!(oldest.poll());
    tokio::time::advance(ms(5)).await;
    assert_eq!(waited(&assert_ready!(newest.poll()).unwrap_err()), ms(5));
}

#[tokio::test(start_paused = true)]
async fn the_request_deadline_still_bounds_a_wait_shorter_than_the_target() {
    let (mut svc, mut inner, _h) = layer(true);
    let _holder = start(&mut svc, "holder");
    let _ = arrives(&mut inner, "holder").await;
    let _early = start(&mut svc, "early");
    tokio::time::advance(ms(150)).await;
    let deadline = Deadline::after(tokio::time::Instant::now(), ms(2));
    let mut late = task::spawn(deadline.scope(svc.call(http::Request::new("late"))));
    assert_pending!(late.poll());
    tokio::time::advance(ms(2)).await;
    assert_eq!(waited(&assert_ready!(late.poll()).unwrap_err()), ms(2));
}
