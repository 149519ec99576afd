//! The layer and its builder.

use seawall_core::{ConfigError, RandomSource, SeededRandom};
use tower_layer::Layer;

use crate::config::FaultConfig;
use crate::handle::Handle;
use crate::requests::AnyRequest;
use crate::service::FaultService;

/// A layer that injects faults into the calls of the service it wraps, as its
/// [`Handle`] says, for rehearsing a dependency's failures.
///
/// **Where state lives.** The injections live in the handle: every service this
/// layer builds, and every clone of the layer, shares them. One layer per
/// dependency, named like the policy that protects it.
///
/// **Where it goes.** Innermost, right in front of the dependency's client, so the
/// protections above it (deadline, bulkhead, breaker, fallback) see the faults as
/// they would see the dependency's own.
#[derive(Debug, Clone)]
pub struct FaultLayer<R = AnyRequest> {
    handle: Handle,
    requests: R,
}

impl FaultLayer {
    /// A layer named `name` with the injections of `config` (none by default),
    /// checked against the wall clock now.
    pub fn new(name: &str, config: FaultConfig) -> Result<Self, ConfigError> {
        Self::builder(name).config(config).build()
    }

    /// A builder, for a seeded random source.
    pub fn builder(name: &str) -> FaultBuilder {
        FaultBuilder {
            name: name.to_owned(),
            config: FaultConfig::new(),
            random: None,
        }
    }

    /// The same layer for requests of any type whose key (for an injection's `key`)
    /// is `key(&request)`.
    pub fn keyed<Req, F>(self, key: F) -> FaultLayer<AnyRequest<F>>
    where
        F: Fn(&Req) -> Option<String> + Clone,
    {
        FaultLayer {
            handle: self.handle,
            requests: self.requests.keyed(key),
        }
    }

    /// The same layer for HTTP clients (`http::Request<B>` in,
    /// `http::Response<B>` out, answered as `http::Response<FaultBody<B>>`): it can
    /// also answer a status or a gRPC status and slow or fail a response body, and
    /// matches `route` against the path and `key` against the host.
    #[cfg(feature = "http")]
    #[cfg_attr(docsrs, doc(cfg(feature = "http")))]
    pub fn http(self) -> FaultLayer<crate::HttpRequests> {
        FaultLayer {
            handle: self.handle,
            requests: crate::HttpRequests,
        }
    }
}

impl<R> FaultLayer<R> {
    /// The handle: what is injected, and the switches.
    pub fn handle(&self) -> Handle {
        self.handle.clone()
    }
}

impl<S, R: Clone> Layer<S> for FaultLayer<R> {
    type Service = FaultService<S, R>;

    fn layer(&self, inner: S) -> Self::Service {
        FaultService::new(inner, self.handle.clone(), self.requests.clone())
    }
}

/// Builds a [`FaultLayer`].
pub struct FaultBuilder {
    name: String,
    config: FaultConfig,
    random: Option<Box<dyn RandomSource>>,
}

impl std::fmt::Debug for FaultBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultBuilder")
            .field("name", &self.name)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl FaultBuilder {
    /// The injections it starts with.
    pub fn config(mut self, config: FaultConfig) -> Self {
        self.config = config;
        self
    }

    /// A fixed seed for the draws that decide which calls get a fault, so a test
    /// knows exactly which ones will. Without it, each instance draws differently.
    pub fn seed(self, seed: u64) -> Self {
        self.random(SeededRandom::new(seed))
    }

    /// The source of the draws (any `FnMut() -> f64` in `[0, 1)`).
    pub fn random(mut self, random: impl RandomSource) -> Self {
        self.random = Some(Box::new(random));
        self
    }

    /// The layer, or the field at fault (e.g. `injections[0].until`).
    pub fn build(self) -> Result<FaultLayer, ConfigError> {
        let handle = match self.random {
            Some(random) => Handle::new(self.name.into(), self.config, random)?,
            None => Handle::with_entropy(&self.name, self.config)?,
        };
        Ok(FaultLayer {
            handle,
            requests: AnyRequest::new(),
        })
    }
}
