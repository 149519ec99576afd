//! A plain closure is a classifier wherever one is taken, including in futures run
//! by `tokio::spawn`; `classify_fn` and `PerRequest` closures too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use seawall::circuit_breaker::{CircuitBreakerLayer, Handle, State};
use seawall::core::{classify_fn, BoxError, ClassifyInput, ClassifyRequest, Outcome, PerRequest};
use seawall::degradation::{DegradationLayer, Fixed};
use seawall::fallback::FallbackLayer;
use tower::{service_fn, Layer, Service, ServiceExt};

/// A dependency that answers its query back; "no" is its way of saying it is sick.
fn answers() -> impl Service<String, Response = String, Error = BoxError, Future: Send>
       + Clone
       + Send
       + Sync
       + 'static {
    service_fn(|q: String| async move { Ok::<_, BoxError>(q) })
}

/// `q` asked of `svc` from a task of its own (so the classifier runs inside a
/// spawned future): the answer.
async fn asked<S>(svc: &S, q: &str) -> String
where
    S: Service<String, Response = String, Error = BoxError> + Clone + Send + 'static,
    S::Future: Send,
{
    let answer = tokio::spawn(svc.clone().oneshot(q.to_owned())).await;
    answer.unwrap().unwrap()
}

/// A breaker over [`answers`] that opens at the first failure `classifier` sees:
/// its handle and its service.
fn opening_at_once<C>(
    classifier: C,
) -> (
    Handle,
    impl Service<String, Response = String, Error = BoxError, Future: Send> + Clone + Send + 'static,
)
where
    C: ClassifyRequest<String, String, Classifier: Send + 'static> + Clone + Send + 'static,
{
    let layer = CircuitBreakerLayer::builder("oracle")
        .consecutive_failures(1)
        .classifier(classifier)
        .build()
        .unwrap();
    (layer.handle(), layer.layer(answers()))
}

fn no_is_a_failure(r: ClassifyInput<'_, String>) -> Outcome {
    match r {
        Ok(answer) if answer == "no" => Outcome::Failure,
        Ok(_) => Outcome::Success,
        Err(_) => Outcome::Failure,
    }
}

#[tokio::test(start_paused = true)]
async fn a_plain_closure_classifies_for_the_breaker_inside_spawned_tasks() {
    let layer = CircuitBreakerLayer::builder("oracle")
        .consecutive_failures(2)
        .open_for(Duration::from_secs(10))
        .classifier(|r: ClassifyInput<'_, String>| no_is_a_failure(r))
        .build()
        .unwrap();
    let handle = layer.handle();
    let svc = layer.layer(answers());
    for q in ["yes", "no", "no"] {
        assert_eq!(asked(&svc, q).await, q);
    }
    assert_eq!(handle.state(), State::Open);
    assert_eq!(handle.snapshot().counters.failures, 2);
}

#[tokio::test(start_paused = true)]
async fn a_function_item_and_classify_fn_classify_too() {
    let (handle, svc) = opening_at_once(no_is_a_failure);
    asked(&svc, "no").await;
    assert_eq!(handle.state(), State::Open);

    let (handle, svc) = opening_at_once(classify_fn(|r: Result<&String, _>| match r {
        Ok(a) if a == "no" => Outcome::Failure,
        _ => Outcome::Success,
    }));
    asked(&svc, "no").await;
    assert_eq!(handle.state(), State::Open);
}

#[tokio::test(start_paused = true)]
async fn a_request_aware_closure_counts_one_request_and_ignores_another() {
    // Writes are not idempotent here: only their "no" counts against the oracle.
    let (handle, svc) = opening_at_once(PerRequest::new(|q: &String| {
        let write = q.starts_with("SET");
        move |r: ClassifyInput<'_, String>| match r {
            Ok(a) if write && a.ends_with("no") => Outcome::Failure,
            _ => Outcome::Success,
        }
    }));
    asked(&svc, "GET no").await;
    assert_eq!(handle.state(), State::Closed);
    asked(&svc, "SET no").await;
    assert_eq!(handle.state(), State::Open);
}

#[tokio::test(start_paused = true)]
async fn closures_classify_for_degradation_and_fallback() {
    let layer = DegradationLayer::builder("oracle")
        .consecutive_failures(2)
        .level("canned", Fixed::new("maybe".to_owned()))
        .classifier(|r: ClassifyInput<'_, String>| no_is_a_failure(r))
        .build()
        .unwrap();
    let handle = layer.handle();
    let svc = layer.layer(answers());
    for _ in 0..2 {
        asked(&svc, "no").await;
    }
    assert_eq!(handle.level().name.as_ref(), "canned");

    let fallback = FallbackLayer::builder("oracle")
        .on_failure(|r: ClassifyInput<'_, String>| no_is_a_failure(r))
        .value("maybe".to_owned())
        .unmarked()
        .build()
        .unwrap();
    let svc = fallback.layer(answers());
    assert_eq!(asked(&svc, "no").await, "maybe");
    assert_eq!(asked(&svc, "yes").await, "yes");
}
