//! The division of a fleet-wide cap, as plain code: no clock, no I/O. The
//! in-process store runs it as is; the Redis store's Lua script is the same steps
//! (see [`CapStore`](crate::CapStore) for the contract both keep).

use std::collections::BTreeMap;

use crate::store::{Claim, ClaimReply, OperatorCap};

/// One live claim as the store keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry<T> {
    pub(crate) seq: u64,
    pub(crate) demand: u32,
    pub(crate) reserved: u32,
    pub(crate) expires: T,
}

/// One capped bulkhead's record in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ledger<T> {
    pub(crate) cap: u32,
    /// Until when this record settles (its first claim's instant plus that
    /// claim's TTL): before, the store may not know every lease still in use.
    /// `None` until a first claim.
    pub(crate) settled: Option<T>,
    pub(crate) claims: BTreeMap<u128, Entry<T>>,
    /// The operator's decision kept, if any.
    pub(crate) operator: Option<OperatorCap>,
    /// The operator cleared the cap: the next claim's configured cap is kept.
    pub(crate) cap_cleared: bool,
}

/// Max-min fair shares of `cap` over `demands` (instance, demand): in ascending
/// order of (demand, instance), each gets `min(demand, floor(left / claims left))`.
/// Shares never sum above `cap`, never exceed a demand, and sum to `cap` when the
/// demands do reach it.
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

impl<T: Copy + Ord> Ledger<T> {
    /// A new record of `cap`, with no claim yet.
    pub(crate) fn new(cap: u32) -> Self {
        Self {
            cap,
            settled: None,
            claims: BTreeMap::new(),
            operator: None,
            cap_cleared: false,
        }
    }

