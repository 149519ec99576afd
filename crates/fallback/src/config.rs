//! [`FallbackConfig`]: the plain-data part of a fallback, what can be loaded from a
//! file and changed at run time.

use std::time::Duration;

use seawall_core::{check_duration, ConfigError};

use crate::machine::Rejections;

/// A step's timeout, by name, in a [`FallbackConfig`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct StepTimeout {
    /// The step's name.
    pub step: String,
    /// Its timeout (`None`: bounded only by the request's deadline), e.g. `"100ms"`.
    #[cfg_attr(
        feature = "serde",
        serde(default, with = "seawall_core::duration_format::option")
    )]
    pub timeout: Option<Duration>,
}

/// The plain-data part of a fallback layer: which rejection kinds fire it, the
/// steps' timeouts, and whether it is enabled. The strategies themselves are code
/// and are set on the [`FallbackBuilder`](crate::FallbackBuilder).
///
/// Apply one with [`FallbackBuilder::config`](crate::FallbackBuilder::config) or at run time with
/// [`Handle::reconfigure`](crate::Handle::reconfigure). With the
/// `serde` feature it loads from a file, e.g. in TOML:
///
/// ```toml
/// on_rejections = ["circuit_open", "bulkhead_full", "deadline_exceeded"]
/// step_timeouts = [{ step = "cache", timeout = "100ms" }]
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
pub struct FallbackConfig {
    /// The seawall rejection kinds that fire the fallback (default: none; the
    /// builder's [`on_rejection`](crate::FallbackBuilder::on_rejection) selects them).
    pub on_rejections: Rejections,
    /// Timeouts overriding those of the named steps; steps not listed keep theirs.
    pub step_timeouts: Vec<StepTimeout>,
    /// Whether the fallback is used at all (default `true`); when `false` every
    /// call passes through untouched.
    pub enabled: bool,
}

impl Default for FallbackConfig {
    fn default() -> Self {
        Self {
            on_rejections: Rejections::NONE,
            step_timeouts: Vec::new(),
            enabled: true,
        }
    }
}

impl FallbackConfig {
    /// Checks the configuration on its own (no zero timeout, no step listed twice);
    /// the step names are checked against the layer when it is applied.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (i, st) in self.step_timeouts.iter().enumerate() {
            if let Some(t) = st.timeout {
                check_duration("step_timeouts", t)?;
            }
            if self.step_timeouts[..i].iter().any(|o| o.step == st.step) {
                return Err(ConfigError::new(
                    "step_timeouts",
                    format!("step `{}` is listed twice", st.step),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use seawall_core::RejectionKind;

    #[test]
    fn config_validation_names_the_field() {
        let mut c = FallbackConfig::default();
        assert!(c.validate().is_ok());
        c.step_timeouts.push(StepTimeout {
            step: "cache".into(),
            timeout: Some(Duration::ZERO),
        });
        assert_eq!(c.validate().unwrap_err().field(), "step_timeouts");
        c.step_timeouts[0].timeout = Some(Duration::from_millis(100));
        c.step_timeouts.push(StepTimeout {
            step: "cache".into(),
            timeout: None,
        });
        assert!(c.validate().unwrap_err().problem().contains("twice"));
    }

    #[cfg(feature = "serde")]
    #[test]
    fn loads_from_toml_and_round_trips_through_json() {
        let text = r#"
            on_rejections = ["circuit_open", "bulkhead_full", "deadline_exceeded"]
            step_timeouts = [{ step = "cache", timeout = "100ms" }, { step = "db" }]
        "#;
        let c: FallbackConfig = toml::from_str(text).unwrap();
        assert_eq!(
            c.on_rejections,
            Rejections::NONE
                .with(RejectionKind::CircuitOpen)
                .with(RejectionKind::BulkheadFull)
                .with(RejectionKind::DeadlineExceeded)
        );
        assert_eq!(c.step_timeouts[0].timeout, Some(Duration::from_millis(100)));
        assert_eq!(c.step_timeouts[1].timeout, None);
        assert!(c.enabled);
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(serde_json::from_str::<FallbackConfig>(&json).unwrap(), c);
        assert!(toml::from_str::<FallbackConfig>("on_rejection = []").is_err());
        assert!(toml::from_str::<FallbackConfig>("on_rejections = [\"open\"]").is_err());
    }
}
