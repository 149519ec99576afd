//! seawall's degradation layer: three levels, steady at the best one, and, on the
//! second path, fallen to the second level and probing the failing best one.

use std::time::Duration;

use http::Response;
use tokio::runtime::Runtime;
use tower::Layer;

use super::inner::{self, drive_until, Prepared};
use super::{Id, Path, Row};
use crate::harness::{Req, Res};

/// Three levels: the inner service, "reduced" (a trivial service) and a fixed message.
fn sw_degradation(min_dwell: Duration) -> seawall::degradation::DegradationLayer<Req, Res> {
    use seawall::degradation::{DegradationLayer, Fixed};
    DegradationLayer::builder("bench")
        .level("reduced", inner::ok())
        .level("message", Fixed::new(Response::new(())))
        .min_dwell(min_dwell)
        .build()
        .expect("valid config")
}

pub(super) fn rows(rt: &Runtime) -> Vec<Row> {
    vec![Row::new(
        Id::SwDegradation,
        "seawall degradation (3 levels, steady at the best)",
        || sw_degradation(Duration::from_secs(60)).layer(inner::ok()),
    )
    .second(Path::Probing, None, {
        // The best level fails: the layer falls to "reduced", dwells 1 ms, then
        // sends 5 % of the calls as probes to the (still failing) best level, so
        // it keeps probing and never climbs.
        let layer = sw_degradation(Duration::from_millis(1));
        let handle = layer.handle();
        let svc = drive_until(rt, layer.layer(inner::failing()), || {
            handle.snapshot().level_name != "full"
        });
        std::thread::sleep(Duration::from_millis(5));
        Prepared::plain(svc)
    })]
}
