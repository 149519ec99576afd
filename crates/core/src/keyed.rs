//! The bounded map shared by the keyed layers, [`KeyedMap`], and what every keyed
//! layer does with it, [`Keyed`].

use std::fmt;
use std::hash::{BuildHasher, Hash, RandomState};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use hashbrown::HashTable;

mod policy;

pub use policy::{Keyed, KeyedPolicy};

/// The most slots one insert looks at before giving up on finding one to evict.
pub const MAX_PROBES: usize = 64;

/// The bound on keys of a keyed layer unless its builder's `max_keys` says otherwise.
pub const DEFAULT_MAX_KEYS: usize = 1024;

/// A bounded map from keys to shared state, for the keyed layers.
///
/// Keys often come from the request (a host, a route, a tenant header), so a client
/// chooses them: whatever a new key costs, a flood of fresh keys multiplies. Here a
/// new key costs the same whatever the size of the map, and the map never holds its
/// lock while anything but its own bookkeeping runs.
///
/// # Eviction: CLOCK with a bounded sweep
///
/// The values live in a ring of at most `max_keys` slots, indexed by a hash map.
/// A lookup sets the slot's *referenced* bit (one relaxed store, and only when the
/// bit is clear, so a hot key does not keep writing a shared cache line). When a new
/// key meets a full map, a hand sweeps the ring from where it last stopped, looking
/// at no more than [`MAX_PROBES`] slots:
///
/// ```text
///             hand
///              v
///   ... | b (ref) | c (pinned) | d | e (ref) | ...
///          clear,    skip        evict d, put the new key in its slot
///          go on
/// ```
///
/// - a **pinned** value (the layer's predicate: an open breaker, a bulkhead with
///   calls in flight or waiting) is never evicted;
/// - a **referenced** one is given a second chance: its bit is cleared and the hand
///   moves on;
/// - the first slot that is neither is evicted. If the sweep ends without one, the
///   first referenced, unpinned slot it passed is evicted instead (a busy map is no
///   reason to turn a key away);
/// - if every slot it looked at was pinned, the key gets no slot (the layer decides
///   what that means: the breaker guards the call with its shared overflow
///   breaker, the bulkhead rejects it with `BulkheadFull`). The hand has moved on,
///   so the next new key looks at the next slots.
///
/// A new key is inserted with its bit clear: a key seen once (a flood of fresh
/// keys) is the first to go, before the keys in use. Each lookup sets at most one
/// bit and each probe clears at most one, so the sweep is O(1) amortized, and it is
/// never longer than [`MAX_PROBES`] probes. In a map of at most [`MAX_PROBES`] keys
/// the sweep sees every slot, so a key is turned away only when every key is
/// pinned; in a larger one, when the [`MAX_PROBES`] keys at the hand are. This
/// approximates least recently used (as an operating system's page cache does),
/// which is enough for state whose loss costs little: an evicted closed breaker
/// forgets its window, an idle bulkhead its counters.
///
/// # Layout: one slot per key, a small index
///
/// Each key is kept once, in its slot, with its hash and its value; the index
/// holds only slot numbers (4 bytes a key), found by that hash. So the index of
/// 10^5 keys is about half a megabyte and stays in a core's cache, the sweep reads
/// the slots in order, and evicting a key removes its slot number from the index
/// by the kept hash, without reading or hashing the evicted key again. The slots
/// and the index grow with the keys and stop growing once the map is full: in a
/// flood, each new key takes an evicted key's slot and index entry.
///
/// What still grows with the map is the memory hierarchy's share: an evicted
/// value was last used many new keys ago, so reading whether it is pinned and
/// dropping it miss the cache, as they would in any map of that size.
///
/// # What runs under the lock
///
/// One `RwLock`: lookups share it, inserts take it briefly, twice. Keys are hashed
/// before it is taken; under it run only the key's `Eq` (to tell keys of one hash
/// apart), the value's `Clone` (an `Arc` in every seawall layer) and the pinning
/// predicate (which must be cheap and run no user code). Building the new value,
/// dropping an evicted key and value, and the caller's own work (polling or
/// calling the inner service, tracing events, a metrics recorder) all happen with
/// the lock released; only [`entries`](Self::entries) clones keys under it (a
/// handle's read, not a call's).
///
/// # Example
///
/// ```
/// use std::convert::Infallible;
/// use std::sync::Arc;
/// use seawall_core::KeyedMap;
///
/// let map: KeyedMap<&str, Arc<u32>> = KeyedMap::new(2);
/// let pinned = |v: &Arc<u32>| Arc::strong_count(v) > 1;
/// let make = |_: &&str| Ok::<_, Infallible>(Arc::new(0));
/// let a = map.get_or_insert_with("a", pinned, make).unwrap().unwrap();
/// let _b = map.get_or_insert_with("b", pinned, make).unwrap().unwrap();
/// // Both values are held elsewhere (pinned): a third key gets no slot.
/// assert!(map.get_or_insert_with("c", pinned, make).unwrap().is_none());
/// drop(a);
/// // Now "a" may go.
/// assert!(map.get_or_insert_with("c", pinned, make).unwrap().is_some());
/// assert!(map.get(&"a").is_none());
/// assert_eq!(map.evicted(), 1);
/// ```
pub struct KeyedMap<K, V> {
    max_keys: usize,
    /// Keys are hashed with it before the lock is taken.
    hasher: RandomState,
    table: RwLock<Table<K, V>>,
    evicted: AtomicU64,
}

