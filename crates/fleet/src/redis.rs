//! A [`Store`] on a Redis (or Valkey) server: one Lua script per write, a `GET`
//! per read, RESP3 pushes for verdicts.
//!
//! # Layout
//!
//! Under the breaker's [`Keys`]:
//!
//! - `…:lease` holds `<token>:<epoch>` (the token as 32 hex digits) with the
//!   lease's TTL (`PX`), so the server's clock expires it;
//! - `…:epoch` holds the fleet epoch counter, a decimal integer (`INCR`'s range:
//!   at most `i64::MAX`);
//! - `…:verdict` holds the latest verdict, `<epoch>:S` (succeeded) or `<epoch>:F`
//!   (failed), and the same text is `PUBLISH`ed on `…:verdicts`;
//! - `…:trips` (only with a fleet trip configured) is a sorted set of the
//!   instances that tripped, scored by the server's `TIME` in milliseconds when
//!   their trip was recorded, expiring a window after the last record;
//! - `…:fleet-trip` holds the fleet trip in force, its epoch, with the window as
//!   TTL; `<epoch>:T` is `PUBLISH`ed on `…:verdicts` when it starts. A
//!   successful verdict deletes both: they were about the sickness it ended.
//!
//! Under a capped bulkhead's [`CapKeys`] (layout version 2), one hash holds the
//! cap (`g`), when the record settles (`settled`), the aggregates a claim needs
//! (`r` reserved, `d` demand, `e` entitled, `x` extra, summed) and each claim
//! (`i:<instance>` as `<seq>:<demand>:<reserved>:<expiry ms>:<entitled>:<extra>`);
//! a sorted set indexes the claims by expiry and another the claims short of
//! their demand (scored by how far short), so a claim costs `O(log N)`, never
//! a scan of every claim (at most 16 dead claims leave the index per claim). A
//! claim that frees slots while another wants more publishes `freed:<instance>`
//! on the own channels (`…:freed:<instance>`) of at most 4 short claims, the
//! furthest short first: no channel reaches the whole fleet.
//! A claim carries its sender's deadline by the server's clock, reckoned from
//! the server's `TIME` in an earlier reply: one applied after it changes
//! nothing.
//!
//! **A rolling upgrade from cap layout 1** (the previous release: one hash
//! `…:v1:cap:{name}` of every claim, [`CapKeys::v1_claims`], under the same
//! hash tag, so the same cluster slot). While that hash exists, a layout-2
//! claim reads it and (1) counts the reservations of its live layout-1 claims
//! as reserved before granting, and (2) writes a copy of its own claim there in
//! layout 1's format, `i:<instance>:v2` = `<seq>:<demand>:<reserved>:<expiry
//! ms>`, which layout 1's script reads as one more claim: it counts its
//! reservation, divides among it too, and drops it when it expires (a withdraw
//! deletes it). So every grant of either layout sees every live reservation of
//! both, and **the reservations across the fleet never sum above the cap**,
//! as within one layout. The first layout-2 claim that finds no live layout-1
//! claim deletes the old hash, and claims are `O(log N)` again (until then a
//! claim reads the old hash whole: `O(N)`, during the upgrade only). The edges
//! of the bound: a layout-1 instance that starts after the old hash went
//! creates a new record, which settles for one TTL (no instance granted more
//! than it holds) while every live layout-2 instance renews and copies its
//! claim there (given layout 2's TTL is no longer than layout 1's, as with one
//! configuration); and each layout grants within its own record's cap: a cap
//! set through a layout-2 instance is written to both records, one set through
//! a layout-1 instance only to its own, so the fleet stays within the larger of
//! the two. Shares across layouts are not max-min fair during the upgrade
//! (layout 2 leaves layout 1's reservations free but does not divide among its
//! demands); the cap is what holds.
//!
//! **A rolling upgrade to signed operator's caps.** The cap's hash gains a
//! field, `op_sig`, beside `op` and `op_at`: the signature of the operator's
//! decision ([`CapSignature`]), written by `set_cap` and given back by claims
//! with the decision. The claim script answers one element more (its reader
//! takes both lengths). Instances of the previous release neither read nor
//! write it: one that sets or clears a cap, or gives a decision back to a
//! flushed store, leaves no signature (an old `op_sig` is deleted or left
//! beside another cap, which it does not verify); with the fleet's secret, the
//! upgraded instances refuse such a decision and count it
//! (`CapSnapshot::operator_caps_refused`) while the store still divides by it.
//! Set a cap through an upgraded instance once the upgrade is done.
//!
//! Every key expires: the lease by its own TTL, the others (the counter, the
//! verdict, the trips and the cap's hash) a [key TTL](RedisStoreBuilder::key_ttl)
//! after their last use (default a day), refreshed by every write and by each
//! instance's health check ([`Store::touch`]), so the keys of a prefix nobody
//! runs any more are gone a day after its last instance stopped.
//!
//! **Epochs never go backwards** for an instance that saw them: a take raises
//! the counter to the taker's highest epoch seen, and so does every connected
//! instance's health check, every `health_every`. A counter lost to a flush, an
//! eviction or its expiry is back above every epoch a connected instance saw
//! within one health check; a newcomer's lease taken before then may get a lower
//! epoch, whose verdict those instances ignore (it costs them their own probe at
//! their interval end, never a wrong state).
//!
//! # Eviction
//!
//! Only `maxmemory-policy noeviction` is safe: `allkeys-*` may evict any fleet
//! key (a silent, repeated partial FLUSHALL), `volatile-*` exactly the keys with
//! a TTL, a live lease first, which lets two probes overlap. At the first
//! connection the store reads the policy (`CONFIG GET`, where the server allows
//! it) and, unless it is `noeviction`, warns (`warn` event, target
//! `seawall::fleet`) and says so in every snapshot (`store_warning`).
//!
//! Epochs travel as decimal strings, never as Lua numbers (doubles), so they stay
//! exact. Each breaker's keys share one hash tag, so a script touching several of
//! them stays in one cluster slot.
//!
//! # Connection
//!
//! Building a [`RedisStore`] only parses the URL: nothing is dialled, so a server
//! that is down when the application starts cannot fail its build. The first
//! operation opens a [`ConnectionManager`] (inside
//! the Tokio runtime that runs it); while the server is down, operations fail as
//! [`StoreError::Unavailable`], the coordinator runs the breaker in local mode,
//! and the manager redials in the background on the next operation, so the
//! instance joins as soon as the server answers.
//!
//! # High availability
//!
//! - **Sentinel** ([`RedisStore::sentinel`]): the store asks the sentinels (in
//!   turn, one second each) which server is the primary at the first operation,
//!   and again whenever the connection is lost or a write is refused as
//!   `READONLY`; sentinel and data node credentials are given apart.
//! - **A URL** (a DNS name an operator repoints at the new primary, a cloud
//!   endpoint): a write refused as `READONLY` (the server is a replica now) is
//!   [`StoreError::Unavailable`]`("read-only replica: …")`, warned about, and drops
//!   the connection, so the next operation dials the name again.
//! - **Cluster** ([`RedisStore::cluster`], feature `redis-cluster`): each
//!   breaker's and cap's keys share a hash tag, so each script runs on the node
//!   that owns their slot; pushes are sharded (`SPUBLISH`, `SSUBSCRIBE`: Redis 7
//!   or later), so they reach that node's listeners only. The cluster
//!   connection follows slot moves and failovers and restores subscriptions.
//! - **TLS** (feature `tls-rustls`): a `rediss://` URL, with
//!   [`RedisStoreBuilder::tls_ca`] for a private CA and
//!   [`RedisStoreBuilder::tls_client_cert`] for servers that require client
//!   certificates.
//! - **The guarantee across a failover.** Replication is asynchronous: the new
//!   primary may lack the last writes, a live lease or claim among them. It is
//!   then a store that lost its data, and the bounds of a flush apply: at most
//!   two probes at once for one lease TTL (one probe per interval, except across
//!   a failover), and the cap's record settles again for one TTL (no instance
//!   granted more than it holds). Epochs stay ordered for the instances that saw
//!   them (the health check raises the counter again). No call fails because of
//!   the failover: instances fall back to local mode while the store answers
//!   nothing or `READONLY`, and rejoin by themselves.
//!
//! Verdicts arrive as RESP3 pushes on the same connection. When the connection
//! drops, every [`Subscription`] of this store ends (`None`): the coordinator
//! then resubscribes on the new connection and reconciles with a read, so a
//! verdict published while it was away is not missed for good.
//! Dropping the last [`Subscription`] of a channel (its coordination dropped)
//! sends `UNSUBSCRIBE` for it, so the server's subscription does not outlive its
//! listeners.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use ::redis::{Client, ProtocolVersion, PushInfo, PushKind, RedisError, Script, Value};
use seawall_core::ConfigError;
use tokio::sync::mpsc;

use crate::store::{
    CapKeys, CapSignature, CapStore, Claim, ClaimReply, FleetEpoch, FleetEvent, FleetVerdict,
    InstanceId, Keys, LeaseReply, LeaseRequest, OperatorCap, ProbeResult, Store, StoreError,
    Subscription, Token, TripRecord, TripReply, AUDIT_KEPT, MAX_ACTIONS, STALE_TRIMMED,
};

/// Pushed verdicts a slow subscriber may have pending before newer ones are
/// dropped (healed by the coordinator's reconciling read).
const SUBSCRIPTION_CAPACITY: usize = 64;