    /// Applies `claim` at `now`: it expires at `expires` (`now` plus its TTL).
    /// Also says whether to push [`SlotsFreed`](crate::FleetEvent::SlotsFreed):
    /// fewer slots are reserved than before while another claim wants more.
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
        match decision.cap {
            Some(cap) => {
                self.cap = cap;
                self.cap_cleared = false;
            }
            None => self.cap_cleared = true,
        }
    }

    /// An operator's decision made now (`at_ms`): applied, and ordered after the
    /// one kept even within the same millisecond.
    pub(crate) fn decide(&mut self, cap: Option<u32>, at_ms: u64) {
        let at_ms = match self.operator {
            Some(kept) => at_ms.max(kept.at_ms.saturating_add(1)),
            None => at_ms,
        };
        self.assert_operator(OperatorCap::new(cap, at_ms));
    }

    pub(crate) fn claim(&mut self, claim: &Claim, now: T, expires: T) -> (ClaimReply, bool) {
        if let Some(decision) = claim.operator {
            self.assert_operator(decision);
        }
        if std::mem::take(&mut self.cap_cleared) {
            self.cap = claim.cap;
        }
        let settled = *self.settled.get_or_insert(expires);
        let settling = now < settled;
        let before = self.reserved();
        self.claims.retain(|_, e| e.expires > now);
        let me = claim.instance.0;
        let stale = self.claims.get(&me).is_some_and(|e| e.seq >= claim.seq);
        if !stale {
            let others: u64 = self
                .claims
                .iter()
                .filter(|(id, _)| **id != me)
                .map(|(_, e)| u64::from(e.reserved))
                .sum();
            let mut demands: Vec<(u128, u32)> = self
                .claims
                .iter()
                .filter(|(id, _)| **id != me)
                .map(|(id, e)| (*id, e.demand))
                .collect();
            demands.push((me, claim.demand));
            let fair = fair_shares(self.cap, &demands)
                .into_iter()
                .find(|(id, _)| *id == me)
                .map_or(0, |(_, share)| share);
            let free = u64::from(self.cap).saturating_sub(others);
            let mut grant = u64::from(fair).min(free);
            if settling {
                grant = grant.min(u64::from(claim.held));
            }
            let grant = u32::try_from(grant).unwrap_or(u32::MAX);
            self.claims.insert(
                me,
                Entry {
                    seq: claim.seq,
                    demand: claim.demand,
                    reserved: grant.max(claim.held),
                    expires,
                },
            );
            let wanting = self
                .claims
                .iter()
                .any(|(id, e)| *id != me && e.demand > e.reserved);
            let freed = self.reserved() < before && wanting;
            return (self.reply(grant, false), freed);
        }
        (self.reply(0, true), false)
    }

    fn reserved(&self) -> u64 {
        self.claims.values().map(|e| u64::from(e.reserved)).sum()
    }

    fn reply(&self, allotment: u32, stale: bool) -> ClaimReply {
        let reserved = self.reserved();
        ClaimReply {
            allotment,
            cap: self.cap,
            reserved: u32::try_from(reserved).unwrap_or(u32::MAX),
            demand: self.claims.values().map(|e| u64::from(e.demand)).sum(),
            claimants: u32::try_from(self.claims.len()).unwrap_or(u32::MAX),
            stale,
            operator: self.operator,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::InstanceId;
    use proptest::prelude::*;
    use std::time::Duration;

    /// A record settled at 0 (by a claim that expired at once).
    fn settled(cap: u32) -> Ledger<u64> {
        let mut l = Ledger::new(cap);
        let _ = l.claim(&claim(99, 1, 0, 0), 0, 0);
        l
    }

    fn claim(id: u128, seq: u64, demand: u32, held: u32) -> Claim {
        Claim::new(
            InstanceId(id),
            seq,
            demand,
            held,
            Duration::from_secs(3),
            10,
        )
    }

    #[test]
    fn small_demands_are_met_and_the_rest_is_split_evenly() {
        // cap 10 over demands 1, 2, 100, 100: 1 and 2 met, 7 left for two: 3 and 4.
        let shares = fair_shares(10, &[(1, 100), (2, 1), (3, 100), (4, 2)]);
        assert_eq!(shares, vec![(2, 1), (4, 2), (1, 3), (3, 4)]);
        assert_eq!(fair_shares(10, &[]), vec![]);
        assert_eq!(fair_shares(3, &[(1, 0), (2, 0)]), vec![(1, 0), (2, 0)]);
    }

    #[test]
    fn a_share_lowered_by_the_division_is_kept_reserved_until_the_holder_drains() {
        let mut l = settled(10);
        // A alone: all 10.
        assert_eq!(l.claim(&claim(1, 1, 10, 0), 0, 100).0.allotment, 10);
        // B arrives: its fair share is 5, but A still has 10 reserved.
        let b = l.claim(&claim(2, 1, 10, 0), 1, 101).0;
        assert_eq!((b.allotment, b.reserved), (0, 10));
        // A renews still holding 10: granted 5, but 10 stays reserved.
        let a = l.claim(&claim(1, 2, 10, 10), 2, 102).0;
        assert_eq!((a.allotment, a.reserved), (5, 10));
        // A renews holding 5 (its calls above 5 ended): B now gets its 5.
        assert_eq!(l.claim(&claim(1, 3, 10, 5), 3, 103).0.reserved, 5);
        let b = l.claim(&claim(2, 2, 10, 0), 4, 104).0;
        assert_eq!((b.allotment, b.reserved, b.claimants), (5, 10, 2));
    }

    #[test]
    fn freed_slots_are_told_only_while_another_claim_wants_more() {
        let mut l = settled(10);
        let _ = l.claim(&claim(1, 1, 10, 0), 0, 100);
        // B wants 10 and gets nothing: A holds all of it. Nothing freed yet.
        let (b, freed) = l.claim(&claim(2, 1, 10, 0), 1, 101);
        assert_eq!((b.allotment, freed), (0, false));
        // A's demand is gone and so are its calls: 10 freed while B wants them.
        let (a, freed) = l.claim(&claim(1, 2, 0, 0), 2, 102);
        assert_eq!((a.allotment, a.reserved, freed), (0, 0, true));
        let (b, freed) = l.claim(&claim(2, 2, 10, 0), 3, 103);
        assert_eq!((b.allotment, freed), (10, false));
        // B gives back half with nobody short of demand: nothing to tell.
        let (_, freed) = l.claim(&claim(2, 3, 5, 5), 4, 104);
        assert!(!freed);
        // A wants 8 again and gets the 5 free; B lowering to 2 frees 3 for A.
        let _ = l.claim(&claim(1, 3, 8, 0), 5, 105);
        let (_, freed) = l.claim(&claim(2, 4, 2, 2), 6, 106);
        assert!(freed);
        // D gets the 3 left; C finds A's and B's claims expired: freed while D wants more.
        let (d, _) = l.claim(&claim(4, 1, 10, 0), 7, 1000);
        assert_eq!(d.allotment, 3);
        let (c, freed) = l.claim(&claim(3, 1, 10, 0), 106, 206);
        assert_eq!((c.allotment, freed), (5, true));
    }

    #[test]
    fn expired_claims_are_reclaimed_and_late_copies_change_nothing() {
        let mut l = settled(10);
        let _ = l.claim(&claim(1, 1, 10, 0), 0, 100);
        assert_eq!(l.claim(&claim(2, 1, 10, 0), 1, 101).0.allotment, 0);
        // At 100 A's claim is gone: B gets everything.
        let b = l.claim(&claim(2, 2, 10, 0), 100, 200).0;
        assert_eq!((b.allotment, b.claimants), (10, 1));
        // A late copy of B's first claim: stale, B keeps its reservation.
        let late = l.claim(&claim(2, 1, 0, 0), 101, 201).0;
        assert!(late.stale);
        assert_eq!((late.allotment, late.reserved), (0, 10));
    }

    #[test]
    fn a_settling_record_grants_no_more_than_is_held() {
        let mut l = Ledger::new(10);
        // Begun at 0 by a claim living until 100: settling until then.
        assert_eq!(l.claim(&claim(1, 1, 10, 0), 0, 100).0.allotment, 0);
        assert_eq!(l.claim(&claim(2, 1, 10, 4), 0, 100).0.allotment, 4);
        assert_eq!(l.claim(&claim(2, 2, 10, 9), 1, 101).0.allotment, 5);
        assert_eq!(l.claim(&claim(1, 2, 10, 0), 99, 199).0.allotment, 0);
        // Settled: shares by fairness and what is free.
        assert_eq!(l.claim(&claim(1, 3, 10, 0), 100, 200).0.allotment, 1);
    }

    proptest! {
        #[test]
        fn shares_are_max_min_fair(cap in 0u32..200, demands in proptest::collection::vec(0u32..100, 0..12)) {
            let input: Vec<(u128, u32)> = demands.iter().enumerate().map(|(i, d)| (i as u128, *d)).collect();
            let shares = fair_shares(cap, &input);
            let total: u64 = shares.iter().map(|s| u64::from(s.1)).sum();
            let wanted: u64 = demands.iter().map(|d| u64::from(*d)).sum();
            prop_assert!(total <= u64::from(cap));
            prop_assert_eq!(total, wanted.min(u64::from(cap)));
            let share = |id: u128| shares.iter().find(|s| s.0 == id).map(|s| s.1).unwrap_or(0);
            for &(id, d) in &input {
                prop_assert!(share(id) <= d);
                // Anyone short of its demand is within one of everyone else's share.
                if share(id) < d {
                    for &(other, _) in &input {
                        prop_assert!(share(other) <= share(id) + 1);
                    }
                }
            }
        }

        #[test]
        fn reservations_never_sum_above_the_cap(
            steps in proptest::collection::vec((0u128..5, 0u32..20, 0u32..20, 0u64..3), 1..200),
        ) {
            // Instances that honour their grants: held = max(last grant, active), with
            // active never above what they were granted or held before.
            let cap = 16;
            let mut l = settled(cap);
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
                let c = Claim::new(InstanceId(who), seq[i], demand, held, Duration::from_secs(1), cap);
                let r = l.claim(&c, now, now + 1_000_000).0;
                prop_assert!(r.reserved <= cap, "reserved {} over {}", r.reserved, cap);
                grant[i] = r.allotment;
                active[i] = active[i].max(grant[i].min(demand));
            }
        }
    }
}
