//! The division of a fleet-wide cap, as plain code: no clock, no I/O. The
//! in-process store runs it as is; the Redis store's Lua script is the same steps
//! on the same layout (see [`CapStore`](crate::CapStore) for the contract both
//! keep, and the differential test that holds them to identical replies).
//!
//! # Cost flat in the fleet size
//!
//! A claim reads and writes its own entry, a handful of aggregates kept up to
//! date incrementally (the reservations summed, the demands summed, the live
//! claims counted, the claims short of their demand counted) and the expiry
//! index (ordered by expiry, then instance): `O(log N)` in a sorted set, never a
//! scan of every claim. Dead claims leave the index at most [`TRIM`] per claim
//! (the claimant's own expired entry first), so a claim's work is bounded
//! whatever the fleet size; until trimmed, a dead claim's reservation still
//! counts, which errs on the side of the cap (fewer grants, never more).
//!
//! # The fairness rule, and how far it is from max-min
//!
//! Exact max-min fairness needs the whole distribution of demands (a sort per
//! claim: what made the store's cost grow as N²). The rule kept needs only the
//! aggregates. With `G` the cap, `N` the claims kept (this one included) and
//! `D'` the other claims' demands summed, a claim is *entitled* to
//!
//! `e = min(demand, max(⌊G/N⌋, G − D'))`,
//!
//! which is never above its max-min share and never below `min(demand, ⌊G/N⌋)`,
//! the guarantee max-min makes to every claimant. The slots no entitlement
//! covers, `G − Σe` (the remainder of `G/N`, and what demands below `⌊G/N⌋`
//! leave), go to the `B` claims short of their demand, `⌈(G − Σe)/B⌉` each on
//! top of its entitlement, as long as they are free. So the cap is used whole
//! once the demands reach it (within some renewals of the demands settling:
//! each entitlement is as of its claim's last renewal), every claim gets at
//! least `min(demand, ⌊G/N⌋)`, and each claim's grant is within `G − Σe` of
//! its max-min share (both lie between its entitlement and its entitlement
//! plus `G − Σe`): the distance from max-min is bounded by what the small
//! demands and the remainder leave on the table. The property test
//! `the_rule_uses_the_cap_whole_and_guarantees_the_even_share` holds the rule
//! to it over random demands.

use std::collections::{BTreeMap, BTreeSet};

use crate::store::{CapSignature, Claim, ClaimReply, OperatorCap};

/// The most dead claims one claim trims from the index (besides its own).
pub(crate) const TRIM: usize = 16;

/// The claims of a freed slot's push reach at most this many claimants short of
/// their demand (the early-claim herd bounded): the furthest short first, so a
/// claimant that a lost push or a lost race left short is the next one told.
pub(crate) const WAKE: usize = 4;

/// One claim as the store keeps it (times in ms of the store's clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) seq: u64,
    pub(crate) demand: u32,
    pub(crate) reserved: u32,
    pub(crate) expires: u64,
    /// Its entitlement when it was applied: `min(demand, max(⌊G/N⌋, G − D'))`.
    pub(crate) entitled: u32,
    /// The slack it took on top of its entitlement.
    pub(crate) extra: u32,
}

impl Entry {
    fn short(&self) -> bool {
        self.demand > self.reserved
    }

    /// How far short of its demand it is: its key in the index of the short.
    fn shortfall(&self) -> u32 {
        self.demand.saturating_sub(self.reserved)
    }
}

