//! A feature plan: which features run normally, degraded or not at all, given which
//! dependencies are healthy.
//!
//! Not every feature matters equally. Checkout must keep taking orders even without
//! fraud scoring (flag them for manual review); search can drop personalisation;
//! recommendations can show a static list, or nothing. A [`FeaturePlan`] writes that
//! down once: each [`Feature`] has a [`Tier`] and its dependencies, the **first**
//! being the one it cannot work without. From the set of healthy dependencies
//! (typically a [`HealthMonitor`](crate::health::HealthMonitor)'s), each feature gets
//! a [`FeatureMode`]:
//!
//! - all its dependencies healthy → [`Normal`](FeatureMode::Normal);
//! - else its first dependency healthy, or the feature is critical →
//!   [`Degraded`](FeatureMode::Degraded);
//! - else [`Disabled`](FeatureMode::Disabled).
//!
//! A critical feature is therefore never disabled. Handlers read the modes from the
//! request's extensions ([`Features`]) when the [`FeaturesLayer`] is in the stack.
//!
//! ```
//! use seawall_degradation::features::{Feature, FeatureMode, FeaturePlan, Tier};
//!
//! let plan = FeaturePlan::new([
//!     Feature::new("checkout", Tier::Critical, ["payment-gateway", "fraud-service"]),
//!     Feature::new("search", Tier::Important, ["search-service", "personalization"]),
//!     Feature::new("recommendations", Tier::NiceToHave, ["recommendation-service"]),
//! ])
//! .unwrap();
//! let healthy = ["search-service"];
//! let modes = plan.modes(|dep| healthy.contains(&dep));
//! assert_eq!(modes.mode("checkout"), Some(FeatureMode::Degraded)); // critical: never disabled
//! assert_eq!(modes.mode("search"), Some(FeatureMode::Degraded)); // first dependency is up
//! assert_eq!(modes.mode("recommendations"), Some(FeatureMode::Disabled));
//! ```

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;
use std::task::{Context, Poll};

use seawall_core::{ConfigError, HasExtensions};
use tokio::sync::watch;
use tower_layer::Layer;
use tower_service::Service;

/// How much a feature matters to the business.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum Tier {
    /// Must keep working, degraded if need be (checkout); never disabled.
    Critical,
    /// Should keep working; degraded while its first dependency is up (search).
    Important,
    /// Can go (recommendations).
    NiceToHave,
}

/// How a feature should behave now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum FeatureMode {
    /// Every dependency is healthy: full behaviour.
    Normal,
    /// Some dependency is not: the declared reduced behaviour.
    Degraded,
    /// The feature cannot work now: hide it.
    Disabled,
}

impl FeatureMode {
    /// `"normal"`, `"degraded"` or `"disabled"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Normal => "normal",
            Self::Degraded => "degraded",
            Self::Disabled => "disabled",
        }
    }
}

/// One feature of the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct Feature {
    /// The feature's name, as handlers ask for it.
    pub name: String,
    /// How much it matters.
    pub tier: Tier,
    /// The dependencies it uses; the first is the one it cannot work without.
    pub dependencies: Vec<String>,
}

impl Feature {
    /// A feature `name` of `tier` using `dependencies` (the essential one first).
    pub fn new<D: Into<String>>(
        name: impl Into<String>,
        tier: Tier,
        dependencies: impl IntoIterator<Item = D>,
    ) -> Self {
        Self {
            name: name.into(),
            tier,
            dependencies: dependencies.into_iter().map(Into::into).collect(),
        }
    }

    /// This feature's mode given which dependencies are healthy.
    pub fn mode(&self, is_healthy: impl Fn(&str) -> bool) -> FeatureMode {
        if self.dependencies.iter().all(|d| is_healthy(d)) {
            FeatureMode::Normal
        } else if self.tier == Tier::Critical
            || self.dependencies.first().is_some_and(|d| is_healthy(d))
        {
            FeatureMode::Degraded
        } else {
            FeatureMode::Disabled
        }
    }
}

/// The features of a service, each with its tier and dependencies.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FeaturePlan {
    features: Vec<Feature>,
}

