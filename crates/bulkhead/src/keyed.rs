//! One bulkhead per key extracted from the request, with a bound on keys.

use std::convert::Infallible;
use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use seawall_core::{
    BoxError, BulkheadFull, Classify, ConfigError, Keyed, KeyedPolicy, LayerHandle, Name,
    TimeoutsAsOverload, DEFAULT_MAX_KEYS,
};
use tower_layer::Layer;
use tower_service::Service;

use crate::config::BulkheadConfig;
use crate::future::ResponseFuture;
use crate::handle::check_forced_limit;
use crate::hold::{Hold, Lend, UntilResponse};
use crate::layer::BulkheadBuilder;
use crate::state::{Shared, Snapshot};
use crate::telemetry::{KeyedTelemetry, Series, ShadowCause};

/// How a keyed layer builds and steers each key's bulkhead; the rest is [`Keyed`]'s.
struct Bulkheads<K> {
    series: KeySeries<K>,
    /// The builder's seed, from which each key's algorithm gets its own.
    seed: Option<u64>,
    /// Bulkheads made so far (numbers each key's seed).
    made: AtomicU64,
    rejected_key_limit: AtomicU64,
    /// Shadow mode: calls with a new key let through while every key was busy.
    shadow_key_limit: AtomicU64,
    telemetry: KeyedTelemetry,
}

/// Where the keys' bulkheads report.
enum KeySeries<K> {
    /// Every key to the layer's series, registered when the layer is built.
    Shared(Series),
    /// Each key to series of its own, labelled with the key formatted by this.
    PerKey(fn(&K) -> String),
}

impl<K> KeyedPolicy for Bulkheads<K> {
    type Key = K;
    type State = Shared;
    type Config = BulkheadConfig;
    /// The limit of active calls to hold every key at.
    type Forced = usize;
    type Error = Infallible;

    /// A layer keeps the kind of limit it was built with, since its metric series
    /// report one kind (a fixed per-key limit, or the sum of the keys' adaptive
    /// limits).
    fn check(config: &BulkheadConfig, built: &BulkheadConfig) -> Result<(), ConfigError> {
        config.validate()?;
        match (built.adaptive.is_some(), config.adaptive.is_some()) {
            (true, false) => Err(ConfigError::new(
                "adaptive",
                "this keyed bulkhead was built with an adaptive limit and keeps one; build another layer for a fixed limit",
            )),
            (false, true) => Err(ConfigError::new(
                "adaptive",
                "this keyed bulkhead was built with a fixed limit and keeps it; build another layer for an adaptive limit",
            )),
            _ => Ok(()),
        }
    }

    fn check_forced(limit: usize) -> Result<(), ConfigError> {
        check_forced_limit(limit)
    }

