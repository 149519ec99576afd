//! Reference designs: not products. Each adds one hot-path ingredient to the bare
//! service, to show what the ingredients of a layer cost on this machine, in each
//! mode, in the same run as the layers.

use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tower::Service;

use super::{inner, Id, Row};
use crate::harness::Req;

/// What a [`Reference`] layer does per call, and nothing else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ingredient {
    /// One `fetch_add` on a counter shared by all clones.
    FetchAdd,
    /// One `Arc` clone moved into the response future (dropped when it completes).
    ArcInFuture,
    /// One read of tokio's clock.
    Clock,
    /// One small value inserted into the request's extensions.
    Extension,
}

impl Ingredient {
    pub(crate) const ALL: [Ingredient; 4] = [
        Ingredient::FetchAdd,
        Ingredient::ArcInFuture,
        Ingredient::Clock,
        Ingredient::Extension,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Ingredient::FetchAdd => "reference: one shared `fetch_add` per call",
            Ingredient::ArcInFuture => "reference: one `Arc` clone into the response future",
            Ingredient::Clock => "reference: one `tokio::time::Instant::now()` per call",
            Ingredient::Extension => "reference: one request-extension insert per call",
        }
    }
}

/// Adds one [`Ingredient`] to `inner`.
#[derive(Clone)]
struct Reference<S> {
    inner: S,
    ingredient: Ingredient,
    shared: Arc<AtomicU64>,
}

#[derive(Clone, Copy)]
struct Marker(#[allow(dead_code)] u64);

pin_project! {
    struct RefFuture<F> {
        #[pin]
        inner: F,
        _arc: Option<Arc<AtomicU64>>,
    }
}

impl<F: Future> Future for RefFuture<F> {
    type Output = F::Output;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.project().inner.poll(cx)
    }
}

impl<S> Service<Req> for Reference<S>
where
    S: Service<Req>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = RefFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Req) -> Self::Future {
        let mut arc = None;
        match self.ingredient {
            Ingredient::FetchAdd => {
                self.shared.fetch_add(1, Ordering::Relaxed);
            }
            Ingredient::ArcInFuture => arc = Some(Arc::clone(&self.shared)),
            Ingredient::Clock => {
                black_box(tokio::time::Instant::now());
            }
            Ingredient::Extension => {
                req.extensions_mut().insert(Marker(1));
            }
        }
        RefFuture {
            inner: self.inner.call(req),
            _arc: arc,
        }
    }
}

pub(super) fn rows() -> Vec<Row> {
    Ingredient::ALL
        .into_iter()
        .map(|ingredient| {
            Row::new(Id::Reference(ingredient), ingredient.label(), move || {
                Reference {
                    inner: inner::ok(),
                    ingredient,
                    shared: Arc::new(AtomicU64::new(0)),
                }
            })
        })
        .collect()
}
