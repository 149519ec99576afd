//! One breaker per key (host, route, tenant), with a bounded number of keys.

use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use seawall_core::{
    bounded_by_current, BoxError, ClassifyRequest, ConfigError, Keyed, KeyedPolicy, LayerHandle,
    Name, OpenCause, PanicWatch, RandomSource, SeededRandom, DEFAULT_MAX_KEYS,
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
/// [`KeyedMap`](seawall_core::KeyedMap): a call costs a shared read lock, a hash of
/// the key and an `Arc` clone on top of the breaker itself, and a new key does the
/// same work at 10 keys as at 100,000 (what grows is the memory hierarchy's share:
/// the evicted key's breaker was last used long ago, so reading and dropping it
/// misses the cache). When a new key meets a full map, a bounded CLOCK sweep evicts
/// a key not used lately whose breaker is plainly closed (not open, half-open,
/// ramping, forced or disabled) — a closed breaker's window is the only history
/// lost. An
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
    shared: Arc<Keyed<Breakers<K>>>,
    key: F,
    classifier: C,
}

/// How a keyed layer builds and steers each key's breaker; the rest is [`Keyed`]'s.
struct Breakers<K> {
    /// The layer's own series, shared by the overflow breaker and, unless
    /// `per_key_metrics`, by every key's breaker.
    series: Series,
    /// Each key's series label (its `Display`), if each key has series of its own.
    per_key_label: Option<fn(&K) -> String>,
    /// Seeds each new breaker's jitter source, if one was supplied.
    random: Mutex<Option<Box<dyn RandomSource>>>,
    /// A key's breaker's name, `{name}/{key}` (`key_name` for the layer's key type).
    key_name: fn(&str, &K) -> Name,
}

impl<K> KeyedPolicy for Breakers<K> {
    type Key = K;
    type State = Lane;
    type Config = CircuitBreakerConfig;
    type Forced = Forced;
    /// Unreachable: the configuration was validated when it was put in force.
    type Error = ConfigError;

    fn check(
        config: &CircuitBreakerConfig,
        _built: &CircuitBreakerConfig,
    ) -> Result<(), ConfigError> {
        config.validate()
    }

    fn build(
        &self,
        name: &Name,
        key: Option<&K>,
        config: &Arc<CircuitBreakerConfig>,
    ) -> Result<Arc<Lane>, ConfigError> {
        let random = self
            .random
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
            .map(|parent| {
                let seed = (parent.next_f64() * (1u64 << 53) as f64) as u64;
                Box::new(SeededRandom::new(seed)) as Box<dyn RandomSource>
            });
        let config = Arc::clone(config);
        let now = Instant::now();
        match key {
            None => {
                let name = format!("{name}/overflow").into();
                Breaker::shared_reporting_to(name, &self.series, config, random, now)
            }
            Some(key) => {
                let own = self
                    .per_key_label
                    .map(|label| Series::keyed(name, label(key)));
                let series = own.as_ref().unwrap_or(&self.series);
                Breaker::shared_reporting_to(
                    (self.key_name)(name, key),
                    series,
                    config,
                    random,
                    now,
                )
            }
        }
    }

    /// An open (or forced, ramping, half-open) breaker is never forgotten.
    fn pinned(&self, breaker: &Arc<Lane>) -> bool {
        !breaker.is_plainly_closed()
    }

    fn reconfigure(&self, breaker: &Arc<Lane>, config: &Arc<CircuitBreakerConfig>) {
        // Validated by `check`.
        let _ = Handle::new(Arc::clone(breaker)).reconfigure(CircuitBreakerConfig::clone(config));
    }

    fn force(&self, breaker: &Arc<Lane>, forced: Forced) {
        Handle::new(Arc::clone(breaker)).force(forced);
    }