/// `a > b` for two decimal strings without leading zeros, exact at any length.
const GREATER: &str = r"
local function greater(a, b)
  if #a ~= #b then return #a > #b end
  return a > b
end
";

/// The fleet epoch counter (KEYS[2] of the scripts that use it) raised to at
/// least `seen`, then incremented, its TTL refreshed to `key_ttl` ms; returns
/// the new epoch as a string.
const NEXT_EPOCH: &str = r"
local function next_epoch(counter_key, seen, key_ttl)
  local counter = redis.call('GET', counter_key) or '0'
  if greater(seen, counter) then
    redis.call('SET', counter_key, seen)
  end
  redis.call('INCR', counter_key)
  redis.call('PEXPIRE', counter_key, key_ttl)
  -- Read back as a string: INCR's reply becomes a Lua number, a double.
  return redis.call('GET', counter_key)
end
";

/// KEYS: lease, epoch. ARGV: token, ttl in ms, seen epoch, key ttl in ms.
/// Returns {1, epoch} taken (now or already ours), {0, epoch, remaining ms} held.
const TAKE: &str = r"
local cur = redis.call('GET', KEYS[1])
if cur then
  local sep = string.find(cur, ':', 1, true)
  if not sep then return redis.error_reply('seawall: malformed lease') end
  local epoch = string.sub(cur, sep + 1)
  if string.sub(cur, 1, sep - 1) == ARGV[1] then return {1, epoch} end
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl < 0 then pttl = 0 end
  return {0, epoch, pttl}
end
local epoch = next_epoch(KEYS[2], ARGV[3], ARGV[4])
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. epoch, 'PX', ARGV[2])
return {1, epoch}
";

/// KEYS: lease. ARGV: token. Returns 1 released, 0 not ours.
const RELEASE: &str = r"
local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 1, #ARGV[1] + 1) == ARGV[1] .. ':' then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
";

/// KEYS: lease, verdict, trips, fleet trip. ARGV: token, result (`S`/`F`), channel,
/// key ttl in ms.
/// Returns the verdict stored, or nil when the token does not hold the lease.
const PUBLISH: &str = r"
local cur = redis.call('GET', KEYS[1])
if not cur or string.sub(cur, 1, #ARGV[1] + 1) ~= ARGV[1] .. ':' then return false end
local epoch = string.sub(cur, #ARGV[1] + 2)
local stored = redis.call('GET', KEYS[2])
if stored then
  local sep = string.find(stored, ':', 1, true)
  if sep and greater(string.sub(stored, 1, sep - 1), epoch) then return stored end
end
local verdict = epoch .. ':' .. ARGV[2]
redis.call('SET', KEYS[2], verdict, 'PX', ARGV[4])
if ARGV[2] == 'S' then redis.call('DEL', KEYS[3], KEYS[4]) end
redis.call('PUBLISH', ARGV[3], verdict)
return verdict
";

/// KEYS: trips, fleet trip, epoch. ARGV: instance, window in ms, instances, seen
/// epoch, channel, key ttl in ms. Returns {instances counted, fleet trip epoch or ''}.
const RECORD_TRIP: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local within = tonumber(ARGV[2])
-- A trip exactly `within` old has expired.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - within)
redis.call('ZADD', KEYS[1], 'NX', now, ARGV[1])
redis.call('PEXPIRE', KEYS[1], within)
local tripped = redis.call('ZCARD', KEYS[1])
local fleet_trip = redis.call('GET', KEYS[2])
if not fleet_trip and tripped >= tonumber(ARGV[3]) then
  fleet_trip = next_epoch(KEYS[3], ARGV[4], ARGV[6])
  redis.call('SET', KEYS[2], fleet_trip, 'PX', ARGV[2])
  redis.call('PUBLISH', ARGV[5], fleet_trip .. ':T')
end
return {tripped, fleet_trip or ''}
";

/// The cap's helpers, KEYS: the cap's hash, its expiry index, its index of
/// claims short of their demand. `remove` forgets one claim and its part of
/// the aggregates (`r`: reserved, `d`: demand, `e`: entitled, `x`: extra);
/// a claim is `i:<instance>` = `<seq>:<demand>:<reserved>:<expiry ms>:<entitled>:<extra>`;
/// the short index is scored by `demand - reserved`; `wake` publishes a freed
/// slot to the own channels of at most 4 short claims, the furthest short
/// first (the `ledger` module's steps).
const CAP_HELPERS: &str = r"
local H, X, S, V1 = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local function num(field) return tonumber(redis.call('HGET', H, field) or '0') end
local function remove(id)
  local v = redis.call('HGET', H, 'i:' .. id)
  redis.call('ZREM', X, id)
  redis.call('ZREM', S, id)
  if not v then return nil end
  local seq, d, r, e, en, x = string.match(v, '^(%d+):(%d+):(%d+):(%d+):(%d+):(%d+)$')
  redis.call('HDEL', H, 'i:' .. id)
  redis.call('HDEL', V1, 'i:' .. id .. ':v2')
  redis.call('HINCRBY', H, 'r', 0 - tonumber(r))
  redis.call('HINCRBY', H, 'd', 0 - tonumber(d))
  redis.call('HINCRBY', H, 'e', 0 - tonumber(en))
  redis.call('HINCRBY', H, 'x', 0 - tonumber(x))
  return {seq, tonumber(d), tonumber(r), tonumber(e), tonumber(en), tonumber(x)}
end
local function wake(me, channel)
  local told = 0
  for _, id in ipairs(redis.call('ZREVRANGEBYSCORE', S, '+inf', '1', 'LIMIT', 0, 5)) do
    if id ~= me and told < 4 then
      redis.call('PUBLISH', channel .. ':' .. id, 'freed:' .. me)
      told = told + 1
    end
  end
end
";

/// KEYS: the cap's hash, expiry index, short index, layout 1's hash (see the
/// module's docs on a rolling upgrade). ARGV: instance (32 hex
/// digits), seq, demand, held, ttl in ms, configured cap, the prefix of the freed channels,
/// the keys' ttl in ms, the operator's cap the instance knows (`''` none, `0`
/// cleared) and its time (ms), the deadline by the server's clock (ms, `''`
/// none), the decision's signature (`''` none). Returns {allotment, cap,
/// reserved, demand, claimants, 0 applied / 1 stale / 2 abandoned, operator's
/// cap kept (`''` if none), its time, the server's ms, its signature (`''`
/// none)}. The signature is kept in the hash's `op_sig`, beside `op` and
/// `op_at`, which an earlier release reads alone. The steps of `CapStore`'s contract, with the server's `TIME`,
/// in `O(log N)`: the aggregates live in the hash, dead claims leave the
/// expiry index at most 16 a claim.
const CLAIM: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function reply(grant, g, verdict)
  local op, op_at = redis.call('HGET', H, 'op') or '', redis.call('HGET', H, 'op_at') or ''
  return {grant, g, num('r'), num('d'), redis.call('ZCARD', X), verdict, op, op_at,
    string.format('%d', now), redis.call('HGET', H, 'op_sig') or ''}
end
if ARGV[11] ~= '' and now > tonumber(ARGV[11]) then
  -- Its sender gave up on it: nothing changes.
  return reply(0, tonumber(redis.call('HGET', H, 'g') or ARGV[6]), 2)
end
local ttl = tonumber(ARGV[5])
if ARGV[9] ~= '' then
  -- An operator's decision this store lost (a flush, a failover): again.
  local kept = tonumber(redis.call('HGET', H, 'op_at') or '-1')
  if tonumber(ARGV[10]) > kept then
    redis.call('HSET', H, 'op', ARGV[9], 'op_at', ARGV[10])
    if ARGV[12] == '' then
      redis.call('HDEL', H, 'op_sig')
    else
      redis.call('HSET', H, 'op_sig', ARGV[12])
    end
    if ARGV[9] == '0' then
      redis.call('HDEL', H, 'g')
    else
      redis.call('HSET', H, 'g', ARGV[9])
    end
  end
end
local g = tonumber(redis.call('HGET', H, 'g') or '')
if not g then
  g = tonumber(ARGV[6])
  redis.call('HSET', H, 'g', ARGV[6])
end
local settled = tonumber(redis.call('HGET', H, 'settled') or '')
if not settled then
  -- A new (or wiped) record: older leases may still be in use for one TTL.
  settled = now + ttl
  redis.call('HSET', H, 'settled', string.format('%d', settled))
end
-- Every key expires, those this claim creates included.
local function keep()
  for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ARGV[8]) end
end
local before = num('r')
local me = ARGV[1]
local function mine()
  local v = redis.call('HGET', H, 'i:' .. me)
  if not v then return nil end
  local seq, d, r, e, en, x = string.match(v, '^(%d+):(%d+):(%d+):(%d+):(%d+):(%d+)$')
  return {seq, tonumber(d), tonumber(r), tonumber(e), tonumber(en), tonumber(x)}
end
local m = mine()
if m and m[4] <= now then
  remove(me)
  m = nil
end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', X, '-inf', now, 'LIMIT', 0, 16)) do
  remove(id)
end
if m and not greater(ARGV[2], m[1]) then
  -- A late copy of an older claim: nothing changes.
  keep()
  return reply(0, g, 1)
