//! A `DeadlineLayer` in shadow mode: the same requests, once enforcing and once in
//! shadow. The shadow run fails nothing and counts exactly the requests the
//! enforcing run failed with `DeadlineExceeded` (counted here from its errors).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use seawall_core::{BoxError, Deadline, DeadlineExceeded, DeadlineLayer};
use tokio::time::{advance, Instant};
use tokio_test::task;
use tower::{service_fn, Layer, ServiceExt};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Latencies against a 100 ms budget: in time, late, exactly at the deadline (in
/// time: a response ready when the deadline passes is not late), far too late.
const LATENCIES: [u64; 8] = [50, 150, 99, 100, 101, 300, 0, 100_000];

/// (requests failed with `DeadlineExceeded`, requests answered, the layer's
/// shadow count). Each request runs alone, so its lateness is its own.
async fn drive(shadow: bool) -> (u64, u64, u64) {
    let layer = DeadlineLayer::new(ms(100)).unwrap().shadow(shadow);
    let handle = layer.handle();
    let svc = layer.layer(service_fn(|latency: u64| async move {
        tokio::time::sleep(ms(latency)).await;
        Ok::<_, BoxError>(latency)
    }));
    let (mut exceeded, mut answered) = (0, 0);
    for latency in LATENCIES {
        let mut call = task::spawn(svc.clone().oneshot(latency));
        loop {
            match call.poll() {
                std::task::Poll::Ready(Ok(l)) => {
                    assert_eq!(l, latency);
                    answered += 1;
                    break;
                }
                std::task::Poll::Ready(Err(e)) => {
                    assert!(e.downcast_ref::<DeadlineExceeded>().is_some(), "{e}");
                    exceeded += 1;
                    break;
                }
                std::task::Poll::Pending => advance(ms(1)).await,
            }
        }
    }
    (exceeded, answered, handle.snapshot().shadow_rejections)
}

#[tokio::test(start_paused = true)]
async fn shadow_counts_exactly_what_enforcement_fails_and_fails_nothing() {
    let (exceeded, answered, counted) = drive(false).await;
    assert_eq!((exceeded, answered, counted), (4, 4, 0));
    let (shadow_exceeded, shadow_answered, shadow_counted) = drive(true).await;
    assert_eq!(shadow_exceeded, 0);
    assert_eq!(shadow_answered, LATENCIES.len() as u64);
    assert_eq!(shadow_counted, exceeded);
}

#[tokio::test(start_paused = true)]
async fn in_shadow_the_deadline_is_not_current_below_but_an_outer_one_still_is() {
    let seen =
        service_fn(
            |(): ()| async move { Ok::<_, BoxError>(Deadline::current().map(|d| d.instant())) },
        );
    let shadow = DeadlineLayer::new(ms(100)).unwrap().shadow(true);
    let svc = shadow.layer(seen);
    assert_eq!(svc.clone().oneshot(()).await.unwrap(), None);

    // An enforcing deadline set further out stays the current one.
    let outer = DeadlineLayer::new(ms(300)).unwrap().layer(svc);
    let at = Instant::now() + ms(300);
    assert_eq!(outer.oneshot(()).await.unwrap(), Some(at));
}

#[tokio::test(start_paused = true)]
async fn switching_shadow_at_run_time_takes_effect_on_the_next_request() {
    let layer = DeadlineLayer::new(ms(10)).unwrap();
    let handle = layer.handle();
    let svc = layer.layer(service_fn(|(): ()| async move {
        tokio::time::sleep(ms(20)).await;
        Ok::<_, BoxError>("late")
    }));
    assert!(!handle.is_shadow());
    let mut late = task::spawn(svc.clone().oneshot(()));
    assert!(late.poll().is_pending());
    handle.set_shadow(true);
    let mut shadowed = task::spawn(svc.clone().oneshot(()));
    assert!(shadowed.poll().is_pending());
    advance(ms(10)).await;
    // The request in flight keeps the mode it started in.
    let std::task::Poll::Ready(Err(e)) = late.poll() else {
        panic!("the enforcing request fails at its deadline");
    };
    assert!(e.downcast_ref::<DeadlineExceeded>().is_some());
    assert!(shadowed.poll().is_pending());
    advance(ms(10)).await;
    assert!(matches!(
        shadowed.poll(),
        std::task::Poll::Ready(Ok("late"))
    ));
    assert_eq!(handle.snapshot().shadow_rejections, 1);
    // A layer made from the handle shares the switch and the counter.
    assert!(handle.layer().handle().is_shadow());
    handle.revert();
    assert!(!handle.is_shadow());
    assert!(svc.oneshot(()).await.is_err());
}
