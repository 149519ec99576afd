//! A policy file's `hold`: the HTTP constructors hold a client's call until the
//! response body ends by default, `hold = "response"` ends it at the headers with
//! the same response type, and a reload cannot change it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::Bytes;
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use seawall::bulkhead::{BulkheadLayer, UntilBodyEnd};
use seawall::config::{Hold, LoadError, Policies};
use seawall::core::{BoxError, HttpStatus};
use seawall::ServiceBuilderExt;
use tokio::sync::mpsc;
use tower::{service_fn, ServiceBuilder, ServiceExt};

const DOCUMENT: &str = r#"
[policies.held]
bulkhead = { max_concurrent = 4 }
breaker = { policy = { kind = "consecutive_failures", threshold = 1 }, jitter = 0.0 }

[policies.headers]
hold = "response"
bulkhead = { max_concurrent = 4 }
breaker = { policy = { kind = "consecutive_failures", threshold = 1 }, jitter = 0.0 }
"#;

type Chunks = StreamBody<tokio_stream::wrappers::ReceiverStream<Result<Frame<Bytes>, BoxError>>>;

/// A supplier whose one response body streams what the test sends on the returned
/// channel (a first chunk is already in it).
#[allow(clippy::type_complexity)] // the service's type, spelled out once
fn streaming_supplier() -> (
    mpsc::Sender<Result<Frame<Bytes>, BoxError>>,
    impl tower::Service<
            http::Request<()>,
            Response = http::Response<Chunks>,
            Error = std::io::Error,
            Future = impl Send,
        > + Clone,
) {
    let (tx, rx) = mpsc::channel(4);
    let rx = std::sync::Arc::new(std::sync::Mutex::new(Some(rx)));
    let supplier = service_fn(move |_req: http::Request<()>| {
        let rx = rx.lock().unwrap().take().expect("one call");
        async move {
            let body = StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx));
            Ok::<_, std::io::Error>(http::Response::new(body))
        }
    });
    tx.try_send(Ok(Frame::data(Bytes::from_static(b"first"))))
        .unwrap();
    (tx, supplier)
}

#[test]
fn the_default_is_body_and_response_is_read() {
    let policies = Policies::from_toml(DOCUMENT).unwrap();
    assert_eq!(policies.document().policies["held"].hold, Hold::Body);
    assert_eq!(policies.document().policies["headers"].hold, Hold::Response);
    // Both are the same layer type: the file chooses, the stack's type does not change.
    let _both: [BulkheadLayer<UntilBodyEnd>; 2] = [
        policies.http_bulkhead("held").unwrap(),
        policies.http_bulkhead("headers").unwrap(),
    ];
    let e = Policies::from_toml("[policies.x]\nhold = \"forever\"\nbulkhead = {}\n").unwrap_err();
    assert!(e.fields().contains(&"policies.x.hold"), "{:?}", e.fields());
}

/// What a client of `policy`'s HTTP bulkhead and breaker saw of one call whose
/// body fails after its first chunk: slots active and successes recorded once the
/// response arrived, then slots active and failures recorded once the body failed.
async fn a_body_failing_mid_stream(policy: &str) -> ((usize, u64), (usize, u64)) {
    let policies = Policies::from_toml(DOCUMENT).unwrap();
    let bulkhead = policies.http_bulkhead(policy).unwrap();
    let breaker = policies
        .http_circuit_breaker(policy, |b| b.classifier(HttpStatus::default()))
        .unwrap();
    let (slots, verdicts) = (bulkhead.handle(), breaker.handle());
    let (tx, supplier) = streaming_supplier();
    let client = ServiceBuilder::new()
        .bulkhead(bulkhead)
        .circuit_breaker(breaker)
        .service(supplier);
    let res = tokio::spawn(async move { client.oneshot(http::Request::new(())).await })
        .await
        .unwrap()
        .unwrap();
    let at_headers = (
        slots.snapshot().active,
        verdicts.snapshot().counters.successes,
    );
    tx.send(Err("connection reset".into())).await.unwrap();
    drop(tx);
    assert!(res.into_body().collect().await.is_err());
    let at_end = (
        slots.snapshot().active,
        verdicts.snapshot().counters.failures,
    );
    (at_headers, at_end)
}

#[tokio::test]
async fn by_default_the_slot_and_the_verdict_last_until_the_body_ends() {
    let (at_headers, at_end) = a_body_failing_mid_stream("held").await;
    // Held while the body streams, not judged yet; its failure is the call's.
    assert_eq!(at_headers, (1, 0));
    assert_eq!(at_end, (0, 1));
}

#[tokio::test]
async fn with_hold_response_the_call_ends_at_the_headers() {
    let (at_headers, at_end) = a_body_failing_mid_stream("headers").await;
    // Freed and judged a success at the headers; what the body does next is not
    // the breaker's to judge.
    assert_eq!(at_headers, (0, 1));
    assert_eq!(at_end, (0, 0));
}

#[test]
fn a_reload_that_changes_hold_needs_a_restart() {
    let policies = Policies::from_toml(DOCUMENT).unwrap();
    let changed = DOCUMENT.replace("hold = \"response\"\n", "");
    let e = policies.apply_toml(&changed).unwrap_err();
    assert!(matches!(e, LoadError::NeedsRestart { .. }), "{e:?}");
    assert_eq!(e.fields(), ["policies.headers.hold"]);
    assert_eq!(policies.generation(), 0);
}