end
local n = redis.call('ZCARD', X)
local mr, md, me_, mx = 0, 0, 0, 0
if m then mr, md, me_, mx = m[3], m[2], m[5], m[6] else n = n + 1 end
local demand, held = tonumber(ARGV[3]), tonumber(ARGV[4])
local rest = g - (num('d') - md)
if rest < 0 then rest = 0 end
local entitled = math.min(demand, math.max(math.floor(g / n), rest))
-- The slack no entitlement covers, shared by the claims short of their demand.
local slack = g - (num('e') - me_ + entitled)
if slack < 0 then slack = 0 end
local left = slack - (num('x') - mx)
if left < 0 then left = 0 end
local short = redis.call('ZCARD', S) + 1
if redis.call('ZSCORE', S, me) then short = short - 1 end
local extra = math.min(math.ceil(slack / short), left, demand - entitled)
local fair = entitled + extra
-- A rolling upgrade: while layout 1's hash holds a live claim of an older
-- instance, its reservation counts as reserved here, and this claim is
-- mirrored there in layout 1's format (so older instances count it too); once
-- no older claim is live, the old hash goes and claims are O(log N) again.
local v1, bridging = 0, redis.call('EXISTS', V1) == 1
if bridging then
  local live, all = false, redis.call('HGETALL', V1)
  for i = 1, #all, 2 do
    local f = all[i]
    if string.sub(f, 1, 2) == 'i:' and string.sub(f, -3) ~= ':v2' then
      local seq, d, r, e = string.match(all[i + 1], '^(%d+):(%d+):(%d+):(%d+)$')
      if seq and tonumber(e) > now then
        v1, live = v1 + tonumber(r), true
      end
    end
  end
  if not live then
    redis.call('DEL', V1)
    bridging = false
  end
end
local free = g - (num('r') - mr) - v1
if free < 0 then free = 0 end
local grant = math.min(fair, free)
if now < settled then grant = math.min(grant, held) end
local reserved = math.max(grant, held)
if m then remove(me) end
local expires = string.format('%d', now + ttl)
-- What it took: an extra the free slots did not cover leaves the slack to the
-- next short claim.
extra = math.min(extra, math.max(grant - entitled, 0))
redis.call('HSET', H, 'i:' .. me,
  table.concat({ARGV[2], demand, reserved, expires, entitled, extra}, ':'))
redis.call('ZADD', X, expires, me)
if bridging then
  redis.call('HSET', V1, 'i:' .. me .. ':v2',
    table.concat({ARGV[2], demand, reserved, expires}, ':'))
end
redis.call('HINCRBY', H, 'r', reserved)
redis.call('HINCRBY', H, 'd', demand)
redis.call('HINCRBY', H, 'e', entitled)
redis.call('HINCRBY', H, 'x', extra)
if demand > reserved then redis.call('ZADD', S, demand - reserved, me) end
local wanting = redis.call('ZCARD', S) - ((demand > reserved) and 1 or 0)
-- Slots freed by this claim, or still free after it once the record settled:
-- the next short claims hear of them now, four at a time.
if wanting > 0 and (num('r') < before or (now >= settled and num('r') < g)) then
  wake(me, ARGV[7])
end
keep()
return reply(grant, g, 0)
";

/// KEYS: the cap's hash, layout 1's hash. ARGV: cap (`0`: cleared), the
/// hash's ttl in ms. Layout 1's hash, if it exists, gets the same decision.
/// Replaces the cap (cleared: forgets it, so the next claim stores its
/// configured one), keeping the claims, and records the operator's decision
/// with the server's time (after the one kept, even within a millisecond).
const SET_CAP: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local kept = tonumber(redis.call('HGET', KEYS[1], 'op_at') or '-1')
if now <= kept then now = kept + 1 end
local function decide(k)
  if ARGV[1] == '0' then
    redis.call('HDEL', k, 'g')
  else
    redis.call('HSET', k, 'g', ARGV[1])
  end
  redis.call('HSET', k, 'op', ARGV[1], 'op_at', string.format('%d', now))
  if (ARGV[3] or '') == '' then
    redis.call('HDEL', k, 'op_sig')
  else
    redis.call('HSET', k, 'op_sig', ARGV[3])
  end
end
decide(KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
-- Layout 1's instances, if any still claim, hear of it too.
if redis.call('EXISTS', KEYS[2]) == 1 then decide(KEYS[2]) end
return 1
";

/// KEYS: the cap's hash, expiry index, short index, layout 1's hash. ARGV:
/// instance (32 hex digits), the prefix of the freed channels. Deletes the instance's claim
/// (and its copy in layout 1's hash); if there was one,
/// publishes `freed:<instance>` to at most 4 short claims.
const WITHDRAW: &str = r"
if not remove(ARGV[1]) then return 0 end
wake(ARGV[1], ARGV[2])
return 1
";

/// KEYS: epoch, verdict. ARGV: seen epoch, key ttl in ms. The health check:
/// raises the counter to `seen` (never lowers it), refreshes both TTLs, and
/// returns the verdict stored (or nil).
const TOUCH: &str = r"
local counter = redis.call('GET', KEYS[1]) or '0'
if greater(ARGV[1], counter) then
  redis.call('SET', KEYS[1], ARGV[1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return redis.call('GET', KEYS[2])
";

/// KEYS: the breaker's reports, their time index. ARGV: instance, record, its
/// time (ms), the stale bound (ms), the most stale dropped, the keys' ttl.
/// Keeps the report, drops a bounded number of stale ones: `O(log N)`.
const REPORT: &str = r"
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
local stale = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[4], 'LIMIT', 0, tonumber(ARGV[5]))
for _, id in ipairs(stale) do
  redis.call('HDEL', KEYS[1], id)
  redis.call('ZREM', KEYS[2], id)
end
redis.call('PEXPIRE', KEYS[1], ARGV[6])
redis.call('PEXPIRE', KEYS[2], ARGV[6])
return #stale
";

/// KEYS: the breaker's actions. ARGV: id, record, ms to keep at least, the
/// most kept. Keeps the record under `id` unless the hash is full (0), and
/// makes the hash live at least that long (never shortens it).
const POST_ACTION: &str = r"
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0
  and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[4]) then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return 1
";

/// A [`Store`] on one Redis (or Valkey) server; cloning shares the connection.
///
/// Built from a URL (`redis://[user:password@]host[:port][/db]`, or `rediss://`
/// when the `redis` crate is built with TLS); the URL is checked at build, the
/// server only at the first operation (see the [module docs](self)).
///
/// ```
/// use seawall_fleet::RedisStore;
///
/// // Nothing listens there: building still succeeds, operations will fail
/// // (and the coordinator fall back to local mode) until a server answers.
/// let store = RedisStore::new("redis://127.0.0.1:1/").unwrap();
/// assert_eq!(RedisStore::new("not a url").unwrap_err().field(), "url");
/// # drop(store);
/// ```
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    target: Target,
    /// The connection in use and its generation (one more for every connection
    /// opened); `None` until the first operation, and again once it was found
    /// to reach a read-only replica (or, behind sentinels, no server at all).
    current: tokio::sync::Mutex<Option<(u64, Con)>>,
    generation: std::sync::atomic::AtomicU64,
    subscribers: Arc<Subscribers>,
    /// The TTL of every key but the lease's, in ms, refreshed by use.
    key_ttl_ms: u64,
    /// Whether the eviction policy was read (or is being read).
    eviction_checked: std::sync::atomic::AtomicBool,
    /// The warning about the eviction policy, once read.
    eviction_warning: Mutex<Option<String>>,
    touch: Script,
    withdraw: Script,
    take: Script,
    release: Script,
    publish: Script,
    record_trip: Script,
    claim: Script,
    set_cap: Script,
}

/// One subscriber's sender, and the id its release names it by (the release must
/// not hold a sender: the stream ends when the map drops the last one).
type Subscriber = (u64, mpsc::Sender<FleetEvent>);

/// Subscribers by channel, fed by the connection's push sender.
#[derive(Default)]
struct Subscribers {
    map: Mutex<HashMap<String, Vec<Subscriber>>>,
    /// The next subscriber's id.
    next_id: std::sync::atomic::AtomicU64,
    /// Held while a SUBSCRIBE or UNSUBSCRIBE is sent and answered, so the store's
    /// commands reach the server one at a time, each decided on the subscribers
    /// registered when it is sent: the last one the server sees for a channel
    /// agrees with whether anyone still listens. (Two commands sent from two tasks
    /// at once may arrive in either order, and an UNSUBSCRIBE overtaken by a
    /// SUBSCRIBE it knew nothing of would leave a live subscriber unheard, or the
    /// reverse a subscription nobody reads.)
    order: tokio::sync::Mutex<()>,
}

impl Subscribers {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Vec<Subscriber>>> {
        // Nothing panics while holding the lock; a poisoned map is still consistent.
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Forgets subscriber `gone` and every closed subscriber of `channel`; whether
    /// none is left (the entry is then removed).
    fn release(&self, channel: &str, gone: u64) -> bool {
        let mut map = self.lock();
        let Some(txs) = map.get_mut(channel) else {
            return true;
        };
        txs.retain(|(id, tx)| *id != gone && !tx.is_closed());
        if txs.is_empty() {
            map.remove(channel);
            true
        } else {
            false
        }
    }

    fn has_live(&self, channel: &str) -> bool {
        self.lock()
            .get(channel)
            .is_some_and(|txs| txs.iter().any(|(_, tx)| !tx.is_closed()))
    }