struct Table<K, V> {
    /// Slot numbers, found by the hash kept in each slot: 4 bytes a key, so the index
    /// of 10^5 keys stays in a core's cache, and an eviction finds the evicted key's
    /// bucket by its slot number without reading, hashing or comparing the key.
    index: HashTable<u32>,
    slots: Vec<Slot<K, V>>,
    /// Slots with no entry, ready for a new key.
    free: Vec<u32>,
    /// Slots taken by inserts that are building their value (no entry, not free).
    reserved: usize,
    hand: usize,
}

struct Slot<K, V> {
    entry: Option<Entry<K, V>>,
    referenced: AtomicBool,
}

/// A key, kept once (the index holds only slot numbers), with its hash and value.
struct Entry<K, V> {
    hash: u64,
    key: K,
    value: V,
}

impl<K, V> fmt::Debug for KeyedMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedMap")
            .field("max_keys", &self.max_keys)
            .field("len", &self.read().index.len())
            .field("evicted", &self.evicted())
            .finish_non_exhaustive()
    }
}

impl<K, V> KeyedMap<K, V> {
    /// An empty map that keeps at most `max_keys` keys (at least one, at most
    /// `u32::MAX`). Nothing is allocated until keys arrive; the index and the slots
    /// grow with the keys, and stop growing once the map is full.
    pub fn new(max_keys: usize) -> Self {
        Self {
            max_keys: max_keys.clamp(1, u32::MAX as usize),
            hasher: RandomState::new(),
            table: RwLock::new(Table {
                index: HashTable::new(),
                slots: Vec::new(),
                free: Vec::new(),
                reserved: 0,
                hand: 0,
            }),
            evicted: AtomicU64::new(0),
        }
    }

    /// The most keys kept.
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// How many keys have a value now.
    pub fn len(&self) -> usize {
        self.read().index.len()
    }