/// One capped bulkhead's record in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ledger {
    pub(crate) cap: Option<u32>,
    /// Until when this record settles (its first claim's instant plus that
    /// claim's TTL): before, the store may not know every lease still in use.
    /// `None` until a first claim.
    pub(crate) settled: Option<u64>,
    pub(crate) claims: BTreeMap<u128, Entry>,
    /// The expiry index: (expiry, instance) of every claim kept.
    pub(crate) expiry: BTreeSet<(u64, u128)>,
    /// Σ reserved over the claims kept.
    pub(crate) reserved: u64,
    /// Σ demand over the claims kept.
    pub(crate) demand: u64,
    /// Σ entitlement over the claims kept.
    pub(crate) entitled: u64,
    /// Σ extra over the claims kept.
    pub(crate) extra: u64,
    /// The claims kept whose demand is above their reservation, by (shortfall,
    /// instance): who a freed slot wakes, the furthest short first.
    pub(crate) short: BTreeSet<(u32, u128)>,
    /// The operator's decision kept, if any.
    pub(crate) operator: Option<OperatorCap>,
}

/// Max-min fair shares of `cap` over `demands` (instance, demand): in ascending
/// order of (demand, instance), each gets `min(demand, floor(left / claims left))`.
/// The reference the rule is measured against (tests only: it sorts).
#[cfg(test)]
pub(crate) fn fair_shares(cap: u32, demands: &[(u128, u32)]) -> Vec<(u128, u32)> {
    let mut order: Vec<(u128, u32)> = demands.to_vec();
    order.sort_by_key(|&(id, demand)| (demand, id));
    let mut left = u64::from(cap);
    let n = order.len() as u64;
    order
        .into_iter()
        .enumerate()
        .map(|(i, (id, demand))| {
            let share = (left / (n - i as u64)).min(u64::from(demand));
            left -= share;
            (id, u32::try_from(share).unwrap_or(u32::MAX))
        })
        .collect()
}

/// The rule: `min(demand, max(⌊cap/n⌋, cap − others' demands))`, `n ≥ 1`.
pub(crate) fn share(cap: u32, n: u64, demand: u32, others_demand: u64) -> u32 {
    let cap = u64::from(cap);
    let even = cap / n.max(1);
    let rest = cap.saturating_sub(others_demand);
    u32::try_from(even.max(rest).min(u64::from(demand))).unwrap_or(u32::MAX)
}

/// The part of the slots no entitlement covers (`cap − entitled`: the
/// remainder of `G/N`, and what small demands leave) that one of `short`
/// claims short of their demand may take on top of its entitlement: an equal
/// part, rounded up, at most what the other claims' extras left and what it
/// still `wants`. The extras never sum above what the entitlements leave, so
/// every entitlement stays coverable; the cap is used whole when the demands
/// reach it, within a few renewals.
pub(crate) fn slack(cap: u32, wants: u32, entitled: u64, others_extra: u64, short: u64) -> u32 {
    let slack = u64::from(cap).saturating_sub(entitled);
    let left = slack.saturating_sub(others_extra);
    let part = slack.div_ceil(short.max(1)).min(left);
    u32::try_from(part.min(u64::from(wants))).unwrap_or(u32::MAX)
}

/// What a claim did besides its reply.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Effects {
    /// The claimants to tell that slots were freed (or left free) while they
    /// want more, on their own channels: at most [`WAKE`], none when nothing
    /// was freed.
    pub(crate) wake: Vec<u128>,
}

impl Ledger {
    /// A record with no cap and no claim yet.
    pub(crate) fn new() -> Self {
        Self {
            cap: None,
            settled: None,
            claims: BTreeMap::new(),
            expiry: BTreeSet::new(),
            reserved: 0,
            demand: 0,
            entitled: 0,
            extra: 0,
            short: BTreeSet::new(),
            operator: None,
        }
    }

    /// Applies `decision` if it is later than the one kept (or none is): an
    /// operator's cap the store lost comes back with the next claim.
    pub(crate) fn assert_operator(&mut self, decision: OperatorCap) {
        if self
            .operator
            .is_some_and(|kept| kept.at_ms >= decision.at_ms)
        {
            return;
        }
        self.operator = Some(decision);
        self.cap = decision.cap;
    }

