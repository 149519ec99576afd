//! [`FallbackLayer`]: one shared state per layer, shared by every service it builds.

use std::fmt;
use std::sync::Arc;

use seawall_core::Name;
use tower_layer::Layer;

use crate::config::FallbackBuilder;
use crate::handle::{Handle, Runtime};
use crate::machine::{NoFailures, Triggers};
use crate::mode::Plain;
use crate::plan::NoStrategy;
use crate::request::NoCapture;
use crate::service::Fallback;

/// What every service built from one layer shares.
pub(crate) struct Shared<Cap, P, C, M> {
    pub(crate) capture: Cap,
    pub(crate) plan: P,
    pub(crate) triggers: Triggers<C>,
    pub(crate) mode: M,
    pub(crate) rt: Arc<Runtime>,
    pub(crate) uses_deadline: bool,
}

/// Answers with a declared alternative when the service below fails in a way you
/// selected (see the [crate docs](crate)).
///
/// Built by [`FallbackLayer::builder`]. The layer holds **one shared state** (its
/// counters, controls and live configuration, reached through
/// [`handle`](Self::handle)), created at build: every service built from it, and
/// every clone of those services, shares it. Build one layer per dependency.
///
/// Type parameters: `Cap` the capture closure, `P` the strategy ([`Single`](crate::Single)
/// or [`Chain`](crate::Chain)), `C` the failure classifier, `M` the
/// [mode](crate::Mode) (generic, or with the `http` feature the `Either` body and
/// the HTTP server modes).
pub struct FallbackLayer<Cap = NoCapture, P = NoStrategy, C = NoFailures, M = Plain> {
    shared: Arc<Shared<Cap, P, C, M>>,
}

impl<Cap, P, C, M> Clone for FallbackLayer<Cap, P, C, M> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<Cap, P, C, M> fmt::Debug for FallbackLayer<Cap, P, C, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FallbackLayer")
            .field("name", &self.shared.rt.name)
            .finish_non_exhaustive()
    }
}

impl FallbackLayer {
    /// Starts a builder for the fallback `name` (used in metrics, events and the
    /// [`Served`](crate::Served) marker).
    pub fn builder(name: impl Into<Name>) -> FallbackBuilder {
        FallbackBuilder::new(name.into())
    }
}

impl<Cap, P, C, M> FallbackLayer<Cap, P, C, M> {
    pub(crate) fn from_shared(shared: Shared<Cap, P, C, M>) -> Self {
        Self {
            shared: Arc::new(shared),
        }
    }

    /// The handle to this layer's shared state (counters, controls, configuration).
    pub fn handle(&self) -> Handle {
        Handle::new(Arc::clone(&self.shared.rt))
    }

    /// The layer's name.
    pub fn name(&self) -> &str {
        &self.shared.rt.name
    }
}

impl<S, Cap, P, C, M> Layer<S> for FallbackLayer<Cap, P, C, M> {
    type Service = Fallback<S, Cap, P, C, M>;

    fn layer(&self, inner: S) -> Self::Service {
        Fallback::new(inner, Arc::clone(&self.shared))
    }
}
