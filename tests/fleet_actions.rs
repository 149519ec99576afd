//! Fleet-wide breaker actions through the admin router, over a real axum server
//! on loopback: three instances sharing one store; an action sent to one
//! instance's router reaches all three, ends by itself at its expiry, and is in
//! the audit log; refused without the token, a reason, or a fleet secret.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use seawall::admin::{self, AdminToken};
use seawall::circuit_breaker::{Handle, State};
use seawall::config::Policies;
use seawall::fleet::{Coordinated, Fleet, FleetSecret, LocalStore};
use serde_json::Value;

const DOC: &str = r#"
[policies.freight]
breaker = { open_for = "10s" }
"#;

const TOKEN: &str = "an-admin-token-of-some-length";

struct Instance {
    handle: Handle,
    coordinated: Arc<Coordinated>,
    addr: SocketAddr,
}

async fn instance(store: &LocalStore, secret: Option<FleetSecret>) -> Instance {
    let policies = Policies::from_toml(DOC).unwrap();
    let breaker = policies.circuit_breaker("freight", |b| b).unwrap();
    let handle = breaker.handle();
    let fleet = Fleet::builder(store.clone())
        .prefix("shop")
        .health_every(Duration::from_millis(100))
        .secret(secret)
        .build()
        .unwrap();
    let coordinated = Arc::new(fleet.coordinate(&handle).unwrap());
    serve(policies, handle, coordinated).await
}

/// Registers `coordinated` with `policies` and serves their admin router on a
/// free loopback port.
async fn serve(policies: Policies, handle: Handle, coordinated: Arc<Coordinated>) -> Instance {
    policies
        .register_coordination(Arc::clone(&coordinated))
        .unwrap();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let app = admin::router(policies, Some(AdminToken::new(TOKEN).unwrap()));
    tokio::spawn(async move { axum::serve(listener, app).await });
    Instance {
        handle,
        coordinated,
        addr,
    }
}

fn client() -> hyper_util::client::legacy::Client<HttpConnector, Empty<Bytes>> {
    hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build_http()
}

async fn send(addr: SocketAddr, method: &str, path: &str, token: Option<&str>) -> (u16, Value) {
    let mut req = http::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"));
    if let Some(token) = token {
        req = req.header("authorization", format!("Bearer {token}"));
    }
    let res = client()
        .request(req.body(Empty::new()).unwrap())
        .await
        .unwrap();
    let status = res.status().as_u16();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// Polls `done` every 20 ms under a 60 s watchdog (a bound, not a measure).
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "watchdog: never {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The events of `action` in an actions `listing`'s audit log.
fn audit_events<'a>(listing: &'a Value, action: &Value) -> Vec<&'a str> {
    listing["audit"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == action["id"])
        .map(|e| e["event"].as_str().unwrap())
        .collect()
}