    /// An operator's decision made now (`at_ms`): applied, and ordered after the
    /// one kept even within the same millisecond.
    pub(crate) fn decide(&mut self, cap: Option<u32>, at_ms: u64, signature: Option<CapSignature>) {
        let at_ms = match self.operator {
            Some(kept) => at_ms.max(kept.at_ms.saturating_add(1)),
            None => at_ms,
        };
        self.assert_operator(OperatorCap::new(cap, at_ms).with_signature(signature));
    }

    /// Forgets `id`'s entry, and its part of every aggregate.
    fn remove(&mut self, id: u128) -> Option<Entry> {
        let e = self.claims.remove(&id)?;
        self.expiry.remove(&(e.expires, id));
        self.reserved -= u64::from(e.reserved);
        self.demand -= u64::from(e.demand);
        self.entitled -= u64::from(e.entitled);
        self.extra -= u64::from(e.extra);
        self.short.remove(&(e.shortfall(), id));
        Some(e)
    }

    fn insert(&mut self, id: u128, e: Entry) {
        self.remove(id);
        self.expiry.insert((e.expires, id));
        self.reserved += u64::from(e.reserved);
        self.demand += u64::from(e.demand);
        self.entitled += u64::from(e.entitled);
        self.extra += u64::from(e.extra);
        if e.short() {
            self.short.insert((e.shortfall(), id));
        }
        self.claims.insert(id, e);
    }

    /// Drops `me`'s own entry if dead, then at most [`TRIM`] of the dead.
    fn trim(&mut self, me: u128, now: u64) {
        if self.claims.get(&me).is_some_and(|e| e.expires <= now) {
            self.remove(me);
        }
        let dead: Vec<u128> = self
            .expiry
            .iter()
            .take_while(|(expires, _)| *expires <= now)
            .take(TRIM)
            .map(|(_, id)| *id)
            .collect();
        for id in dead {
            self.remove(id);
        }
    }

    /// Up to [`WAKE`] claims short of their demand, `me` excluded: the
    /// furthest short first, ties by the higher instance (the order of a
    /// sorted set read from its top).
    fn wake(&self, me: u128) -> Vec<u128> {
        self.short
            .iter()
            .rev()
            .map(|(_, id)| *id)
            .filter(|id| *id != me)
            .take(WAKE)
            .collect()
    }

    /// Applies `claim` at `now` (ms of the store's clock): the steps of
    /// [`CapStore`](crate::CapStore)'s contract, in `O(log N)`.
    pub(crate) fn claim(&mut self, claim: &Claim, now: u64) -> (ClaimReply, Effects) {
        if claim.deadline_ms.is_some_and(|deadline| now > deadline) {
            // Its sender gave up on it: nothing changes.
            let cap = self.cap.unwrap_or(claim.cap);
            return (
                self.reply(0, cap, Verdict::Abandoned, now),
                Effects::default(),
            );
        }
        if let Some(decision) = claim.operator {
            self.assert_operator(decision);
        }
        let cap = *self.cap.get_or_insert(claim.cap);
        let ttl = ttl_ms(claim);
        let settled = *self.settled.get_or_insert(now + ttl);
        let before = self.reserved;
        let me = claim.instance.0;
        self.trim(me, now);
        if let Some(mine) = self.claims.get(&me) {
            if mine.seq >= claim.seq {
                // A late copy of an older claim: nothing changes.
                return (self.reply(0, cap, Verdict::Stale, now), Effects::default());
            }
        }
        let mine = self.claims.get(&me).copied();
        let others_reserved = self.reserved - mine.map_or(0, |e| u64::from(e.reserved));
        let others_demand = self.demand - mine.map_or(0, |e| u64::from(e.demand));
        let others_entitled = self.entitled - mine.map_or(0, |e| u64::from(e.entitled));
        let others_extra = self.extra - mine.map_or(0, |e| u64::from(e.extra));
        let n = self.claims.len() as u64 + u64::from(mine.is_none());
        let entitled = share(cap, n, claim.demand, others_demand);
        let short_others = self.short.len() as u64 - u64::from(mine.is_some_and(|e| e.short()));
        let extra = slack(
            cap,
            claim.demand - entitled,
            others_entitled + u64::from(entitled),
            others_extra,
            short_others + 1,
        );
        let fair = entitled.saturating_add(extra);
        let free = u64::from(cap).saturating_sub(others_reserved);
        let mut grant = u64::from(fair).min(free);
        if now < settled {
            grant = grant.min(u64::from(claim.held));
        }
        let grant = u32::try_from(grant).unwrap_or(u32::MAX);
        self.insert(
            me,
            Entry {
                seq: claim.seq,
                demand: claim.demand,
                reserved: grant.max(claim.held),
                expires: now + ttl,
                entitled,
                // What it took: an extra the free slots did not cover leaves
                // the slack to the next short claim instead of blocking it.
                extra: extra.min(grant.saturating_sub(entitled)),
            },
        );
        let wanting = self.short.iter().any(|(_, id)| *id != me);
        // Slots freed by this claim, or still free after it (it took what its
        // share allowed) once the record settled (before, a claim gets no more
        // than it holds): the next short claims hear of them now, not at their
        // renewals, four at a time.
        let free_after = now >= settled && self.reserved < u64::from(cap);
        let freed = wanting && (self.reserved < before || free_after);
        let effects = Effects {
            wake: if freed { self.wake(me) } else { Vec::new() },
        };
        (self.reply(grant, cap, Verdict::Applied, now), effects)
    }