    fn deliver(&self, info: &PushInfo) {
        match info.kind {
            // The connection is gone, and its subscriptions with it: end every
            // stream (the map holds the only senders) so each coordinator
            // resubscribes on the new connection and reconciles.
            PushKind::Disconnection => self.lock().clear(),
            PushKind::Message | PushKind::SMessage => {
                let [channel, payload] = info.data.as_slice() else {
                    return;
                };
                let (Some(channel), Some(payload)) = (text(channel), text(payload)) else {
                    return;
                };
                let Some(event) = parse_event(&payload) else {
                    return;
                };
                let mut map = self.lock();
                if let Some(txs) = map.get_mut(&channel) {
                    txs.retain(|(_, tx)| !tx.is_closed());
                    for (_, tx) in txs.iter() {
                        // A full subscriber loses the push; its reconcile heals it.
                        let _ = tx.try_send(event);
                    }
                }
            }
            _ => {}
        }
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let target = match &self.inner.target {
            Target::Url(client) => client.get_connection_info().addr().to_string(),
            Target::Sentinel(s) => format!("{} via sentinels {:?}", s.master, s.sentinels),
            #[cfg(feature = "redis-cluster")]
            Target::Cluster(nodes) => format!("cluster of {} nodes given", nodes.len()),
        };
        let opened = self
            .inner
            .generation
            .load(std::sync::atomic::Ordering::Relaxed);
        f.debug_struct("RedisStore")
            .field("target", &target)
            .field("connected_once", &(opened > 0))
            .finish_non_exhaustive()
    }
}

/// The TTL every key but the lease gets by default, refreshed by use.
pub const DEFAULT_KEY_TTL: Duration = Duration::from_secs(24 * 3600);

/// Builds a [`RedisStore`] with settings beyond the URL; [`build`](Self::build)
/// checks them, naming the field at fault.
#[derive(Clone)]
pub struct RedisStoreBuilder {
    place: Place,
    key_ttl: Duration,
    /// The CA (PEM) that signed the server's certificate.
    tls_ca: Option<Vec<u8>>,
    /// A client certificate and its key (PEM).
    tls_client: Option<(Vec<u8>, Vec<u8>)>,
}

/// Where the server is, as given to the builder.
#[derive(Clone)]
enum Place {
    Url(String),
    Sentinel {
        master: String,
        sentinels: Vec<String>,
        sentinel_auth: Option<(Option<String>, String)>,
        auth: Option<(Option<String>, String)>,
        db: i64,
    },
    #[cfg(feature = "redis-cluster")]
    Cluster(Vec<String>),
}

impl fmt::Debug for RedisStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the passwords.
        let place = match &self.place {
            Place::Url(_) => "url".to_owned(),
            Place::Sentinel {
                master, sentinels, ..
            } => format!("{master} via sentinels {sentinels:?}"),
            #[cfg(feature = "redis-cluster")]
            Place::Cluster(nodes) => format!("cluster of {} nodes given", nodes.len()),
        };
        f.debug_struct("RedisStoreBuilder")
            .field("place", &place)
            .field("key_ttl", &self.key_ttl)
            .finish_non_exhaustive()
    }
}

impl RedisStoreBuilder {
    /// How long a key the fleet no longer uses stays on the server (default
    /// [`DEFAULT_KEY_TTL`], one day; at least a second). Every key has it (the
    /// lease has its own, shorter one) and every use refreshes it: the epoch
    /// counter and the verdict at each lease, verdict and health check, a cap's
    /// hash at each claim. Keys of a prefix nobody runs any more (an old release's)
    /// are gone this long after its last instance stopped.
    #[must_use]
    pub fn key_ttl(mut self, ttl: Duration) -> Self {
        self.key_ttl = ttl;
        self
    }

    /// With a `rediss://` URL (feature `tls-rustls`): trust the server's
    /// certificate if this CA (PEM) signed it, instead of the system's roots
    /// (a private CA). Refused at build, naming `tls`, without such a URL.
    #[must_use]
    pub fn tls_ca(mut self, ca_pem: impl Into<Vec<u8>>) -> Self {
        self.tls_ca = Some(ca_pem.into());
        self
    }

    /// With a `rediss://` URL (feature `tls-rustls`): present this client
    /// certificate and key (PEM) to a server that asks for one
    /// (`tls-auth-clients yes`). Refused at build, naming `tls`, without such a URL.
    #[must_use]
    pub fn tls_client_cert(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls_client = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// Behind sentinels: the credentials of the data nodes (the primary), as
    /// `AUTH [username] password`. Ignored for a URL (it carries its own).
    #[must_use]
    pub fn auth(mut self, username: Option<&str>, password: &str) -> Self {
        if let Place::Sentinel { auth, .. } = &mut self.place {
            *auth = Some((username.map(str::to_owned), password.to_owned()));
        }
        self
    }

    /// Behind sentinels: the sentinels' own credentials, which often differ
    /// from the data nodes'. Ignored for a URL.
    #[must_use]
    pub fn sentinel_auth(mut self, username: Option<&str>, password: &str) -> Self {
        if let Place::Sentinel { sentinel_auth, .. } = &mut self.place {
            *sentinel_auth = Some((username.map(str::to_owned), password.to_owned()));
        }
        self
    }

    /// Behind sentinels: the database number (default 0). Ignored for a URL.
    #[must_use]
    pub fn db(mut self, number: i64) -> Self {
        if let Place::Sentinel { db, .. } = &mut self.place {
            *db = number;
        }
        self
    }

    /// The store; refused, naming the field (`url`, `key_ttl`, `sentinels`,
    /// `master`, `db`), if a setting is wrong. The server is not contacted.
    pub fn build(self) -> Result<RedisStore, ConfigError> {
        if self.key_ttl < Duration::from_secs(1) || self.key_ttl > crate::MAX_SETTING * 30 {
            return Err(ConfigError::new(
                "key_ttl",
                format!(
                    "must be between 1s and {:?}, got {:?}",
                    crate::MAX_SETTING * 30,
                    self.key_ttl
                ),
            ));
        }
        let tls_given = self.tls_ca.is_some() || self.tls_client.is_some();
        let target = match self.place {
            Place::Url(url) => {
                let tls_url = url.starts_with("rediss:");
                if tls_url && !cfg!(feature = "tls-rustls") {
                    return Err(ConfigError::new(
                        "url",
                        "a rediss:// URL needs seawall-fleet's feature `tls-rustls`",
                    ));
                }
                if tls_given && !tls_url {
                    return Err(ConfigError::new(
                        "tls",
                        "a CA or a client certificate needs a rediss:// URL",
                    ));
                }
                let client = Client::open(url.as_str())
                    .map_err(|e| ConfigError::new("url", e.to_string()))?;
                // Pushes (the verdicts) need RESP3, whatever the URL asked for.
                let info = client.get_connection_info().clone();
                let settings = info
                    .redis_settings()
                    .clone()
                    .set_protocol(ProtocolVersion::RESP3);
                let info = info.set_redis_settings(settings);
                #[cfg(feature = "tls-rustls")]
                if tls_given {
                    let certs = ::redis::TlsCertificates {
                        client_tls: self.tls_client.map(|(client_cert, client_key)| {
                            ::redis::ClientTlsConfig {
                                client_cert,
                                client_key,
                            }
                        }),
                        root_cert: self.tls_ca,
                    };
                    let client = Client::build_with_tls(info, certs)
                        .map_err(|e| ConfigError::new("tls", e.to_string()))?;
                    return Ok(RedisStore::open(Target::Url(client), self.key_ttl));
                }
                Target::Url(Client::open(info).map_err(|e| ConfigError::new("url", e.to_string()))?)
            }
            Place::Sentinel {
                master,
                sentinels,
                sentinel_auth,
                auth,
                db,
            } => {
                if tls_given {
                    return Err(ConfigError::new(
                        "tls",
                        "TLS is for a rediss:// URL (not yet behind sentinels)",
                    ));
                }
                if master.is_empty() {
                    return Err(ConfigError::new("master", "must not be empty"));
                }
                if sentinels.is_empty() {
                    return Err(ConfigError::new("sentinels", "must name at least one"));
                }
                let mut addrs = Vec::new();
                for s in &sentinels {
                    addrs.push(host_port(s).ok_or_else(|| {
                        ConfigError::new("sentinels", format!("{s:?} is not host:port"))
                    })?);
                }
                if db < 0 {
                    return Err(ConfigError::new(
                        "db",
                        format!("must be at least 0, got {db}"),
                    ));
                }
                Target::Sentinel(SentinelTarget {
                    master,
                    sentinels: addrs,
                    sentinel_auth,
                    auth,
                    db,
                })
            }
            #[cfg(feature = "redis-cluster")]
            Place::Cluster(nodes) => {
                if tls_given {
                    return Err(ConfigError::new(
                        "tls",
                        "TLS is for a rediss:// URL (not yet on a cluster)",
                    ));
                }
                if nodes.is_empty() {
                    return Err(ConfigError::new("nodes", "must name at least one"));
                }
                for node in &nodes {
                    Client::open(node.as_str())
                        .map_err(|e| ConfigError::new("nodes", format!("{node:?}: {e}")))?;
                }
                Target::Cluster(nodes)
            }
        };
        Ok(RedisStore::open(target, self.key_ttl))
    }
}

/// `host:port` (a bracketed IPv6 host allowed) as its parts.
fn host_port(s: &str) -> Option<(String, u16)> {
    let (host, port) = s.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return None;
    }
    Some((host.to_owned(), port.parse().ok()?))
}

