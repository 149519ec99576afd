//! The cap's rule lives twice, in Rust (`LocalStore`, through the ledger) and in
//! Lua (`RedisStore`): the same random claims, withdrawals and operator caps
//! sent to both get the same replies, on a real `redis-server`.
//!
//! Every claim's TTL outlives the test, so no claim expires between two
//! operations whichever store runs faster; the record therefore stays in its
//! settling TTL (grants are also bounded by what each instance holds), and the
//! division, the free slots, the aggregates, staleness and the operator's cap
//! are compared at every step. The store's clock (`store_ms`, an operator's
//! `at_ms`) is each store's own and is not compared.
#![cfg(feature = "redis")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use seawall_fleet::{CapKeys, CapStore, Claim, ClaimReply, InstanceId, LocalStore, RedisStore};
use support::redis_server::RedisServer;

const TTL: Duration = Duration::from_secs(3600);

#[derive(Debug, Clone)]
enum Op {
    /// A claim by instance `.0`; its seq is the last one plus `.1` (0: a late
    /// copy of the last, answered stale if the claim is still stored).
    Claim(u128, u64, u32, u32, u32),
    Withdraw(u128),
    SetCap(u32),
    ClearCap,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0u128..5, 0u64..3, 0u32..20, 0u32..20, 1u32..30)
            .prop_map(|(i, d, demand, held, cap)| Op::Claim(i, d, demand, held, cap)),
        1 => (0u128..5).prop_map(Op::Withdraw),
        1 => (1u32..30).prop_map(Op::SetCap),
        1 => Just(Op::ClearCap),
    ]
}

/// A reply without the store's own clock.
fn comparable(r: &ClaimReply) -> (u32, u32, u32, u64, u32, bool, bool, Option<Option<u32>>) {
    (
        r.allotment,
        r.cap,
        r.reserved,
        r.demand,
        r.claimants,
        r.stale,
        r.abandoned,
        r.operator.map(|o| o.cap),
    )
}

#[test]
fn local_store_and_redis_answer_the_same_operations_the_same() {
    let Some(server) =
        RedisServer::start("local_store_and_redis_answer_the_same_operations_the_same")
    else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let redis = RedisStore::new(&server.url()).unwrap();
    let case = AtomicU64::new(0);
    let compared = AtomicU64::new(0);
    let mut runner = TestRunner::new(Config {
        cases: 128,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&proptest::collection::vec(op(), 1..60), |ops| {
            // A bulkhead of its own per case: both stores start empty.
            let keys = CapKeys::new(
                "diff",
                &format!("c{}", case.fetch_add(1, Ordering::Relaxed)),
            )
            .unwrap();
            let local = LocalStore::new();
            rt.block_on(async {
                let mut seqs: HashMap<u128, u64> = HashMap::new();
                for (step, op) in ops.iter().enumerate() {
                    match *op {
                        Op::Claim(i, delta, demand, held, cap) => {
                            let seq = seqs.entry(i).or_insert(0);
                            *seq += delta;
                            let claim = Claim::new(InstanceId(i + 1), *seq, demand, held, TTL, cap);
                            let l = local.claim(&keys, claim).await.unwrap();
                            let r = redis.claim(&keys, claim).await.unwrap();
                            prop_assert_eq!(
                                comparable(&l),
                                comparable(&r),
                                "step {}: {:?}: local {:?}, redis {:?}",
                                step,
                                op,
                                l,
                                r
                            );
                            compared.fetch_add(1, Ordering::Relaxed);
                        }
                        Op::Withdraw(i) => {
                            local.withdraw(&keys, InstanceId(i + 1)).await.unwrap();
                            redis.withdraw(&keys, InstanceId(i + 1)).await.unwrap();
                        }
                        Op::SetCap(cap) => {
                            local.set_cap(&keys, cap).await.unwrap();
                            redis.set_cap(&keys, cap).await.unwrap();
                        }
                        Op::ClearCap => {
                            local.clear_cap(&keys).await.unwrap();
                            redis.clear_cap(&keys).await.unwrap();
                        }
                    }
                }
                Ok(())
            })
        })
        .unwrap();
    assert!(
        compared.load(Ordering::Relaxed) > 0,
        "no claim was compared"
    );
}
