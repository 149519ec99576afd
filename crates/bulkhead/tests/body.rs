//! Holding the slot until the response body ends (feature `http`).
#![cfg(feature = "http")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use seawall_bulkhead::{BulkheadLayer, Handle};
use tokio_test::{assert_pending, assert_ready_ok, task};
use tower::{service_fn, Layer, Service, ServiceExt};

fn counts(h: &Handle) -> (usize, usize) {
    let s = h.snapshot();
    (s.active, s.queued)
}

fn quote(
    _req: http::Request<()>,
) -> std::future::Ready<Result<http::Response<Full<Bytes>>, Infallible>> {
    std::future::ready(Ok(http::Response::new(Full::new(Bytes::from_static(
        b"quote: 12.50",
    )))))
}

fn body_layer() -> (BulkheadLayer<seawall_bulkhead::UntilBodyEnd>, Handle) {
    let l = BulkheadLayer::builder("freight")
        .max_concurrent(1)
        .max_queue(1)
        .build()
        .unwrap();
    let h = l.handle();
    (l.hold_until_body_end(), h)
}

/// Waits for `svc` to be ready, then makes one call: its response, body unread.
async fn ready_call<S>(svc: &mut S) -> S::Response
where
    S: Service<http::Request<()>>,
    S::Error: std::fmt::Debug,
{
    svc.ready()
        .await
        .unwrap()
        .call(http::Request::new(()))
        .await
        .unwrap()
}

/// Reads a quote's body to its end, checking it is the whole quote.
async fn read_quote<B>(res: http::Response<B>)
where
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&bytes[..], b"quote: 12.50");
}

#[tokio::test(start_paused = true)]
async fn the_body_held_permit_is_released_at_the_end_of_the_body() {
    let (l, h) = body_layer();
    let mut svc = l.layer(service_fn(quote));
    let res = ready_call(&mut svc).await;
    assert_eq!(res.status(), 200);
    assert!(res.body().is_holding());
    // The response is here, but its body is unread: the slot is still taken.
    assert_eq!(counts(&h), (1, 0));
    let mut waiter = task::spawn(svc.call(http::Request::new(())));
    assert_pending!(waiter.poll());
    assert_eq!(counts(&h), (1, 1));

    read_quote(res).await;
    assert!(waiter.is_woken());
    let res2 = assert_ready_ok!(waiter.poll());
    assert_eq!(counts(&h), (1, 0));
    drop(res2);
    assert_eq!(counts(&h), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn the_body_held_permit_is_released_when_the_body_is_dropped() {
    let (l, h) = body_layer();
    let mut svc = l.layer(service_fn(quote));
    let res = svc.call(http::Request::new(())).await.unwrap();
    let (parts, body) = res.into_parts();
    drop(parts);
    assert_eq!(counts(&h), (1, 0));
    drop(body);
    assert_eq!(counts(&h), (0, 0));
    assert_eq!(h.snapshot().admitted, 1);
}

#[tokio::test(start_paused = true)]
async fn an_empty_body_releases_at_once_and_errors_release_too() {
    let (l, h) = body_layer();
    let mut svc = l.layer(service_fn(|_req: http::Request<()>| async {
        Ok::<_, Infallible>(http::Response::new(Empty::<Bytes>::new()))
    }));
    let res = svc.call(http::Request::new(())).await.unwrap();
    assert!(!res.body().is_holding());
    assert_eq!(counts(&h), (0, 0));

    let (l, h) = body_layer();
    let mut svc = l.layer(service_fn(|_req: http::Request<()>| async {
        Err::<http::Response<Empty<Bytes>>, _>(std::io::Error::other("refused"))
    }));
    let err = svc.call(http::Request::new(())).await.unwrap_err();
    assert_eq!(err.to_string(), "refused");
    assert_eq!(counts(&h), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn by_default_the_slot_is_freed_with_the_response() {
    let l = BulkheadLayer::builder("freight")
        .max_concurrent(1)
        .build()
        .unwrap();
    let h = l.handle();
    let mut svc = l.layer(service_fn(quote));
    let res = svc.call(http::Request::new(())).await.unwrap();
    // Plain response type, body unread, slot already free.
    let _: &http::Response<Full<Bytes>> = &res;
    assert_eq!(counts(&h), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn in_backpressure_mode_a_held_body_keeps_the_next_service_unready() {
    let (l, h) = body_layer();
    let l = l.backpressure();
    let mut a = l.layer(service_fn(quote));
    let mut b = tower_test::mock::Spawn::new(a.clone());
    let res = ready_call(&mut a).await;
    assert!(res.body().is_holding());
    // The body still holds the only slot: the other service is not ready.
    assert_pending!(b.poll_ready::<http::Request<()>>());
    assert_eq!(counts(&h), (1, 1));

    read_quote(res).await;
    assert!(b.is_woken());
    assert_ready_ok!(b.poll_ready::<http::Request<()>>());
    assert_eq!(counts(&h), (1, 0));
}
