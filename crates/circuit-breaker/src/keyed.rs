//! One breaker per key (host, route, tenant), with a bounded number of keys.

use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll};

use seawall_core::{
    bounded_by_current, check_positive, BoxError, ClassifyRequest, ConfigError, KeyedMap,
    LayerHandle, Name, OpenCause, PanicWatch, RandomSource, SeededRandom, DEFAULT_MAX_KEYS,
};
use tokio::time::Instant;
use tower_layer::Layer;
use tower_service::Service;

use crate::config::CircuitBreakerConfig;
use crate::future::{Guard, ResponseFuture};
use crate::handle::{Forced, Handle, Snapshot};
use crate::layer::CircuitBreakerBuilder;
use crate::machine::{Admission, State};
use crate::state::{Breaker, Lane, WORD_SLOT};
use crate::telemetry::Series;

/// Wraps services in one circuit breaker per key extracted from the request, so one
/// sick host (route, tenant) is cut off while the others keep working.
///
/// **Where state lives:** the layer owns one bounded map of breakers, created when
/// it is built and shared by every service it builds and every clone. Each key's
/// breaker is created on the key's first request, from the configuration in force
/// (see [`KeyedHandle::reconfigure`]), and named `{name}/{key}` in rejections and
/// logs.
///
/// **Bound and eviction.** At most `max_keys` breakers are kept, in a
/// [`KeyedMap`]: a call costs a shared read lock, a hash of the key and an `Arc`
/// clone on top of the breaker itself, and a new key does the same work at 10 keys
/// as at 100,000 (what grows is the memory hierarchy's share: the evicted key's
/// breaker was last used long ago, so reading and dropping it misses the cache).
/// When a new key meets a full map, a bounded CLOCK sweep evicts a key
/// not used lately whose breaker is plainly closed (not open, half-open, ramping,
/// forced or disabled) — a closed breaker's window is the only history lost. An
/// open breaker is never evicted: if every breaker the sweep looks at is pinned
/// that way (every breaker, in a map of up to [`MAX_PROBES`](seawall_core::MAX_PROBES)
/// keys), the call is guarded by one shared *overflow* breaker named
/// `{name}/overflow`, so a flood of new keys can never evict an open breaker and
/// expose a sick dependency again. Calls already admitted by an evicted breaker
/// finish and report to it. No lock is held while the key is formatted, a breaker
/// is built or dropped, or the inner service is polled or called.
///
/// **Metrics** (feature `metrics`) are bounded by the configuration, not by the
/// keys clients send: every key's breaker (and the overflow breaker) reports under
/// the layer's `name`, so `seawall_breaker_calls_total{name}` counts all keys and
/// `seawall_breaker_state{name, state}` is the number of keys in each state.
/// Per-key series are an opt-in,
/// [`per_key_metrics`](KeyedCircuitBreakerBuilder::per_key_metrics), whose docs
/// give their cardinality.
///
/// **Readiness.** The key is known only in `call`, so `poll_ready` always polls the
/// inner service; a call rejected because its key is open does not reach it.
///
/// **Streams.** With the `http` feature, `hold_until_body_end` reports each call
/// when its response body ends, as the unkeyed breaker's mode of that name does
/// (for client stacks, where the dependency's answer lasts until then).
pub struct KeyedCircuitBreakerLayer<K, F, C> {
    shared: Arc<Keyed<K>>,
    key: F,
    classifier: C,
}

struct Keyed<K> {
    name: Name,
    /// The layer's own series, shared by the overflow breaker and, unless
    /// `per_key_metrics`, by every key's breaker.
    series: Series,
    per_key_metrics: bool,
    settings: Mutex<Settings>,
    map: KeyedMap<K, Arc<Lane>>,
    overflow: OnceLock<Arc<Lane>>,
}

struct Settings {
    /// Validated, and shared by every key's breaker built from it: a new key
    /// copies a pointer, not the configuration, and is not validated again.
    config: Arc<CircuitBreakerConfig>,
    built: CircuitBreakerConfig,
    /// Seeds each new key's jitter source, if one was supplied.
    random: Option<Box<dyn RandomSource>>,
    /// What an operator holds every key's breaker at, new keys' included.
    forced: Option<Forced>,
}

