//! Every form a classifier takes (an annotated closure, a `fn` item, a classifier
//! struct, `classify_fn`) compiles and classifies when the protected service is
//! called the way users call it: inside `tokio::spawn(async move { .. .await })`, an
//! axum handler, a `BoxCloneSyncService` and a `tower::Buffer`, with the bulkhead
//! outside the breaker and the other way round.
//!
//! The inner services name their error type (a `fn` item, `std::io::Error`): see
//! the README's "Known compiler limitation" for a closure whose `async` block
//! returns `Result<_, BoxError>`.

use seawall::bulkhead::BulkheadLayer;
use seawall::circuit_breaker::{CircuitBreakerLayer, State};
use seawall::core::{classify_fn, BoxError, ClassifyInput, ErrorsAsFailures, Outcome};
use tower::util::BoxCloneSyncService;
use tower::{service_fn, Layer, ServiceBuilder, ServiceExt};

/// A key-value client whose error type is named in its signature.
async fn lookup(key: String) -> Result<String, BoxError> {
    if key == "missing" {
        Err("no such key".into())
    } else {
        Ok(format!("value of {key}"))
    }
}

fn by_fn_item(r: ClassifyInput<'_, String>) -> Outcome {
    match r {
        Ok(v) if v.starts_with("value") => Outcome::Success,
        _ => Outcome::Failure,
    }
}

/// Two calls that fail through `svc`, in a spawned task, trip a breaker of two
/// consecutive failures; the answer before that is the inner service's.
macro_rules! spawned_stack_trips {
    ($classifier:expr) => {{
        let breaker = CircuitBreakerLayer::builder("kv")
            .consecutive_failures(2)
            .jitter(0.0)
            .classifier($classifier)
            .build()?;
        let handle = breaker.handle();
        let bulkhead = BulkheadLayer::builder("kv").max_concurrent(4).build()?;
        // The README's order: bulkhead outside the breaker.
        let svc = ServiceBuilder::new()
            .layer(bulkhead.clone())
            .layer(breaker.clone())
            .service(service_fn(lookup));
        let answer = tokio::spawn({
            let svc = svc.clone();
            async move { svc.oneshot("k1".to_string()).await }
        })
        .await??;
        assert_eq!(answer, "value of k1");
        // Swapped: the breaker outside the bulkhead.
        let swapped = breaker.layer(bulkhead.layer(service_fn(lookup)));
        for _ in 0..2 {
            let svc = swapped.clone();
            let failed =
                tokio::spawn(async move { svc.oneshot("missing".to_string()).await }).await?;
            assert!(failed.is_err());
        }
        assert_eq!(handle.state(), State::Open);
    }};
}

#[tokio::test]
async fn an_annotated_closure_in_a_spawned_async_block() -> Result<(), BoxError> {
    spawned_stack_trips!(|r: ClassifyInput<'_, String>| {
        if r.is_ok() {
            Outcome::Success
        } else {
            Outcome::Failure
        }
    });
    Ok(())
}

#[tokio::test]
async fn a_fn_item_in_a_spawned_async_block() -> Result<(), BoxError> {
    spawned_stack_trips!(by_fn_item);
    Ok(())
}

#[tokio::test]
async fn a_classifier_struct_in_a_spawned_async_block() -> Result<(), BoxError> {
    spawned_stack_trips!(ErrorsAsFailures);
    Ok(())
}

#[tokio::test]
async fn classify_fn_without_annotation_in_a_spawned_async_block() -> Result<(), BoxError> {
    spawned_stack_trips!(classify_fn::<String, _>(|r| match r {
        Ok(_) => Outcome::Success,
        Err(e) if e.rejection().is_some() => Outcome::Ignore,
        Err(_) => Outcome::Failure,
    }));
    Ok(())
}

#[tokio::test]
async fn a_closure_classifier_over_an_io_client_in_a_spawned_async_block() -> Result<(), BoxError> {
    let breaker = CircuitBreakerLayer::builder("kv")
        .consecutive_failures(3)
        .classifier(|r: ClassifyInput<'_, String>| {
            if r.is_ok() {
                Outcome::Success
            } else {
                Outcome::Failure
            }
        })
        .build()?;
    let svc = breaker.layer(service_fn(|key: String| async move {
        Ok::<_, std::io::Error>(key)
    }));
    let answer = tokio::spawn(async move { svc.oneshot("k1".to_string()).await }).await??;
    assert_eq!(answer, "k1");
    Ok(())
}

#[tokio::test]
async fn a_closure_classifier_behind_box_clone_sync_service_and_buffer() -> Result<(), BoxError> {
    let breaker = CircuitBreakerLayer::builder("kv")
        .consecutive_failures(1)
        .jitter(0.0)
        .classifier(|r: ClassifyInput<'_, String>| match r {
            Ok(_) => Outcome::Success,
            Err(e) if e.to_string() == "no such key" => Outcome::Failure,
            Err(_) => Outcome::Ignore,
        })
        .build()?;
    let handle = breaker.handle();
    let boxed: BoxCloneSyncService<String, String, BoxError> =
        BoxCloneSyncService::new(breaker.layer(service_fn(lookup)));
    let answer = tokio::spawn({
        let boxed = boxed.clone();
        async move { boxed.oneshot("k1".to_string()).await }
    })
    .await??;
    assert_eq!(answer, "value of k1");

    let buffered = ServiceBuilder::new()
        .buffer(16)
        .service(breaker.layer(service_fn(lookup)));
    let failed = tokio::spawn(async move { buffered.oneshot("missing".to_string()).await }).await?;
    assert!(failed.is_err());
    assert_eq!(
        handle.state(),
        State::Open,
        "the classifier saw the failure"
    );
    Ok(())
}

#[tokio::test]
async fn a_closure_classifier_in_an_axum_handler() -> Result<(), BoxError> {
    use axum::extract::State as AxumState;
    use axum::routing::get;

    let breaker = CircuitBreakerLayer::builder("kv")
        .consecutive_failures(3)
        .classifier(|r: ClassifyInput<'_, String>| {
            if r.is_ok() {
                Outcome::Success
            } else {
                Outcome::Failure
            }
        })
        .build()?;
    let handle = breaker.handle();
    let client = breaker.layer(service_fn(lookup));
    let app = axum::Router::new()
        .route(
            "/kv/{key}",
            get(
                |AxumState(client): AxumState<_>,
                 axum::extract::Path(key): axum::extract::Path<String>| async move {
                    let client: seawall::circuit_breaker::CircuitBreaker<_, _> = client;
                    match client.oneshot(key).await {
                        Ok(value) => value,
                        Err(e) => format!("unavailable: {e}"),
                    }
                },
            ),
        )
        .with_state(client);
    let res = app
        .oneshot(http::Request::get("/kv/k1").body(axum::body::Body::empty())?)
        .await?;
    let body = http_body_util::BodyExt::collect(res.into_body())
        .await?
        .to_bytes();
    assert_eq!(&body[..], b"value of k1");
    assert_eq!(handle.snapshot().counters.successes, 1);
    Ok(())
}