    /// Whether no key has a value.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many keys were evicted to make room for new ones, since the map was built.
    pub fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    fn read(&self) -> RwLockReadGuard<'_, Table<K, V>> {
        // Nothing that runs under the lock leaves the table inconsistent if it
        // panics (see `reserve` and `fill`), so a poisoned lock is still good.
        self.table.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Table<K, V>> {
        self.table.write().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<K: Hash + Eq, V: Clone> KeyedMap<K, V> {
    /// The value of `key`, marked as recently used.
    #[inline]
    pub fn get(&self, key: &K) -> Option<V> {
        self.get_hashed(self.hasher.hash_one(key), key)
    }

    #[inline]
    fn get_hashed(&self, hash: u64, key: &K) -> Option<V> {
        let table = self.read();
        let slot = table.slot_of(hash, key)?;
        if !slot.referenced.load(Ordering::Relaxed) {
            slot.referenced.store(true, Ordering::Relaxed);
        }
        slot.entry.as_ref().map(|e| e.value.clone())
    }

    /// The value of `key` without marking it used (for handles and snapshots).
    pub fn peek(&self, key: &K) -> Option<V> {
        let hash = self.hasher.hash_one(key);
        self.read().value_of(hash, key)
    }

    /// The value of `key`, or a new one built by `make` (with the lock released) in
    /// a free slot or in the slot of an evicted key. `Ok(None)` when the map is full
    /// and every slot the sweep looked at holds a `pinned` value; `Err` when `make`
    /// fails (the slot it was given is freed).
    ///
    /// `pinned` runs under the lock: it must be cheap and run no user code. If
    /// another caller inserts the same key while `make` runs, its value is returned
    /// and the one made here is dropped.
    pub fn get_or_insert_with<E>(
        &self,
        key: K,
        pinned: impl Fn(&V) -> bool,
        make: impl FnOnce(&K) -> Result<V, E>,
    ) -> Result<Option<V>, E> {
        // Hashed once, with the lock released; the hash is kept in the key's slot.
        let hash = self.hasher.hash_one(&key);
        if let Some(v) = self.get_hashed(hash, &key) {
            return Ok(Some(v));
        }
        let (reservation, evicted) = {
            let mut table = self.write();
            if let Some(v) = table.value_of(hash, &key) {
                return Ok(Some(v));
            }
            match table.reserve(self.max_keys, &pinned) {
                Some(r) => r,
                None => return Ok(None),
            }
        };
        if evicted.is_some() {
            self.evicted.fetch_add(1, Ordering::Relaxed);
        }
        // The evicted key and value are dropped here, with the lock released.
        drop(evicted);
        let reservation = Reservation {
            map: self,
            slot: Some(reservation),
        };
        let value = make(&key)?;
        Ok(Some(reservation.fill(hash, key, value)))
    }

    /// Every key with its value, copied out, in no order. The keys are cloned under
    /// the shared lock (lookups go on; inserts wait): for handles, not for a hot path.
    pub fn entries(&self) -> Vec<(K, V)>
    where
        K: Clone,
    {
        let table = self.read();
        table
            .entries()
            .map(|e| (e.key.clone(), e.value.clone()))
            .collect()
    }

    /// Runs `f` on every key and value, in no order, under the shared lock: for a
    /// layer's own quick reads (summing counters) that should not pin every value
    /// by copying it out. `f` must run no user code.
    pub fn for_each(&self, mut f: impl FnMut(&K, &V)) {
        let table = self.read();
        for e in table.entries() {
            f(&e.key, &e.value);
        }
    }

    /// Every value, copied out, in no order.
    pub fn values(&self) -> Vec<V> {
        let table = self.read();
        table.entries().map(|e| e.value.clone()).collect()
    }
}

/// A slot taken out of circulation while its value is built; given back if the
/// value is never stored (`make` failed or panicked).
struct Reservation<'a, K: Hash + Eq, V: Clone> {
    map: &'a KeyedMap<K, V>,
    slot: Option<u32>,
}

impl<K: Hash + Eq, V: Clone> Reservation<'_, K, V> {
    fn fill(mut self, hash: u64, key: K, value: V) -> V {
        let Some(i) = self.slot.take() else {
            return value;
        };
        let mut table = self.map.write();
        table.reserved -= 1;
        if let Some(existing) = table.value_of(hash, &key) {
            // Inserted meanwhile by another caller: keep theirs. Ours is dropped
            // after the lock is released.
            table.free.push(i);
            drop(table);
            drop((key, value));
            return existing;
        }
        let Table { index, slots, .. } = &mut *table;
        let Some(slot) = slots.get_mut(i as usize) else {
            return value;
        };
        slot.entry = Some(Entry {
            hash,
            key,
            value: value.clone(),
        });
        *slot.referenced.get_mut() = false;
        // Growing the index rehashes from the hashes kept in the slots: no key's
        // `Hash` runs under the lock.
        index.insert_unique(hash, i, |&j| hash_of(slots, j));
        value
    }
}