impl<K> fmt::Debug for Keyed<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyed")
            .field("name", &self.name)
            .field("max_keys", &self.map.max_keys())
            .finish_non_exhaustive()
    }
}

impl<K> Keyed<K>
where
    K: Hash + Eq + Clone + fmt::Display,
{
    fn settings(&self) -> std::sync::MutexGuard<'_, Settings> {
        self.settings.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new breaker from the configuration in force, and that configuration.
    fn new_breaker(
        &self,
        name: Name,
        series: &Series,
        now: Instant,
    ) -> Result<(Arc<Lane>, Arc<CircuitBreakerConfig>), ConfigError> {
        let (config, random) = {
            let mut settings = self.settings();
            let random = settings.random.as_mut().map(|parent| {
                let seed = (parent.next_f64() * (1u64 << 53) as f64) as u64;
                Box::new(SeededRandom::new(seed)) as Box<dyn RandomSource>
            });
            (Arc::clone(&settings.config), random)
        };
        // Built with the settings released: building registers metrics (a
        // recorder is user code, and may reconfigure the layer).
        let breaker = Breaker::shared_reporting_to(name, series, Arc::clone(&config), random, now)?;
        Ok((breaker, config))
    }

    fn overflow(&self, now: Instant) -> Option<Arc<Lane>> {
        if let Some(b) = self.overflow.get() {
            return Some(Arc::clone(b));
        }
        let name: Name = format!("{}/overflow", self.name).into();
        let (breaker, made) = self.new_breaker(name, &self.series, now).ok()?;
        let breaker = Arc::clone(self.overflow.get_or_init(|| breaker));
        self.catch_up(&breaker, &made);
        Some(breaker)
    }

    /// The breaker guarding `key`, created (and another evicted) if needed. The
    /// clock is read only then.
    fn breaker_for(&self, key: K, clock: impl Fn() -> Instant) -> Option<Arc<Lane>> {
        let mut made_with = None;
        let found = self.map.get_or_insert_with(
            key,
            // An open (or forced, ramping, half-open) breaker is never forgotten.
            |b| !b.is_plainly_closed(),
            |key| {
                let name = key_name(&self.name, key);
                let (breaker, config) = if self.per_key_metrics {
                    let series = Series::keyed(&self.name, key.to_string());
                    self.new_breaker(name, &series, clock())?
                } else {
                    self.new_breaker(name, &self.series, clock())?
                };
                made_with = Some(config);
                Ok::<_, ConfigError>(breaker)
            },
        );
        let breaker = match found {
            Ok(Some(breaker)) => breaker,
            Ok(None) => return self.overflow(clock()),
            Err(_) => return None,
        };
        if let Some(made) = made_with {
            self.catch_up(&breaker, &made);
        }
        Some(breaker)
    }

    /// A breaker built from a configuration that a `reconfigure` replaced meanwhile
    /// (it could not see a breaker not yet in the map) takes the current one, and
    /// a new breaker of a forced layer is forced like the others. Every
    /// `reconfigure` puts a new `Arc` in force, so comparing pointers is enough.
    fn catch_up(&self, breaker: &Arc<Lane>, made: &Arc<CircuitBreakerConfig>) {
        let (replaced, mut forced) = {
            let settings = self.settings();
            let replaced = (!Arc::ptr_eq(made, &settings.config))
                .then(|| CircuitBreakerConfig::clone(&settings.config));
            (replaced, settings.forced)
        };
        if replaced.is_none() && forced.is_none() {
            // The common case: nothing changed while the breaker was built.
            return;
        }
        let handle = Handle::new(Arc::clone(breaker));
        if let Some(current) = replaced {
            // Validated by `reconfigure`.
            let _ = handle.reconfigure(current);
        }
        // Applied with the settings released (a transition reaches user code). A
        // `force` or `release` that ran meanwhile may have missed this breaker
        // (or been overtaken by this one): apply until the setting holds still.
        while let Some(holding) = forced {
            handle.force(holding);
            forced = self.settings().forced;
            if forced.is_none() {
                handle.release();
            } else if forced == Some(holding) {
                break;
            }
        }
    }

    fn breakers(&self) -> Vec<(K, Arc<Lane>)> {
        self.map.entries()
    }
}