/// The actions listing of `policy` once `n` instances have audited `event` of
/// `action`: each audits after it has acted, so the log may lag the states it
/// changed by one store write. Polled under a 60 s watchdog (a bound, not a measure).
async fn audited(addr: SocketAddr, policy: &str, action: &Value, event: &str, n: usize) -> Value {
    let path = format!("/fleet/policies/{policy}/actions");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (status, listing) = send(addr, "GET", &path, None).await;
        assert_eq!(status, 200, "{listing}");
        if times(&audit_events(&listing, action), event) >= n {
            return listing;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "watchdog: {listing}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How many of `events` are `event`.
fn times(events: &[&str], event: &str) -> usize {
    events.iter().filter(|e| **e == event).count()
}

fn secret() -> Option<FleetSecret> {
    Some(FleetSecret::new(vec![9; 32]).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_action_sent_to_one_router_holds_every_instance_until_its_expiry() {
    let store = LocalStore::new();
    let nodes = [
        instance(&store, secret()).await,
        instance(&store, secret()).await,
        instance(&store, secret()).await,
    ];
    let states = |nodes: &[Instance]| nodes.iter().map(|n| n.handle.state()).collect::<Vec<_>>();
    let path = "/fleet/policies/freight/breaker/force-open?reason=game%20day&ttl=2s";

    // Refused, changing nothing: no token, no reason, a bad ttl.
    assert_eq!(send(nodes[0].addr, "POST", path, None).await.0, 401);
    let (status, body) = send(
        nodes[0].addr,
        "POST",
        "/fleet/policies/freight/breaker/force-open?ttl=2s",
        Some(TOKEN),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert!(body["error"].as_str().unwrap().starts_with("reason"));
    let (status, body) = send(
        nodes[0].addr,
        "POST",
        "/fleet/policies/freight/breaker/force-open?reason=x&ttl=5h",
        Some(TOKEN),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert!(body["error"].as_str().unwrap().contains("ttl"), "{body}");

    let (status, action) = send(nodes[0].addr, "POST", path, Some(TOKEN)).await;
    assert_eq!(status, 200, "{action}");
    assert_eq!(action["kind"], "force_open");
    assert_eq!(action["reason"], "game day");
    assert!(action["signer"].as_str().unwrap().starts_with("token:"));
    assert!(
        !action.to_string().contains(TOKEN),
        "the token is never shown"
    );
    until("all three forced open", || {
        states(&nodes) == vec![State::ForcedOpen; 3]
    })
    .await;
    let held = nodes[2].coordinated.snapshot().fleet_action.unwrap();
    assert_eq!(serde_json::json!(held.action.id), action["id"]);
    until("all three back at the expiry", || {
        states(&nodes) == vec![State::Closed; 3]
    })
    .await;

    let listing = audited(nodes[1].addr, "freight", &action, "expired", 3).await;
    let events = audit_events(&listing, &action);
    assert_eq!(times(&events, "applied"), 3, "{listing}");
    assert_eq!(times(&events, "expired"), 3, "{listing}");
    assert!(events.contains(&"issued"));

    // One view of the three: every instance reports (every 5 s).
    until_view(nodes[2].addr, 3).await;
}

/// Waits until the router's fleet view of `freight` shows `n` closed instances.
async fn until_view(addr: SocketAddr, n: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (status, view) = send(addr, "GET", "/fleet/policies/freight/instances", None).await;
        assert_eq!(status, 200, "{view}");
        if view["closed"] == n {
            assert_eq!(view["instances"].as_array().unwrap().len() as u64, n);
            assert_eq!(view["instances"][0]["state"], "closed");
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "watchdog: {view}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_fleet_secret_fleet_actions_are_refused() {
    let store = LocalStore::new();
    let node = instance(&store, None).await;
    let (status, body) = send(
        node.addr,
        "POST",
        "/fleet/policies/freight/breaker/force-open?reason=x",
        Some(TOKEN),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert!(body["error"]
        .as_str()
        .unwrap()
        .contains("SEAWALL_FLEET_SECRET"));
    assert_eq!(node.handle.state(), State::Closed);
    let (status, _) = send(
        node.addr,
        "POST",
        "/fleet/policies/nothing/breaker/force-open?reason=x",
        Some(TOKEN),
    )
    .await;
    assert_eq!(status, 404);
}

const FLOOR_DOC: &str = r#"
[policies.assistant]
degradation = { failures_to_degrade = 2 }
"#;

/// An instance whose `assistant` degradation floor follows the fleet's floor actions.
async fn floor_instance(store: &LocalStore) -> (seawall::degradation::Handle, SocketAddr) {
    use seawall::degradation::Fixed;
    let policies = Policies::from_toml(FLOOR_DOC).unwrap();
    let layer = policies
        .degradation::<String, String, _, _>("assistant", |b| {
            b.level("reduced", Fixed::new("reduced".to_owned()))
                .level("canned", Fixed::new("canned".to_owned()))
        })
        .unwrap();
    let handle = layer.handle();
    let fleet = Fleet::builder(store.clone())
        .prefix("shop")
        .health_every(Duration::from_millis(100))
        .secret(secret())
        .build()
        .unwrap();
    policies.follow_fleet_floor(&fleet, "assistant").unwrap();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let app = admin::router(policies, Some(AdminToken::new(TOKEN).unwrap()));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (handle, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_floor_sent_to_one_router_holds_every_instance_until_reverted() {
    let store = LocalStore::new();
    let nodes = [
        floor_instance(&store).await,
        floor_instance(&store).await,
        floor_instance(&store).await,
    ];
    let floors = || {
        nodes
            .iter()
            .map(|(h, _)| h.snapshot().state.floor)
            .collect::<Vec<_>>()
    };
    let addr = nodes[0].1;
    let path = |q: &str| format!("/fleet/policies/assistant/degradation/floor?{q}");

    // Refused, changing nothing: no token, no level, an unknown level, no reason.
    assert_eq!(
        send(addr, "POST", &path("level=canned&reason=x"), None)
            .await
            .0,
        401
    );
    for (query, field) in [
        ("reason=x", "level"),
        ("level=premium&reason=x", "level"),
        ("level=7&reason=x", "level"),
        ("level=canned", "reason"),
        ("level=canned&reason=x&ttl=5h", "ttl"),
    ] {
        let (status, body) = send(addr, "POST", &path(query), Some(TOKEN)).await;
        assert_eq!(status, 422, "{query}: {body}");
        assert!(
            body["error"].as_str().unwrap().contains(field),
            "{query}: {body}"
        );
    }
    assert_eq!(
        send(
            addr,
            "POST",
            "/fleet/policies/nothing/degradation/floor?level=canned&reason=x",
            Some(TOKEN)
        )
        .await
        .0,
        404
    );
    assert_eq!(floors(), vec![None; 3]);

    // By name: the index of "canned" (full, reduced, canned) on every instance.
    let (status, action) = send(
        addr,
        "POST",
        &path("level=canned&reason=model%20overloaded&ttl=10m"),
        Some(TOKEN),
    )
    .await;
    assert_eq!(status, 200, "{action}");
    assert_eq!(action["kind"], serde_json::json!({"floor": 2}));
    until("every floor at canned", || floors() == vec![Some(2); 3]).await;

    // Reverted through another instance's router: every floor back to none.
    let id = action["id"].as_str().unwrap();
    let (status, revert) = send(
        nodes[2].1,
        "POST",
        &format!("/fleet/policies/assistant/revert/{id}?reason=model%20back"),
        Some(TOKEN),
    )
    .await;
    assert_eq!(status, 200, "{revert}");
    until("every floor cleared", || floors() == vec![None; 3]).await;

    let reverted = format!("reverted by {}", revert["id"].as_str().unwrap());
    let listing = audited(nodes[1].1, "assistant", &action, &reverted, 3).await;
    let events = audit_events(&listing, &action);
    assert_eq!(times(&events, "applied"), 3, "{listing}");
    assert_eq!(times(&events, &reverted), 3, "{listing}");
    // The policy's snapshot shows the follower (nothing in force now).
    let (_, snapshot) = send(addr, "GET", "/policies/assistant", None).await;
    assert_eq!(
        snapshot["fleet"]["floor"]["actions_refused"], 0,
        "{snapshot}"
    );
}

/// An instance of a service whose breaker opens for 100 ms at a time, with a
/// direct check of its dependency linked; its own calls go through `calls`.
async fn checked_instance(
    store: &LocalStore,
    monitor: &seawall::degradation::health::HealthMonitor,
) -> (Instance, seawall::circuit_breaker::CircuitBreakerLayer) {
    let policies = Policies::from_toml(
        "[policies.freight]\nbreaker = { open_for = \"100ms\", policy = { kind = \"consecutive_failures\", threshold = 3 } }\n",
    )
    .unwrap();
    let breaker = policies.circuit_breaker("freight", |b| b).unwrap();
    let handle = breaker.handle();
    let fleet = Fleet::builder(store.clone())
        .prefix("shop")
        .stuck_after(Duration::from_secs(1))
        .build()
        .unwrap();
    let coordinated = Arc::new(fleet.coordinate(&handle).unwrap());
    seawall::link_health_check(&coordinated, monitor, "freight");
    (serve(policies, handle, coordinated).await, breaker)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breaker_open_on_one_instance_while_its_dependency_checks_healthy_is_flagged_local() {
    use seawall::core::BoxError;
    use seawall::degradation::health::{CheckConfig, HealthMonitor};
    use tower::{service_fn, Layer, ServiceExt};

    let store = LocalStore::new();
    // The dependency answers its direct check every time.
    let monitor = HealthMonitor::builder()
        .check(
            "freight",
            CheckConfig {
                interval: Duration::from_millis(100),
                ..CheckConfig::default()
            },
            || async { Ok::<_, BoxError>(()) },
        )
        .start()
        .unwrap();
    let mut nodes = Vec::new();
    let mut breakers = Vec::new();
    for _ in 0..3 {
        let (node, breaker) = checked_instance(&store, &monitor).await;
        nodes.push(node);
        breakers.push(breaker);
    }
    // Instance 0's own path fails, without end; the others' calls succeed.
    for (i, breaker) in breakers.into_iter().enumerate() {
        let service = tower::util::BoxCloneSyncService::new(breaker.layer(service_fn(
            move |_: ()| async move {
                if i == 0 {
                    Err::<(), BoxError>(BoxError::from(String::from(
                        "connection reset on this instance's path",
                    )))
                } else {
                    Ok(())
                }
            },
        )));
        tokio::spawn(async move {
            loop {
                let _ = service.clone().oneshot(()).await;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
    }
    until("instance 0 open", || {
        nodes[0].handle.state() != State::Closed
    })
    .await;
    // Reports go out every 5 s: the flag comes with the first one after the
    // breaker has been open a second.
    let mut flag = Value::Null;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while flag.is_null() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "watchdog: never flagged"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (status, view) = send(
            nodes[1].addr,
            "GET",
            "/fleet/policies/freight/instances",
            None,
        )
        .await;
        assert_eq!(status, 200, "{view}");
        flag = view["instances"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| !r["stuck_open"].is_null())
            .map_or(Value::Null, |r| r["stuck_open"].clone());
    }
    assert_eq!(flag["cause"], "local_only", "{flag}");
    assert_eq!(flag["dependency_check"], true, "{flag}");
    assert_eq!(flag["others_closed"], 2, "{flag}");
    // Only the instance whose path fails is ever flagged.
    for node in &nodes[1..] {
        assert_eq!(node.coordinated.snapshot().stuck_open, None);
    }
}