/// The connection: one server's (through a manager that redials), or a cluster's.
#[derive(Clone)]
enum Con {
    Single(ConnectionManager),
    #[cfg(feature = "redis-cluster")]
    Cluster(::redis::cluster_async::ClusterConnection),
}

impl Con {
    /// Pushes on `channel` from now on (`SSUBSCRIBE` on a cluster).
    async fn subscribe(&mut self, channel: &str) -> Result<(), RedisError> {
        match self {
            Con::Single(con) => con.subscribe(channel).await,
            #[cfg(feature = "redis-cluster")]
            Con::Cluster(con) => con.ssubscribe(channel).await,
        }
    }

    async fn unsubscribe(&mut self, channel: &str) -> Result<(), RedisError> {
        match self {
            Con::Single(con) => con.unsubscribe(channel).await,
            #[cfg(feature = "redis-cluster")]
            Con::Cluster(con) => con.sunsubscribe(channel).await,
        }
    }
}

impl ::redis::aio::ConnectionLike for Con {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a ::redis::Cmd,
    ) -> ::redis::RedisFuture<'a, Value> {
        match self {
            Con::Single(con) => con.req_packed_command(cmd),
            #[cfg(feature = "redis-cluster")]
            Con::Cluster(con) => con.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a ::redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> ::redis::RedisFuture<'a, Vec<Value>> {
        match self {
            Con::Single(con) => con.req_packed_commands(pipeline, offset, count),
            #[cfg(feature = "redis-cluster")]
            Con::Cluster(con) => con.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Con::Single(con) => con.get_db(),
            #[cfg(feature = "redis-cluster")]
            Con::Cluster(con) => con.get_db(),
        }
    }
}

/// Where the store's server is.
enum Target {
    /// One URL (a DNS name is resolved again at every new connection).
    Url(Client),
    /// The primary named by a set of sentinels, asked again at every new connection.
    Sentinel(SentinelTarget),
    /// A Redis Cluster, by some of its nodes' URLs.
    #[cfg(feature = "redis-cluster")]
    Cluster(Vec<String>),
}

struct SentinelTarget {
    master: String,
    sentinels: Vec<(String, u16)>,
    sentinel_auth: Option<(Option<String>, String)>,
    auth: Option<(Option<String>, String)>,
    db: i64,
}

/// How long one sentinel may take to name the primary before the next is asked.
const SENTINEL_TIMEOUT: Duration = Duration::from_secs(1);

impl SentinelTarget {
    /// A client of the primary, as the first sentinel that answers names it.
    async fn resolve(&self) -> Result<Client, StoreError> {
        let mut why = Vec::new();
        for (host, port) in &self.sentinels {
            match tokio::time::timeout(SENTINEL_TIMEOUT, self.ask(host, *port)).await {
                Ok(Ok(client)) => return Ok(client),
                Ok(Err(e)) => why.push(format!("{host}:{port}: {e}")),
                Err(_) => why.push(format!("{host}:{port}: no answer")),
            }
        }
        Err(StoreError::Unavailable(format!(
            "no sentinel named the primary of {:?} ({})",
            self.master,
            why.join("; ")
        )))
    }

    async fn ask(&self, host: &str, port: u16) -> Result<Client, RedisError> {
        let info = ::redis::IntoConnectionInfo::into_connection_info(
            ::redis::ConnectionAddr::Tcp(host.to_owned(), port),
        )?;
        let mut settings = ::redis::RedisConnectionInfo::default();
        if let Some((user, password)) = &self.sentinel_auth {
            if let Some(user) = user {
                settings = settings.set_username(user);
            }
            settings = settings.set_password(password);
        }
        let sentinel = Client::open(info.set_redis_settings(settings))?;
        let mut con = sentinel.get_multiplexed_async_connection().await?;
        let named: Option<(String, u16)> = ::redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(&self.master)
            .query_async(&mut con)
            .await?;
        let Some((host, port)) = named else {
            return Err(RedisError::from((
                ::redis::ErrorKind::Client,
                "the sentinel knows no such master",
            )));
        };
        let info = ::redis::IntoConnectionInfo::into_connection_info(
            ::redis::ConnectionAddr::Tcp(host, port),
        )?;
        let mut settings = ::redis::RedisConnectionInfo::default()
            .set_db(self.db)
            .set_protocol(ProtocolVersion::RESP3);
        if let Some((user, password)) = &self.auth {
            if let Some(user) = user {
                settings = settings.set_username(user);
            }
            settings = settings.set_password(password);
        }
        Client::open(info.set_redis_settings(settings))
    }
}

impl RedisStore {
    /// A store on the server at `url`, with the default settings. Refused, naming
    /// the field `url`, if the URL does not parse; the server is not contacted
    /// (see the [module docs](self)).
    pub fn new(url: &str) -> Result<Self, ConfigError> {
        Self::builder(url).build()
    }

    /// A builder for a store on the server at `url`
    /// (`redis://[user:password@]host[:port][/db]`).
    pub fn builder(url: impl Into<String>) -> RedisStoreBuilder {
        RedisStoreBuilder {
            place: Place::Url(url.into()),
            key_ttl: DEFAULT_KEY_TTL,
            tls_ca: None,
            tls_client: None,
        }
    }