    /// Deletes `instance`'s claim; what to push if there was one.
    pub(crate) fn withdraw(&mut self, instance: u128) -> Option<Effects> {
        self.remove(instance)?;
        Some(Effects {
            wake: self.wake(instance),
        })
    }

    fn reply(&self, allotment: u32, cap: u32, verdict: Verdict, now: u64) -> ClaimReply {
        ClaimReply {
            allotment,
            cap,
            reserved: u32::try_from(self.reserved).unwrap_or(u32::MAX),
            demand: self.demand,
            claimants: u32::try_from(self.claims.len()).unwrap_or(u32::MAX),
            stale: verdict != Verdict::Applied,
            abandoned: verdict == Verdict::Abandoned,
            operator: self.operator,
            store_ms: now,
        }
    }
}

/// A claim's TTL in whole ms, at least 1 (as the Redis store sends it).
pub(crate) fn ttl_ms(claim: &Claim) -> u64 {
    u64::try_from(claim.ttl.as_millis())
        .unwrap_or(u64::MAX / 4)
        .clamp(1, u64::MAX / 4)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Applied,
    Stale,
    Abandoned,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::InstanceId;
    use proptest::prelude::*;
    use std::time::Duration;

    /// A record settled at 0 (by a claim that expired at once).
    fn settled() -> Ledger {
        let mut l = Ledger::new();
        l.settled = Some(0);
        l
    }

    /// A claim living 100 ms, configured with a cap of 10.
    fn claim(id: u128, seq: u64, demand: u32, held: u32) -> Claim {
        lived(id, seq, demand, held, 100)
    }

    fn lived(id: u128, seq: u64, demand: u32, held: u32, ttl_ms: u64) -> Claim {
        Claim::new(
            InstanceId(id),
            seq,
            demand,
            held,
            Duration::from_millis(ttl_ms),
            10,
        )
    }

    /// The aggregates recounted from the entries.
    #[allow(clippy::type_complexity)]
    fn recount(l: &Ledger) -> (u64, u64, u64, BTreeSet<(u32, u128)>, BTreeSet<(u64, u128)>) {
        (
            l.claims.values().map(|e| u64::from(e.reserved)).sum(),
            l.claims.values().map(|e| u64::from(e.demand)).sum(),
            l.claims
                .values()
                .map(|e| u64::from(e.entitled) + u64::from(e.extra) * 1_000_000)
                .sum(),
            l.claims
                .iter()
                .filter(|(_, e)| e.demand > e.reserved)
                .map(|(id, e)| (e.demand - e.reserved, *id))
                .collect(),
            l.claims.iter().map(|(id, e)| (e.expires, *id)).collect(),
        )
    }

    #[test]
    fn the_rule_meets_small_demands_and_splits_the_rest_evenly() {
        // Demands 4 and 10 over 10: 4 and 6 (as max-min).
        assert_eq!(share(10, 2, 4, 10), 4);
        assert_eq!(share(10, 2, 10, 4), 6);
        // 4, 10, 10 over 10: max-min gives 3, 3, 4; the rule 3, 3, 3.
        assert_eq!(share(10, 3, 4, 20), 3);
        assert_eq!(share(10, 3, 10, 14), 3);
        assert_eq!(share(10, 1, 0, 0), 0);
    }

    #[test]
    fn a_share_lowered_by_the_division_is_kept_reserved_until_the_holder_drains() {
        let mut l = settled();
        // A alone: all 10.
        assert_eq!(l.claim(&claim(1, 1, 10, 0), 0).0.allotment, 10);
        // B arrives: its fair share is 5, but A still has 10 reserved.
        let b = l.claim(&claim(2, 1, 10, 0), 1).0;
        assert_eq!((b.allotment, b.reserved), (0, 10));
        // A renews still holding 10: granted 5, but 10 stays reserved.
        let a = l.claim(&claim(1, 2, 10, 10), 2).0;
        assert_eq!((a.allotment, a.reserved), (5, 10));
        // A renews holding 5 (its calls above 5 ended): B now gets its 5.
        assert_eq!(l.claim(&claim(1, 3, 10, 5), 3).0.reserved, 5);
        let b = l.claim(&claim(2, 2, 10, 0), 4).0;
        assert_eq!((b.allotment, b.reserved, b.claimants), (5, 10, 2));
    }

    #[test]
    fn freed_slots_are_told_only_while_another_claim_wants_more() {
        let mut l = settled();
        let _ = l.claim(&claim(1, 1, 10, 0), 0);
        // B wants 10 and gets nothing: A holds all of it. Nothing freed yet.
        let (b, fx) = l.claim(&claim(2, 1, 10, 0), 1);
        assert_eq!((b.allotment, fx.wake.is_empty()), (0, true));
        // A's demand is gone and so are its calls: 10 freed while B wants them.
        let (a, fx) = l.claim(&claim(1, 2, 0, 0), 2);
        assert_eq!((a.allotment, a.reserved, fx.wake.is_empty()), (0, 0, false));
        assert_eq!(fx.wake, vec![2]);
        let (b, fx) = l.claim(&claim(2, 2, 10, 0), 3);
        assert_eq!((b.allotment, fx.wake.is_empty()), (10, true));
        // B gives back half with nobody short of demand: nothing to tell.
        let (_, fx) = l.claim(&claim(2, 3, 5, 5), 4);
        assert!(fx.wake.is_empty());
        // A wants 8 again and gets the 5 free; B lowering to 2 frees 3 for A.
        let _ = l.claim(&claim(1, 3, 8, 0), 5);
        let (_, fx) = l.claim(&claim(2, 4, 2, 2), 6);
        assert!(!fx.wake.is_empty());
        // D gets the 3 left; C finds A's and B's claims expired: freed while D wants more.
        let (d, _) = l.claim(&lived(4, 1, 10, 0, 993), 7);
        assert_eq!(d.allotment, 3);
        // (C's entitlement is 5, and it takes 1 of the slack D's entitlement,
        // 3 as of its claim among three, leaves.)
        let (c, fx) = l.claim(&claim(3, 1, 10, 0), 106);
        assert_eq!((c.allotment, fx.wake), (6, vec![4]));
    }

    #[test]
    fn a_freed_slot_wakes_a_bounded_number_of_claimants() {
        let mut l = settled();
        let _ = l.claim(&claim(0, 1, 10, 0), 0);
        for id in 1..50 {
            let r = l.claim(&claim(id, 1, 10, 0), 1).0;
            assert_eq!(r.allotment, 0);
        }
        assert_eq!(l.short.len(), 49);
        let (_, fx) = l.claim(&claim(0, 2, 0, 0), 2);
        assert!(!fx.wake.is_empty());
        // 49 short by 10 each: four of them, the highest instances on a tie.
        assert_eq!(fx.wake, vec![49, 48, 47, 46]);
        // 49 now wants 5 (and still holds none): the least short, told last.
        let r = l.claim(&claim(49, 2, 5, 0), 3).0;
        assert_eq!((r.allotment, r.demand), (0, 48 * 10 + 5));
        let fx = l.withdraw(47).unwrap();
        assert_eq!(fx.wake, vec![48, 46, 45, 44]);
        assert!(l.withdraw(47).is_none());
    }

    #[test]
    fn expired_claims_are_reclaimed_and_late_copies_change_nothing() {
        let mut l = settled();
        let _ = l.claim(&claim(1, 1, 10, 0), 0);
        assert_eq!(l.claim(&claim(2, 1, 10, 0), 1).0.allotment, 0);
        // At 100 A's claim is gone: B gets everything.
        let b = l.claim(&claim(2, 2, 10, 0), 100).0;
        assert_eq!((b.allotment, b.claimants), (10, 1));
        // A late copy of B's first claim: stale, B keeps its reservation.
        let late = l.claim(&claim(2, 1, 0, 0), 101).0;
        assert!(late.stale);
        assert_eq!((late.allotment, late.reserved), (0, 10));
    }

    #[test]
    fn a_claim_past_its_senders_deadline_changes_nothing() {
        let mut l = settled();
        let _ = l.claim(&claim(1, 1, 10, 0), 0);
        let before = l.clone();
        let late = claim(2, 1, 10, 0).with_deadline_ms(Some(49));
        let r = l.claim(&late, 50).0;
        assert!(r.abandoned && r.stale);
        assert_eq!((r.allotment, r.reserved, r.claimants), (0, 10, 1));
        assert_eq!(l, before);
        // At its deadline it is still wanted.
        let r = l.claim(&late, 49).0;
        assert!(!r.abandoned);
        assert_eq!(r.claimants, 2);
    }

    #[test]
    fn dead_claims_leave_at_most_trim_per_claim() {
        let mut l = settled();
        for id in 0..(TRIM as u128 * 2 + 1) {
            let _ = l.claim(&claim(id, 1, 0, 0), 0);
        }
        let r = l.claim(&claim(1000, 1, 0, 0), 100).0;
        assert_eq!(r.claimants, TRIM as u32 + 2);
        let r = l.claim(&claim(1000, 2, 0, 0), 100).0;
        assert_eq!(r.claimants, 2);
        let r = l.claim(&claim(1000, 3, 0, 0), 100).0;
        assert_eq!(r.claimants, 1);
    }

    #[test]
    fn a_settling_record_grants_no_more_than_is_held() {
        let mut l = Ledger::new();
        // Begun at 0 by a claim living until 100: settling until then.
        assert_eq!(l.claim(&claim(1, 1, 10, 0), 0).0.allotment, 0);
        assert_eq!(l.claim(&claim(2, 1, 10, 4), 0).0.allotment, 4);
        assert_eq!(l.claim(&claim(2, 2, 10, 9), 1).0.allotment, 5);
        assert_eq!(l.claim(&claim(1, 2, 10, 0), 99).0.allotment, 0);
        // Settled: shares by fairness and what is free.
        assert_eq!(l.claim(&claim(1, 3, 10, 0), 100).0.allotment, 1);
    }

    proptest! {
        #[test]
        fn the_rule_uses_the_cap_whole_and_guarantees_the_even_share(
            cap in 1u32..200,
            demands in proptest::collection::vec(0u32..100, 1..12),
        ) {
            // Instances that hold what they were granted, renewing in turn with
            // demands that hold still.
            let mut l = settled();
            let n = demands.len() as u64;
            let mut grant = vec![0u32; demands.len()];
            for round in 1..=20u64 {
                for (i, d) in demands.iter().enumerate() {
                    let c = Claim::new(InstanceId(i as u128), round, *d, grant[i], Duration::from_secs(1000), cap);
                    grant[i] = l.claim(&c, round).0.allotment;
                }
            }
            let total: u64 = demands.iter().map(|d| u64::from(*d)).sum();
            let granted: u64 = grant.iter().map(|g| u64::from(*g)).sum();
            prop_assert_eq!(granted, total.min(u64::from(cap)), "grants {:?}", grant);
            let even = cap / n as u32;
            let entitled: u64 = l.entitled;
            prop_assert!(l.entitled + l.extra <= u64::from(cap));
            let left = u64::from(cap) - entitled;
            let input: Vec<(u128, u32)> = demands.iter().enumerate().map(|(i, d)| (i as u128, *d)).collect();
            for (id, f) in fair_shares(cap, &input) {
                let (g, d) = (grant[id as usize], demands[id as usize]);
                prop_assert!(g >= d.min(even), "{} of {} under the even share {}", g, d, even);
                prop_assert!(g <= d);
                prop_assert!(u64::from(g.abs_diff(f)) <= left, "{} is {} from max-min {}", id, g, f);
            }
        }

        #[test]
        fn the_aggregates_equal_a_full_recount_after_random_operations(
            steps in proptest::collection::vec((0u8..5, 0u128..8, 0u32..20, 0u32..20, 0u64..40), 1..200),
        ) {
            let mut l = Ledger::new();
            let mut now = 0u64;
            let mut seq = [0u64; 8];
            for (op, who, demand, held, tick) in steps {
                now += tick;
                let i = who as usize;
                match op {
                    0 => { let _ = l.withdraw(who); }
                    1 => l = Ledger::new(),
                    2 => l.decide(
                        if demand % 3 == 0 { None } else { Some(demand + 1) },
                        now,
                        None,
                    ),
                    _ => {
                        seq[i] = if op == 3 { seq[i] + 1 } else { seq[i].saturating_sub(1) };
                        let c = lived(who, seq[i], demand, held, 1 + u64::from(held) * 5);
                        let _ = l.claim(&c, now);
                    }
                }
                let (reserved, demand, entitled, short, expiry) = recount(&l);
                prop_assert_eq!(l.reserved, reserved);
                prop_assert_eq!(l.demand, demand);
                prop_assert_eq!(l.entitled + l.extra * 1_000_000, entitled);
                prop_assert_eq!(&l.short, &short);
                prop_assert_eq!(&l.expiry, &expiry);
            }
        }

        #[test]
        fn reservations_never_sum_above_the_cap(
            steps in proptest::collection::vec((0u128..5, 0u32..20, 0u32..20, 0u64..3), 1..200),
        ) {
            // Instances that honour their grants: held = max(last grant, active), with
            // active never above what they were granted or held before.
            let cap = 16;
            let mut l = settled();
            let mut now = 0u64;
            let mut seq = [0u64; 5];
            let mut grant = [0u32; 5];
            let mut active = [0u32; 5];
            for (who, demand, drain, tick) in steps {
                now += tick;
                let i = who as usize;
                active[i] = active[i].saturating_sub(drain);
                let held = grant[i].max(active[i]);
                seq[i] += 1;
                let c = Claim::new(InstanceId(who), seq[i], demand, held, Duration::from_secs(1000), cap);
                let r = l.claim(&c, now).0;
                prop_assert!(r.reserved <= cap, "reserved {} over {}", r.reserved, cap);
                grant[i] = r.allotment;
                active[i] = active[i].max(grant[i].min(demand));
            }
        }
    }
}