impl FeaturePlan {
    /// A plan of `features`; names must be unique and non-empty.
    pub fn new(features: impl IntoIterator<Item = Feature>) -> Result<Self, ConfigError> {
        let features: Vec<Feature> = features.into_iter().collect();
        for (i, f) in features.iter().enumerate() {
            if f.name.is_empty() {
                return Err(ConfigError::new("features.name", "must not be empty"));
            }
            if features[..i].iter().any(|g| g.name == f.name) {
                return Err(ConfigError::new(
                    "features.name",
                    format!("`{}` is listed twice", f.name),
                ));
            }
        }
        Ok(Self { features })
    }

    /// The features, in the order given.
    pub fn features(&self) -> &[Feature] {
        &self.features
    }

    /// Every feature's mode given which dependencies are healthy.
    pub fn modes(&self, is_healthy: impl Fn(&str) -> bool) -> FeatureModes {
        FeatureModes {
            modes: self
                .features
                .iter()
                .map(|f| (f.name.clone(), f.mode(&is_healthy)))
                .collect(),
        }
    }

    /// Every feature in normal mode (before any health is known, or without a monitor).
    pub fn all_normal(&self) -> FeatureModes {
        self.modes(|_| true)
    }
}

/// Each feature's mode at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct FeatureModes {
    modes: Vec<(String, FeatureMode)>,
}

impl FeatureModes {
    /// The mode of `feature`, if the plan has it.
    pub fn mode(&self, feature: &str) -> Option<FeatureMode> {
        self.modes
            .iter()
            .find(|(name, _)| name == feature)
            .map(|(_, m)| *m)
    }

    /// Whether `feature` is in the plan and not disabled.
    pub fn is_enabled(&self, feature: &str) -> bool {
        self.mode(feature)
            .is_some_and(|m| m != FeatureMode::Disabled)
    }

    /// Every feature and its mode, in the plan's order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, FeatureMode)> {
        self.modes.iter().map(|(n, m)| (n.as_str(), *m))
    }
}

/// The feature modes in force when a request arrived, in its extensions (inserted by
/// [`FeaturesLayer`]). Cheap to clone.
///
/// ```
/// # use seawall_degradation::features::{Features, FeatureMode};
/// fn handler(req: &http::Request<()>) -> &'static str {
///     match req.extensions().get::<Features>().and_then(|f| f.mode("recommendations")) {
///         Some(FeatureMode::Normal) | None => "personalised picks",
///         Some(FeatureMode::Degraded) => "trending items",
///         Some(FeatureMode::Disabled) => "",
///     }
/// }
/// # assert_eq!(handler(&http::Request::new(())), "personalised picks");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Features(pub Arc<FeatureModes>);

impl Deref for Features {
    type Target = FeatureModes;

    fn deref(&self) -> &FeatureModes {
        &self.0
    }
}

/// Inserts the current [`Features`] into each request's extensions (one `Arc` clone
/// and one extension insert per request: add it only where handlers use it).
#[derive(Clone)]
pub struct FeaturesLayer {
    source: watch::Receiver<Arc<FeatureModes>>,
}

impl fmt::Debug for FeaturesLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FeaturesLayer")
            .field("modes", &*self.source.borrow())
            .finish()
    }
}

impl FeaturesLayer {
    /// Follows the modes published on `source` (a health monitor's, or your own).
    pub fn new(source: watch::Receiver<Arc<FeatureModes>>) -> Self {
        Self { source }
    }

    /// Always the same modes.
    pub fn fixed(modes: FeatureModes) -> Self {
        let (tx, rx) = watch::channel(Arc::new(modes));
        // Dropping the sender leaves the last value readable forever.
        drop(tx);
        Self { source: rx }
    }
}

impl<S> Layer<S> for FeaturesLayer {
    type Service = FeaturesService<S>;

    fn layer(&self, inner: S) -> FeaturesService<S> {
        FeaturesService {
            inner,
            source: self.source.clone(),
        }
    }
}

/// The service made by [`FeaturesLayer`].
#[derive(Clone)]
pub struct FeaturesService<S> {
    inner: S,
    source: watch::Receiver<Arc<FeatureModes>>,
}