    /// A builder for a store on the primary that the sentinels (each
    /// `host:port`) name `master`: asked at the first operation and again
    /// whenever the connection is lost or reaches a read-only replica (a
    /// failover), each sentinel in turn until one answers. Sentinel and data
    /// node credentials are set apart ([`RedisStoreBuilder::sentinel_auth`],
    /// [`RedisStoreBuilder::auth`]).
    pub fn sentinel<I, S>(master: impl Into<String>, sentinels: I) -> RedisStoreBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RedisStoreBuilder {
            place: Place::Sentinel {
                master: master.into(),
                sentinels: sentinels.into_iter().map(Into::into).collect(),
                sentinel_auth: None,
                auth: None,
                db: 0,
            },
            key_ttl: DEFAULT_KEY_TTL,
            tls_ca: None,
            tls_client: None,
        }
    }

    /// A builder for a store on a Redis Cluster (feature `redis-cluster`),
    /// given the URLs of some of its nodes (the others are found from them).
    /// All of a breaker's or a cap's keys share a hash tag, so each script runs
    /// on the one node that owns their slot; pushes are sharded (`SPUBLISH` and
    /// `SSUBSCRIBE`, Redis 7 or later), so they cost the one node their slot is
    /// on, not every node. The cluster connection follows slot moves and
    /// failovers by itself, and restores the subscriptions.
    #[cfg(feature = "redis-cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis-cluster")))]
    pub fn cluster<I, S>(nodes: I) -> RedisStoreBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RedisStoreBuilder {
            place: Place::Cluster(nodes.into_iter().map(Into::into).collect()),
            key_ttl: DEFAULT_KEY_TTL,
            tls_ca: None,
            tls_client: None,
        }
    }

    /// The warning about the server's eviction policy, once read at the first
    /// connection: `None` under `noeviction` (the only safe policy: any other may
    /// evict a live lease or claim), while not read yet, or where `CONFIG GET` is
    /// refused (a managed Redis: check the setting by its console).
    pub fn eviction_warning(&self) -> Option<String> {
        self.inner
            .eviction_warning
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn open(target: Target, key_ttl: Duration) -> Self {
        // On a cluster, pushes are sharded: `SPUBLISH` reaches only the node
        // that owns the channel's slot (the breaker's or cap's hash tag), where
        // its listeners `SSUBSCRIBE`d; `PUBLISH` would go to every node.
        #[cfg(feature = "redis-cluster")]
        let sharded = matches!(target, Target::Cluster(_));
        #[cfg(not(feature = "redis-cluster"))]
        let sharded = false;
        let script = |text: &str| {
            if sharded {
                Script::new(&text.replace("'PUBLISH'", "'SPUBLISH'"))
            } else {
                Script::new(text)
            }
        };
        Self {
            inner: Arc::new(Inner {
                target,
                current: tokio::sync::Mutex::new(None),
                generation: std::sync::atomic::AtomicU64::new(0),
                subscribers: Arc::default(),
                key_ttl_ms: u64::try_from(key_ttl.as_millis()).unwrap_or(u64::MAX),
                eviction_checked: std::sync::atomic::AtomicBool::new(false),
                eviction_warning: Mutex::new(None),
                touch: Script::new(&format!("{GREATER}{TOUCH}")),
                withdraw: script(&format!("{CAP_HELPERS}{WITHDRAW}")),
                take: Script::new(&format!("{GREATER}{NEXT_EPOCH}{TAKE}")),
                release: Script::new(RELEASE),
                publish: script(&format!("{GREATER}{PUBLISH}")),
                record_trip: script(&format!("{GREATER}{NEXT_EPOCH}{RECORD_TRIP}")),
                claim: script(&format!("{GREATER}{CAP_HELPERS}{CLAIM}")),
                set_cap: Script::new(SET_CAP),
            }),
        }
    }

    /// The connection and its generation, opened (lazily, without dialling a
    /// URL; behind sentinels, after asking them) on first use and after it was
    /// dropped; the first use also reads the server's eviction policy, in the
    /// background.
    async fn connection(&self) -> Result<(u64, Con), StoreError> {
        let (generation, con) = self.manager().await?;
        if !self
            .inner
            .eviction_checked
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            let (inner, mut con) = (Arc::clone(&self.inner), con.clone());
            tokio::spawn(async move {
                let mut cmd = ::redis::cmd("CONFIG");
                cmd.arg("GET").arg("maxmemory-policy");
                let read = cmd.query_async::<HashMap<String, String>>(&mut con);
                match tokio::time::timeout(Duration::from_secs(5), read).await {
                    Ok(Ok(config)) => {
                        let policy = config.get("maxmemory-policy").cloned();
                        let warning = eviction_warning(policy.as_deref());
                        if let Some(warning) = &warning {
                            crate::telemetry::store_warning(warning);
                        }
                        *inner
                            .eviction_warning
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner) = warning;
                    }
                    // Refused (a managed server, an ACL): nothing to read it by.
                    Ok(Err(e)) if !e.is_io_error() && !e.is_connection_dropped() => {
                        crate::telemetry::store_check_refused(&e.to_string());
                    }
                    // No answer: read it at the next use.
                    _ => inner
                        .eviction_checked
                        .store(false, std::sync::atomic::Ordering::Relaxed),
                }
            });
        }
        Ok((generation, con))
    }

    async fn manager(&self) -> Result<(u64, Con), StoreError> {
        let mut current = self.inner.current.lock().await;
        if let Some((generation, con)) = &*current {
            return Ok((*generation, con.clone()));
        }
        let client = match &self.inner.target {
            Target::Url(client) => client.clone(),
            Target::Sentinel(sentinels) => sentinels.resolve().await?,
            #[cfg(feature = "redis-cluster")]
            Target::Cluster(nodes) => {
                let subscribers = Arc::clone(&self.inner.subscribers);
                let client =
                    ::redis::cluster::ClusterClientBuilder::new(nodes.iter().map(String::as_str))
                        .use_protocol(ProtocolVersion::RESP3)
                        .push_sender(move |info: PushInfo| {
                            subscribers.deliver(&info);
                            Ok::<(), ::redis::aio::SendError>(())
                        })
                        .connection_timeout(Duration::from_secs(1))
                        .response_timeout(Duration::from_secs(5))
                        .retries(1)
                        .build()
                        .map_err(store_error)?;
                let con = Con::Cluster(client.get_async_connection().await.map_err(store_error)?);
                let generation = self
                    .inner
                    .generation
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    + 1;
                *current = Some((generation, con.clone()));
                return Ok((generation, con));
            }
        };
        let subscribers = Arc::clone(&self.inner.subscribers);
        let config = ConnectionManagerConfig::new()
            .set_push_sender(move |info: PushInfo| {
                subscribers.deliver(&info);
                Ok::<(), ::redis::aio::SendError>(())
            })
            // The coordinator bounds each operation; these only keep a
            // dead socket from holding a reconnect for long.
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(Some(Duration::from_secs(5)))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let con = Con::Single(
            ConnectionManager::new_lazy_with_config(client, config).map_err(store_error)?,
        );
        let generation = self
            .inner
            .generation
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        *current = Some((generation, con.clone()));
        Ok((generation, con))
    }

    /// `e`, met on the connection of `generation`, as a store error. A write
    /// refused as `READONLY` (the server is a replica: a failover happened, and
    /// the URL or the connection still points at the old primary) drops the
    /// connection, so the next operation dials again (resolving the name again,
    /// or asking the sentinels); behind sentinels a lost connection does too.
    /// Every subscription of the dropped connection ends, so its listeners
    /// subscribe again on the next.
    fn failed(&self, generation: u64, e: RedisError) -> StoreError {
        let read_only = e.code() == Some("READONLY");
        let lost = e.is_io_error() || e.is_connection_refusal() || e.is_connection_dropped();
        let sentinel = matches!(self.inner.target, Target::Sentinel(_));
        if read_only || (sentinel && lost) {
            self.drop_connection(generation);
        }
        if read_only {
            let error = StoreError::Unavailable(format!("read-only replica: {e}"));
            crate::telemetry::store_warning(&error.to_string());
            return error;
        }
        store_error(e)
    }

    /// Forgets the connection of `generation` if it is still the current one.
    fn drop_connection(&self, generation: u64) {
        // Someone opening the next one holds the lock: nothing to drop.
        let Ok(mut current) = self.inner.current.try_lock() else {
            return;
        };
        if current.as_ref().is_some_and(|(g, _)| *g == generation) {
            *current = None;
            self.inner.subscribers.lock().clear();
        }
    }
}

impl Store for RedisStore {
    async fn take_lease(
        &self,
        keys: &Keys,
        request: LeaseRequest,
    ) -> Result<LeaseReply, StoreError> {
        let (generation, mut con) = self.connection().await?;
        let ttl_ms = u64::try_from(request.ttl.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let reply: Vec<Value> = self
            .inner
            .take
            .key(keys.lease())
            .key(keys.epoch())
            .arg(token_text(request.token))
            .arg(ttl_ms)
            .arg(request.seen.0.to_string())
            .arg(self.inner.key_ttl_ms)
            .invoke_async(&mut con)
            .await
            .map_err(|e| self.failed(generation, e))?;
        parse_take(&reply).ok_or_else(|| malformed("lease reply", &reply))
    }

    async fn release_lease(&self, keys: &Keys, token: Token) -> Result<bool, StoreError> {
        let (generation, mut con) = self.connection().await?;
        let released: i64 = self
            .inner
            .release
            .key(keys.lease())
            .arg(token_text(token))
            .invoke_async(&mut con)
            .await
            .map_err(|e| self.failed(generation, e))?;
        Ok(released == 1)
    }

    async fn publish_verdict(
        &self,
        keys: &Keys,
        token: Token,
        result: ProbeResult,
    ) -> Result<Option<FleetVerdict>, StoreError> {
        let (generation, mut con) = self.connection().await?;
        let stored: Option<String> = self
            .inner
            .publish
            .key(keys.lease())
            .key(keys.verdict())
            .key(keys.trips())
            .key(keys.fleet_trip())
            .arg(token_text(token))
            .arg(match result {
                ProbeResult::Succeeded => "S",
                ProbeResult::Failed => "F",
            })
            .arg(keys.channel())
            .arg(self.inner.key_ttl_ms)
            .invoke_async(&mut con)
            .await
            .map_err(|e| self.failed(generation, e))?;
        stored
            .map(|s| parse_verdict(&s).ok_or_else(|| malformed("verdict", &s)))
            .transpose()
    }

    async fn read_verdict(&self, keys: &Keys) -> Result<Option<FleetVerdict>, StoreError> {
        let (generation, mut con) = self.connection().await?;
        let stored: Option<String> = ::redis::cmd("GET")
            .arg(keys.verdict())
            .query_async(&mut con)
            .await
            .map_err(|e| self.failed(generation, e))?;
        stored
            .map(|s| parse_verdict(&s).ok_or_else(|| malformed("verdict", &s)))
            .transpose()
    }

    async fn record_trip(&self, keys: &Keys, trip: TripRecord) -> Result<TripReply, StoreError> {
        let (generation, mut con) = self.connection().await?;
        let within_ms = u64::try_from(trip.within.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let reply: Vec<Value> = self
            .inner
            .record_trip
            .key(keys.trips())
            .key(keys.fleet_trip())
            .key(keys.epoch())
            .arg(token_text(trip.instance))
            .arg(within_ms)
            .arg(trip.instances)
            .arg(trip.seen.0.to_string())
            .arg(keys.channel())
            .arg(self.inner.key_ttl_ms)
            .invoke_async(&mut con)
            .await
            .map_err(|e| self.failed(generation, e))?;
        parse_trip_reply(&reply).ok_or_else(|| malformed("trip reply", &reply))
    }

    async fn read_fleet_trip(&self, keys: &Keys) -> Result<Option<FleetEpoch>, StoreError> {
        let (generation, mut con) = self.connection().await?;
        let stored: Option<String> = ::redis::cmd("GET")
            .arg(keys.fleet_trip())
            .query_async(&mut con)
            .await
            .map_err(|e| self.failed(generation, e))?;
        stored
            .map(|s| parse_epoch(&s).ok_or_else(|| malformed("fleet trip", &s)))
            .transpose()
    }

    async fn subscribe(&self, keys: &Keys) -> Result<Subscription, StoreError> {
        self.listen(keys.channel()).await
    }

    async fn touch(
        &self,
        keys: &Keys,
        seen: FleetEpoch,
    ) -> Result<Option<FleetVerdict>, StoreError> {
        let (generation, mut con) = self.connection().await?;
        let stored: Option<String> = self
            .inner
            .touch
            .key(keys.epoch())
            .key(keys.verdict())
            .arg(seen.0.to_string())
            .arg(self.inner.key_ttl_ms)
            .invoke_async(&mut con)
            .await
            .map_err(|e| self.failed(generation, e))?;
        stored
            .map(|s| parse_verdict(&s).ok_or_else(|| malformed("verdict", &s)))
            .transpose()
    }

    async fn post_action(
        &self,
        keys: &Keys,
        id: &str,
        record: String,
        keep: Duration,
    ) -> Result<(), StoreError> {
        let (generation, mut con) = self.connection().await?;
        let keep_ms = u64::try_from(keep.as_millis()).unwrap_or(u64::MAX).max(1);
        let kept: i64 = ::redis::Script::new(POST_ACTION)
            .key(keys.actions())
            .arg(id)
            .arg(record)
            .arg(keep_ms)
            .arg(MAX_ACTIONS)
            .invoke_async(&mut con)
            .await
            .map_err(|e| self.failed(generation, e))?;
        if kept == 0 {
            return Err(StoreError::Other(
                format!("at most {MAX_ACTIONS} fleet actions are kept per breaker").into(),
            ));
        }
        Ok(())
    }

    async fn remove_action(&self, keys: &Keys, id: &str) -> Result<(), StoreError> {
        let (generation, mut con) = self.connection().await?;
        let _: i64 = ::redis::cmd("HDEL")
            .arg(keys.actions())
            .arg(id)
            .query_async(&mut con)
            .await
            .map_err(|e| self.failed(generation, e))?;
        Ok(())
    }

    async fn read_actions(&self, keys: &Keys) -> Result<Vec<(String, String)>, StoreError> {
        let (generation, mut con) = self.connection().await?;
        ::redis::cmd("HGETALL")
            .arg(keys.actions())
            .query_async(&mut con)
            .await
            .map_err(|e| self.failed(generation, e))
    }

    async fn audit(&self, keys: &Keys, entry: String) -> Result<(), StoreError> {
        let (generation, mut con) = self.connection().await?;
        let _: () = ::redis::pipe()
            .atomic()
            .cmd("LPUSH")
            .arg(keys.audit())
            .arg(entry)
            .ignore()
            .cmd("LTRIM")
            .arg(keys.audit())
            .arg(0)
            .arg(AUDIT_KEPT - 1)
            .ignore()
            .cmd("PEXPIRE")
            .arg(keys.audit())
            .arg(self.inner.key_ttl_ms)
            .ignore()
            .query_async(&mut con)
            .await
            .map_err(|e| self.failed(generation, e))?;
        Ok(())
    }

    async fn report(
        &self,
        keys: &Keys,
        instance: &str,
        record: String,
        at_ms: u64,
        stale_ms: u64,
    ) -> Result<(), StoreError> {
        let (generation, mut con) = self.connection().await?;
        let _: i64 = ::redis::Script::new(REPORT)
            .key(keys.reports())
            .key(keys.reported())
            .arg(instance)
            .arg(record)
            .arg(at_ms)
            .arg(stale_ms)
            .arg(STALE_TRIMMED)
            .arg(self.inner.key_ttl_ms)
            .invoke_async(&mut con)
            .await
            .map_err(|e| self.failed(generation, e))?;
        Ok(())
    }

    async fn read_reports(&self, keys: &Keys) -> Result<Vec<(String, String)>, StoreError> {
        let (generation, mut con) = self.connection().await?;
        ::redis::cmd("HGETALL")
            .arg(keys.reports())
            .query_async(&mut con)
            .await
            .map_err(|e| self.failed(generation, e))
    }

    async fn read_audit(&self, keys: &Keys, n: usize) -> Result<Vec<String>, StoreError> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let (generation, mut con) = self.connection().await?;
        ::redis::cmd("LRANGE")
            .arg(keys.audit())
            .arg(0)
            .arg(n.saturating_sub(1).min(AUDIT_KEPT))
            .query_async(&mut con)
            .await
            .map_err(|e| self.failed(generation, e))
    }

    fn warning(&self) -> Option<String> {
        self.eviction_warning()
    }
}

impl RedisStore {
    /// An operator's decision on the cap: set, or cleared with `None` (the script
    /// stores 0 for none), kept with its signature when there is one.
    async fn decide(
        &self,
        keys: &CapKeys,
        cap: Option<u32>,
        signature: Option<CapSignature>,
    ) -> Result<(), StoreError> {
        let (generation, mut con) = self.connection().await?;
        let mut invocation = self.inner.set_cap.key(keys.claims());
        invocation
            .key(keys.v1_claims())
            .arg(cap.unwrap_or(0))
            .arg(self.inner.key_ttl_ms);
        if let Some(signature) = signature {
            invocation.arg(signature.encode());
        }
        let _: i64 = invocation
            .invoke_async(&mut con)
            .await
            .map_err(|e| self.failed(generation, e))?;
        Ok(())
    }

