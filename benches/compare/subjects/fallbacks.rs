//! Fallbacks answering with a value: seawall's and tower-resilience's. The second
//! path has a primary that fails at once, so the fallback serves every call.

use std::convert::Infallible;

use http::Response;
use tower::Layer;

use super::inner::{self, Fail};
use super::{Id, Row};
use crate::harness::{Req, Res};

/// seawall's fallback answering with an empty `http::Response` when the primary
/// fails or is rejected, in the `Either`-body mode (an HTTP client's), whose body
/// carries the `Served` marker. A macro: the layer's type depends on the services
/// below.
macro_rules! sw_fallback {
    () => {
        sw_fallback!(builder)
            .either_body()
            .build()
            .expect("valid config")
    };
    // The generic mode, which marks an `http::Response` in its extensions.
    (generic) => {
        sw_fallback!(builder).build().expect("valid config")
    };
    (builder) => {
        seawall::fallback::FallbackLayer::builder("bench")
            .on_rejections(seawall::fallback::Rejections::ALL)
            .on_failure(seawall::ErrorsAsFailures)
            .value(http::Response::new(()))
    };
}
pub(super) use sw_fallback;

pub(super) fn seawall() -> Vec<Row> {
    vec![
        Row::new(Id::SwFallback, "seawall fallback (value)", || {
            sw_fallback!().layer(inner::ok())
        })
        .served(sw_fallback!().layer(inner::failing())),
        Row::new(
            Id::SwFallbackExtensions,
            "seawall fallback (value, generic mode: the marker in the extensions)",
            || sw_fallback!(generic).layer(inner::ok()),
        )
        .served(sw_fallback!(generic).layer(inner::failing())),
    ]
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
