//! Rejections and limit changes emit `tracing` events (feature `tracing`).
#![cfg(feature = "tracing")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use seawall_bulkhead::{BulkheadConfig, BulkheadLayer};
use tokio_test::{assert_pending, assert_ready, task};
use tower::{service_fn, Layer, Service};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Records the message and `bulkhead` field of every event.
#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<String>>>);

#[derive(Default)]
struct Line {
    bulkhead: String,
    message: String,
}

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        }
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "bulkhead" {
            self.bulkhead = value.to_owned();
        }
    }
}

impl Subscriber for Events {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        if event.metadata().target() == "seawall::bulkhead" {
            let mut line = Line::default();
            event.record(&mut line);
            let text = format!("{}: {}", line.bulkhead, line.message);
            self.0.lock().unwrap().push(text);
        }
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[tokio::test(start_paused = true)]
async fn rejections_and_limit_changes_are_traced() {
    let events = Events::default();
    let _guard = tracing::subscriber::set_default(events.clone());
    let l = BulkheadLayer::builder("freight")
        .max_concurrent(1)
        .max_queue(1)
        .build()
        .unwrap();
    let mut svc = l.layer(service_fn(|_req: http::Request<()>| {
        std::future::pending::<Result<(), Infallible>>()
    }));
    let mut busy = task::spawn(svc.call(http::Request::new(())));
    assert_pending!(busy.poll());
    let mut waiting = task::spawn(svc.call(http::Request::new(())));
    assert_pending!(waiting.poll());
    // Admissions are silent; a full bulkhead and a timed-out wait are not.
    assert!(events.0.lock().unwrap().is_empty());
    let mut full = task::spawn(svc.call(http::Request::new(())));
    assert!(assert_ready!(full.poll()).is_err());
    tokio::time::advance(Duration::from_millis(20)).await;
    assert!(assert_ready!(waiting.poll()).is_err());
    l.handle()
        .reconfigure(BulkheadConfig {
            max_concurrent: 2,
            ..l.handle().config()
        })
        .unwrap();
    // The end of the saturation is logged by the release that finds half the
    // limit free and nobody waiting.
    drop(busy);
    let seen = events.0.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            "freight: bulkhead full; call rejected",
            "freight: bulkhead saturated: turning calls away",
            "freight: no bulkhead slot in time; call rejected",
            "freight: bulkhead limits changed",
            "freight: bulkhead relieved: room again",
        ]
    );
}
