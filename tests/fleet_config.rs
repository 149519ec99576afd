//! The `[fleet]` table of a policy document: parsed into the fleet's settings,
//! each bad value named by its path, never changed at run time, and shown by the
//! admin router without the store's password.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use axum::body::Body;
use http_body_util::BodyExt;
use seawall::admin;
use seawall::config::{LoadError, Policies, PolicyDocument};
use seawall::fleet::{Fleet, LocalStore, RedisStore, TripTogether};
use tower::ServiceExt;

const DOC: &str = r#"
[policies.freight]
breaker = { open_for = "10s" }

[fleet]
store = "redis://app:s3cret@redis.internal:6380/0"
prefix = "shop-v2"
store_timeout = "150ms"
trip_together = { instances = 3, within = "30s" }
"#;

/// `text` is refused as invalid, naming `field` alone; `what` names the case.
fn assert_invalid(text: &str, field: &str, what: &str) {
    let e = PolicyDocument::from_toml(text).unwrap_err();
    assert!(matches!(e, LoadError::Invalid { .. }), "{what}: {e:?}");
    assert_eq!(e.fields(), [field], "{what}: {e}");
}

/// `text` is refused as malformed, naming `field` alone; `what` names the case.
fn assert_malformed(text: &str, field: &str, what: &str) {
    let e = PolicyDocument::from_toml(text).unwrap_err();
    assert!(matches!(e, LoadError::Malformed { .. }), "{what}: {e:?}");
    assert_eq!(e.fields(), [field], "{what}: {e}");
}

#[test]
fn the_fleet_table_gives_the_store_and_the_settings() {
    let doc = PolicyDocument::from_toml(DOC).unwrap();
    let fleet = doc.fleet.as_ref().unwrap();
    assert_eq!(
        fleet.redis_url(),
        Some("redis://app:s3cret@redis.internal:6380/0")
    );
    let config = fleet.config();
    assert_eq!(config.prefix, "shop-v2");
    assert_eq!(config.store_timeout, Duration::from_millis(150));
    assert_eq!(
        config.trip_together,
        Some(TripTogether::new(3, Duration::from_secs(30)))
    );
    // Left out: the fleet's defaults.
    let defaults = seawall::fleet::FleetConfig::default();
    assert_eq!(config.probe_window, defaults.probe_window);
    assert_eq!(config.disconnect_after, defaults.disconnect_after);
    // Both stores build from it (a Redis URL is parsed, not dialled).
    let redis = RedisStore::new(fleet.redis_url().unwrap()).unwrap();
    Fleet::builder(redis).config(config).build().unwrap();

    let local = PolicyDocument::from_toml("[policies.a]\nbreaker = {}\n[fleet]\n").unwrap();
    let local = local.fleet.unwrap();
    assert_eq!(local.redis_url(), None);
    assert_eq!(local.config().trip_together, None);
    Fleet::builder(LocalStore::new())
        .config(local.config())
        .build()
        .unwrap();
    // No table, no fleet.
    let none = PolicyDocument::from_toml("[policies.a]\nbreaker = {}\n").unwrap();
    assert!(none.fleet.is_none());
}

#[test]
fn each_bad_fleet_value_is_named_by_its_path() {
    let cases: &[(&str, &str)] = &[
        ("store = \"not a url\"", "fleet.store"),
        ("store = \"http://redis.internal/\"", "fleet.store"),
        ("store = \"redis://redis.internal:port/\"", "fleet.store"),
        ("prefix = \"\"", "fleet.prefix"),
        ("prefix = \"has space\"", "fleet.prefix"),
        ("store_timeout = \"0s\"", "fleet.store_timeout"),
        ("probe_window = \"0ms\"", "fleet.probe_window"),
        ("disconnect_after = 0", "fleet.disconnect_after"),
        (
            "trip_together = { instances = 1, within = \"30s\" }",
            "fleet.trip_together.instances",
        ),
        (
            "trip_together = { instances = 3, within = \"0s\" }",
            "fleet.trip_together.within",
        ),
    ];
    for (line, field) in cases {
        let text = format!("[policies.a]\nbreaker = {{}}\n[fleet]\n{line}\n");
        assert_invalid(&text, field, line);
    }
    // Malformed shapes are named with their line, as everywhere in the document.
    for (line, field) in [
        ("stor = \"local\"", "fleet.stor"),
        ("store_timeout = 200", "fleet.store_timeout"),
        (
            "trip_together = { instances = 3 }",
            "fleet.trip_together.within",
        ),
    ] {
        let text = format!("[policies.a]\nbreaker = {{}}\n[fleet]\n{line}\n");
        assert_malformed(&text, field, line);
    }
}

#[test]
fn the_fleet_table_cannot_change_at_run_time() {
    let policies = Policies::from_toml(DOC).unwrap();
    let changed = DOC.replace("shop-v2", "shop-v3");
    let e = policies.apply_toml(&changed).unwrap_err();
    assert!(matches!(e, LoadError::NeedsRestart { .. }), "{e:?}");
    assert_eq!(e.fields(), ["fleet"]);
    assert_eq!(policies.fleet().unwrap().prefix, "shop-v2");
}

