//! The deadline's tests: the current deadline, the bounded futures, the codec and
//! the layer, in paused time.

use super::*;
use crate::find_rejection;
use crate::rejection::RejectionKind;
use crate::rejection::{BoxError, DeadlineExceeded};
use tokio::time::Sleep;
use tokio_test::{assert_pending, assert_ready, task};
use tower::ServiceExt;
use tower_layer::Layer;
use tower_service::Service;
use tower_test::mock;

#[test]
fn grpc_timeout_round_trips_and_rounds_up() {
    assert_eq!(parse_grpc_timeout("300m"), Some(Duration::from_millis(300)));
    assert_eq!(parse_grpc_timeout("2S"), Some(Duration::from_secs(2)));
    assert_eq!(parse_grpc_timeout("1H"), Some(Duration::from_secs(3600)));
    assert_eq!(parse_grpc_timeout("5u"), Some(Duration::from_micros(5)));
    assert_eq!(parse_grpc_timeout("123456789m"), None);
    assert_eq!(parse_grpc_timeout("m"), None);
    assert_eq!(parse_grpc_timeout("1x"), None);
    assert_eq!(parse_grpc_timeout("-1m"), None);
    assert_eq!(format_grpc_timeout(Duration::from_millis(300)), "300000u");
    assert_eq!(format_grpc_timeout(Duration::from_nanos(1500)), "1500n");
    assert_eq!(format_grpc_timeout(Duration::from_secs(1000)), "1000000m");
    let d = Duration::from_nanos(123_456_789_123);
    let back = parse_grpc_timeout(&format_grpc_timeout(d)).unwrap();
    assert!(back >= d && back - d < Duration::from_millis(1));
}

#[test]
fn a_budget_past_a_year_is_a_config_error_naming_the_field() {
    for budget in [
        Duration::MAX,
        Duration::from_secs(u64::MAX),
        crate::MAX_DURATION + Duration::from_nanos(1),
    ] {
        let e = DeadlineLayer::new(budget).unwrap_err();
        assert_eq!(e.field(), "budget", "{budget:?}");
    }
    assert_eq!(
        DeadlineLayer::new(crate::MAX_DURATION).unwrap().budget(),
        crate::MAX_DURATION
    );
}

#[test]
fn a_deadline_after_any_duration_is_computed_without_panicking() {
    let now = Instant::now();
    let d = Deadline::after(now, Duration::MAX);
    assert!(d.remaining(now) > Duration::from_secs(86_400 * 365 * 29));
    assert!(!d.is_expired(now));
}

/// An inner service that answers with the deadline current when it was called
/// and when its future ran, and the `grpc-timeout` it was sent.
#[allow(clippy::type_complexity)]
fn seeing<Req: SentHeader + 'static>() -> impl Service<
    Req,
    Response = (Option<Deadline>, Option<Deadline>, Option<String>),
    Error = BoxError,
    Future: Send,
> + Clone {
    tower::service_fn(|req: Req| {
        let in_call = Deadline::current();
        let header = req.grpc_timeout();
        async move { Ok((in_call, Deadline::current(), header)) }
    })
}

trait SentHeader {
    fn grpc_timeout(&self) -> Option<String>;
}

impl SentHeader for http::Request<()> {
    fn grpc_timeout(&self) -> Option<String> {
        self.headers()
            .get(GRPC_TIMEOUT)
            .map(|v| v.to_str().unwrap().to_owned())
    }
}

impl SentHeader for String {
    fn grpc_timeout(&self) -> Option<String> {
        None
    }
}

#[tokio::test(start_paused = true)]
async fn a_huge_incoming_grpc_timeout_is_no_panic_and_the_budget_still_wins() {
    let svc = DeadlineLayer::new(Duration::from_millis(300))
        .unwrap()
        .honor_grpc_timeout(true)
        .layer(seeing::<http::Request<()>>());
    let start = Instant::now();
    let req = http::Request::builder()
        .header(GRPC_TIMEOUT, "99999999H")
        .body(())
        .unwrap();
    let (in_call, _, _) = svc.oneshot(req).await.unwrap();
    assert_eq!(
        in_call.unwrap().remaining(start),
        Duration::from_millis(300)
    );
}

#[tokio::test(start_paused = true)]
async fn any_request_type_gets_the_deadline_in_call_and_in_its_future() {
    let svc = DeadlineLayer::new(Duration::from_millis(300))
        .unwrap()
        .layer(seeing::<String>());
    let start = Instant::now();
    let expected = Some(Deadline::after(start, Duration::from_millis(300)));
    let (in_call, in_future, _) = svc.oneshot("SELECT 1".to_owned()).await.unwrap();
    assert_eq!(in_call, expected);
    assert_eq!(in_future, expected);
    // Outside the layer's call and future there is none.
    assert_eq!(Deadline::current(), None);
}

