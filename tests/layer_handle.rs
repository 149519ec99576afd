//! Every layer's handle through one generic function over `LayerHandle`: the verbs
//! mean the same on all four.

#![cfg(all(
    feature = "circuit-breaker",
    feature = "bulkhead",
    feature = "degradation",
    feature = "fallback"
))]

use std::fmt::Debug;

use seawall::bulkhead::BulkheadLayer;
use seawall::circuit_breaker::{CircuitBreakerLayer, Forced, State};
use seawall::degradation::{DegradationLayer, Fixed};
use seawall::fallback::{FallbackLayer, Rejections};
use seawall::{ConfigError, LayerHandle};

/// How a test reads one layer's snapshot.
struct Reading<S> {
    /// Whether the snapshot shows the test's configuration change.
    changed: fn(&S) -> bool,
    /// Whether the snapshot shows the layer forced.
    forced: fn(&S) -> bool,
}

/// Drives `handle` through the shared verbs: an invalid configuration is refused
/// and changes nothing; `reconfigure` applies `changed` (config and snapshot show
/// it); `force` holds through `revert`, which restores the built configuration;
/// `release` ends the hold, and releasing again changes nothing.
fn drive<H>(
    handle: &H,
    name: &str,
    changed: H::Config,
    invalid: H::Config,
    forced: H::Forced,
    read: &Reading<H::Snapshot>,
) -> Result<(), ConfigError>
where
    H: LayerHandle,
    H::Config: Debug,
{
    assert_eq!(handle.name(), name);
    let built = handle.config();
    assert_ne!(built, changed, "{name}: the change must change something");
    assert!(!(read.changed)(&handle.snapshot()), "{name}");
    assert!(!(read.forced)(&handle.snapshot()), "{name}");

    assert!(handle.reconfigure(invalid).is_err(), "{name}");
    assert_eq!(handle.config(), built, "{name}: a refusal changes nothing");

    handle.reconfigure(changed.clone())?;
    assert_eq!(handle.config(), changed, "{name}");
    assert!((read.changed)(&handle.snapshot()), "{name}");

    handle.force(forced)?;
    assert!((read.forced)(&handle.snapshot()), "{name}");
    handle.revert();
    assert_eq!(handle.config(), built, "{name}");
    assert!(!(read.changed)(&handle.snapshot()), "{name}");
    assert!(
        (read.forced)(&handle.snapshot()),
        "{name}: a forced state is no configuration: revert keeps it"
    );

    handle.release();
    assert!(!(read.forced)(&handle.snapshot()), "{name}");
    handle.release();
    assert!(!(read.forced)(&handle.snapshot()), "{name}");
    assert_eq!(handle.config(), built, "{name}");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn every_handle_reconfigures_reverts_forces_and_releases_alike() {
    let breaker = CircuitBreakerLayer::builder("breaker").build().unwrap();
    let h = breaker.handle();
    let mut shadow = h.config();
    shadow.shadow = true;
    let mut invalid = h.config();
    invalid.jitter = Some(2.0);
    drive(
        &h,
        "breaker",
        shadow,
        invalid,
        Forced::Open,
        &Reading {
            changed: |s| s.shadow,
            forced: |s| s.state == State::ForcedOpen,
        },
    )
    .unwrap();
    h.force(Forced::Closed);
    assert_eq!(h.state(), State::ForcedClosed);
    h.release();
    assert_eq!(h.state(), State::Closed);

    let bulkhead = BulkheadLayer::builder("bulkhead")
        .max_concurrent(4)
        .build()
        .unwrap();
    let h = bulkhead.handle();
    let mut wider = h.config();
    wider.max_concurrent = 6;
    let mut invalid = h.config();
    invalid.max_concurrent = 0;
    drive(
        &h,
        "bulkhead",
        wider,
        invalid,
        2,
        &Reading {
            changed: |s| s.max_concurrent == 6,
            forced: |s| s.limit_forced && s.limit == 2,
        },
    )
    .unwrap();
    assert_eq!(h.snapshot().limit, 4, "released: back to max_concurrent");
    assert!(
        LayerHandle::force(&h, 0).is_err(),
        "a zero limit is refused"
    );
    assert!(!h.snapshot().limit_forced);

    let degradation = DegradationLayer::<(), &str>::builder("degradation")
        .level("cached", Fixed::new("stale price"))
        .build()
        .unwrap();
    let h = degradation.handle();
    let mut shadow = h.config();
    shadow.shadow = true;
    let mut invalid = h.config();
    invalid.probe_ratio = 2.0;
    drive(
        &h,
        "degradation",
        shadow,
        invalid,
        1,
        &Reading {
            changed: |s| s.shadow,
            forced: |s| s.state.forced && s.level_name == "cached",
        },
    )
    .unwrap();
    assert!(LayerHandle::force(&h, 2).is_err(), "no third level");
    assert!(!h.snapshot().state.forced);

    let fallback = FallbackLayer::builder("fallback")
        .on_rejections(Rejections::ALL)
        .value("unavailable")
        .build()
        .unwrap();
    let h = fallback.handle();
    let mut disabled = h.config();
    disabled.enabled = false;
    let mut invalid = h.config();
    invalid.on_rejections = Rejections::NONE;
    drive(
        &h,
        "fallback",
        disabled,
        invalid,
        (),
        &Reading {
            changed: |s| !s.enabled,
            forced: |s| s.forced,
        },
    )
    .unwrap();
}

#[tokio::test(start_paused = true)]
async fn release_hands_back_only_what_an_operator_forced() {
    use seawall::BoxError;
    use tower::{service_fn, Layer, ServiceExt};

    let breaker = CircuitBreakerLayer::builder("breaker")
        .consecutive_failures(1)
        .build()
        .unwrap();
    let h = breaker.handle();
    let failing = breaker.layer(service_fn(|()| async {
        Err::<(), BoxError>("down".into())
    }));
    assert!(failing.oneshot(()).await.is_err());
    assert_eq!(h.state(), State::Open, "tripped by itself");
    h.release();
    assert_eq!(
        h.state(),
        State::Open,
        "no operator held it: release leaves the trip"
    );
    h.disable();
    assert_eq!(h.state(), State::Disabled);
    h.release();
    assert_eq!(
        h.state(),
        State::Closed,
        "a disabled breaker is handed back fresh"
    );
    assert_eq!(h.snapshot().consecutive_failures, Some(0));
}