impl<C> CircuitBreakerBuilder<C> {
    /// One breaker per key that `key` extracts from the request (a host, a route, a
    /// tenant) instead of one shared breaker: every setting so far applies to each
    /// key's breaker; the bound on keys and per-key series are set on what this
    /// returns (see [`KeyedCircuitBreakerLayer`] for the eviction rule).
    ///
    /// ```
    /// use seawall_circuit_breaker::CircuitBreakerLayer;
    ///
    /// let per_host = CircuitBreakerLayer::builder("suppliers")
    ///     .consecutive_failures(5)
    ///     .keyed(|req: &http::Request<()>| req.uri().host().unwrap_or("").to_owned())
    ///     .max_keys(64)
    ///     .build()
    ///     .unwrap();
    /// # let _ = per_host;
    /// ```
    pub fn keyed<Req, K, F>(self, key: F) -> KeyedCircuitBreakerBuilder<K, F, C>
    where
        F: Fn(&Req) -> K,
        K: Hash + Eq + Clone + fmt::Display,
    {
        KeyedCircuitBreakerBuilder {
            breaker: self,
            key,
            max_keys: DEFAULT_MAX_KEYS,
            per_key_metrics: false,
            _key: PhantomData,
        }
    }
}

/// Builds a [`KeyedCircuitBreakerLayer`]: the settings only a keyed layer has. Made
/// by [`CircuitBreakerBuilder::keyed`], after the breaker's own settings.
pub struct KeyedCircuitBreakerBuilder<K, F, C> {
    breaker: CircuitBreakerBuilder<C>,
    key: F,
    max_keys: usize,
    per_key_metrics: bool,
    _key: PhantomData<fn() -> K>,
}

impl<K, F, C: fmt::Debug> fmt::Debug for KeyedCircuitBreakerBuilder<K, F, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedCircuitBreakerBuilder")
            .field("breaker", &self.breaker)
            .field("max_keys", &self.max_keys)
            .field("per_key_metrics", &self.per_key_metrics)
            .finish_non_exhaustive()
    }
}

impl<K, F, C> KeyedCircuitBreakerBuilder<K, F, C>
where
    K: Hash + Eq + Clone + fmt::Display,
{
    /// The most keys with a breaker at once (default [`DEFAULT_MAX_KEYS`], at least 1).
    #[must_use]
    pub fn max_keys(mut self, n: usize) -> Self {
        self.max_keys = n;
        self
    }

    /// Reports each key's breaker in series of its own, labelled `name` (the
    /// layer's) and `key` (the key's `Display`), instead of all keys together under
    /// the layer's name.
    ///
    /// **Cardinality:** keys come from requests, so clients choose how many series
    /// this makes. At most `max_keys` keys are live at once, but the `metrics`
    /// facade cannot remove a series: an evicted key's series (its state gauge
    /// back at 0) stay in the exporter until its idle timeout drops them (with
    /// `metrics-exporter-prometheus`, `PrometheusBuilder::idle_timeout`). Budget
    /// 24 series per key seen within that timeout, plus operator transitions. Use it
    /// for keys from a fixed set (routes, configured tenants), not for a host or
    /// header a client picks.
    #[must_use]
    pub fn per_key_metrics(mut self) -> Self {
        self.per_key_metrics = true;
        self
    }

    /// Validates the configuration and creates the layer and its map of breakers.
    pub fn build(self) -> Result<KeyedCircuitBreakerLayer<K, F, C>, ConfigError> {
        let builder = self.breaker;
        builder.config.validate()?;
        check_positive("max_keys", self.max_keys)?;
        Ok(KeyedCircuitBreakerLayer {
            shared: Arc::new(Keyed {
                series: Series::named(&builder.name),
                name: builder.name,
                per_key_metrics: self.per_key_metrics,
                settings: Mutex::new(Settings {
                    config: Arc::new(builder.config.clone()),
                    built: builder.config,
                    random: builder.random,
                    forced: None,
                }),
                map: KeyedMap::new(self.max_keys),
                overflow: OnceLock::new(),
            }),
            key: self.key,
            classifier: builder.classifier,
        })
    }
}