    fn build(
        &self,
        name: &Name,
        key: Option<&K>,
        config: &Arc<BulkheadConfig>,
    ) -> Result<Arc<Shared>, Infallible> {
        let name = name.clone();
        let Some(key) = key else {
            // What calls with a new key hold in shadow mode while every key is busy.
            return Ok(Arc::new(match &self.series {
                KeySeries::Shared(series) => Shared::reporting_to(name, series, config, None),
                KeySeries::PerKey(_) => Shared::new(name, **config, None),
            }));
        };
        // Each key's algorithm its own random choices (a gradient's jitter), so keys
        // do not measure their baselines in step.
        let n = self.made.fetch_add(1, Ordering::Relaxed);
        let seed = self
            .seed
            .map(|s| s.wrapping_add(n.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
        Ok(Arc::new(match &self.series {
            KeySeries::Shared(series) => Shared::reporting_to(name, series, config, seed),
            KeySeries::PerKey(label) => {
                let series = Series::keyed(&name, label(key));
                Shared::reporting_to(name, &series, config, seed)
            }
        }))
    }

    /// A slot held or a call waiting (each holds the bulkhead): not idle.
    fn pinned(&self, bulkhead: &Arc<Shared>) -> bool {
        Arc::strong_count(bulkhead) > 1
    }

    fn reconfigure(&self, bulkhead: &Arc<Shared>, config: &Arc<BulkheadConfig>) {
        // Validated by `check`.
        let _ = bulkhead.reconfigure_to(config);
    }

    fn force(&self, bulkhead: &Arc<Shared>, limit: usize) {
        bulkhead.force_limit(limit);
    }

    fn release(&self, bulkhead: &Arc<Shared>) {
        bulkhead.release_limit();
    }
}

/// Applies one bulkhead per key extracted from each request (a host, a route, a
/// tenant), so a slow key uses only its own capacity.
///
/// Every per-key bulkhead has the same limits (the layer's configuration, which
/// [`KeyedHandle::reconfigure`] changes for all of them) and the layer's name in
/// its rejections. All services built from one layer share the same map of keys.
///
/// # An adaptive limit per key
///
/// With [`adaptive`](BulkheadBuilder::adaptive), each key gets its own
/// instance of the algorithm, fed only by that key's calls: a slow host shrinks
/// its own limit, not its neighbours'. What counts as overload is the layer's
/// classifier ([`overload`](KeyedBulkheadLayer::overload)), as for
/// [`BulkheadLayer`](crate::BulkheadLayer). A key starts at the algorithm's
/// initial limit; **a forgotten key forgets what it learned** (an idle key
/// evicted at the bound on keys, or when a new configuration of the algorithm
/// starts every key again from its limit in force), and comes back at the
/// initial limit: keep the initial limit one a new, unknown key can be trusted
/// with. A layer built adaptive stays adaptive (and a fixed one fixed):
/// [`KeyedHandle::reconfigure`] may change the algorithm's settings, not drop
/// it. See [`KeyedHandle::snapshot_of`] for a key's limit now. A
/// fixed random source ([`BulkheadBuilder::seed`]) makes the keys' random choices
/// repeatable in tests: each key still gets its own, derived from that value and
/// the order keys arrive in.
///
/// # The bound on keys
///
/// At most `max_keys` keys (default [`DEFAULT_MAX_KEYS`]) have a bulkhead at once,
/// in a [`KeyedMap`](seawall_core::KeyedMap). When a call brings a new key and the
/// bound is reached, a bounded CLOCK sweep forgets one idle key not used lately — no
/// call holding a slot, none waiting — with its counters (counted in
/// [`KeyedSnapshot::evicted`]).
/// A busy key is never forgotten: if every key the sweep looks at is busy (every
/// key, in a map of up to [`MAX_PROBES`](seawall_core::MAX_PROBES) keys), the call
/// is rejected at once with [`BulkheadFull`] (carrying the layer's name) and
/// counted in [`KeyedSnapshot::rejected_key_limit`]; calls for known keys are
/// unaffected. In [shadow mode](BulkheadBuilder::shadow) it goes through instead,
/// holding no key's slot, counted in [`KeyedSnapshot::shadow_rejected_key_limit`].
///
/// A call costs a shared read lock, a hash of the key and an `Arc` clone on top of
/// the bulkhead itself; the first call of a key allocates its bulkhead, and does the
/// same work at 10 keys as at 100,000 (what grows is the memory hierarchy's share:
/// the evicted key's bulkhead was last used long ago, so dropping it misses the
/// cache). That share is kept small: a key's bulkhead takes 376 bytes, 400 with
/// the `metrics` feature (the keys share one copy of the configuration, and a key
/// gets its wait queue and histogram only when a call waits, its shadow counters
/// only when a call is let through beyond the limit, its algorithm only when
/// adaptive), and a drop reads the few fields that hold something to release,
/// laid out together.
/// No lock is held while a bulkhead is built or dropped, or while the inner service
/// is polled or called.
///
/// # Metrics
///
/// With the `metrics` feature every key's bulkhead reports under the layer's
/// `name`, so the series add up (`seawall_bulkhead_active{name}` is the calls
/// active over all keys) and their number is fixed by the configuration, not by
/// the keys clients send. Per-key series are an opt-in,
/// [`per_key_metrics`](KeyedBulkheadBuilder::per_key_metrics), whose docs give
/// their cardinality.
///
/// Built by [`BulkheadBuilder::keyed`]: `BulkheadLayer::builder(name)`, the
/// limits, `.keyed(key_fn)`, the bound on keys, `.build()`.
pub struct KeyedBulkheadLayer<K, F, H = UntilResponse, O = TimeoutsAsOverload> {
    shared: Arc<Keyed<Bulkheads<K>>>,
    key_fn: F,
    overload: O,
    _hold: PhantomData<fn() -> H>,
}

impl BulkheadBuilder {
    /// One bulkhead per key that `key_fn` extracts from the request (a host, a
    /// route, a tenant) instead of one shared bulkhead: every setting so far applies
    /// to each key's bulkhead (an [`adaptive`](Self::adaptive) limit becomes one
    /// algorithm per key); the bound on keys and per-key series are set on what this
    /// returns.
    ///
    /// ```
    /// use seawall_bulkhead::BulkheadLayer;
    ///
    /// let per_host = BulkheadLayer::builder("suppliers")
    ///     .max_concurrent(4)
    ///     .keyed(|req: &http::Request<()>| req.uri().host().unwrap_or("").to_owned())
    ///     .max_keys(64)
    ///     .build()
    ///     .unwrap();
    /// # let _ = per_host;
    /// ```
    pub fn keyed<Req, K, F>(self, key_fn: F) -> KeyedBulkheadBuilder<K, F>
    where
        F: Fn(&Req) -> K,
        K: Hash + Eq + Clone + Send + Sync + 'static,
    {
        KeyedBulkheadBuilder {
            bulkhead: self,
            max_keys: DEFAULT_MAX_KEYS,
            key_label: None,
            key_fn,
            _key: PhantomData,
        }
    }
}

/// Builds a [`KeyedBulkheadLayer`]: the settings only a keyed layer has. Made by
/// [`BulkheadBuilder::keyed`], after the bulkhead's own settings.
pub struct KeyedBulkheadBuilder<K, F> {
    bulkhead: BulkheadBuilder,
    max_keys: usize,
    key_label: Option<fn(&K) -> String>,
    key_fn: F,
    _key: PhantomData<fn() -> K>,
}

impl<K, F> KeyedBulkheadBuilder<K, F>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    /// The most keys with a bulkhead at once (default [`DEFAULT_MAX_KEYS`], at least 1).
    #[must_use]
    pub fn max_keys(mut self, n: usize) -> Self {
        self.max_keys = n;
        self
    }

    /// Reports each key's bulkhead in series of its own, labelled `name` (the
    /// layer's) and `key` (the key's `Display`), instead of all keys together under
    /// the layer's name.
    ///
    /// **Cardinality:** keys come from requests, so clients choose how many series
    /// this makes. At most `max_keys` keys are live at once, but the `metrics`
    /// facade cannot remove a series: an evicted key's series stay in the exporter
    /// until its idle timeout drops them (with `metrics-exporter-prometheus`,
    /// `PrometheusBuilder::idle_timeout`). Budget 13 series per key seen within that
    /// timeout. Use it for keys from a fixed set (routes, configured tenants), not
    /// for a host or header a client picks.
    #[must_use]
    pub fn per_key_metrics(mut self) -> Self
    where
        K: fmt::Display,
    {
        self.key_label = Some(|key: &K| key.to_string());
        self
    }

    /// Validates the configuration and creates the layer.
    pub fn build(self) -> Result<KeyedBulkheadLayer<K, F>, ConfigError> {
        let BulkheadBuilder {
            name, config, seed, ..
        } = self.bulkhead;
        let bulkheads = || Bulkheads {
            series: match self.key_label {
                Some(label) => KeySeries::PerKey(label),
                None => {
                    // Registered now, so the series are exported before the first
                    // key arrives: the configured limit, and the limits in force
                    // summed over the keys (none yet), as their active calls are.
                    let series = Series::named(&name).summing_limits();
                    series.limit(config.max_concurrent);
                    KeySeries::Shared(series)
                }
            },
            seed,
            made: AtomicU64::new(0),
            rejected_key_limit: AtomicU64::new(0),
            shadow_key_limit: AtomicU64::new(0),
            telemetry: KeyedTelemetry::new(&name),
        };
        let keyed = Keyed::new(name.clone(), config, self.max_keys, bulkheads)?;
        Ok(KeyedBulkheadLayer {
            shared: Arc::new(keyed),
            key_fn: self.key_fn,
            overload: TimeoutsAsOverload,
            _hold: PhantomData,
        })
    }
}

impl<K, F, H, O> KeyedBulkheadLayer<K, F, H, O> {
    /// The handle of the keyed bulkhead, available before layering.
    pub fn handle(&self) -> KeyedHandle<K> {
        KeyedHandle {
            shared: self.shared.clone(),
        }
    }