#[tokio::test(start_paused = true)]
async fn a_spawned_future_loses_the_deadline_unless_it_is_carried() {
    let start = Instant::now();
    let d = Deadline::after(start, Duration::from_millis(100));
    let (lost, carried) = d
        .scope(async {
            let lost = tokio::spawn(async { Deadline::current() }).await.unwrap();
            let carried = tokio::spawn(with_current_deadline(async { Deadline::current() }))
                .await
                .unwrap();
            (lost, carried)
        })
        .await;
    assert_eq!(lost, None);
    assert_eq!(carried, Some(d));
}

#[tokio::test(start_paused = true)]
async fn an_inner_scope_never_extends_an_outer_deadline() {
    let start = Instant::now();
    let outer = Deadline::after(start, Duration::from_millis(100));
    let longer = Deadline::after(start, Duration::from_millis(500));
    let shorter = Deadline::after(start, Duration::from_millis(50));
    outer.sync_scope(|| {
        assert_eq!(longer.sync_scope(Deadline::current), Some(outer));
        assert_eq!(shorter.sync_scope(Deadline::current), Some(shorter));
        assert_eq!(Deadline::current(), Some(outer));
    });
}

#[test]
fn each_layer_adds_a_few_words_to_the_future_it_bounds() {
    use std::mem::size_of;
    type Inner = std::future::Ready<Result<[u64; 4], ()>>;
    const WORD: usize = size_of::<usize>();
    // The deadline or the rarely needed timer, and what says which: three words.
    assert_eq!(
        size_of::<BoundedByCurrent<Inner>>(),
        size_of::<Inner>() + 3 * WORD
    );
    // The layer's timer is inline (a pending call allocates nothing) and holds
    // the deadline once armed; in shadow mode, a word for the counters it
    // reports to.
    assert!(
        size_of::<DeadlineFuture<Inner>>() <= size_of::<Inner>() + size_of::<Sleep>() + WORD,
        "{}",
        size_of::<DeadlineFuture<Inner>>()
    );
}

#[tokio::test(start_paused = true)]
async fn bounded_by_current_looks_again_at_the_first_poll() {
    let start = Instant::now();
    let d = Deadline::after(start, Duration::from_millis(100));
    // Made where no deadline is current (as in tower's Buffer worker), polled
    // inside the caller's scope: the bound is the caller's deadline.
    let fut = bounded_by_current(std::future::pending::<()>());
    let mut fut = task::spawn(d.scope(fut));
    assert_pending!(fut.poll());
    tokio::time::advance(Duration::from_millis(100)).await;
    assert!(assert_ready!(fut.poll()).is_err());
}

#[tokio::test(start_paused = true)]
async fn bounded_by_current_under_a_deadline_layer_notices_the_deadline_first() {
    // The inner service's future is bounded by the current deadline and tells
    // its own expiry apart; the layer's timer wakes the task, and the inner
    // bound, polled first, is the one that reports the deadline.
    let inner = tower::service_fn(|()| async {
        match bounded_by_current(std::future::pending::<()>()).await {
            Ok(()) => Ok::<_, BoxError>("answered"),
            Err(DeadlineExceeded { .. }) => Err("the inner bound saw the deadline".into()),
        }
    });
    let svc = DeadlineLayer::new(Duration::from_millis(100))
        .unwrap()
        .layer(inner);
    let mut fut = task::spawn(svc.oneshot(()));
    assert_pending!(fut.poll());
    tokio::time::advance(Duration::from_millis(99)).await;
    assert_pending!(fut.poll());
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(fut.is_woken());
    let err = assert_ready!(fut.poll()).unwrap_err();
    assert_eq!(err.to_string(), "the inner bound saw the deadline");
}

#[tokio::test(start_paused = true)]
async fn bounded_by_current_under_a_plain_scope_sets_its_own_timer() {
    // `Deadline::scope` has no timer: the bound must wake the task itself.
    let d = Deadline::after(Instant::now(), Duration::from_millis(50));
    let mut fut = task::spawn(d.scope(bounded_by_current(std::future::pending::<()>())));
    assert_pending!(fut.poll());
    tokio::time::advance(Duration::from_millis(50)).await;
    assert!(fut.is_woken());
    assert!(assert_ready!(fut.poll()).is_err());
}

#[test]
fn zero_budget_is_a_config_error() {
    assert_eq!(
        DeadlineLayer::new(Duration::ZERO).unwrap_err().field(),
        "budget"
    );
}

#[tokio::test(start_paused = true)]
async fn bounded_fails_when_the_deadline_passes_first() {
    let now = Instant::now();
    let d = Deadline::after(now, Duration::from_millis(300));
    let mut fut = task::spawn(bounded(std::future::pending::<()>(), Some(d)));
    assert_pending!(fut.poll());
    tokio::time::advance(Duration::from_millis(299)).await;
    assert_pending!(fut.poll());
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(assert_ready!(fut.poll()).is_err());
}

