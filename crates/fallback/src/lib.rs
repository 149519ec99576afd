//! seawall's fallback layer: a declared alternative when the service below fails.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod config;
mod error;
mod future;
mod handle;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod http;
mod layer;
mod machine;
mod mode;
mod plan;
mod request;
mod service;
mod strategy;
mod telemetry;

pub use config::{FallbackBuilder, FallbackConfig, StepTimeout};
pub use error::{Mark, Served, StepTimedOut, Unavailable};
pub use future::ResponseFuture;
pub use handle::{
    FallbackEvent, FallbackHandle, FallbackSnapshot, Runtime, StepSnapshot, TriggerCount,
};
pub use layer::FallbackLayer;
pub use machine::{NoFailures, Rejections, Trigger};
pub use mode::{ErrorOrigin, Mode, Plain};
pub use plan::{
    Chain, ChainFuture, ChainSteps, Finished, NoStrategy, Plan, Single, SingleFuture, Spec,
};
pub use request::{Capture, CaptureFn, Captures, FallbackRequest, NoCapture};
pub use service::FallbackService;
pub use strategy::{
    async_fn, service, sync_fn, unavailable, value, AsyncFn, Decline, ErrInto, Fallback,
    ServiceFallback, SyncFn, Value,
};

pub use seawall_core::{
    BoxError, BulkheadFull, BulkheadTimeout, CircuitOpen, DeadlineExceeded, FallbacksExhausted,
    RejectionKind, StepFailure,
};