    /// See [`BulkheadLayer::permit_in_extensions`](crate::BulkheadLayer::permit_in_extensions).
    pub fn permit_in_extensions(
        self,
    ) -> KeyedBulkheadLayer<K, F, crate::hold::WithPermitHandle<H>, O> {
        KeyedBulkheadLayer {
            shared: self.shared,
            key_fn: self.key_fn,
            overload: self.overload,
            _hold: PhantomData,
        }
    }

    /// The same keyed bulkhead, with `overload` deciding what each key's adaptive
    /// limit learns from its calls; see
    /// [`BulkheadLayer::overload`](crate::BulkheadLayer::overload). A fixed keyed
    /// bulkhead never calls it.
    pub fn overload<O2>(self, overload: O2) -> KeyedBulkheadLayer<K, F, H, O2> {
        KeyedBulkheadLayer {
            shared: self.shared,
            key_fn: self.key_fn,
            overload,
            _hold: PhantomData,
        }
    }
}

impl<K, F, O> KeyedBulkheadLayer<K, F, UntilResponse, O> {
    /// The same keyed bulkhead, holding each slot until the response body ends or
    /// is dropped. See [`UntilBodyEnd`](crate::UntilBodyEnd).
    #[cfg(feature = "http")]
    #[cfg_attr(docsrs, doc(cfg(feature = "http")))]
    pub fn hold_until_body_end(self) -> KeyedBulkheadLayer<K, F, crate::hold::UntilBodyEnd, O> {
        KeyedBulkheadLayer {
            shared: self.shared,
            key_fn: self.key_fn,
            overload: self.overload,
            _hold: PhantomData,
        }
    }
}

impl<K, F: Clone, H, O: Clone> Clone for KeyedBulkheadLayer<K, F, H, O> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
            key_fn: self.key_fn.clone(),
            overload: self.overload.clone(),
            _hold: PhantomData,
        }
    }
}