impl<K: Hash + Eq, V: Clone> Drop for Reservation<'_, K, V> {
    fn drop(&mut self) {
        if let Some(i) = self.slot.take() {
            let mut table = self.map.write();
            table.reserved -= 1;
            table.free.push(i);
        }
    }
}

/// The hash kept in slot `i`, for the index to rehash by.
fn hash_of<K, V>(slots: &[Slot<K, V>], i: u32) -> u64 {
    slots
        .get(i as usize)
        .and_then(|s| s.entry.as_ref())
        .map_or(0, |e| e.hash)
}

impl<K: Eq, V: Clone> Table<K, V> {
    fn slot_of(&self, hash: u64, key: &K) -> Option<&Slot<K, V>> {
        let slots = &self.slots;
        let i = self.index.find(hash, |&i| {
            slots
                .get(i as usize)
                .and_then(|s| s.entry.as_ref())
                .is_some_and(|e| e.key == *key)
        })?;
        slots.get(*i as usize)
    }

    fn value_of(&self, hash: u64, key: &K) -> Option<V> {
        let entry = self.slot_of(hash, key)?.entry.as_ref()?;
        Some(entry.value.clone())
    }

    fn entries(&self) -> impl Iterator<Item = &Entry<K, V>> {
        self.slots.iter().filter_map(|s| s.entry.as_ref())
    }

    /// A slot for a new key: a free one while the map is not full, else the slot of
    /// a key the bounded sweep evicts, with what it held. `None` when every slot it
    /// looked at is pinned.
    fn reserve(
        &mut self,
        max_keys: usize,
        pinned: &impl Fn(&V) -> bool,
    ) -> Option<(u32, Option<Entry<K, V>>)> {
        if self.index.len() + self.reserved < max_keys {
            let i = match self.free.pop() {
                Some(i) => i,
                None => {
                    // Below `max_keys`, which fits in a `u32`.
                    let i = u32::try_from(self.slots.len()).ok()?;
                    self.slots.push(Slot {
                        entry: None,
                        referenced: AtomicBool::new(false),
                    });
                    i
                }
            };
            self.reserved += 1;
            if self.index.len() + self.reserved == max_keys {
                self.make_room(max_keys);
            }
            return Some((i, None));
        }
        let victim = self.sweep(pinned)?;
        let entry = self.slots.get_mut(victim as usize)?.entry.take()?;
        // Found by its slot number: the evicted key is not read again.
        if let Ok(bucket) = self.index.find_entry(entry.hash, |&i| i == victim) {
            bucket.remove();
        }
        self.reserved += 1;
        Some((victim, Some(entry)))
    }

    /// Sizes the index once the map is full, when every insert from now on follows
    /// an eviction: with room for twice the keys, the markers its removals leave
    /// stay rare, so it never has to rehash (reading every slot) while new keys
    /// keep coming. Done by the insert that fills the map, as a growth would be.
    #[cold]
    fn make_room(&mut self, max_keys: usize) {
        let room = max_keys.saturating_mul(2);
        if self.index.capacity() < room {
            let Table { index, slots, .. } = self;
            index.reserve(room - index.len(), |&j| hash_of(slots, j));
        }
    }

