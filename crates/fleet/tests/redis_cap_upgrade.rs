//! A rolling upgrade of a capped bulkhead on a real `redis-server`: instances of
//! cap layout 1 (the previous release's claim script, run verbatim from
//! `fixtures/cap_claim_v1.lua`) and of layout 2 (`RedisStore`) claim one cap
//! under one prefix, and the slots reserved across both never sum above it.
#![cfg(feature = "redis")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::HashMap;
use std::time::Duration;

use ::redis::aio::MultiplexedConnection;
use ::redis::Script;
use seawall_fleet::{CapKeys, CapStore, Claim, InstanceId, RedisStore};
use support::redis_server::RedisServer;

const V1_CLAIM: &str = include_str!("fixtures/cap_claim_v1.lua");
/// Long enough that nothing expires during a test: expiry is written, not waited for.
const TTL: Duration = Duration::from_secs(600);
const CAP: u32 = 10;

struct Fleet {
    store: RedisStore,
    keys: CapKeys,
    con: MultiplexedConnection,
    v1: Script,
}

impl Fleet {
    async fn new(url: &str) -> Self {
        let client = ::redis::Client::open(url).unwrap();
        Self {
            store: RedisStore::new(url).unwrap(),
            keys: CapKeys::new("upgrade", "freight").unwrap(),
            con: client.get_multiplexed_async_connection().await.unwrap(),
            v1: Script::new(V1_CLAIM),
        }
    }

    /// A claim by a layout-1 instance, as the previous release sent it: the grant.
    async fn v1_claim(&mut self, instance: u128, seq: u64, demand: u32, held: u32) -> u32 {
        let reply: Vec<::redis::Value> = self
            .v1
            .key(self.keys.v1_claims())
            .arg(format!("{instance:032x}"))
            .arg(seq.to_string())
            .arg(demand)
            .arg(held)
            .arg(TTL.as_millis() as u64)
            .arg(CAP)
            .arg(format!("{}:v1-freed", self.keys.v1_claims()))
            .arg(86_400_000u64)
            .arg("")
            .arg(0)
            .invoke_async(&mut self.con)
            .await
            .unwrap();
        match reply.first() {
            Some(::redis::Value::Int(g)) => u32::try_from(*g).unwrap(),
            other => panic!("layout 1's claim answered {other:?}"),
        }
    }

    /// A claim by a layout-2 instance: the grant.
    async fn v2_claim(&self, instance: u128, seq: u64, demand: u32, held: u32) -> u32 {
        let claim = Claim::new(InstanceId(instance), seq, demand, held, TTL, CAP);
        let reply = self.store.claim(&self.keys, claim).await.unwrap();
        assert!(!reply.stale && !reply.abandoned, "{reply:?}");
        reply.allotment
    }

    async fn hash(&mut self, v1: bool) -> HashMap<String, String> {
        let key = if v1 {
            self.keys.v1_claims()
        } else {
            self.keys.claims()
        };
        ::redis::cmd("HGETALL")
            .arg(key)
            .query_async(&mut self.con)
            .await
            .unwrap()
    }

    /// Both records as settled long ago (what their first claim's TTL would do).
    async fn settle(&mut self) {
        for key in [
            self.keys.v1_claims().to_owned(),
            self.keys.claims().to_owned(),
        ] {
            let _: () = ::redis::cmd("HSET")
                .arg(&key)
                .arg("settled")
                .arg(1)
                .query_async(&mut self.con)
                .await
                .unwrap();
        }
    }

    /// Live reservations: (layout 1's own claims, layout 2's claims), each
    /// counted once (a layout-2 claim's copy in the old hash is not counted).
    async fn reserved(&mut self) -> (u64, u64) {
        let parse = |v: &str| -> (u64, u64) {
            let parts: Vec<u64> = v.split(':').map(|p| p.parse().unwrap()).collect();
            (parts[2], parts[3])
        };
        let v1: u64 = self
            .hash(true)
            .await
            .iter()
            .filter(|(f, _)| f.starts_with("i:") && !f.ends_with(":v2"))
            .map(|(_, v)| parse(v).0)
            .sum();
        let v2: u64 = self
            .hash(false)
            .await
            .iter()
            .filter(|(f, _)| f.starts_with("i:"))
            .map(|(_, v)| parse(v).0)
            .sum();
        (v1, v2)
    }

    /// Whether the old hash holds `field`.
    async fn in_v1(&mut self, field: &str) -> bool {
        ::redis::cmd("HEXISTS")
            .arg(self.keys.v1_claims())
            .arg(field)
            .query_async(&mut self.con)
            .await
            .unwrap()
    }
}

