//! The bounded map shared by the keyed layers; see [`KeyedMap`].

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// The most slots one insert looks at before giving up on finding one to evict.
pub const MAX_PROBES: usize = 64;

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
/// # What runs under the lock
///
/// One `RwLock`: lookups share it, inserts take it briefly, twice. Under it run only
/// the key's `Hash` and `Eq` (a map cannot find a key otherwise), the value's
/// `Clone` (an `Arc` in every seawall layer) and the pinning predicate (which must
/// be cheap and run no user code). Cloning the new key (the index keeps it inline,
/// so a lookup reads no other allocation; its slot keeps a shared copy for the
/// sweep and the handles), building the new value, dropping an evicted key and
/// value, and the caller's own work (polling or calling the inner service, tracing
/// events, a metrics recorder) all happen with the lock released.
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
    table: RwLock<Table<K, V>>,
    evicted: AtomicU64,
}

struct Table<K, V> {
    /// Keys inline, so a lookup reads no other allocation than its bucket's.
    index: HashMap<K, usize>,
    slots: Vec<Slot<K, V>>,
    /// Slots with no entry, ready for a new key.
    free: Vec<usize>,
    /// Slots taken by inserts that are building their value (no entry, not free).
    reserved: usize,
    hand: usize,
}

struct Slot<K, V> {
    entry: Option<(Arc<K>, V)>,
    referenced: AtomicBool,
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
    /// An empty map that keeps at most `max_keys` keys (at least one). Nothing is
    /// allocated until keys arrive.
    pub fn new(max_keys: usize) -> Self {
        Self {
            max_keys: max_keys.max(1),
            table: RwLock::new(Table {
                index: HashMap::new(),
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
        let table = self.read();
        let slot = table.slots.get(*table.index.get(key)?)?;
        let (_, value) = slot.entry.as_ref()?;
        if !slot.referenced.load(Ordering::Relaxed) {
            slot.referenced.store(true, Ordering::Relaxed);
        }
        Some(value.clone())
    }

    /// The value of `key` without marking it used (for handles and snapshots).
    pub fn peek(&self, key: &K) -> Option<V> {
        let table = self.read();
        let slot = table.slots.get(*table.index.get(key)?)?;
        slot.entry.as_ref().map(|(_, v)| v.clone())
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
    ) -> Result<Option<V>, E>
    where
        K: Clone,
    {
        if let Some(v) = self.get(&key) {
            return Ok(Some(v));
        }
        let (reservation, evicted) = {
            let mut table = self.write();
            if let Some(v) = table.value_of(&key) {
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
        Ok(Some(reservation.fill(key, value)))
    }

    /// Every key with its value, copied out (cloning `Arc`s only), in no order.
    pub fn entries(&self) -> Vec<(Arc<K>, V)> {
        let table = self.read();
        table
            .slots
            .iter()
            .filter_map(|s| s.entry.as_ref())
            .map(|(k, v)| (Arc::clone(k), v.clone()))
            .collect()
    }

    /// Runs `f` on every key and value, in no order, under the shared lock: for a
    /// layer's own quick reads (summing counters) that should not pin every value
    /// by copying it out. `f` must run no user code.
    pub fn for_each(&self, mut f: impl FnMut(&K, &V)) {
        let table = self.read();
        for (k, v) in table.slots.iter().filter_map(|s| s.entry.as_ref()) {
            f(k, v);
        }
    }

    /// Every value, copied out, in no order.
    pub fn values(&self) -> Vec<V> {
        let table = self.read();
        table
            .slots
            .iter()
            .filter_map(|s| s.entry.as_ref())
            .map(|(_, v)| v.clone())
            .collect()
    }
}

/// A slot taken out of circulation while its value is built; given back if the
/// value is never stored (`make` failed or panicked).
struct Reservation<'a, K: Hash + Eq, V: Clone> {
    map: &'a KeyedMap<K, V>,
    slot: Option<usize>,
}

impl<K: Hash + Eq, V: Clone> Reservation<'_, K, V> {
    fn fill(mut self, key: K, value: V) -> V
    where
        K: Clone,
    {
        let Some(i) = self.slot.take() else {
            return value;
        };
        // The slot's copy of the key (for the sweep and the handles), made with the
        // lock released.
        let shared = Arc::new(key.clone());
        let mut table = self.map.write();
        table.reserved -= 1;
        if let Some(existing) = table.value_of(&key) {
            // Inserted meanwhile by another caller: keep theirs. Ours (and our copy
            // of the key) is dropped after the lock is released.
            table.free.push(i);
            drop(table);
            drop((key, shared, value));
            return existing;
        }
        // The index first: if the key's `Hash` or `Eq` panicked, nothing changed.
        table.index.insert(key, i);
        if let Some(slot) = table.slots.get_mut(i) {
            slot.entry = Some((shared, value.clone()));
            *slot.referenced.get_mut() = false;
        }
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

/// What an eviction took out of the map, dropped once the lock is released.
type Evicted<K, V> = Option<((K, usize), (Arc<K>, V))>;

impl<K: Hash + Eq, V: Clone> Table<K, V> {
    fn value_of(&self, key: &K) -> Option<V> {
        let slot = self.slots.get(*self.index.get(key)?)?;
        slot.entry.as_ref().map(|(_, v)| v.clone())
    }

    /// A slot for a new key: a free one while the map is not full, else the slot of
    /// a key the bounded sweep evicts. `None` when every slot it looked at is pinned.
    fn reserve(
        &mut self,
        max_keys: usize,
        pinned: &impl Fn(&V) -> bool,
    ) -> Option<(usize, Evicted<K, V>)> {
        if self.index.len() + self.reserved < max_keys {
            let i = self.free.pop().unwrap_or_else(|| {
                self.slots.push(Slot {
                    entry: None,
                    referenced: AtomicBool::new(false),
                });
                self.slots.len() - 1
            });
            self.reserved += 1;
            return Some((i, None));
        }
        let victim = self.sweep(pinned)?;
        let slot = self.slots.get_mut(victim)?;
        let key = Arc::clone(&slot.entry.as_ref()?.0);
        // The index first: if the key's `Hash` or `Eq` panicked, nothing changed.
        let indexed = self.index.remove_entry(&*key);
        let entry = self.slots.get_mut(victim)?.entry.take();
        drop(key);
        self.reserved += 1;
        Some((victim, indexed.zip(entry)))
    }

    /// Moves the hand over at most [`MAX_PROBES`] slots; the slot to evict.
    fn sweep(&mut self, pinned: &impl Fn(&V) -> bool) -> Option<usize> {
        let n = self.slots.len();
        let mut second_choice = None;
        for _ in 0..MAX_PROBES.min(n) {
            let i = self.hand;
            self.hand = if i + 1 == n { 0 } else { i + 1 };
            let Some(slot) = self.slots.get_mut(i) else {
                continue;
            };
            let Some((_, value)) = &slot.entry else {
                // Reserved by an insert still building its value.
                continue;
            };
            if std::mem::take(slot.referenced.get_mut()) {
                if second_choice.is_none() && !pinned(value) {
                    second_choice = Some(i);
                }
            } else if !pinned(value) {
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

    type Map = KeyedMap<u32, Arc<u32>>;

    fn held(v: &Arc<u32>) -> bool {
        Arc::strong_count(v) > 1
    }

    fn insert(map: &Map, k: u32) -> Option<Arc<u32>> {
        map.get_or_insert_with(k, held, |k| Ok::<_, Infallible>(Arc::new(*k)))
            .unwrap()
    }

    fn keys(map: &Map) -> Vec<u32> {
        let mut keys: Vec<u32> = map.entries().iter().map(|(k, _)| **k).collect();
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