impl<K, F, H, O> fmt::Debug for KeyedBulkheadLayer<K, F, H, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedBulkheadLayer")
            .field("name", &&**self.shared.name())
            .field("max_keys", &self.shared.map().max_keys())
            .finish()
    }
}

impl<K, F> fmt::Debug for KeyedBulkheadBuilder<K, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedBulkheadBuilder")
            .field("bulkhead", &self.bulkhead)
            .field("max_keys", &self.max_keys)
            .finish()
    }
}

impl<S, K, F: Clone, H, O: Clone> Layer<S> for KeyedBulkheadLayer<K, F, H, O> {
    type Service = KeyedBulkhead<S, K, F, H, O>;

    fn layer(&self, inner: S) -> Self::Service {
        KeyedBulkhead {
            inner,
            shared: self.shared.clone(),
            key_fn: self.key_fn.clone(),
            overload: self.overload.clone(),
            _hold: PhantomData,
        }
    }
}

/// A service with one bulkhead per key; built by [`KeyedBulkheadLayer`].
///
/// Behaves as [`Bulkhead`](crate::Bulkhead) for each key: always ready, admission
/// decided in `call`, waiting and inner readiness driven by the response future.
pub struct KeyedBulkhead<S, K, F, H = UntilResponse, O = TimeoutsAsOverload> {
    inner: S,
    shared: Arc<Keyed<Bulkheads<K>>>,
    key_fn: F,
    overload: O,
    _hold: PhantomData<fn() -> H>,
}