impl<K, F, C> KeyedCircuitBreakerLayer<K, F, C> {
    /// The operator's handle on every key's breaker.
    pub fn handle(&self) -> KeyedHandle<K> {
        KeyedHandle {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<K, F: Clone, C: Clone> Clone for KeyedCircuitBreakerLayer<K, F, C> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            key: self.key.clone(),
            classifier: self.classifier.clone(),
        }
    }
}

impl<K, F, C: fmt::Debug> fmt::Debug for KeyedCircuitBreakerLayer<K, F, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedCircuitBreakerLayer")
            .field("name", &self.shared.name)
            .field("max_keys", &self.shared.map.max_keys())
            .field("classifier", &self.classifier)
            .finish_non_exhaustive()
    }
}

impl<S, K, F: Clone, C: Clone> Layer<S> for KeyedCircuitBreakerLayer<K, F, C> {
    type Service = KeyedCircuitBreaker<S, K, F, C>;

    fn layer(&self, inner: S) -> Self::Service {
        KeyedCircuitBreaker {
            inner,
            shared: Arc::clone(&self.shared),
            key: self.key.clone(),
            classifier: self.classifier.clone(),
        }
    }
}

/// A service guarded by one breaker per key; built by [`KeyedCircuitBreakerLayer`].
pub struct KeyedCircuitBreaker<S, K, F, C> {
    inner: S,
    shared: Arc<Keyed<K>>,
    key: F,
    classifier: C,
}

impl<S, K, F, C> KeyedCircuitBreaker<S, K, F, C> {
    /// The operator's handle on every key's breaker.
    pub fn handle(&self) -> KeyedHandle<K> {
        KeyedHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: Clone, K, F: Clone, C: Clone> Clone for KeyedCircuitBreaker<S, K, F, C> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
            key: self.key.clone(),
            classifier: self.classifier.clone(),
        }
    }
}

impl<S: fmt::Debug, K, F, C: fmt::Debug> fmt::Debug for KeyedCircuitBreaker<S, K, F, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedCircuitBreaker")
            .field("name", &self.shared.name)
            .field("inner", &self.inner)
            .field("classifier", &self.classifier)
            .finish_non_exhaustive()
    }
}

impl<S, K, F, C, Req> Service<Req> for KeyedCircuitBreaker<S, K, F, C>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    C: ClassifyRequest<Req, S::Response>,
    F: Fn(&Req) -> K,
    K: Hash + Eq + Clone + fmt::Display,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future, C::Classifier>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let key = (self.key)(&req);
        let Some(breaker) = self.shared.breaker_for(key, Instant::now) else {
            // Unreachable: the configuration was validated when the layer was built.
            return ResponseFuture::rejected(
                &self.shared.name,
                crate::machine::MIN_RETRY_AFTER,
                OpenCause::Open,
            );
        };
        match breaker.admit(WORD_SLOT, Instant::now) {
            Admission::Rejected(retry_after, cause) => {
                ResponseFuture::rejected(breaker.name(), retry_after, cause)
            }
            Admission::Admitted(ticket) | Admission::Shadow(ticket, _) => {
                // The guard exists before anything that may panic, so every path
                // (a panicking `call` included) reports the ticket.
                let started = breaker.start_clock(Instant::now);
                let mut guard = Guard::new(breaker, ticket, started);
                let classifier = self.classifier.classifier_for(&req);
                let watch = PanicWatch::arm(|| guard.finish_panicked());
                let future = self.inner.call(req);
                watch.disarm();
                ResponseFuture::admitted(bounded_by_current(future), guard, classifier)
            }
        }
    }
}

/// Watches and steers the breakers of a [`KeyedCircuitBreakerLayer`]. Cheap to clone.
pub struct KeyedHandle<K> {
    shared: Arc<Keyed<K>>,
}

impl<K> Clone for KeyedHandle<K> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<K> fmt::Debug for KeyedHandle<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedHandle")
            .field("name", &self.shared.name)
            .finish_non_exhaustive()
    }
}

