//! The fleet as the admin router shows it, over a real axum server on loopback:
//! the coordinations and caps registered with the policies, live, next to the
//! `[fleet]` settings.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use seawall::admin;
use seawall::config::Policies;
use seawall::fleet::{Fleet, LocalStore};
use serde_json::Value;
use tower::ServiceExt;

const DOC: &str = r#"
[policies.freight]
breaker = { open_for = "10s" }
bulkhead = { max_concurrent = 8 }

[policies.search]
bulkhead = { max_concurrent = 4 }

[fleet]
store = "local"
prefix = "shop-v2"

[fleet.caps.freight]
cap = 8
renew_every = "50ms"
ttl = "2s"
"#;

struct Admin {
    addr: SocketAddr,
    http: hyper_util::client::legacy::Client<HttpConnector, Empty<Bytes>>,
}

impl Admin {
    async fn serve(policies: Policies) -> Self {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let app = admin::router(policies, None);
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            addr,
            http: hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    async fn get(&self, path: &str) -> (http::StatusCode, Value) {
        let uri = format!("http://{}{path}", self.addr).parse().unwrap();
        let res = self.http.get(uri).await.unwrap();
        let status = res.status();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        (status, serde_json::from_slice(&body).unwrap())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_fleet_shows_each_registered_coordination_and_cap_live() {
    let policies = Policies::from_toml(DOC).unwrap();
    let breaker = policies.circuit_breaker("freight", |b| b).unwrap();
    let bulkhead = policies.bulkhead("freight").unwrap();
    let section = policies.fleet().unwrap().clone();
    let fleet = Fleet::builder(LocalStore::new())
        .config(section.config())
        .build()
        .unwrap();
    let coordinated = fleet.coordinate(&breaker.handle()).unwrap();
    let capped = fleet
        .cap(
            &bulkhead.handle(),
            section.caps["freight"].config().unwrap(),
        )
        .unwrap();
    let instance = capped.instance().to_string();
    let admin = Admin::serve(policies.clone()).await;

    // Settings alone until the application registers its parts.
    let (status, before) = admin.get("/fleet").await;
    assert_eq!(status, http::StatusCode::OK);
    assert_eq!(before["prefix"], "shop-v2");
    assert_eq!(before["caps"]["freight"]["cap"], 8);
    assert_eq!(before["caps"]["freight"]["mode"], "divided");
    assert_eq!(before["policies"], serde_json::json!({}));

    policies.register_coordination(coordinated).unwrap();
    policies.register_cap(capped).unwrap();

    // Calls refused as full make the demand; the store hands out its first
    // allotment a TTL after the first claim, and the admin route follows it there,
    // whatever the machine's load (each round is one call and one loopback GET).
    let calls = tower::ServiceBuilder::new()
        .layer(bulkhead.clone())
        .service(tower::service_fn(|()| async { Ok::<_, Infallible>(()) }));
    let give_up = tokio::time::Instant::now() + Duration::from_secs(60);
    let freight = loop {
        let _refused_or_admitted = calls.clone().oneshot(()).await;
        let (_, now) = admin.get("/fleet").await;
        let freight = now["policies"]["freight"].clone();
        if freight["cap"]["allotment"].as_u64().unwrap() > 0 && freight["connected"] == true {
            break freight;
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "no allotment after 60 s: {now:#}"
        );
    };
    let cap = &freight["cap"];
    assert_eq!(cap["instance"], instance.as_str());
    assert_eq!(cap["mode"], "divided");
    assert_eq!(cap["floor"], 1);
    assert!(cap.get("local_share").is_none(), "{cap:#}");
    assert_eq!(cap["cap"], 8);
    assert_eq!(cap["store_cap"], 8);
    assert_eq!(cap["claimants"], 1);
    let allotment = cap["allotment"].as_u64().unwrap();
    let reserved = cap["fleet_reserved"].as_u64().unwrap();
    assert!(allotment <= reserved && reserved <= 8, "{cap:#}");
    assert!(cap["demand"].as_u64().unwrap() >= 1, "{cap:#}");
    assert!(cap["renewals"].as_u64().unwrap() >= 1, "{cap:#}");
    assert_eq!(cap["store_errors"], 0);
    assert!(cap["lease_remaining"].is_string(), "{cap:#}");
    // The breaker is closed and alone: no lease taken, no verdict to apply.
    let coordination = &freight["coordination"];
    assert_eq!(coordination["connected"], true);
    assert_eq!(coordination["lease"], "none");
    assert_eq!(coordination["leases_taken"], 0);
    assert_eq!(coordination["verdicts_applied"], 0);
    assert_eq!(coordination["store_errors"], 0);

    // The policy's entry in `GET /policies` carries the same parts; a policy that
    // registered nothing has no `fleet` entry.
    let (_, all) = admin.get("/policies").await;
    let entry = &all["policies"]["freight"]["fleet"];
    assert_eq!(entry["cap"]["instance"], instance.as_str());
    assert_eq!(entry["cap"]["store_cap"], 8);
    assert_eq!(entry["coordination"]["lease"], "none");
    assert!(all["policies"]["search"].get("fleet").is_none());
    let (_, one) = admin.get("/policies/freight").await;
    assert_eq!(one["fleet"]["cap"]["cap"], 8);
}

#[tokio::test]
async fn a_part_registers_only_under_the_policy_it_was_built_from() {
    let policies = Policies::from_toml(DOC).unwrap();
    let bulkhead = policies.bulkhead("search").unwrap();
    let fleet = Fleet::builder(LocalStore::new()).build().unwrap();
    let capped = fleet
        .cap(&bulkhead.handle(), seawall::fleet::CapConfig::new(4))
        .unwrap();
    let elsewhere = Policies::from_toml("[policies.freight]\nbulkhead = {}\n[fleet]\n").unwrap();
    let e = elsewhere.register_cap(capped).unwrap_err();
    assert_eq!(e.field(), "policies.search");
    assert!(elsewhere.fleet_status().unwrap().policies.is_empty());

    // No `[fleet]` table and nothing registered: no fleet to show.
    let alone = Policies::from_toml("[policies.a]\nbulkhead = {}\n").unwrap();
    assert!(alone.fleet_status().is_none());
    let admin = Admin::serve(alone).await;
    let (status, _) = admin.get("/fleet").await;
    assert_eq!(status, http::StatusCode::NOT_FOUND);
}
