//! A randomized schedule of arrivals, completions, cancellations, clock advances and
//! limit changes through the real service, checked after every step.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use proptest::prelude::*;
use seawall_bulkhead::BulkheadLayer;
use seawall_core::{find_rejection, BoxError, RejectionKind};
use tokio::sync::oneshot;
use tokio_test::task;
use tower::{service_fn, Layer, Service};

type Req = http::Request<oneshot::Receiver<()>>;
type Call = task::Spawn<Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send>>>;

#[derive(Debug, Clone)]
enum Op {
    Arrive,
    Complete(usize),
    Cancel(usize),
    Advance(u64),
    Limits(usize, usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => Just(Op::Arrive),
        3 => any::<usize>().prop_map(Op::Complete),
        2 => any::<usize>().prop_map(Op::Cancel),
        2 => (0..30u64).prop_map(Op::Advance),
        1 => (1..6usize, 0..6usize).prop_map(|(c, q)| Op::Limits(c, q)),
    ]
}

/// Counts calls inside the inner service, decremented when the inner future ends
/// or is dropped.
struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[derive(Default)]
struct Tally {
    ok: u64,
    full: u64,
    timeout: u64,
}

fn run(limit: usize, queue: usize, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let rt = seawall_test_support::paused_runtime();
    rt.block_on(async move {
        let l = BulkheadLayer::builder("schedule")
            .max_concurrent(limit)
            .max_queue(queue)
            .max_wait(Duration::from_millis(20))
            .build()
            .unwrap();
        let h = l.handle();
        let in_flight = Arc::new(AtomicUsize::new(0));
        let counter = in_flight.clone();
        let mut svc = l.layer(service_fn(move |req: Req| {
            counter.fetch_add(1, Ordering::SeqCst);
            let guard = InFlight(counter.clone());
            async move {
                let _guard = guard;
                let _ = req.into_body().await;
                Ok::<_, Infallible>(())
            }
        }));

        let mut calls: Vec<(Call, Option<oneshot::Sender<()>>)> = Vec::new();
        let mut arrivals = 0u64;
        let mut tally = Tally::default();
        let mut config = h.config();

        for op in ops {
            let before = h.snapshot();
            match op {
                Op::Arrive => {
                    let (tx, rx) = oneshot::channel();
                    let fut: Pin<Box<dyn Future<Output = _> + Send>> =
                        Box::pin(svc.call(http::Request::new(rx)));
                    calls.push((task::spawn(fut), Some(tx)));
                    arrivals += 1;
                }
                Op::Complete(i) if !calls.is_empty() => {
                    let k = i % calls.len();
                    if let Some(tx) = calls[k].1.take() {
                        let _ = tx.send(());
                    }
                }
                Op::Cancel(i) if !calls.is_empty() => {
                    let k = i % calls.len();
                    let (call, _) = calls.swap_remove(k);
                    // Waiting or running, dropping it must give everything back.
                    drop(call);
                }
                Op::Advance(ms) => tokio::time::advance(Duration::from_millis(ms)).await,
                Op::Limits(c, q) => {
                    config.max_concurrent = c;
                    config.queue.max_queue = q;
                    h.reconfigure(config).unwrap();
                }
                Op::Complete(_) | Op::Cancel(_) => {}
            }
            // Drive every call, as an executor would.
            let mut i = 0;
            while i < calls.len() {
                match calls[i].0.poll() {
                    Poll::Pending => i += 1,
                    Poll::Ready(result) => {
                        drop(calls.swap_remove(i));
                        match result {
                            Ok(()) => tally.ok += 1,
                            Err(e) => match find_rejection(&*e).map(|r| r.kind()) {
                                Some(RejectionKind::BulkheadFull) => tally.full += 1,
                                Some(RejectionKind::BulkheadTimeout) => tally.timeout += 1,
                                other => prop_assert!(false, "unexpected error {e} ({other:?})"),
                            },
                        }
                    }
                }
            }
            let after = h.snapshot();
            // Never more admitted than the limit, never more waiting than the queue.
            if after.active > before.active {
                prop_assert!(after.active <= config.max_concurrent, "{after:?}");
            }
            if after.queued > before.queued {
                prop_assert!(after.queued <= config.queue.max_queue, "{after:?}");
            }
            prop_assert!(after.active <= before.active.max(config.max_concurrent));
            // Only a call holding a slot is in the inner service.
            prop_assert!(in_flight.load(Ordering::SeqCst) <= after.active);
            // Nobody waits while a slot is free.
            prop_assert!(after.queued == 0 || after.active >= config.max_concurrent);
        }

        // Every caller goes away: every permit comes back.
        drop(calls);
        let end = h.snapshot();
        prop_assert_eq!((end.active, end.queued), (0, 0));
        prop_assert_eq!(in_flight.load(Ordering::SeqCst), 0);
        prop_assert_eq!(end.rejected_full, tally.full);
        prop_assert_eq!(end.rejected_timeout, tally.timeout);
        // Every arrival was admitted, rejected, timed out, or abandoned while waiting;
        // admitted ones either finished or were cancelled while running.
        prop_assert_eq!(
            end.admitted + end.rejected_full + end.rejected_timeout + end.abandoned,
            arrivals
        );
        prop_assert!(end.admitted >= tally.ok);
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]
    #[test]
    fn never_over_the_limits_and_every_permit_returned(
        limit in 1..5usize,
        queue in 0..5usize,
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        run(limit, queue, ops)?;
    }
}