#[tokio::test]
async fn the_admin_router_shows_the_fleet_settings_without_the_password() {
    let get = |app: axum::Router, path: &'static str| async move {
        let res = app
            .oneshot(http::Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = res.status();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            serde_json::from_slice::<serde_json::Value>(&body).unwrap(),
        )
    };
    let app = admin::router(Policies::from_toml(DOC).unwrap(), None);
    let (status, fleet) = get(app.clone(), "/fleet").await;
    assert_eq!(status, http::StatusCode::OK);
    assert_eq!(fleet["store"], "redis://app:***@redis.internal:6380/0");
    assert_eq!(fleet["prefix"], "shop-v2");
    assert_eq!(fleet["store_timeout"], "150ms");
    assert_eq!(fleet["trip_together"]["instances"], 3);
    assert_eq!(fleet["trip_together"]["within"], "30s");
    let (_, all) = get(app, "/policies").await;
    // `GET /fleet` is the settings of `GET /policies` and the registered parts.
    let mut settings = fleet.clone();
    assert_eq!(
        settings.as_object_mut().unwrap().remove("policies"),
        Some(serde_json::json!({}))
    );
    assert_eq!(all["fleet"], settings);
    assert!(!all.to_string().contains("s3cret"));

    let without = admin::router(
        Policies::from_toml("[policies.a]\nbreaker = {}\n").unwrap(),
        None,
    );
    let (status, _) = get(without, "/fleet").await;
    assert_eq!(status, http::StatusCode::NOT_FOUND);
}

const CAPPED: &str = r#"
[policies.freight]
bulkhead = { max_concurrent = 8 }

[policies.search]
bulkhead = { max_concurrent = 4 }

[fleet]
store = "local"

[fleet.caps.freight]
cap = 8
renew_every = "500ms"
ttl = "4s"
longest_call = "2s"
mode = "available"
local_share = 2

[fleet.caps.search]
cap = 12
"#;

#[test]
fn a_cap_table_gives_the_fleet_wide_cap_of_a_policys_bulkhead() {
    use seawall::fleet::{CapConfig, CapMode};
    let doc = PolicyDocument::from_toml(CAPPED).unwrap();
    let caps = &doc.fleet.as_ref().unwrap().caps;
    let freight = caps["freight"].config().unwrap();
    assert_eq!(freight.cap, 8);
    assert_eq!(freight.renew_every, Duration::from_millis(500));
    assert_eq!(freight.ttl, Duration::from_secs(4));
    assert_eq!(freight.longest_call, Duration::from_secs(2));
    assert_eq!(freight.mode, CapMode::Available { local_share: 2 });
    // Only `cap` given: the cap's own defaults, divided mode with a floor of 1.
    let search = caps["search"].config().unwrap();
    assert_eq!(search, CapConfig::new(12));
    assert_eq!(search.mode, CapMode::Divided { floor: 1 });
    // No caps table, no caps.
    let none = PolicyDocument::from_toml(DOC).unwrap();
    assert!(none.fleet.unwrap().caps.is_empty());
}

#[test]
fn each_bad_cap_value_is_named_by_its_path() {
    let cases: &[(&str, &str)] = &[
        ("cap = 0", "fleet.caps.freight.cap"),
        ("cap = 2000000", "fleet.caps.freight.cap"),
        (
            "cap = 8\nrenew_every = \"0s\"",
            "fleet.caps.freight.renew_every",
        ),
        ("cap = 8\nttl = \"0s\"", "fleet.caps.freight.ttl"),
        // A TTL not above T.
        (
            "cap = 8\nrenew_every = \"2s\"\nttl = \"2s\"",
            "fleet.caps.freight.ttl",
        ),
        (
            "cap = 8\nttl = \"3s\"\nlongest_call = \"2s\"",
            "fleet.caps.freight.longest_call",
        ),
        // A local share above G.
        (
            "cap = 8\nmode = \"available\"\nlocal_share = 9",
            "fleet.caps.freight.local_share",
        ),
        (
            "cap = 8\nmode = \"available\"",
            "fleet.caps.freight.local_share",
        ),
        ("cap = 8\nlocal_share = 2", "fleet.caps.freight.local_share"),
    ];
    for (lines, field) in cases {
        let text = format!(
            "[policies.freight]\nbulkhead = {{}}\n[fleet]\n[fleet.caps.freight]\n{lines}\n"
        );
        assert_invalid(&text, field, lines);
    }
    // A cap on a policy without a bulkhead, or on no policy at all.
    for (policy, section) in [
        ("freight", "[policies.freight]\nbreaker = {}\n"),
        ("nowhere", "[policies.freight]\nbulkhead = {}\n"),
    ] {
        let text = format!("{section}[fleet]\n[fleet.caps.{policy}]\ncap = 8\n");
        let e = PolicyDocument::from_toml(&text).unwrap_err();
        assert_eq!(e.fields(), [format!("fleet.caps.{policy}")], "{e}");
    }
    // Malformed shapes: named with their line.
    for (lines, field) in [
        ("renew_every = \"1s\"", "fleet.caps.freight.cap"),
        ("cap = 8\nmode = \"eventual\"", "fleet.caps.freight.mode"),
        ("cap = 8\nshare = 2", "fleet.caps.freight.share"),
        ("cap = -1", "fleet.caps.freight.cap"),
    ] {
        let text = format!(
            "[policies.freight]\nbulkhead = {{}}\n[fleet]\n[fleet.caps.freight]\n{lines}\n"
        );
        assert_malformed(&text, field, lines);
    }
}

#[test]
fn the_caps_cannot_change_at_run_time() {
    let policies = Policies::from_toml(CAPPED).unwrap();
    let e = policies
        .apply_toml(&CAPPED.replace("cap = 12", "cap = 16"))
        .unwrap_err();
    assert!(matches!(e, LoadError::NeedsRestart { .. }), "{e:?}");
    assert_eq!(e.fields(), ["fleet"]);
}