/// A busy runtime runs the deadline's timer and the answer's wake-up together:
/// the answer came after the deadline, so it is a timeout, not a success.
#[tokio::test(start_paused = true)]
async fn an_answer_seen_only_after_the_deadline_is_a_timeout() {
    let d = Deadline::after(Instant::now(), Duration::from_millis(300));
    let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
    let mut plain = task::spawn(bounded(rx, Some(d)));
    assert_pending!(plain.poll());
    let (tx2, rx2) = tokio::sync::oneshot::channel::<u32>();
    let mut current = task::spawn(d.scope(bounded_by_current(rx2)));
    assert_pending!(current.poll());
    tokio::time::advance(Duration::from_millis(400)).await;
    tx.send(1).unwrap();
    tx2.send(2).unwrap();
    assert!(assert_ready!(plain.poll()).is_err());
    assert!(assert_ready!(current.poll()).is_err());

    // An answer seen before the deadline is the answer.
    let d = Deadline::after(Instant::now(), Duration::from_millis(300));
    let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
    let mut in_time = task::spawn(bounded(rx, Some(d)));
    assert_pending!(in_time.poll());
    tokio::time::advance(Duration::from_millis(299)).await;
    tx.send(3).unwrap();
    assert_eq!(assert_ready!(in_time.poll()).unwrap().unwrap(), 3);
}

#[tokio::test(start_paused = true)]
async fn bounded_fails_at_once_when_the_deadline_has_already_passed() {
    let now = Instant::now();
    let past = Deadline::after(now, Duration::from_millis(10));
    tokio::time::advance(Duration::from_millis(20)).await;
    let mut fut = task::spawn(bounded(std::future::pending::<()>(), Some(past)));
    assert!(assert_ready!(fut.poll()).is_err());
    // A future that is ready wins even over a passed deadline: its answer is in.
    let mut ready = task::spawn(bounded(std::future::ready(1), Some(past)));
    assert_eq!(assert_ready!(ready.poll()).unwrap(), 1);
}

#[tokio::test(start_paused = true)]
async fn bounded_without_deadline_is_the_inner_future() {
    let mut fut = task::spawn(bounded(std::future::ready(7), None));
    assert_eq!(assert_ready!(fut.poll()).unwrap(), 7);
    let mut never = task::spawn(bounded(std::future::pending::<()>(), None));
    tokio::time::advance(Duration::from_secs(3600)).await;
    assert_pending!(never.poll());
}

/// One request through a 300 ms deadline over a mock, polled once and taken by
/// the mock: its future, and the mock's way to answer it.
async fn a_call_taken_under_300ms() -> (
    task::Spawn<impl Future<Output = Result<&'static str, BoxError>>>,
    mock::SendResponse<&'static str>,
) {
    let (svc, mut handle) = mock::pair::<http::Request<()>, &'static str>();
    let mut svc = DeadlineLayer::new(Duration::from_millis(300))
        .unwrap()
        .layer(svc);
    handle.allow(1);
    let mut fut = task::spawn(svc.ready().await.unwrap().call(http::Request::new(())));
    assert_pending!(fut.poll());
    let (_req, send) = handle.next_request().await.unwrap();
    (fut, send)
}

#[tokio::test(start_paused = true)]
async fn layer_sets_the_deadline_and_enforces_it() {
    let (mut fut, _send) = a_call_taken_under_300ms().await;
    tokio::time::advance(Duration::from_millis(300)).await;
    let err = assert_ready!(fut.poll()).unwrap_err();
    assert_eq!(
        find_rejection(&*err).unwrap().kind(),
        RejectionKind::DeadlineExceeded
    );
}

#[tokio::test(start_paused = true)]
async fn an_earlier_outer_deadline_and_a_shorter_grpc_timeout_win() {
    let mut svc = DeadlineLayer::new(Duration::from_millis(300))
        .unwrap()
        .honor_grpc_timeout(true)
        .propagate_grpc_timeout(true)
        .layer(seeing::<http::Request<()>>());
    let start = Instant::now();

    let outer = Deadline::after(start, Duration::from_millis(100));
    svc.ready().await.unwrap();
    let fut = outer.sync_scope(|| svc.call(http::Request::new(())));
    let (in_call, in_future, header) = outer.scope(fut).await.unwrap();
    assert_eq!(in_call, Some(outer));
    assert_eq!(in_future, Some(outer));
    assert_eq!(header.as_deref(), Some("100000u"));

    let req = http::Request::builder()
        .header(GRPC_TIMEOUT, "50m")
        .body(())
        .unwrap();
    let (in_call, _, header) = svc.ready().await.unwrap().call(req).await.unwrap();
    assert_eq!(in_call.unwrap().remaining(start), Duration::from_millis(50));
    assert_eq!(header.as_deref(), Some("50000000n"));
}

#[tokio::test(start_paused = true)]
async fn a_response_in_time_passes_through() {
    let (mut fut, send) = a_call_taken_under_300ms().await;
    tokio::time::advance(Duration::from_millis(299)).await;
    send.send_response("quote");
    assert_eq!(assert_ready!(fut.poll()).unwrap(), "quote");
}
