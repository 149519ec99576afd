//! A `tower::retry` policy that counts attempts honestly and never retries past the budget.
//!
//! seawall adds no retries by default: three layers of three attempts make 27 calls
//! to the deepest dependency. Where one layer should retry a fast transient
//! failure, use this policy there and only there. `max_attempts` counts the first
//! attempt, and no retry starts when what remains of the request's [`Deadline`](crate::Deadline)
//! is below `min_remaining`.

use std::future::{ready, Ready};
use std::time::Duration;

use tokio::time::Instant;
use tower::retry::Policy;

use crate::classify::{Classify, ErrorsAsFailures, Outcome};
use crate::config::{check_positive, ConfigError};
use crate::deadline::{remaining_budget, HasExtensions};
use crate::rejection::BoxError;

/// A retry policy bounded by attempts and by the request's remaining budget.
///
/// Only results its classifier calls [`Outcome::Failure`] are retried: an open
/// breaker or a full bulkhead (admission rejections, `Ignore` by default) are not.
/// Requests must be [`RetryableRequest`] (an `http::Request` whose body is `Clone`):
/// `tower::retry` resends a copy.
///
/// ```
/// use std::time::Duration;
/// use seawall_core::DeadlineRetry;
/// use tower::retry::RetryLayer;
///
/// let policy = DeadlineRetry::new(3, Duration::from_millis(50)).unwrap();
/// let _layer = RetryLayer::new(policy);
/// ```
#[derive(Debug, Clone)]
pub struct DeadlineRetry<C = ErrorsAsFailures> {
    max_attempts: usize,
    min_remaining: Duration,
    attempts: usize,
    classifier: C,
}

impl DeadlineRetry {
    /// At most `max_attempts` attempts in all (at least 1: the first counts), each
    /// retry starting only with at least `min_remaining` of the budget left.
    pub fn new(max_attempts: usize, min_remaining: Duration) -> Result<Self, ConfigError> {
        Ok(Self {
            max_attempts: check_positive("max_attempts", max_attempts)?,
            min_remaining,
            attempts: 1,
            classifier: ErrorsAsFailures,
        })
    }
}

impl<C> DeadlineRetry<C> {
    /// Uses `classifier` to decide which results are worth retrying.
    pub fn with_classifier<C2>(self, classifier: C2) -> DeadlineRetry<C2> {
        DeadlineRetry {
            max_attempts: self.max_attempts,
            min_remaining: self.min_remaining,
            attempts: self.attempts,
            classifier,
        }
    }

    /// The attempts made so far for the current request (1 before any retry).
    pub fn attempts(&self) -> usize {
        self.attempts
    }
}

impl<C, Req, Res> Policy<Req, Res, BoxError> for DeadlineRetry<C>
where
    C: Classify<Res>,
    Req: RetryableRequest,
{
    type Future = Ready<()>;

    fn retry(&mut self, req: &mut Req, result: &mut Result<Res, BoxError>) -> Option<Self::Future> {
        if self.attempts >= self.max_attempts {
            return None;
        }
        let outcome = self.classifier.classify(
            result
                .as_ref()
                .map_err(|e| &**e as &(dyn std::error::Error + 'static)),
        );
        if outcome != Outcome::Failure {
            return None;
        }
        if remaining_budget(req, Instant::now()).is_some_and(|left| left < self.min_remaining) {
            return None;
        }
        self.attempts += 1;
        Some(ready(()))
    }

    fn clone_request(&mut self, req: &Req) -> Option<Req> {
        req.try_clone()
    }
}

/// A request that can be copied for another attempt.
///
/// `http::Request` is not `Clone` (its body usually cannot be replayed); it is
/// retryable when its body is `Clone`, such as `Full<Bytes>` or `()`.
pub trait RetryableRequest: HasExtensions + Sized {
    /// A copy to send again, or `None` when this request cannot be resent.
    fn try_clone(&self) -> Option<Self>;
}

impl<B: Clone> RetryableRequest for http::Request<B> {
    fn try_clone(&self) -> Option<Self> {
        let mut copy = http::Request::new(self.body().clone());
        *copy.method_mut() = self.method().clone();
        *copy.uri_mut() = self.uri().clone();
        *copy.version_mut() = self.version();
        *copy.headers_mut() = self.headers().clone();
        *copy.extensions_mut() = self.extensions().clone();
        Some(copy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deadline::DeadlineLayer;
    use crate::rejection::BulkheadFull;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use tower::{service_fn, ServiceBuilder, ServiceExt};

    type Req = http::Request<()>;

    fn failing(
        calls: Arc<AtomicUsize>,
        each_takes: Duration,
        error: fn() -> BoxError,
    ) -> impl tower::Service<Req, Response = (), Error = BoxError, Future = impl Send> + Clone {
        service_fn(move |_req: Req| {
            let calls = calls.clone();
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(each_takes).await;
                Err::<(), BoxError>(error())
            }
        })
    }

    #[tokio::test(start_paused = true)]
    async fn attempts_count_the_first() {
        let calls = Arc::new(AtomicUsize::new(0));
        let svc = ServiceBuilder::new()
            .retry(DeadlineRetry::new(3, Duration::ZERO).unwrap())
            .service(failing(calls.clone(), Duration::ZERO, || "boom".into()));
        assert!(svc.oneshot(Req::new(())).await.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn never_retries_past_the_budget() {
        let calls = Arc::new(AtomicUsize::new(0));
        // Each attempt takes 120 ms of a 300 ms budget; a retry needs 100 ms left.
        let svc = ServiceBuilder::new()
            .layer(DeadlineLayer::new(Duration::from_millis(300)).unwrap())
            .retry(DeadlineRetry::new(10, Duration::from_millis(100)).unwrap())
            .service(failing(calls.clone(), Duration::from_millis(120), || {
                "boom".into()
            }));
        let start = Instant::now();
        assert!(svc.oneshot(Req::new(())).await.is_err());
        // 0-120 first, 120-240 second; at 240 only 60 ms remain: no third attempt.
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert!(Instant::now() - start <= Duration::from_millis(300));
    }

    #[tokio::test(start_paused = true)]
    async fn admission_rejections_are_not_retried() {
        let calls = Arc::new(AtomicUsize::new(0));
        let svc = ServiceBuilder::new()
            .retry(DeadlineRetry::new(5, Duration::ZERO).unwrap())
            .service(failing(calls.clone(), Duration::ZERO, || {
                Box::new(BulkheadFull::new("b".into()))
            }));
        assert!(svc.oneshot(Req::new(())).await.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_copy_keeps_method_uri_headers_and_deadline() {
        let mut req = http::Request::post("http://freight/quote")
            .header("x-destination", "lisbon")
            .body(())
            .unwrap();
        let d = crate::Deadline::after(Instant::now(), Duration::from_millis(300));
        req.extensions_mut().insert(d);
        let copy = req.try_clone().unwrap();
        assert_eq!(copy.method(), http::Method::POST);
        assert_eq!(copy.uri(), "http://freight/quote");
        assert_eq!(copy.headers()["x-destination"], "lisbon");
        assert_eq!(crate::deadline_of(&copy), Some(d));
    }

    #[test]
    fn zero_attempts_is_a_config_error() {
        assert_eq!(
            DeadlineRetry::new(0, Duration::ZERO).unwrap_err().field(),
            "max_attempts"
        );
    }
}
