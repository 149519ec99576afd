//! The error every seawall builder returns for invalid configuration.

use std::borrow::Cow;
use std::fmt;

/// Invalid configuration, naming the field at fault.
///
/// Builders validate eagerly and return this instead of clamping or panicking:
/// a zero limit, a rate outside `0.0..=1.0`, a NaN or a window shorter than its
/// bucket is a mistake the operator should hear about at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    field: Cow<'static, str>,
    problem: Cow<'static, str>,
}

impl ConfigError {
    /// A problem with `field` (a builder method or config key such as `max_concurrent`).
    pub fn new(field: impl Into<Cow<'static, str>>, problem: impl Into<Cow<'static, str>>) -> Self {
        Self {
            field: field.into(),
            problem: problem.into(),
        }
    }

    /// The field at fault, as a dotted path when the error came through [`ConfigError::within`].
    pub fn field(&self) -> &str {
        &self.field
    }

    /// What is wrong with the field.
    pub fn problem(&self) -> &str {
        &self.problem
    }

    /// Prefixes the field with the path of the section it was found in, so an error
    /// from a nested policy reads `policies.quote.breaker.failure_rate`.
    #[must_use]
    pub fn within(self, section: &str) -> Self {
        Self {
            field: Cow::Owned(format!("{section}.{}", self.field)),
            problem: self.problem,
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid `{}`: {}", self.field, self.problem)
    }
}

impl std::error::Error for ConfigError {}

/// Checks that a rate or fraction is a number in `0.0..=1.0`.
pub fn check_fraction(field: &'static str, value: f64) -> Result<f64, ConfigError> {
    if value.is_finite() && (0.0..=1.0).contains(&value) {
        Ok(value)
    } else {
        Err(ConfigError::new(
            field,
            format!("must be between 0.0 and 1.0, got {value}"),
        ))
    }
}

/// Checks that a count is at least one.
pub fn check_positive(field: &'static str, value: usize) -> Result<usize, ConfigError> {
    if value == 0 {
        Err(ConfigError::new(field, "must be at least 1"))
    } else {
        Ok(value)
    }
}

/// Checks that a duration is longer than zero and at most
/// [`MAX_DURATION`](crate::MAX_DURATION) (a year): zero would disable the setting
/// silently, and a larger value is a unit slip that would overflow the clock.
pub fn check_duration(
    field: &'static str,
    value: std::time::Duration,
) -> Result<std::time::Duration, ConfigError> {
    if value.is_zero() {
        Err(ConfigError::new(field, "must be longer than zero"))
    } else if value > crate::MAX_DURATION {
        Err(ConfigError::new(
            field,
            format!("must be at most a year, got {value:?}"),
        ))
    } else {
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_field_and_nests() {
        let e = ConfigError::new("failure_rate", "must be between 0.0 and 1.0, got 2")
            .within("breaker")
            .within("policies.quote");
        assert_eq!(e.field(), "policies.quote.breaker.failure_rate");
        assert_eq!(
            e.to_string(),
            "invalid `policies.quote.breaker.failure_rate`: must be between 0.0 and 1.0, got 2"
        );
    }

    #[test]
    fn fractions_reject_nan_and_out_of_range() {
        assert!(check_fraction("rate", f64::NAN).is_err());
        assert!(check_fraction("rate", -0.1).is_err());
        assert!(check_fraction("rate", 1.01).is_err());
        assert_eq!(check_fraction("rate", 1.0), Ok(1.0));
        assert_eq!(check_fraction("rate", 0.0), Ok(0.0));
        assert_eq!(check_positive("n", 0).unwrap_err().field(), "n");
    }

    #[test]
    fn durations_are_longer_than_zero_and_at_most_a_year() {
        use std::time::Duration;
        let year = Duration::from_secs(365 * 24 * 3600);
        assert_eq!(check_duration("budget", year), Ok(year));
        let too_long = check_duration("budget", year + Duration::from_nanos(1)).unwrap_err();
        assert_eq!(too_long.field(), "budget");
        assert!(too_long.problem().contains("at most a year"), "{too_long}");
        assert_eq!(
            check_duration("budget", Duration::MAX).unwrap_err().field(),
            "budget"
        );
        assert_eq!(
            check_duration("budget", Duration::ZERO)
                .unwrap_err()
                .field(),
            "budget"
        );
    }
}
