//! tonic glue: seawall rejections as meaningful gRPC statuses.
//!
//! tonic turns a transport error into a status with `Status::from_error`, which only
//! recognises a `Status` somewhere in the error chain; a seawall rejection would
//! otherwise reach the generated client as `UNKNOWN`. Wrap the protected `Channel` in
//! [`RejectionStatusLayer`] (outermost) so rejections arrive as:
//!
//! | rejection | gRPC status |
//! |---|---|
//! | circuit open | `UNAVAILABLE` |
//! | deadline exceeded | `UNAVAILABLE` |
//! | fallbacks exhausted | `UNAVAILABLE` |
//! | bulkhead full | `RESOURCE_EXHAUSTED` |
//! | bulkhead wait timed out | `RESOURCE_EXHAUSTED` |
//! | anything else | what `Status::from_error` makes of it |
//!
//! The rejection stays reachable as the status's source, so [`find_rejection`] still
//! finds it. On a server, [`rejection_grpc_response`] renders a rejection as a
//! trailers-only response with `grpc-retry-pushback-ms` when a retry-after is known
//! (only clients with a retry policy honour it).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use pin_project_lite::pin_project;
use tonic::{Code, Status};
use tower_layer::Layer;
use tower_service::Service;

use crate::rejection::{find_rejection, BoxError, Rejection, RejectionKind};

/// The gRPC code for a rejection of `kind`.
pub fn rejection_code(kind: RejectionKind) -> Code {
    match kind {
        RejectionKind::BulkheadFull | RejectionKind::BulkheadTimeout => Code::ResourceExhausted,
        RejectionKind::CircuitOpen
        | RejectionKind::DeadlineExceeded
        | RejectionKind::FallbacksExhausted => Code::Unavailable,
    }
}

/// Converts any error into a `Status`, mapping seawall rejections by the table above.
pub fn status_from_error(error: BoxError) -> Status {
    let code = find_rejection(&*error).map(|r| rejection_code(r.kind()));
    match code {
        Some(code) => {
            let mut status = Status::new(code, error.to_string());
            status.set_source(Arc::from(error));
            status
        }
        None => Status::from_error(error),
    }
}

/// The `grpc-retry-pushback-ms` header name.
pub const GRPC_RETRY_PUSHBACK_MS: &str = "grpc-retry-pushback-ms";

/// Renders a rejection as a trailers-only gRPC response: HTTP 200,
/// `content-type: application/grpc`, `grpc-status`, a generic percent-encoded
/// `grpc-message` (nothing internal), and `grpc-retry-pushback-ms` when the
/// rejection knows a retry-after.
pub fn rejection_grpc_response<B: Default>(rejection: &Rejection<'_>) -> http::Response<B> {
    let status = Status::new(
        rejection_code(rejection.kind()),
        "service temporarily unavailable",
    );
    let mut res = status.into_http::<B>();
    if let Some(after) = rejection.retry_after() {
        let ms = u64::try_from(after.as_millis()).unwrap_or(u64::MAX);
        res.headers_mut()
            .insert(GRPC_RETRY_PUSHBACK_MS, http::HeaderValue::from(ms));
    }
    res
}

/// Maps errors coming out of the wrapped service with [`status_from_error`], so a
/// tonic client sees `UNAVAILABLE` / `RESOURCE_EXHAUSTED` instead of `UNKNOWN`.
#[derive(Debug, Clone, Copy, Default)]
pub struct RejectionStatusLayer;

impl<S> Layer<S> for RejectionStatusLayer {
    type Service = RejectionStatus<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RejectionStatus { inner }
    }
}

/// The service built by [`RejectionStatusLayer`]. Its error is a `BoxError` holding a
/// `tonic::Status`.
#[derive(Debug, Clone)]
pub struct RejectionStatus<S> {
    inner: S,
}

impl<S, Req> Service<Req> for RejectionStatus<S>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = RejectionStatusFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner
            .poll_ready(cx)
            .map_err(|e| Box::new(status_from_error(e.into())) as BoxError)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        RejectionStatusFuture {
            inner: self.inner.call(req),
        }
    }
}

pin_project! {
    /// The response future of [`RejectionStatus`].
    #[derive(Debug)]
    pub struct RejectionStatusFuture<F> {
        #[pin]
        inner: F,
    }
}

impl<F, T, E> Future for RejectionStatusFuture<F>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let out = ready!(self.project().inner.poll(cx));
        Poll::Ready(out.map_err(|e| Box::new(status_from_error(e.into())) as BoxError))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rejection::{BulkheadFull, BulkheadTimeout, CircuitOpen, DeadlineExceeded};
    use std::time::Duration;
    use tower::{service_fn, ServiceExt};

    #[test]
    fn rejections_map_to_meaningful_codes_and_stay_findable() {
        let cases: Vec<(BoxError, Code)> = vec![
            (
                Box::new(CircuitOpen::new("q".into(), Duration::from_secs(3))),
                Code::Unavailable,
            ),
            (Box::new(DeadlineExceeded::new()), Code::Unavailable),
            (
                Box::new(BulkheadFull::new("q".into())),
                Code::ResourceExhausted,
            ),
            (
                Box::new(BulkheadTimeout::new("q".into(), Duration::from_millis(20))),
                Code::ResourceExhausted,
            ),
        ];
        for (err, code) in cases {
            let kind = find_rejection(&*err).unwrap().kind();
            let status = status_from_error(err);
            assert_eq!(status.code(), code, "{kind}");
            assert_eq!(find_rejection(&status).unwrap().kind(), kind);
        }
        let other = status_from_error("connection reset".into());
        assert_eq!(other.code(), Code::Unknown);
        let passthrough = status_from_error(Box::new(Status::not_found("no such order")));
        assert_eq!(passthrough.code(), Code::NotFound);
    }

    #[tokio::test]
    async fn the_layer_hands_tonic_a_status_it_recognises() {
        let svc = RejectionStatusLayer.layer(service_fn(|_: ()| async {
            Err::<(), BoxError>(Box::new(BulkheadFull::new("q".into())))
        }));
        let err = svc.oneshot(()).await.unwrap_err();
        // This is exactly what a generated client does with a transport error.
        let seen = Status::from_error(err);
        assert_eq!(seen.code(), Code::ResourceExhausted);
    }

    #[test]
    fn server_rendering_is_trailers_only_with_pushback() {
        let err = CircuitOpen::new("freight-db".into(), Duration::from_millis(1500));
        let r = find_rejection(&err).unwrap();
        let res: http::Response<()> = rejection_grpc_response(&r);
        assert_eq!(res.status(), http::StatusCode::OK);
        assert_eq!(res.headers()["content-type"], "application/grpc");
        assert_eq!(res.headers()["grpc-status"], "14");
        assert_eq!(
            res.headers()["grpc-message"],
            "service%20temporarily%20unavailable"
        );
        assert_eq!(res.headers()[GRPC_RETRY_PUSHBACK_MS], "1500");
        let full = BulkheadFull::new("q".into());
        let res: http::Response<()> = rejection_grpc_response(&find_rejection(&full).unwrap());
        assert_eq!(res.headers()["grpc-status"], "8");
        assert!(res.headers().get(GRPC_RETRY_PUSHBACK_MS).is_none());
    }
}