    /// Moves the hand over at most [`MAX_PROBES`] slots; the slot to evict.
    fn sweep(&mut self, pinned: &impl Fn(&V) -> bool) -> Option<u32> {
        let n = self.slots.len();
        let mut second_choice = None;
        for _ in 0..MAX_PROBES.min(n) {
            let i = self.hand;
            self.hand = if i + 1 >= n { 0 } else { i + 1 };
            let Some(slot) = self.slots.get_mut(i) else {
                continue;
            };
            let Some(entry) = &slot.entry else {
                // Reserved by an insert still building its value.
                continue;
            };
            // Slot numbers fit in a `u32` (see `KeyedMap::new`).
            let i = i as u32;
            if std::mem::take(slot.referenced.get_mut()) {
                if second_choice.is_none() && !pinned(&entry.value) {
                    second_choice = Some(i);
                }
            } else if !pinned(&entry.value) {
                return Some(i);
            }
        }
        second_choice
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use std::sync::Arc;

    type Map = KeyedMap<u32, Arc<u32>>;

    fn held(v: &Arc<u32>) -> bool {
        Arc::strong_count(v) > 1
    }

    fn insert(map: &Map, k: u32) -> Option<Arc<u32>> {
        map.get_or_insert_with(k, held, |k| Ok::<_, Infallible>(Arc::new(*k)))
            .unwrap()
    }

    fn keys(map: &Map) -> Vec<u32> {
        let mut keys: Vec<u32> = map.entries().iter().map(|(k, _)| *k).collect();
        keys.sort_unstable();
        keys
    }

    #[test]
    fn a_key_used_since_the_hand_passed_is_kept_over_one_that_was_not() {
        let map = Map::new(3);
        for k in [1, 2, 3] {
            insert(&map, k);
        }
        map.get(&1);
        map.get(&3);
        // 1 gets a second chance (its bit is cleared), 2 was not used: it goes.
        insert(&map, 4);
        assert_eq!(keys(&map), vec![1, 3, 4]);
        assert_eq!(map.evicted(), 1);
        // 1 is used again after the hand passed it, 4 never was: 3 and 1 get a
        // second chance, 4 goes.
        map.get(&1);
        insert(&map, 5);
        assert_eq!(keys(&map), vec![1, 3, 5]);
        // Nobody was used since: the hand, after 4's old slot, finds 3 first.
        insert(&map, 6);
        assert_eq!(keys(&map), vec![1, 5, 6]);
    }

    #[test]
    fn a_flood_of_fresh_keys_evicts_itself_before_the_keys_in_use() {
        let map = Map::new(8);
        for k in 0..4 {
            insert(&map, k);
        }
        for fresh in 100..10_000 {
            // The keys in use are used between fresh keys.
            for k in 0..4 {
                assert_eq!(*map.get(&k).unwrap(), k);
            }
            insert(&map, fresh);
            assert!(map.len() <= 8);
        }
        assert_eq!(&keys(&map)[..4], &[0, 1, 2, 3]);
    }

    #[test]
    fn pinned_values_are_never_evicted_and_a_full_pinned_map_admits_no_key() {
        let map = Map::new(4);
        let held: Vec<_> = (0..4).map(|k| insert(&map, k).unwrap()).collect();
        for fresh in 10..20 {
            assert!(insert(&map, fresh).is_none());
        }
        assert_eq!(keys(&map), vec![0, 1, 2, 3]);
        assert_eq!(map.evicted(), 0);
        // Known keys are still found.
        assert_eq!(*insert(&map, 2).unwrap(), 2);
        drop(held);
        assert!(insert(&map, 10).is_some());
        assert_eq!(map.len(), 4);
    }

    #[test]
    fn a_busy_map_still_makes_room() {
        let map = Map::new(MAX_PROBES * 4);
        for k in 0..(MAX_PROBES * 4) as u32 {
            insert(&map, k);
            map.get(&k);
        }
        // Every key referenced: the sweep clears bits and evicts the first it passed.
        assert!(insert(&map, 9_999).is_some());
        assert_eq!(map.len(), MAX_PROBES * 4);
        assert_eq!(map.evicted(), 1);
    }

    #[test]
    fn a_sweep_looks_at_no_more_than_max_probes_slots() {
        let n = MAX_PROBES * 3;
        let map = Map::new(n);
        let mut held = Vec::new();
        for k in 0..n as u32 {
            let v = insert(&map, k).unwrap();
            // Only the last key is unpinned: the first sweep cannot reach it.
            if k + 1 < n as u32 {
                held.push(v);
            }
        }
        let probes = std::cell::Cell::new(0usize);
        let counting = |v: &Arc<u32>| {
            probes.set(probes.get() + 1);
            Arc::strong_count(v) > 1
        };
        let make = |k: &u32| Ok::<_, Infallible>(Arc::new(*k));
        assert!(map
            .get_or_insert_with(10_000, counting, make)
            .unwrap()
            .is_none());
        assert_eq!(probes.get(), MAX_PROBES);
        // The hand moved on: the sweeps that follow reach the unpinned key.
        assert!(map
            .get_or_insert_with(10_001, counting, make)
            .unwrap()
            .is_none());
        assert!(map
            .get_or_insert_with(10_002, counting, make)
            .unwrap()
            .is_some());
        assert!(map.peek(&(n as u32 - 1)).is_none());
    }

    /// A value that checks, when dropped, that the map is not locked.
    struct Tracker {
        map: &'static KeyedMap<u32, Arc<Tracker>>,
        dropped: Arc<AtomicBool>,
    }

    impl Drop for Tracker {
        fn drop(&mut self) {
            assert!(self.map.table.try_write().is_ok(), "dropped under the lock");
            self.dropped.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn make_runs_and_the_evicted_value_drops_with_the_lock_released() {
        let map: &'static KeyedMap<u32, Arc<Tracker>> = Box::leak(Box::new(KeyedMap::new(1)));
        let first_dropped = Arc::new(AtomicBool::new(false));
        let tracker = |dropped: &Arc<AtomicBool>| Tracker {
            map,
            dropped: Arc::clone(dropped),
        };
        let pinned = |v: &Arc<Tracker>| Arc::strong_count(v) > 1;
        map.get_or_insert_with(1, pinned, |_| {
            Ok::<_, Infallible>(Arc::new(tracker(&first_dropped)))
        })
        .unwrap();
        let second_dropped = Arc::new(AtomicBool::new(false));
        let made = map
            .get_or_insert_with(2, pinned, |_| {
                assert!(map.table.try_write().is_ok(), "made under the lock");
                // Key 1 was evicted (and dropped) before `make` ran; the map can be
                // used from `make`, as from any user code.
                assert!(first_dropped.load(Ordering::SeqCst));
                assert!(map.get(&1).is_none());
                Ok::<_, Infallible>(Arc::new(tracker(&second_dropped)))
            })
            .unwrap();
        assert!(made.is_some());
        assert!(!second_dropped.load(Ordering::SeqCst));
    }

    #[test]
    fn a_failed_make_gives_its_slot_back() {
        let map = Map::new(1);
        let err = map.get_or_insert_with(1, held, |_| Err("no")).unwrap_err();
        assert_eq!(err, "no");
        assert!(map.is_empty());
        assert!(insert(&map, 2).is_some());
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            map.get_or_insert_with(3, held, |_| -> Result<Arc<u32>, Infallible> {
                panic!("make panicked")
            })
        }));
        assert!(panicked.is_err());
        // 2 was evicted for 3, whose slot came back: the map is empty but usable.
        assert!(map.is_empty());
        assert!(insert(&map, 4).is_some());
        assert_eq!(keys(&map), vec![4]);
    }