    /// Pushes on `channel` from now on: registered, then `SUBSCRIBE`d.
    async fn listen(&self, channel: &str) -> Result<Subscription, StoreError> {
        let (generation, mut con) = self.connection().await?;
        let (tx, rx) = mpsc::channel(SUBSCRIPTION_CAPACITY);
        let id = self
            .inner
            .subscribers
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let order = self.inner.subscribers.order.lock().await;
        // Registered before SUBSCRIBE, so nothing published after its answer is
        // missed. The map keeps the only sender: when a dropped connection clears
        // it, the stream ends.
        self.inner
            .subscribers
            .lock()
            .entry(channel.to_owned())
            .or_default()
            .push((id, tx));
        // Until it is answered, this subscription is released if the call fails or
        // is dropped (a store timeout drops it with the SUBSCRIBE perhaps already
        // applied: the server's subscription must not outlive it).
        let mut pending = Release {
            subscribers: Some(Arc::clone(&self.inner.subscribers)),
            channel: channel.to_owned(),
            id,
            con: con.clone(),
        };
        let subscribed = con.subscribe(channel).await;
        drop(order);
        subscribed.map_err(|e| self.failed(generation, e))?;
        let release = Release {
            subscribers: pending.subscribers.take(),
            channel: pending.channel.clone(),
            id,
            con: pending.con.clone(),
        };
        Ok(Subscription::with_release(rx, move || drop(release)))
    }
}

/// One subscriber's claim on a channel; dropping it forgets the subscriber, and
/// the last one of the channel ends the server's subscription (which would
/// otherwise outlive it, and be restored by every reconnect).
struct Release {
    /// `None` once handed on (to the subscription, when SUBSCRIBE was answered).
    subscribers: Option<Arc<Subscribers>>,
    channel: String,
    /// The subscriber's id in [`Subscribers`] (never a sender, which would keep
    /// the stream open after its connection dropped).
    id: u64,
    con: Con,
}

impl Drop for Release {
    fn drop(&mut self) {
        let Some(subscribers) = self.subscribers.take() else {
            return;
        };
        if !subscribers.release(&self.channel, self.id) {
            return;
        }
        // Off the dropping thread, after any SUBSCRIBE or UNSUBSCRIBE in flight.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let channel = std::mem::take(&mut self.channel);
        let mut con = self.con.clone();
        runtime.spawn(async move {
            let _order = subscribers.order.lock().await;
            // A subscriber that came meanwhile has subscribed (before this task
            // took the lock) or will (after): either way the channel is its to keep.
            if !subscribers.has_live(&channel) {
                let _ = con.unsubscribe(&channel).await;
            }
        });
    }
}

impl CapStore for RedisStore {
    async fn claim(&self, keys: &CapKeys, claim: Claim) -> Result<ClaimReply, StoreError> {
        let (generation, mut con) = self.connection().await?;
        let ttl_ms = u64::try_from(claim.ttl.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let reply: Vec<Value> = self
            .inner
            .claim
            .key(keys.claims())
            .key(keys.expiry())
            .key(keys.short())
            .key(keys.v1_claims())
            .arg(format!("{:032x}", claim.instance.0))
            .arg(claim.seq.to_string())
            .arg(claim.demand)
            .arg(claim.held)
            .arg(ttl_ms)
            .arg(claim.cap)
            .arg(keys.freed_prefix())
            .arg(self.inner.key_ttl_ms.max(ttl_ms))
            .arg(claim.operator.map_or(String::new(), |o| {
                o.cap.map_or("0".to_owned(), |c| c.to_string())
            }))
            .arg(claim.operator.map_or(0, |o| o.at_ms))
            .arg(claim.deadline_ms.map_or(String::new(), |d| d.to_string()))
            .arg(
                claim
                    .operator
                    .and_then(|o| o.signature)
                    .map_or(String::new(), |sig| sig.encode()),
            )
            .invoke_async(&mut con)
            .await
            .map_err(|e| self.failed(generation, e))?;
        parse_claim(&reply).ok_or_else(|| malformed("claim reply", &reply))
    }

    async fn decide_cap(
        &self,
        keys: &CapKeys,
        cap: Option<u32>,
        signature: CapSignature,
    ) -> Result<(), StoreError> {
        self.decide(keys, cap, Some(signature)).await
    }

    async fn set_cap(&self, keys: &CapKeys, cap: u32) -> Result<(), StoreError> {
        self.decide(keys, Some(cap), None).await
    }

    async fn watch_freed(
        &self,
        keys: &CapKeys,
        instance: InstanceId,
    ) -> Result<Subscription, StoreError> {
        self.listen(&keys.freed_for(instance)).await
    }

    async fn withdraw(&self, keys: &CapKeys, instance: InstanceId) -> Result<(), StoreError> {
        let (generation, mut con) = self.connection().await?;
        let _: i64 = self
            .inner
            .withdraw
            .key(keys.claims())
            .key(keys.expiry())
            .key(keys.short())
            .key(keys.v1_claims())
            .arg(format!("{:032x}", instance.0))
            .arg(keys.freed_prefix())
            .invoke_async(&mut con)
            .await
            .map_err(|e| self.failed(generation, e))?;
        Ok(())
    }

    async fn clear_cap(&self, keys: &CapKeys) -> Result<(), StoreError> {
        self.decide(keys, None, None).await
    }

    fn warning(&self) -> Option<String> {
        self.eviction_warning()
    }
}

/// The warning an eviction policy calls for: any but `noeviction` may evict the
/// fleet's keys (`allkeys-*` any of them, like a partial FLUSHALL; `volatile-*`
/// exactly the ones with a TTL, a live lease or claim first).
fn eviction_warning(policy: Option<&str>) -> Option<String> {
    match policy {
        Some("noeviction") => None,
        Some(policy) => Some(format!(
            "the server's maxmemory-policy is {policy}: under memory pressure it may \
             evict the fleet's keys (a live lease or claim included); set noeviction"
        )),
        None => None,
    }
}

fn parse_claim(reply: &[Value]) -> Option<ClaimReply> {
    let n = |i: usize| int(reply.get(i)?).and_then(|v| u64::try_from(v).ok());
    let small = |i: usize| n(i).and_then(|v| u32::try_from(v).ok());
    // Nine elements from a script before signatures were kept; ten since.
    if reply.len() != 9 && reply.len() != 10 {
        return None;
    }
    let signature = match reply.get(9).map(text) {
        None => None,
        Some(sig) => match sig?.as_str() {
            "" => None,
            // An unreadable signature is read as none: the instance refuses it.
            sig => CapSignature::decode(sig),
        },
    };
    let operator = match text(reply.get(6)?)?.as_str() {
        "" => None,
        op => {
            let cap = match op.parse::<u32>().ok()? {
                0 => None,
                cap => Some(cap),
            };
            Some(
                OperatorCap::new(cap, text(reply.get(7)?)?.parse().ok()?).with_signature(signature),
            )
        }
    };
    let (stale, abandoned) = match n(5)? {
        0 => (false, false),
        1 => (true, false),
        2 => (true, true),
        _ => return None,
    };
    Some(ClaimReply {
        allotment: small(0)?,
        cap: small(1)?,
        reserved: small(2)?,
        demand: n(3)?,
        claimants: small(4)?,
        stale,
        abandoned,
        operator,
        store_ms: text(reply.get(8)?)?.parse().ok()?,
    })
}

fn token_text(token: Token) -> String {
    format!("{:032x}", token.0)
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        other => text(other)?.parse().ok(),
    }
}

fn parse_take(reply: &[Value]) -> Option<LeaseReply> {
    let epoch = FleetEpoch(text(reply.get(1)?)?.parse().ok()?);
    match (int(reply.first()?)?, reply.get(2)) {
        (1, None) => Some(LeaseReply::Taken { epoch }),
        (0, Some(ms)) => Some(LeaseReply::Held {
            epoch,
            remaining: Duration::from_millis(u64::try_from(int(ms)?).ok()?),
        }),
        _ => None,
    }
}

fn parse_epoch(s: &str) -> Option<FleetEpoch> {
    // Digits only: `u64::from_str` would also take a leading `+`.
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok().map(FleetEpoch)
}

fn parse_trip_reply(reply: &[Value]) -> Option<TripReply> {
    let [tripped, fleet_trip] = reply else {
        return None;
    };
    let tripped = u32::try_from(int(tripped)?).ok()?;
    let fleet_trip = match text(fleet_trip)?.as_str() {
        "" => None,
        epoch => Some(parse_epoch(epoch)?),
    };
    Some(TripReply {
        tripped,
        fleet_trip,
    })
}

/// A pushed payload: a verdict (`<epoch>:S`, `<epoch>:F`), a fleet trip
/// (`<epoch>:T`) or a cap's freed slots (`freed:<instance>`).
fn parse_event(s: &str) -> Option<FleetEvent> {
    if let Some(instance) = s.strip_prefix("freed:") {
        let valid = instance.len() == 32 && instance.bytes().all(|b| b.is_ascii_hexdigit());
        return valid
            .then(|| u128::from_str_radix(instance, 16).ok())
            .flatten()
            .map(|id| FleetEvent::SlotsFreed(InstanceId(id)));
    }
    match s.strip_suffix(":T") {
        Some(epoch) => parse_epoch(epoch).map(FleetEvent::Tripped),
        None => parse_verdict(s).map(FleetEvent::Verdict),
    }
}

fn parse_verdict(s: &str) -> Option<FleetVerdict> {
    let (epoch, result) = s.split_once(':')?;
    let result = match result {
        "S" => ProbeResult::Succeeded,
        "F" => ProbeResult::Failed,
        _ => return None,
    };
    Some(FleetVerdict {
        epoch: FleetEpoch(epoch.parse().ok()?),
        result,
    })
}

fn malformed(what: &str, got: &dyn fmt::Debug) -> StoreError {
    StoreError::Other(format!("malformed {what} from the server: {got:?}").into())
}

/// Connection trouble is `Unavailable` (the coordinator's local fallback is for
/// it); a server that answered with an error is `Other`.
fn store_error(e: RedisError) -> StoreError {
    if e.is_timeout() {
        StoreError::TimedOut
    } else if e.is_io_error() || e.is_connection_refusal() || e.is_connection_dropped() {
        StoreError::Unavailable(e.to_string())
    } else {
        StoreError::Other(Box::new(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_replies_are_refused_not_panicked_on() {
        assert_eq!(parse_verdict("7:S").map(|v| v.epoch), Some(FleetEpoch(7)));
        for bad in ["", "7", "7:X", "x:S", "-1:F", "99999999999999999999999:S"] {
            assert_eq!(parse_verdict(bad), None, "{bad:?}");
        }
        let s = |t: &str| Value::BulkString(t.as_bytes().to_vec());
        assert_eq!(
            parse_take(&[Value::Int(0), s("3"), Value::Int(250)]),
            Some(LeaseReply::Held {
                epoch: FleetEpoch(3),
                remaining: Duration::from_millis(250)
            })
        );
        assert_eq!(parse_take(&[]), None);
        assert_eq!(parse_take(&[Value::Int(1), s("x")]), None);
        assert_eq!(parse_take(&[Value::Int(0), s("3"), Value::Int(-5)]), None);
        assert_eq!(parse_take(&[Value::Int(2), s("3")]), None);
        assert_eq!(
            parse_event("12:T"),
            Some(FleetEvent::Tripped(FleetEpoch(12)))
        );
        assert!(matches!(parse_event("12:F"), Some(FleetEvent::Verdict(_))));
        for bad in [":T", "+1:T", "x:T", "1:T:T"] {
            assert_eq!(parse_event(bad), None, "{bad:?}");
        }
        assert_eq!(
            parse_event("freed:000000000000000000000000000000ff"),
            Some(FleetEvent::SlotsFreed(InstanceId(255)))
        );
        for bad in [
            "freed:",
            "freed:ff",
            "freed:+00000000000000000000000000000ff",
        ] {
            assert_eq!(parse_event(bad), None, "{bad:?}");
        }
        assert_eq!(
            parse_trip_reply(&[Value::Int(2), s("9")]),
            Some(TripReply {
                tripped: 2,
                fleet_trip: Some(FleetEpoch(9))
            })
        );
        assert_eq!(
            parse_trip_reply(&[Value::Int(1), s("")]).map(|r| r.fleet_trip),
            Some(None)
        );
        assert_eq!(parse_trip_reply(&[Value::Int(-1), s("")]), None);
        assert_eq!(parse_trip_reply(&[Value::Int(1)]), None);
    }

    #[test]
    fn malformed_claim_replies_are_refused() {
        let i = Value::Int;
        let s = |t: &str| Value::BulkString(t.as_bytes().to_vec());
        let ok = [i(3), i(10), i(7), i(12), i(2), i(0), s(""), s(""), s("17")];
        let r = parse_claim(&ok).unwrap();
        assert_eq!(
            (
                r.allotment,
                r.cap,
                r.reserved,
                r.demand,
                r.claimants,
                r.stale
            ),
            (3, 10, 7, 12, 2, false)
        );
        assert_eq!((r.abandoned, r.store_ms), (false, 17));
        assert!(parse_claim(&ok[..8]).is_none());
        let with = |mut r: [Value; 9], at: usize, v: Value| {
            r[at] = v;
            parse_claim(&r)
        };
        assert!(with(ok.clone(), 0, i(-1)).is_none());
        let abandoned = with(ok.clone(), 5, i(2)).unwrap();
        assert!(abandoned.stale && abandoned.abandoned);
        assert!(with(ok.clone(), 5, i(3)).is_none());
        assert!(with(ok.clone(), 8, s("x")).is_none());
        assert!(with(ok, 0, i(1 << 40)).is_none());
        let set = [
            i(3),
            i(10),
            i(7),
            i(12),
            i(2),
            i(0),
            s("4"),
            s("1765"),
            s("17"),
        ];
        assert_eq!(
            parse_claim(&set).unwrap().operator,
            Some(OperatorCap::new(Some(4), 1765))
        );
        let cleared = with(set.clone(), 6, s("0")).unwrap();
        assert_eq!(cleared.operator, Some(OperatorCap::new(None, 1765)));
        assert!(with(set.clone(), 7, s("x")).is_none());
        assert!(with(set, 6, s("-1")).is_none());
    }

    #[test]
    fn the_url_is_checked_at_build_and_the_server_is_not_dialled() {
        assert_eq!(RedisStore::new("").unwrap_err().field(), "url");
        assert_eq!(RedisStore::new("http://x").unwrap_err().field(), "url");
        // Outside any runtime, with nothing listening: still builds.
        let store = RedisStore::new("redis://127.0.0.1:1/?protocol=resp2").unwrap();
        assert!(format!("{store:?}").contains("connected_once: false"));
    }
}
