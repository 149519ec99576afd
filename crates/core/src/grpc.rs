//! tonic glue: seawall rejections as meaningful gRPC statuses.
//!
//! tonic turns a transport error into a status with `Status::from_error`, which only
//! recognises a `Status` somewhere in the error chain; a seawall rejection would
//! otherwise reach the generated client as `UNKNOWN`. Wrap the protected `Channel` in
//! [`RejectionStatusLayer`] (outermost) so each rejection arrives with its kind's
//! [`RejectionKind::grpc_code`](crate::RejectionKind::grpc_code): the gRPC column of
//! the answers table in the `http` module's docs (feature `http`). Anything else
//! becomes what `Status::from_error` makes of it.
//!
//! The rejection stays reachable as the status's source, so [`find_rejection`] still
//! finds it. On a server, [`rejection_grpc_response`] renders a rejection as a
//! trailers-only response with `grpc-retry-pushback-ms` when a retry-after is known
//! (only clients with a retry policy honour it), and [`GrpcRespondLayer`] does it for
//! every error coming out of a protected tonic service.

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use pin_project_lite::pin_project;
use tonic::Status;
use tower_layer::Layer;
use tower_service::Service;

use crate::held::HeldError;
use crate::rejection::{find_rejection, BoxError, Rejection};

/// Converts any error into a `Status`, mapping seawall rejections by the table above
/// ([`RejectionKind::grpc_code`](crate::RejectionKind::grpc_code)).
pub fn status_from_error(error: BoxError) -> Status {
    let code = find_rejection(&*error).map(|r| r.kind().grpc_code());
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
        rejection.kind().grpc_code(),
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

/// Renders any error as a trailers-only gRPC response: a seawall rejection with
/// [`rejection_grpc_response`], anything else as `INTERNAL` with a generic message.
pub fn error_grpc_response<B: Default>(
    error: &(dyn std::error::Error + 'static),
) -> http::Response<B> {
    match find_rejection(error) {
        Some(rejection) => rejection_grpc_response(&rejection),
        None => Status::internal("internal error").into_http(),
    }
}

/// Server side: answers the protected service's errors as trailers-only gRPC
/// responses ([`error_grpc_response`]), so the stack's error is `Infallible` as
/// tonic's server wants and a client sees `UNAVAILABLE` / `RESOURCE_EXHAUSTED` /
/// `DEADLINE_EXCEEDED`.
///
/// tonic's `Server::add_service` needs the service's gRPC name; seawall's layers
/// hide the generated server's, so give it back with [`named`](Self::named):
///
/// ```text
/// let protected = ServiceBuilder::new()
///     .layer(GrpcRespondLayer::new().named::<QuotesServer<MyQuotes>>())
///     .layer(bulkhead)
///     .layer(breaker)
///     .service(QuotesServer::new(MyQuotes));
/// Server::builder().add_service(protected)
/// ```
pub struct GrpcRespondLayer<N = ()> {
    _name: PhantomData<fn() -> N>,
}

impl GrpcRespondLayer {
    /// A layer whose services have no gRPC service name of their own.
    pub fn new() -> Self {
        Self { _name: PhantomData }
    }
}

impl Default for GrpcRespondLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl<N> GrpcRespondLayer<N> {
    /// Gives the services the gRPC name of `M` (typically the generated server
    /// type), so tonic's router can route to them.
    pub fn named<M: tonic::server::NamedService>(self) -> GrpcRespondLayer<M> {
        GrpcRespondLayer { _name: PhantomData }
    }
}

impl<N> Clone for GrpcRespondLayer<N> {
    fn clone(&self) -> Self {
        Self { _name: PhantomData }
    }
}

impl<N> fmt::Debug for GrpcRespondLayer<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("GrpcRespondLayer")
    }
}

impl<S, N> Layer<S> for GrpcRespondLayer<N> {
    type Service = GrpcRespond<S, N>;

    fn layer(&self, inner: S) -> Self::Service {
        GrpcRespond {
            inner,
            not_ready: HeldError::default(),
            _name: PhantomData,
        }
    }
}

/// The service built by [`GrpcRespondLayer`].
pub struct GrpcRespond<S, N = ()> {
    inner: S,
    not_ready: HeldError,
    _name: PhantomData<fn() -> N>,
}

impl<S: Clone, N> Clone for GrpcRespond<S, N> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            not_ready: HeldError::default(),
            _name: PhantomData,
        }
    }
}