impl<S: fmt::Debug> fmt::Debug for FeaturesService<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FeaturesService")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, Req> Service<Req> for FeaturesService<S>
where
    S: Service<Req>,
    Req: HasExtensions,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Req) -> S::Future {
        let modes = self.source.borrow().clone();
        if let Some(ext) = req.extensions_mut() {
            ext.insert(Features(modes));
        }
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::{service_fn, ServiceExt};

    fn seed_plan() -> FeaturePlan {
        FeaturePlan::new([
            Feature::new(
                "Checkout",
                Tier::Critical,
                ["payment-gateway", "fraud-service", "inventory-service"],
            ),
            Feature::new(
                "Product search",
                Tier::Important,
                ["search-service", "personalization-engine"],
            ),
            Feature::new(
                "Recommendations",
                Tier::NiceToHave,
                ["recommendation-service", "user-profile-service"],
            ),
        ])
        .unwrap()
    }

    fn modes_with(healthy: &[&str]) -> FeatureModes {
        seed_plan().modes(|d| healthy.contains(&d))
    }

    #[test]
    fn all_healthy_is_normal() {
        let all = [
            "payment-gateway",
            "fraud-service",
            "inventory-service",
            "search-service",
            "personalization-engine",
            "recommendation-service",
            "user-profile-service",
        ];
        let m = modes_with(&all);
        assert!(m.iter().all(|(_, mode)| mode == FeatureMode::Normal));
        assert_eq!(seed_plan().all_normal(), m);
    }

    #[test]
    fn the_first_dependency_up_degrades_instead_of_disabling() {
        let m = modes_with(&["search-service", "recommendation-service"]);
        assert_eq!(m.mode("Product search"), Some(FeatureMode::Degraded));
        assert_eq!(m.mode("Recommendations"), Some(FeatureMode::Degraded));
        let m = modes_with(&["personalization-engine", "user-profile-service"]);
        assert_eq!(m.mode("Product search"), Some(FeatureMode::Disabled));
        assert_eq!(m.mode("Recommendations"), Some(FeatureMode::Disabled));
        assert!(!m.is_enabled("Recommendations"));
        assert!(!m.is_enabled("no such feature"));
        assert_eq!(m.mode("no such feature"), None);
    }

    #[test]
    fn a_critical_feature_is_never_disabled() {
        // Nothing healthy at all, including its essential dependency.
        let m = modes_with(&[]);
        assert_eq!(m.mode("Checkout"), Some(FeatureMode::Degraded));
        assert!(m.is_enabled("Checkout"));
        // Whatever subset is healthy.
        let deps = ["payment-gateway", "fraud-service", "inventory-service"];
        for mask in 0..8u8 {
            let healthy: Vec<&str> = (0..3)
                .filter(|i| mask & (1 << i) != 0)
                .map(|i| deps[i])
                .collect();
            assert_ne!(
                modes_with(&healthy).mode("Checkout"),
                Some(FeatureMode::Disabled)
            );
        }
        // A feature without dependencies is always normal.
        let f = Feature::new("static page", Tier::NiceToHave, Vec::<String>::new());
        assert_eq!(f.mode(|_| false), FeatureMode::Normal);
    }

    #[test]
    fn plans_reject_duplicate_and_empty_names() {
        let dup = FeaturePlan::new([
            Feature::new("a", Tier::Critical, ["x"]),
            Feature::new("a", Tier::Important, ["y"]),
        ]);
        assert_eq!(dup.unwrap_err().field(), "features.name");
        let empty = FeaturePlan::new([Feature::new("", Tier::Critical, ["x"])]);
        assert_eq!(empty.unwrap_err().field(), "features.name");
    }

    #[tokio::test]
    async fn handlers_find_the_modes_in_request_extensions() {
        let (tx, rx) = watch::channel(Arc::new(modes_with(&["search-service"])));
        let layer = FeaturesLayer::new(rx);
        let handler = service_fn(|req: http::Request<()>| async move {
            let features = req.extensions().get::<Features>().cloned();
            Ok::<_, std::convert::Infallible>(features.and_then(|f| f.mode("Product search")))
        });
        let svc = layer.layer(handler);
        let seen = svc.clone().oneshot(http::Request::new(())).await.unwrap();
        assert_eq!(seen, Some(FeatureMode::Degraded));
        tx.send_replace(Arc::new(seed_plan().all_normal()));
        let seen = svc.oneshot(http::Request::new(())).await.unwrap();
        assert_eq!(seen, Some(FeatureMode::Normal));

        let fixed = FeaturesLayer::fixed(modes_with(&[]));
        let seen = fixed
            .layer(handler)
            .oneshot(http::Request::new(()))
            .await
            .unwrap();
        assert_eq!(seen, Some(FeatureMode::Disabled));
    }
}
