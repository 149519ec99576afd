//! One bulkhead per key extracted from the request, with a bound on keys.

use std::cell::Cell;
use std::convert::Infallible;
use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll};

use seawall_core::{
    BoxError, BulkheadFull, Classify, ConfigError, KeyedMap, LayerHandle, Name, TimeoutsAsOverload,
    DEFAULT_MAX_KEYS,
};
use tower_layer::Layer;
use tower_service::Service;

use crate::config::BulkheadConfig;
use crate::future::ResponseFuture;
use crate::handle::check_forced_limit;
use crate::hold::{Hold, Lend, UntilResponse};
use crate::layer::BulkheadBuilder;
use crate::state::{Shared, Snapshot};
use crate::telemetry::{KeyedTelemetry, Series, ShadowReason};

/// Validates a new per-key configuration for a layer built `adaptive` or not: a
/// layer keeps the kind of limit it was built with, since its metric series report
/// one kind (a fixed per-key limit, or the sum of the keys' adaptive limits).
fn check_keyed(config: &BulkheadConfig, adaptive: bool) -> Result<(), ConfigError> {
    config.validate()?;
    match (adaptive, config.adaptive.is_some()) {
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

struct KeyedShared<K> {
    name: Name,
    series: KeySeries<K>,
    built: BulkheadConfig,
    /// The builder's seed, from which each key's algorithm gets its own.
    seed: Option<u64>,
    /// Bulkheads made so far (numbers each key's seed).
    made: AtomicU64,
    /// Shared with every key's bulkhead (one copy per layer, not per key).
    config: Mutex<Arc<BulkheadConfig>>,
    /// The limit an operator holds every key at, new keys' included.
    forced: Mutex<Option<usize>>,
    map: KeyedMap<K, Arc<Shared>>,
    rejected_key_limit: AtomicU64,
    /// Shadow mode: calls with a new key let through while every key was busy.
    shadow_key_limit: AtomicU64,
    /// What those calls hold instead of a key's slot (made at the first one).
    over_keys: OnceLock<Arc<Shared>>,
    telemetry: KeyedTelemetry,
}

/// Where the keys' bulkheads report.
enum KeySeries<K> {
    /// Every key to the layer's series, registered when the layer is built.
    Shared(Series),
    /// Each key to series of its own, labelled with the key formatted by this.
    PerKey(fn(&K) -> String),
}

impl<K: Hash + Eq + Clone> KeyedShared<K> {
    fn config(&self) -> BulkheadConfig {
        **self.config.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn shared_config(&self) -> Arc<BulkheadConfig> {
        Arc::clone(&self.config.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The bulkhead of `key`, created if needed; `None` when the map is full and
    /// every key the sweep looked at has work in flight or waiting.
    #[inline]
    fn bulkhead_for(&self, key: K) -> Option<Arc<Shared>> {
        let made_with = Cell::new(None::<Arc<BulkheadConfig>>);
        let found = self.map.get_or_insert_with(
            key,
            // A slot held or a call waiting (each holds the bulkhead): not idle.
            |b| Arc::strong_count(b) > 1,
            |key| {
                let config = self.shared_config();
                made_with.set(Some(Arc::clone(&config)));
                // Each key's algorithm its own random choices (a gradient's
                // jitter), so keys do not measure their baselines in step.
                let n = self.made.fetch_add(1, Ordering::Relaxed);
                let seed = self
                    .seed
                    .map(|s| s.wrapping_add(n.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
                let shared = match &self.series {
                    KeySeries::Shared(series) => {
                        Shared::reporting_to(self.name.clone(), series, &config, seed)
                    }
                    KeySeries::PerKey(label) => {
                        let series = Series::keyed(&self.name, label(key));
                        Shared::reporting_to(self.name.clone(), &series, &config, seed)
                    }
                };
                Ok::<_, Infallible>(Arc::new(shared))
            },
        );
        let b = match found {
            Ok(b) => b?,
            Err(never) => match never {},
        };
        // Built from a configuration that a `reconfigure` replaced meanwhile (it
        // could not see a key not yet in the map): catch up.
        if let Some(made) = made_with.take() {
            let current = self.shared_config();
            if *made != *current {
                // Validated by `reconfigure`.
                let _ = b.reconfigure_to(&current);
            }
            self.catch_up_force(&b);
        }
        Some(b)
    }

    fn forced(&self) -> Option<usize> {
        *self.forced.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new key's bulkhead of a forced layer is held like the others. A `force`
    /// or `release` that ran meanwhile may have missed it (or been overtaken by
    /// this): applied until the setting holds still.
    #[cold]
    fn catch_up_force(&self, b: &Shared) {
        let mut forced = self.forced();
        while let Some(limit) = forced {
            b.force_limit(limit);
            forced = self.forced();
            if forced.is_none() {
                b.release_limit();
            } else if forced == Some(limit) {
                break;
            }
        }
    }

    /// Counts a call with a new key let through in shadow mode while every key
    /// was busy, and gives the bulkhead its over-limit permit counts against.
    #[cold]
    fn over_key_limit(&self) -> Arc<Shared> {
        self.shadow_key_limit.fetch_add(1, Ordering::Relaxed);
        let b = self.over_keys.get_or_init(|| {
            let config = self.shared_config();
            Arc::new(match &self.series {
                KeySeries::Shared(series) => {
                    Shared::reporting_to(self.name.clone(), series, &config, None)
                }
                KeySeries::PerKey(_) => Shared::new(self.name.clone(), *config, None),
            })
        });
        b.admit_over_limit(ShadowReason::Keys);
        Arc::clone(b)
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
/// in a [`KeyedMap`]. When a call brings a new key and the bound is reached, a
/// bounded CLOCK sweep forgets one idle key not used lately — no call holding a
/// slot, none waiting — with its counters (counted in [`KeyedSnapshot::evicted`]).
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
    shared: Arc<KeyedShared<K>>,
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
        let adaptive = self.bulkhead.config.adaptive.is_some();
        check_keyed(&self.bulkhead.config, adaptive)?;
        seawall_core::check_positive("max_keys", self.max_keys)?;
        let name = self.bulkhead.name;
        let telemetry = KeyedTelemetry::new(&name);
        Ok(KeyedBulkheadLayer {
            shared: Arc::new(KeyedShared {
                series: match self.key_label {
                    Some(label) => KeySeries::PerKey(label),
                    None => {
                        // Registered now, so the series are exported before the
                        // first key arrives: the configured limit, and the limits in
                        // force summed over the keys (none yet), as their active
                        // calls are.
                        let series = Series::named(&name).summing_limits();
                        series.limit(self.bulkhead.config.max_concurrent);
                        KeySeries::Shared(series)
                    }
                },
                name,
                built: self.bulkhead.config,
                seed: self.bulkhead.seed,
                made: AtomicU64::new(0),
                config: Mutex::new(Arc::new(self.bulkhead.config)),
                forced: Mutex::new(None),
                map: KeyedMap::new(self.max_keys),
                rejected_key_limit: AtomicU64::new(0),
                shadow_key_limit: AtomicU64::new(0),
                over_keys: OnceLock::new(),
                telemetry,
            }),
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
            .field("name", &&*self.shared.name)
            .field("max_keys", &self.shared.map.max_keys())
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
    shared: Arc<KeyedShared<K>>,
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
            .field("name", &&*self.shared.name)
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
        // The map is not locked while the inner service is polled or called.
        match ks.bulkhead_for(key) {
            Some(b) => ResponseFuture::new(&b, &mut self.inner, req, self.overload.clone()),
            None if ks.config().shadow => {
                let b = ks.over_key_limit();
                ResponseFuture::over_limit(&b, &mut self.inner, req, self.overload.clone())
            }
            None => {
                ks.rejected_key_limit.fetch_add(1, Ordering::Relaxed);
                ks.telemetry.key_limit(&ks.name, ks.map.max_keys());
                let full = Box::new(BulkheadFull::named(&ks.name));
                ResponseFuture::rejected(full, self.overload.clone())
            }
        }
    }
}

/// Observes and controls a keyed bulkhead. Cheap to clone.
pub struct KeyedHandle<K> {
    shared: Arc<KeyedShared<K>>,
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
            .field("name", &&*self.shared.name)
            .finish()
    }
}

impl<K: Hash + Eq + Clone> KeyedHandle<K> {
    /// The layer's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The keys that have a bulkhead now.
    pub fn keys(&self) -> Vec<K> {
        self.shared
            .map
            .entries()
            .into_iter()
            .map(|(k, _)| k)
            .collect()
    }

    /// The snapshot of `key`'s bulkhead, if the key has one.
    pub fn snapshot_of(&self, key: &K) -> Option<Snapshot> {
        self.shared.map.peek(key).map(|b| b.snapshot())
    }

    /// Totals over the keys that have a bulkhead now, and the key-bound counters.
    pub fn snapshot(&self) -> KeyedSnapshot {
        let mut s = KeyedSnapshot {
            name: self.shared.name.to_string(),
            keys: 0,
            max_keys: self.shared.map.max_keys(),
            active: 0,
            queued: 0,
            rejected_key_limit: self.shared.rejected_key_limit.load(Ordering::Relaxed),
            shadow_rejected_key_limit: self.shared.shadow_key_limit.load(Ordering::Relaxed),
            evicted: self.shared.map.evicted(),
            forced: self.shared.forced(),
        };
        // Summed in place: copying the bulkheads out would pin them meanwhile.
        self.shared.map.for_each(|_, b| {
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
        check_keyed(&config, self.shared.built.adaptive.is_some())?;
        let shared_config = Arc::new(config);
        *self
            .shared
            .config
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Arc::clone(&shared_config);
        if let KeySeries::Shared(series) = &self.shared.series {
            series.limit(config.max_concurrent);
        }
        // Copied out first: each bulkhead logs its change, and a subscriber may read
        // this map (a snapshot) from inside that event.
        for b in self.shared.map.values() {
            b.reconfigure_to(&shared_config)?;
        }
        Ok(())
    }

    /// Goes back to the limits the layer was built with, for every key.
    pub fn revert(&self) {
        // The built configuration was validated when the layer was built.
        let _ = self.reconfigure(self.shared.built);
    }

    /// Holds every key's limit of active calls at `limit` (1 to 2^20), the keys
    /// seen from now on included, until [`release`](Self::release); see
    /// [`Handle::force`](crate::Handle::force). Refused, changing nothing, when
    /// `limit` is out of range.
    pub fn force(&self, limit: usize) -> Result<(), ConfigError> {
        check_forced_limit(limit)?;
        *self
            .shared
            .forced
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(limit);
        // Copied out first, as for `reconfigure`.
        for b in self.shared.map.values() {
            b.force_limit(limit);
        }
        Ok(())
    }

    /// Hands every key's limit back to its algorithm (or `max_concurrent`) after
    /// [`force`](Self::force); see [`Handle::release`](crate::Handle::release).
    pub fn release(&self) {
        *self
            .shared
            .forced
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
        for b in self.shared.map.values() {
            b.release_limit();
        }
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