impl<K> KeyedHandle<K>
where
    K: Hash + Eq + Clone + fmt::Display,
{
    /// The layer's name (each key's breaker is named `{name}/{key}`).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The most keys kept.
    pub fn max_keys(&self) -> usize {
        self.shared.map.max_keys()
    }

    /// How many keys have a breaker now.
    pub fn len(&self) -> usize {
        self.shared.map.len()
    }

    /// How many keys were evicted to make room for new ones.
    pub fn evicted(&self) -> u64 {
        self.shared.map.evicted()
    }

    /// Whether no key has a breaker yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The keys that have a breaker now.
    pub fn keys(&self) -> Vec<K> {
        self.shared.breakers().into_iter().map(|(k, _)| k).collect()
    }

    /// The handle on `key`'s breaker, if it has one (for its snapshot, subscription
    /// and controls).
    pub fn get(&self, key: &K) -> Option<Handle> {
        self.shared.map.peek(key).map(Handle::new)
    }

    /// The shared overflow breaker, if the map has ever been full of open breakers.
    pub fn overflow(&self) -> Option<Handle> {
        self.shared
            .overflow
            .get()
            .map(|b| Handle::new(Arc::clone(b)))
    }

    /// Every key's snapshot.
    pub fn snapshots(&self) -> Vec<(K, Snapshot)> {
        self.shared
            .breakers()
            .into_iter()
            .map(|(k, b)| (k, Handle::new(b).snapshot()))
            .collect()
    }

    /// The keys whose breakers are open or half-open (tripped, not forced).
    pub fn open_keys(&self) -> Vec<K> {
        self.shared
            .breakers()
            .into_iter()
            .filter(|(_, b)| {
                matches!(
                    Handle::new(Arc::clone(b)).state(),
                    State::Open | State::HalfOpen
                )
            })
            .map(|(k, _)| k)
            .collect()
    }

    /// Applies a configuration to every key's breaker (keeping their states) and to
    /// the breakers of keys seen from now on. Refused, changing nothing, if invalid.
    pub fn reconfigure(&self, config: CircuitBreakerConfig) -> Result<(), ConfigError> {
        config.validate()?;
        self.shared.settings().config = Arc::new(config.clone());
        for (_, b) in self.shared.breakers() {
            Handle::new(b).reconfigure(config.clone())?;
        }
        if let Some(b) = self.shared.overflow.get() {
            Handle::new(Arc::clone(b)).reconfigure(config)?;
        }
        Ok(())
    }

    /// Goes back to the configuration the layer was built with, for every key.
    pub fn revert(&self) -> Result<(), ConfigError> {
        let built = self.shared.settings().built.clone();
        self.reconfigure(built)
    }

    /// The configuration new keys get.
    pub fn config(&self) -> CircuitBreakerConfig {
        CircuitBreakerConfig::clone(&self.shared.settings().config)
    }

    /// Holds every key's breaker at `forced` (see [`Handle::force`]), the
    /// overflow breaker and the breakers of keys seen from now on included, until
    /// [`release`](Self::release). A forced breaker is never evicted, so new keys
    /// beyond the bound share the (forced) overflow breaker meanwhile.
    pub fn force(&self, forced: Forced) {
        self.shared.settings().forced = Some(forced);
        self.each_breaker(|h| h.force(forced));
    }

    /// Hands every key's breaker back to its own policy after
    /// [`force`](Self::force) (see [`Handle::release`]: a forced or disabled
    /// breaker starts afresh, the others are left as they are).
    pub fn release(&self) {
        self.shared.settings().forced = None;
        self.each_breaker(|h| h.release());
    }

    /// What [`force`](Self::force) holds the keys at, if anything.
    pub fn forced(&self) -> Option<Forced> {
        self.shared.settings().forced
    }

    /// Every key's snapshot and the overflow breaker's, with the key-bound
    /// counters.
    pub fn snapshot(&self) -> KeyedSnapshot<K> {
        KeyedSnapshot {
            name: self.shared.name.to_string(),
            max_keys: self.max_keys(),
            evicted: self.evicted(),
            forced: self.forced(),
            keys: self.snapshots(),
            overflow: self.overflow().map(|h| h.snapshot()),
        }
    }

    /// Runs `f` on every key's breaker and the overflow breaker, with no lock held.
    fn each_breaker(&self, f: impl Fn(&Handle)) {
        for (_, b) in self.shared.breakers() {
            f(&Handle::new(b));
        }
        if let Some(overflow) = self.overflow() {
            f(&overflow);
        }
    }
}