impl<S: fmt::Debug, N> fmt::Debug for GrpcRespond<S, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GrpcRespond")
            .field("inner", &self.inner)
            .finish()
    }
}

impl<S, N: tonic::server::NamedService> tonic::server::NamedService for GrpcRespond<S, N> {
    const NAME: &'static str = N::NAME;
}

impl<S, N, Req, B> Service<Req> for GrpcRespond<S, N>
where
    S: Service<Req, Response = http::Response<B>>,
    S::Error: Into<BoxError>,
    B: Default,
{
    type Response = http::Response<B>;
    type Error = Infallible;
    type Future = GrpcRespondFuture<S::Future, B>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.not_ready.poll_ready(&mut self.inner, cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let state = match self.not_ready.call(&mut self.inner, req) {
            Ok(inner) => GrpcRespondState::Calling { inner },
            Err(held) => GrpcRespondState::Answered {
                response: Some(error_grpc_response(&*held)),
            },
        };
        GrpcRespondFuture { state }
    }
}

pin_project! {
    /// The response future of [`GrpcRespond`].
    pub struct GrpcRespondFuture<F, B> {
        #[pin]
        state: GrpcRespondState<F, B>,
    }
}

pin_project! {
    #[project = GrpcRespondStateProj]
    enum GrpcRespondState<F, B> {
        Calling { #[pin] inner: F },
        Answered { response: Option<http::Response<B>> },
    }
}

impl<F, B> fmt::Debug for GrpcRespondFuture<F, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("GrpcRespondFuture")
    }
}

impl<F, B, E> Future for GrpcRespondFuture<F, B>
where
    F: Future<Output = Result<http::Response<B>, E>>,
    E: Into<BoxError>,
    B: Default,
{
    type Output = Result<http::Response<B>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let res = match self.project().state.project() {
            GrpcRespondStateProj::Calling { inner } => match ready!(inner.poll(cx)) {
                Ok(res) => res,
                Err(e) => error_grpc_response(&*e.into()),
            },
            GrpcRespondStateProj::Answered { response } => response
                .take()
                .unwrap_or_else(|| Status::internal("internal error").into_http()),
        };
        Poll::Ready(Ok(res))
    }
}

/// Maps errors coming out of the wrapped service with [`status_from_error`], so a
/// tonic client sees `UNAVAILABLE` / `RESOURCE_EXHAUSTED` / `DEADLINE_EXCEEDED`
/// instead of `UNKNOWN`.
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
    use tonic::Code;
    use tower::{service_fn, ServiceExt};

    #[test]
    fn rejections_map_to_meaningful_codes_and_stay_findable() {
        let cases: Vec<(BoxError, Code)> = vec![
            (
                Box::new(CircuitOpen::new("q".into(), Duration::from_secs(3))),
                Code::Unavailable,
            ),
            (Box::new(DeadlineExceeded::new()), Code::DeadlineExceeded),
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

    #[tokio::test]
    async fn the_server_layer_answers_every_error_with_a_status() {
        let open = service_fn(|_: ()| async {
            Err::<http::Response<()>, BoxError>(Box::new(CircuitOpen::new(
                "db".into(),
                Duration::from_secs(2),
            )))
        });
        let res = GrpcRespondLayer::new()
            .layer(open)
            .oneshot(())
            .await
            .unwrap();
        assert_eq!(res.status(), http::StatusCode::OK);
        assert_eq!(res.headers()["grpc-status"], "14");
        assert_eq!(res.headers()[GRPC_RETRY_PUSHBACK_MS], "2000");

        let broken = service_fn(|_: ()| async {
            Err::<http::Response<()>, BoxError>("db.internal:5432 refused".into())
        });
        let res = GrpcRespondLayer::new()
            .layer(broken)
            .oneshot(())
            .await
            .unwrap();
        assert_eq!(res.headers()["grpc-status"], "13");
        assert_eq!(res.headers()["grpc-message"], "internal%20error");

        struct Quotes;
        impl tonic::server::NamedService for Quotes {
            const NAME: &'static str = "freight.Quotes";
        }
        fn name_of<S: tonic::server::NamedService>(_: &S) -> &'static str {
            S::NAME
        }
        let named = GrpcRespondLayer::new().named::<Quotes>().layer(open);
        assert_eq!(name_of(&named), "freight.Quotes");
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