    #[test]
    fn a_key_inserted_while_make_ran_keeps_the_first_value() {
        let map = Map::new(4);
        let v = map
            .get_or_insert_with(1, held, |_| {
                // Another caller inserts the same key meanwhile.
                assert_eq!(*insert(&map, 1).unwrap(), 1);
                Ok::<_, Infallible>(Arc::new(100))
            })
            .unwrap()
            .unwrap();
        assert_eq!(*v, 1);
        assert_eq!(map.len(), 1);
        // The slot reserved for the loser is free again.
        for k in 2..5 {
            insert(&map, k);
        }
        assert_eq!(map.len(), 4);
        assert_eq!(map.evicted(), 0);
    }

    /// A key that counts its hashes and checks that the map is not locked then.
    #[derive(Clone, PartialEq, Eq)]
    struct Counted(u32);

    static COUNTED_MAP: std::sync::OnceLock<KeyedMap<Counted, Arc<u32>>> =
        std::sync::OnceLock::new();
    static HASHED: AtomicU64 = AtomicU64::new(0);

    impl Hash for Counted {
        fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
            if let Some(map) = COUNTED_MAP.get() {
                assert!(map.table.try_write().is_ok(), "hashed under the lock");
            }
            HASHED.fetch_add(1, Ordering::SeqCst);
            self.0.hash(state);
        }
    }

    #[test]
    fn a_key_is_hashed_once_per_call_with_the_lock_released_and_never_to_evict_or_grow() {
        let map = COUNTED_MAP.get_or_init(|| KeyedMap::new(100));
        let make = |k: &Counted| Ok::<_, Infallible>(Arc::new(k.0));
        // Growing the index from empty to full, then a flood that evicts.
        for k in 0..1_000 {
            let v = map.get_or_insert_with(Counted(k), held, make).unwrap();
            assert_eq!(*v.unwrap(), k);
        }
        assert_eq!(HASHED.load(Ordering::SeqCst), 1_000);
        assert_eq!(map.evicted(), 900);
        assert_eq!(*map.get(&Counted(999)).unwrap(), 999);
        assert_eq!(*map.peek(&Counted(998)).unwrap(), 998);
        assert_eq!(HASHED.load(Ordering::SeqCst), 1_002);
    }

    #[test]
    fn the_index_stops_growing_once_the_map_is_full() {
        let map = Map::new(1_000);
        for k in 0..1_000 {
            insert(&map, k);
        }
        let capacity = map.read().index.capacity();
        assert!(capacity >= 2_000, "sized once full: {capacity}");
        for fresh in 0..100_000 {
            insert(&map, 1_000_000 + fresh);
        }
        // Not grown (it would double), and still room for twice the keys: the
        // markers the evictions left are few.
        let after = map.read().index.capacity();
        assert!(
            after <= capacity && after >= 2_000,
            "{capacity} then {after}"
        );
        assert_eq!(map.len(), 1_000);
        assert_eq!(map.read().slots.len(), 1_000);
    }

    #[test]
    fn a_huge_max_keys_allocates_nothing_up_front() {
        let map = Map::new(usize::MAX);
        assert_eq!(map.max_keys(), u32::MAX as usize);
        assert_eq!(map.read().index.capacity(), 0);
        assert!(insert(&map, 1).is_some());
        assert!(map.read().index.capacity() < 1_000);
    }

    #[test]
    fn threads_never_exceed_the_bound_nor_lose_a_key_in_use() {
        let map = Map::new(16);
        std::thread::scope(|s| {
            for t in 0..4u32 {
                let map = &map;
                s.spawn(move || {
                    // Each thread holds its own key's value throughout.
                    let own = insert(map, t).unwrap();
                    for i in 0..5_000u32 {
                        let k = 1_000 + (i * 7 + t) % 300;
                        if let Some(v) = insert(map, k) {
                            assert_eq!(*v, k);
                        }
                        assert!(map.len() <= 16);
                        assert_eq!(*map.peek(&t).unwrap(), t);
                    }
                    drop(own);
                });
            }
        });
        assert!(map.len() <= 16);
        let table = map.read();
        assert_eq!(table.reserved, 0);
        assert_eq!(table.index.len() + table.free.len(), table.slots.len());
    }
}