const A: u128 = 0xa1;
const B: u128 = 0xb2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v2_claim_is_granted_only_what_live_v1_claims_leave() {
    let Some(server) = RedisServer::start("a_v2_claim_is_granted_only_what_live_v1_claims_leave")
    else {
        return;
    };
    let mut f = Fleet::new(&server.url()).await;
    // Both records exist and have settled.
    assert_eq!(f.v1_claim(A, 1, 0, 0).await, 0);
    assert_eq!(f.v2_claim(B, 1, 0, 0).await, 0);
    f.settle().await;

    // A layout-1 instance takes 6 of the 10.
    assert_eq!(f.v1_claim(A, 2, 6, 0).await, 6);
    // A layout-2 instance wanting all 10 is granted the 4 left.
    assert_eq!(f.v2_claim(B, 2, 10, 0).await, 4);
    assert_eq!(f.reserved().await, (6, 4));
    // ... and its claim is in the old hash, so layout 1 counts it.
    let mirror = format!("i:{B:032x}:v2");
    assert!(f.in_v1(&mirror).await);

    // Layout 1 wanting everything now gets at most what layout 2 left it.
    let a = f.v1_claim(A, 3, 10, 6).await;
    assert!(a <= CAP - 4, "layout 1 granted {a} beside layout 2's 4");
    let (v1, v2) = f.reserved().await;
    assert!(v1 + v2 <= u64::from(CAP), "{v1} + {v2} reserved");

    // Withdrawn, the layout-2 claim leaves the old hash too.
    f.store.withdraw(&f.keys, InstanceId(B)).await.unwrap();
    assert!(!f.in_v1(&mirror).await);
    assert_eq!(f.v1_claim(A, 4, 10, a).await, CAP);

    // An operator's cap set through layout 2 binds layout 1 too.
    f.store.set_cap(&f.keys, 3).await.unwrap();
    let old = f.hash(true).await;
    assert_eq!(old.get("g").map(String::as_str), Some("3"), "{old:?}");
    assert_eq!(f.v1_claim(A, 5, 10, 0).await, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_no_v1_claim_is_live_the_old_hash_goes_and_v2_gets_the_whole_cap() {
    let Some(server) =
        RedisServer::start("once_no_v1_claim_is_live_the_old_hash_goes_and_v2_gets_the_whole_cap")
    else {
        return;
    };
    let mut f = Fleet::new(&server.url()).await;
    assert_eq!(f.v1_claim(A, 1, 0, 0).await, 0);
    assert_eq!(f.v2_claim(B, 1, 0, 0).await, 0);
    f.settle().await;
    assert_eq!(f.v1_claim(A, 2, 7, 0).await, 7);
    assert_eq!(f.v2_claim(B, 2, 10, 0).await, 3);

    // The layout-1 instance stopped: its claim's TTL ran out (written, not waited for).
    let field = format!("i:{A:032x}");
    let _: () = ::redis::cmd("HSET")
        .arg(f.keys.v1_claims())
        .arg(&field)
        .arg("2:7:7:1")
        .query_async(&mut f.con)
        .await
        .unwrap();
    assert_eq!(f.v2_claim(B, 3, 10, 3).await, CAP);
    let old: i64 = ::redis::cmd("EXISTS")
        .arg(f.keys.v1_claims())
        .query_async(&mut f.con)
        .await
        .unwrap();
    assert_eq!(old, 0, "the old hash outlived the last layout-1 claim");
}

/// Three instances of each layout claim in turn with varying demands, each
/// holding at most its last grant: after every claim, the live reservations of
/// both layouts sum to at most the cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_layouts_never_reserve_more_than_the_cap_together() {
    let Some(server) = RedisServer::start("mixed_layouts_never_reserve_more_than_the_cap_together")
    else {
        return;
    };
    let mut f = Fleet::new(&server.url()).await;
    let v1s = [0x11u128, 0x12, 0x13];
    let v2s = [0x21u128, 0x22, 0x23];
    for (i, id) in v1s.iter().enumerate() {
        f.v1_claim(*id, 1, 0, 0).await;
        f.v2_claim(v2s[i], 1, 0, 0).await;
    }
    f.settle().await;
    let mut held: HashMap<u128, u32> = HashMap::new();
    let mut granted = (0u64, 0u64);
    let mut rng: u64 = 0x9e37_79b9_7f4a_7c15;
    for step in 0..300u64 {
        rng = rng
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let which = (rng >> 33) as usize % 6;
        let demand = ((rng >> 40) % 9) as u32;
        let seq = step + 2;
        let (id, v1) = if which < 3 {
            (v1s[which], true)
        } else {
            (v2s[which - 3], false)
        };
        // Calls in flight never exceed the allotment last granted.
        let h = held.get(&id).copied().unwrap_or(0) * ((rng >> 50) % 2) as u32;
        let grant = if v1 {
            f.v1_claim(id, seq, demand, h).await
        } else {
            f.v2_claim(id, seq, demand, h).await
        };
        held.insert(id, grant);
        if v1 {
            granted.0 += u64::from(grant);
        } else {
            granted.1 += u64::from(grant);
        }
        let (r1, r2) = f.reserved().await;
        assert!(
            r1 + r2 <= u64::from(CAP),
            "step {step}: layout 1 reserves {r1}, layout 2 {r2}, cap {CAP}"
        );
    }
    // Both layouts were served, not one starved to keep the bound.
    assert!(granted.0 > 0 && granted.1 > 0, "grants {granted:?}");
}
