//! Reference designs: not products. Each adds one hot-path ingredient to the bare
//! service, to show what the ingredients of a layer cost on this machine, in each
//! mode, in the same run as the layers.

use std::future::Future;
use std::hint::black_box;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use seawall::core::{BoxError, CircuitOpen, Name};
use tower::Service;

use super::{inner, Id, Row};
use crate::harness::Req;

/// What a [`Reference`] layer does per call, and nothing else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ingredient {
    /// One `fetch_add` on a counter shared by all clones.
    FetchAdd,
    /// One compare-and-swap loop on a word shared by all clones.
    CompareSwap,
    /// One `Arc` clone moved into the response future (dropped when it completes).
    ArcInFuture,
    /// One read of tokio's clock.
    Clock,
    /// One small value inserted into the request's extensions.
    Extension,
    /// One boxed `CircuitOpen` (with a clone of its name) built and dropped.
    BoxedRejection,
    /// A response future 256 bytes larger than its inner one.
    LargeFuture,
    /// The breaker's closed-path ingredients, on lines every core shares: an `Arc`
    /// clone into a response future as large as the breaker's (160 B), one
    /// compare-and-swap.
    BreakerClosed,
    /// The same on lines of the calling thread's own, as the breaker's lanes do:
    /// the clone of this thread's `Arc`, a compare-and-swap on this thread's word.
    LaneClosed,
    /// The breaker's open-path ingredients together: one clock read (its
    /// `poll_ready`'s), one `fetch_add`, one boxed copy of a `CircuitOpen` built
    /// beforehand (as the breaker keeps one with its name).
    BreakerOpen,
}

impl Ingredient {
    pub(crate) const ALL: [Ingredient; 10] = [
        Ingredient::FetchAdd,
        Ingredient::CompareSwap,
        Ingredient::ArcInFuture,
        Ingredient::Clock,
        Ingredient::Extension,
        Ingredient::BoxedRejection,
        Ingredient::LargeFuture,
        Ingredient::BreakerClosed,
        Ingredient::LaneClosed,
        Ingredient::BreakerOpen,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Ingredient::FetchAdd => "reference: one shared `fetch_add` per call",
            Ingredient::CompareSwap => "reference: one shared compare-and-swap per call",
            Ingredient::ArcInFuture => "reference: one `Arc` clone into the response future",
            Ingredient::Clock => "reference: one `tokio::time::Instant::now()` per call",
            Ingredient::Extension => "reference: one request-extension insert per call",
            Ingredient::BoxedRejection => {
                "reference: one boxed `CircuitOpen` (name clone + `Box`) per call"
            }
            Ingredient::LargeFuture => "reference: a response future 256 B larger",
            Ingredient::BreakerClosed => {
                "reference: shared `Arc` clone into a 160 B future + shared compare-and-swap"
            }
            Ingredient::LaneClosed => {
                "reference: this thread's `Arc` clone into a 160 B future + compare-and-swap on its own line (the breaker's closed path)"
            }
            Ingredient::BreakerOpen => {
                "reference: one clock read + `fetch_add` + boxed copy of a `CircuitOpen` (the breaker's open path)"
            }
        }
    }
}

/// Adds one [`Ingredient`] to `inner`; a `P` in its future makes it larger.
#[derive(Clone)]
struct Reference<S, P> {
    inner: S,
    ingredient: Ingredient,
    shared: Arc<Line>,
    /// One line per thread slot, as a breaker's lanes.
    lanes: Arc<[Arc<Line>]>,
    name: Name,
    /// Built once with `name`, as a breaker keeps its rejection.
    rejection: CircuitOpen,
    _pad: PhantomData<fn() -> P>,
}