    fn release(&self, breaker: &Arc<Lane>) {
        Handle::new(Arc::clone(breaker)).release();
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
        let breakers = || Breakers {
            series: Series::named(&builder.name),
            per_key_label: self.per_key_metrics.then_some(|key: &K| key.to_string()),
            random: Mutex::new(builder.random),
            key_name: key_name::<K>,
        };
        let keyed = Keyed::new(
            builder.name.clone(),
            builder.config,
            self.max_keys,
            breakers,
        )?;
        Ok(KeyedCircuitBreakerLayer {
            shared: Arc::new(keyed),
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
            .field("name", self.shared.name())
            .field("max_keys", &self.shared.map().max_keys())
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
    shared: Arc<Keyed<Breakers<K>>>,
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
            .field("name", self.shared.name())
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
        let found = match self.shared.state_for(key) {
            Ok(Some(breaker)) => Ok(breaker),
            // Every key the sweep looked at is open (or held): the overflow breaker.
            Ok(None) => self.shared.overflow(),
            Err(invalid) => Err(invalid),
        };
        let Ok(breaker) = found else {
            // Unreachable: the configuration was validated when the layer was built.
            return ResponseFuture::rejected(
                self.shared.name(),
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
    shared: Arc<Keyed<Breakers<K>>>,
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
            .field("name", self.shared.name())
            .finish_non_exhaustive()
    }
}

impl<K> KeyedHandle<K>
where
    K: Hash + Eq + Clone + fmt::Display + Send + Sync + 'static,
{
    /// The layer's name (each key's breaker is named `{name}/{key}`).
    pub fn name(&self) -> &str {
        self.shared.name()
    }

    /// The most keys kept.
    pub fn max_keys(&self) -> usize {
        self.shared.map().max_keys()
    }

    /// How many keys have a breaker now.
    pub fn len(&self) -> usize {
        self.shared.map().len()
    }

    /// How many keys were evicted to make room for new ones.
    pub fn evicted(&self) -> u64 {
        self.shared.map().evicted()
    }

    /// Whether no key has a breaker yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The keys that have a breaker now.
    pub fn keys(&self) -> Vec<K> {
        self.shared.keys()
    }

    /// The handle on `key`'s breaker, if it has one (for its snapshot, subscription
    /// and controls).
    pub fn get(&self, key: &K) -> Option<Handle> {
        self.shared.map().peek(key).map(Handle::new)
    }

    /// The shared overflow breaker, if the map has ever been full of open breakers.
    pub fn overflow(&self) -> Option<Handle> {
        self.shared.peek_overflow().map(Handle::new)
    }

    /// Every key's snapshot.
    pub fn snapshots(&self) -> Vec<(K, Snapshot)> {
        self.shared
            .map()
            .entries()
            .into_iter()
            .map(|(k, b)| (k, Handle::new(b).snapshot()))
            .collect()
    }

    /// The keys whose breakers are open or half-open (tripped, not forced).
    pub fn open_keys(&self) -> Vec<K> {
        self.shared
            .map()
            .entries()
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
        self.shared.reconfigure(config)
    }

    /// Goes back to the configuration the layer was built with, for every key.
    pub fn revert(&self) -> Result<(), ConfigError> {
        self.reconfigure(self.shared.built().clone())
    }

    /// The configuration new keys get.
    pub fn config(&self) -> CircuitBreakerConfig {
        self.shared.config()
    }

    /// Holds every key's breaker at `forced` (see [`Handle::force`]), the
    /// overflow breaker and the breakers of keys seen from now on included, until
    /// [`release`](Self::release). A forced breaker is never evicted, so new keys
    /// beyond the bound share the (forced) overflow breaker meanwhile.
    pub fn force(&self, forced: Forced) {
        // Every `Forced` is accepted.
        let _ = self.shared.force(forced);
    }

    /// Hands every key's breaker back to its own policy after
    /// [`force`](Self::force) (see [`Handle::release`]: a forced or disabled
    /// breaker starts afresh, the others are left as they are).
    pub fn release(&self) {
        self.shared.release();
    }

    /// What [`force`](Self::force) holds the keys at, if anything.
    pub fn forced(&self) -> Option<Forced> {
        self.shared.forced()
    }

    /// Every key's snapshot and the overflow breaker's, with the key-bound
    /// counters.
    pub fn snapshot(&self) -> KeyedSnapshot<K> {
        KeyedSnapshot {
            name: self.name().to_owned(),
            max_keys: self.max_keys(),
            evicted: self.evicted(),
            forced: self.forced(),
            keys: self.snapshots(),
            overflow: self.overflow().map(|h| h.snapshot()),
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
fn key_name<K: fmt::Display>(prefix: &str, key: &K) -> Name {
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