/// Every key's breaker of a keyed layer at one instant (see [`KeyedHandle::snapshot`]).
///
/// With the `serde` feature it serializes for an operator's endpoint, as a keyed
/// bulkhead's snapshot does, though in a shape of its own: `keys` is a list of
/// `[key, snapshot]` pairs (a keyed bulkhead's `keys` is a count) and `forced` is
/// `"open"`, `"closed"` or `null`.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct KeyedSnapshot<K> {
    /// The layer's name.
    pub name: String,
    /// The bound on keys.
    pub max_keys: usize,
    /// Keys evicted to make room for new ones.
    pub evicted: u64,
    /// What an operator holds every key at ([`KeyedHandle::force`]), if anything.
    pub forced: Option<Forced>,
    /// Each key with a breaker now, and its snapshot.
    pub keys: Vec<(K, Snapshot)>,
    /// The shared overflow breaker's snapshot, if the map has ever been full of
    /// breakers that may not be evicted.
    pub overflow: Option<Snapshot>,
}

/// A key's breaker name, `{prefix}/{key}`, in one allocation: formatted on the
/// stack, then copied once into the shared name (`format!` would grow a `String`
/// and copy it again). A name too long for the stack is formatted on the heap.
fn key_name(prefix: &str, key: &impl fmt::Display) -> Name {
    use fmt::Write as _;
    let mut text = StackText::default();
    if write!(text, "{prefix}/{key}").is_ok() {
        if let Ok(name) = std::str::from_utf8(text.written()) {
            return Name::from(name);
        }
    }
    format!("{prefix}/{key}").into()
}

/// Text written into a fixed buffer; a write that does not fit fails.
struct StackText {
    bytes: [u8; STACK_NAME],
    len: usize,
}

/// The longest key name formatted on the stack.
const STACK_NAME: usize = 128;

impl Default for StackText {
    fn default() -> Self {
        Self {
            bytes: [0; STACK_NAME],
            len: 0,
        }
    }
}

impl StackText {
    fn written(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl fmt::Write for StackText {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        let slot = self.bytes.get_mut(self.len..end).ok_or(fmt::Error)?;
        slot.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// A keyed layer is one layer to an operator: its configuration is every key's
/// (and the next keys'), `force` holds every key's breaker and those of keys seen
/// while forced, `release` hands them all back, and the snapshot is every key's.
impl<K> LayerHandle for KeyedHandle<K>
where
    K: Hash + Eq + Clone + fmt::Display + Send + Sync + 'static,
{
    type Config = CircuitBreakerConfig;
    type Snapshot = KeyedSnapshot<K>;
    type Forced = Forced;

    fn name(&self) -> &str {
        KeyedHandle::name(self)
    }

    fn config(&self) -> CircuitBreakerConfig {
        KeyedHandle::config(self)
    }

    fn reconfigure(&self, config: CircuitBreakerConfig) -> Result<(), ConfigError> {
        KeyedHandle::reconfigure(self, config)
    }

    fn revert(&self) {
        // The built configuration was validated when the layer was built.
        let _ = KeyedHandle::revert(self);
    }

    fn snapshot(&self) -> KeyedSnapshot<K> {
        KeyedHandle::snapshot(self)
    }

    fn force(&self, forced: Forced) -> Result<(), ConfigError> {
        KeyedHandle::force(self, forced);
        Ok(())
    }

    fn release(&self) {
        KeyedHandle::release(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_name_is_the_prefix_and_the_key_however_long() {
        assert_eq!(&*key_name("suppliers", &42u64), "suppliers/42");
        assert_eq!(&*key_name("", &"a"), "/a");
        // Longer than the stack buffer: formatted on the heap, the same text.
        let long = "k".repeat(STACK_NAME * 2);
        let name = key_name("suppliers", &long);
        assert_eq!(name.len(), "suppliers/".len() + STACK_NAME * 2);
        assert!(name.starts_with("suppliers/kkk") && name.ends_with("kkk"));
        // Just at the edge of the buffer.
        let edge = "é".repeat((STACK_NAME - 2) / 2);
        assert_eq!(&*key_name("p", &edge), format!("p/{edge}"));
    }
}