#[derive(Clone, Copy)]
struct Marker(#[allow(dead_code)] u64);

/// A counter on a cache line of its own (its `Arc`'s counts on the line before).
#[repr(align(64))]
#[derive(Default)]
struct Line(AtomicU64);

/// Lanes per reference instance: as many as a breaker has on this machine.
const LANES: usize = 32;

/// This thread's lane, given in the order threads first ask.
fn lane_index() -> usize {
    use std::cell::Cell;
    use std::sync::atomic::AtomicUsize;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    std::thread_local!(static SLOT: Cell<usize> = const { Cell::new(usize::MAX) });
    SLOT.with(|slot| {
        if slot.get() == usize::MAX {
            slot.set(NEXT.fetch_add(1, Ordering::Relaxed) % LANES);
        }
        slot.get()
    })
}

pin_project! {
    struct RefFuture<F, P> {
        #[pin]
        inner: F,
        _arc: Option<Arc<Line>>,
        _pad: P,
    }
}

impl<F: Future, P> Future for RefFuture<F, P> {
    type Output = F::Output;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.project().inner.poll(cx)
    }
}

impl<S, P> Service<Req> for Reference<S, P>
where
    S: Service<Req>,
    P: Default,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = RefFuture<S::Future, P>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Req) -> Self::Future {
        let mut arc = None;
        match self.ingredient {
            Ingredient::FetchAdd => {
                self.shared.0.fetch_add(1, Ordering::Relaxed);
            }
            Ingredient::CompareSwap => compare_swap(&self.shared.0),
            Ingredient::ArcInFuture => arc = Some(Arc::clone(&self.shared)),
            Ingredient::Clock => {
                black_box(tokio::time::Instant::now());
            }
            Ingredient::Extension => {
                req.extensions_mut().insert(Marker(1));
            }
            Ingredient::BoxedRejection => boxed_rejection(&self.name),
            Ingredient::LargeFuture => {}
            Ingredient::BreakerClosed => {
                arc = Some(Arc::clone(&self.shared));
                compare_swap(&self.shared.0);
            }
            Ingredient::LaneClosed => {
                let lane = &self.lanes[lane_index()];
                arc = Some(Arc::clone(lane));
                compare_swap(&lane.0);
            }
            Ingredient::BreakerOpen => {
                let now = black_box(tokio::time::Instant::now());
                self.shared.0.fetch_add(1, Ordering::Relaxed);
                let e: BoxError = Box::new(self.rejection.until(now));
                drop(black_box(e));
            }
        }
        RefFuture {
            inner: self.inner.call(req),
            _arc: arc,
            _pad: black_box(P::default()),
        }
    }
}

/// One compare-and-swap loop incrementing `word`.
fn compare_swap(word: &AtomicU64) {
    let mut w = word.load(Ordering::Relaxed);
    while let Err(now) = word.compare_exchange_weak(w, w + 1, Ordering::Relaxed, Ordering::Relaxed)
    {
        w = now;
    }
}

/// A rejection's error: a boxed `CircuitOpen` with a clone of the name, dropped.
fn boxed_rejection(name: &Name) {
    let e: BoxError = Box::new(CircuitOpen::new(Arc::clone(name), Duration::from_secs(1)));
    drop(black_box(e));
}

fn reference<P: Default + Clone + Send + 'static>(ingredient: Ingredient) -> Row {
    Row::new(Id::Reference(ingredient), ingredient.label(), move || {
        let name = Name::from("bench");
        Reference::<_, P> {
            inner: inner::ok(),
            ingredient,
            shared: Arc::default(),
            lanes: if ingredient == Ingredient::LaneClosed {
                (0..LANES).map(|_| Arc::default()).collect()
            } else {
                Arc::new([])
            },
            rejection: CircuitOpen::new(Arc::clone(&name), Duration::from_secs(1)),
            name,
            _pad: PhantomData,
        }
    })
}

pub(super) fn rows() -> Vec<Row> {
    Ingredient::ALL
        .into_iter()
        .map(|i| match i {
            Ingredient::LargeFuture => reference::<[u64; 32]>(i),
            // 112 B of inner future, 8 of `Arc`, 40 of padding: the breaker's 160.
            Ingredient::BreakerClosed | Ingredient::LaneClosed => reference::<[u64; 5]>(i),
            _ => reference::<()>(i),
        })
        .collect()
}