impl<S, K, F, H, O> KeyedBulkhead<S, K, F, H, O> {
    /// The handle of the keyed bulkhead.
    pub fn handle(&self) -> KeyedHandle<K> {
        KeyedHandle {
            shared: self.shared.clone(),
        }
    }
}

impl<S: Clone, K, F: Clone, H, O: Clone> Clone for KeyedBulkhead<S, K, F, H, O> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
            key_fn: self.key_fn.clone(),
            overload: self.overload.clone(),
            _hold: PhantomData,
        }
    }
}

impl<S: fmt::Debug, K, F, H, O> fmt::Debug for KeyedBulkhead<S, K, F, H, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedBulkhead")
            .field("name", &&**self.shared.name())
            .field("inner", &self.inner)
            .finish()
    }
}

impl<S, K, F, H, O, Req> Service<Req> for KeyedBulkhead<S, K, F, H, O>
where
    S: Service<Req> + Clone,
    S::Error: Into<BoxError>,
    H: Hold<S::Response> + Lend<Req>,
    K: Hash + Eq + Clone,
    F: Fn(&Req) -> K,
    O: Classify<S::Response> + Clone,
{
    type Response = H::Output;
    type Error = BoxError;
    type Future = ResponseFuture<S, Req, H, O>;

    /// Always ready; nothing is reserved.
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let key = (self.key_fn)(&req);
        let ks = &*self.shared;
        let bulkheads = ks.policy();
        // The map is not locked while the inner service is polled or called.
        let Ok(found) = ks.state_for(key);
        match found {
            Some(b) => ResponseFuture::new(&b, &mut self.inner, req, self.overload.clone()),
            None if ks.config().shadow => {
                // Let through, counted against the overflow bulkhead's over-limit
                // calls: no key's slot is held.
                bulkheads.shadow_key_limit.fetch_add(1, Ordering::Relaxed);
                let Ok(b) = ks.overflow();
                b.admit_over_limit(ShadowCause::Keys);
                ResponseFuture::over_limit(&b, &mut self.inner, req, self.overload.clone())
            }
            None => {
                bulkheads.rejected_key_limit.fetch_add(1, Ordering::Relaxed);
                bulkheads
                    .telemetry
                    .key_limit(ks.name(), ks.map().max_keys());
                let full = Box::new(BulkheadFull::named(ks.name()));
                ResponseFuture::rejected(full, self.overload.clone())
            }
        }
    }
}

/// Observes and controls a keyed bulkhead. Cheap to clone.
pub struct KeyedHandle<K> {
    shared: Arc<Keyed<Bulkheads<K>>>,
}

impl<K> Clone for KeyedHandle<K> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<K> fmt::Debug for KeyedHandle<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedHandle")
            .field("name", &&**self.shared.name())
            .finish()
    }
}

impl<K: Hash + Eq + Clone> KeyedHandle<K> {
    /// The layer's name.
    pub fn name(&self) -> &str {
        self.shared.name()
    }

    /// The keys that have a bulkhead now.
    pub fn keys(&self) -> Vec<K> {
        self.shared.keys()
    }

    /// The snapshot of `key`'s bulkhead, if the key has one.
    pub fn snapshot_of(&self, key: &K) -> Option<Snapshot> {
        self.shared.map().peek(key).map(|b| b.snapshot())
    }

