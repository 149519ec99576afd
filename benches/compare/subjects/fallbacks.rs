//! Fallbacks answering with a value: seawall's and tower-resilience's. The second
//! path has a primary that fails at once, so the fallback serves every call.

use std::convert::Infallible;

use http::Response;
use tower::Layer;

use super::inner::{self, Fail};
use super::{Id, Row};
use crate::harness::{Req, Res};

/// seawall's fallback answering with an empty `http::Response` when the primary
/// fails or is rejected. A macro: the layer's type depends on the services below.
macro_rules! sw_fallback {
    () => {
        seawall::fallback::FallbackLayer::builder("bench")
            .on_rejections(seawall::fallback::Rejections::ALL)
            .on_failure(seawall::ErrorsAsFailures)
            .value(http::Response::new(()))
            .build()
            .expect("valid config")
    };
}
pub(super) use sw_fallback;

pub(super) fn seawall() -> Vec<Row> {
    vec![Row::new(Id::SwFallback, "seawall fallback (value)", || {
        sw_fallback!().layer(inner::ok())
    })
    .served(sw_fallback!().layer(inner::failing()))]
}

pub(super) fn peers() -> Vec<Row> {
    use tower_resilience::fallback::FallbackLayer;
    vec![Row::new(
        Id::TrFallback,
        "tower-resilience 0.13 Fallback (value)",
        || FallbackLayer::<Req, Res, Infallible>::value(Response::new(())).layer(inner::ok()),
    )
    .served(FallbackLayer::<Req, Res, Fail>::value(Response::new(())).layer(inner::failing()))]
}