    /// Totals over the keys that have a bulkhead now, and the key-bound counters.
    pub fn snapshot(&self) -> KeyedSnapshot {
        let (map, bulkheads) = (self.shared.map(), self.shared.policy());
        let mut s = KeyedSnapshot {
            name: self.name().to_owned(),
            keys: 0,
            max_keys: map.max_keys(),
            active: 0,
            queued: 0,
            rejected_key_limit: bulkheads.rejected_key_limit.load(Ordering::Relaxed),
            shadow_rejected_key_limit: bulkheads.shadow_key_limit.load(Ordering::Relaxed),
            evicted: map.evicted(),
            forced: self.shared.forced(),
        };
        // Summed in place: copying the bulkheads out would pin them meanwhile.
        map.for_each(|_, b| {
            let counts = b.semaphore.counts();
            s.keys += 1;
            s.active += counts.active;
            s.queued += counts.queued;
        });
        s
    }

    /// The per-key limits in force.
    pub fn config(&self) -> BulkheadConfig {
        self.shared.config()
    }

    /// Changes the limits of every key (present and future), after validating them.
    /// Same rules as [`Handle::reconfigure`](crate::Handle::reconfigure).
    pub fn reconfigure(&self, config: BulkheadConfig) -> Result<(), ConfigError> {
        self.shared.reconfigure(config)?;
        if let KeySeries::Shared(series) = &self.shared.policy().series {
            series.limit(config.max_concurrent);
        }
        Ok(())
    }

    /// Goes back to the limits the layer was built with, for every key.
    pub fn revert(&self) {
        // The built configuration was validated when the layer was built.
        let _ = self.reconfigure(*self.shared.built());
    }

    /// Holds every key's limit of active calls at `limit` (1 to 2^20), the keys
    /// seen from now on included, until [`release`](Self::release); see
    /// [`Handle::force`](crate::Handle::force). Refused, changing nothing, when
    /// `limit` is out of range.
    pub fn force(&self, limit: usize) -> Result<(), ConfigError> {
        self.shared.force(limit)
    }

    /// Hands every key's limit back to its algorithm (or `max_concurrent`) after
    /// [`force`](Self::force); see [`Handle::release`](crate::Handle::release).
    pub fn release(&self) {
        self.shared.release();
    }
}

/// Totals of a keyed bulkhead (see [`KeyedHandle::snapshot`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct KeyedSnapshot {
    /// The layer's name.
    pub name: String,
    /// Keys with a bulkhead now.
    pub keys: usize,
    /// The bound on keys.
    pub max_keys: usize,
    /// Calls holding a slot now, over all keys.
    pub active: usize,
    /// Calls waiting now, over all keys.
    pub queued: usize,
    /// Calls rejected because they brought a new key while every key was busy.
    pub rejected_key_limit: u64,
    /// Shadow mode: calls that brought a new key while every key was busy, let
    /// through (holding no key's slot) instead of rejected.
    pub shadow_rejected_key_limit: u64,
    /// Idle keys forgotten to make room for new ones.
    pub evicted: u64,
    /// The limit an operator holds every key at ([`KeyedHandle::force`]), if any.
    pub forced: Option<usize>,
}

/// A keyed layer is one layer to an operator: its configuration is every key's
/// (and the next keys'), `force` holds every key's limit and those of keys seen
/// while forced, `release` hands them all back, and the snapshot is the totals
/// over the keys.
impl<K> LayerHandle for KeyedHandle<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    type Config = BulkheadConfig;
    type Snapshot = KeyedSnapshot;
    /// The limit of active calls to hold every key at.
    type Forced = usize;

    fn name(&self) -> &str {
        KeyedHandle::name(self)
    }

    fn config(&self) -> BulkheadConfig {
        KeyedHandle::config(self)
    }

    fn reconfigure(&self, config: BulkheadConfig) -> Result<(), ConfigError> {
        KeyedHandle::reconfigure(self, config)
    }

    fn revert(&self) {
        KeyedHandle::revert(self);
    }

    fn snapshot(&self) -> KeyedSnapshot {
        KeyedHandle::snapshot(self)
    }

    fn force(&self, limit: usize) -> Result<(), ConfigError> {
        KeyedHandle::force(self, limit)
    }

    fn release(&self) {
        KeyedHandle::release(self);
    }
}
