//! The injections as plain, validated data: what a policy file, an admin route or
//! code asks for. A leaf: it knows nothing of services or clocks but the wall time
//! it is checked against.

use std::time::{Duration, SystemTime};

use seawall_core::{check_duration, ConfigError};

use crate::fault::{Fault, FaultKind, DEFAULT_HANG_BOUND};

/// The longest an injection may last: a day. An expiry further away is refused, so a
/// rehearsal cannot be armed for longer than a game day by a slip of the finger.
pub const MAX_INJECTION: Duration = Duration::from_secs(24 * 3600);

/// The most injections one fault layer holds at once (each call looks at them all).
pub const MAX_INJECTIONS: usize = 32;

/// The injections a fault layer starts with: in a policy file, the `fault` table of a
/// policy, whose `injections` is an array of [`InjectionConfig`] tables. Empty by
/// default: nothing is injected unless configured.
#[derive(Debug, Clone, Default, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(default, deny_unknown_fields)
)]
#[non_exhaustive]
pub struct FaultConfig {
    /// The injections, each with its own expiry.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Vec::is_empty"))]
    pub injections: Vec<InjectionConfig>,
}

impl FaultConfig {
    /// No injection.
    pub const fn new() -> Self {
        Self {
            injections: Vec::new(),
        }
    }

    /// With `injection` added.
    pub fn with(mut self, injection: InjectionConfig) -> Self {
        self.injections.push(injection);
        self
    }

    /// Checks every injection against the wall clock now: see
    /// [`validate_at`](Self::validate_at).
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_at(SystemTime::now())
    }

    /// Checks every injection as of `now`: its fault's parameters, its rate, and
    /// its expiry, which must be after `now` and at most [`MAX_INJECTION`] later (so
    /// a file read again after a rehearsal ended cannot start it again). The error
    /// names the field, e.g. `injections[0].until`.
    pub fn validate_at(&self, now: SystemTime) -> Result<(), ConfigError> {
        if self.injections.len() > MAX_INJECTIONS {
            return Err(ConfigError::new(
                "injections",
                format!(
                    "at most {MAX_INJECTIONS} injections, got {}",
                    self.injections.len()
                ),
            ));
        }
        for (i, injection) in self.injections.iter().enumerate() {
            injection
                .validate_at(now)
                .map_err(|e| e.within(&format!("injections[{i}]")))?;
        }
        Ok(())
    }
}

/// One injection: a fault, how often (`percent` of the calls it matches), which
/// calls (`route`, `key`), and until when (`until`, mandatory).
///
/// Its fields are flat, so the same table reads well in a policy file and as an
/// admin route's query string:
///
/// ```toml
/// [[policies.freight.fault.injections]]
/// kind = "http_status"              # see FaultKind for every kind
/// status = 503
/// percent = 50                      # of the matching calls; 100 by default
/// until = "2026-12-07T20:00:00Z"    # RFC 3339, mandatory, at most a day ahead
/// route = "/quote"                  # only calls to this path (HTTP), optional
/// ```
///
/// | `kind` | parameters |
/// |---|---|
/// | `latency` | `delay` (e.g. `"800ms"`), and `delay_max` for a delay drawn uniformly between the two |
/// | `http_status` | `status` (100 to 599) |
/// | `grpc_status` | `grpc_code` (1 to 16, e.g. 14 for `UNAVAILABLE`) |
/// | `refused`, `reset` | none |
/// | `hang` | `at_most` (default 30 s): the bound when no deadline comes first |
/// | `slow_body` | `delay`: the wait before each frame of the body |
/// | `failing_body` | `after_bytes` (default 0) |
///
/// A parameter another kind takes is refused, so a typo'd table never injects
/// something else than what was meant.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(deny_unknown_fields)
)]
#[non_exhaustive]
pub struct InjectionConfig {
    /// The kind of fault.
    pub kind: FaultKind,
    /// The share of the matching calls that get the fault, from 0 to 100.
    #[cfg_attr(feature = "serde", serde(default = "hundred"))]
    pub percent: f64,
    /// When the injection ends by itself. In a file, an RFC 3339 time
    /// (`"2026-12-07T20:00:00Z"`).
    #[cfg_attr(feature = "serde", serde(with = "rfc3339"))]
    pub until: SystemTime,
    /// Only calls to this path (HTTP requests; the path without the query).
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub route: Option<String>,
    /// Only calls with this key: the host of an HTTP request's URI, or what the
    /// layer's key function gives for other requests.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub key: Option<String>,
    /// `latency`: the added latency (the shortest, with `delay_max`);
    /// `slow_body`: the wait before each frame.
    #[cfg_attr(
        feature = "serde",
        serde(
            default,
            with = "seawall_core::duration_format::option",
            skip_serializing_if = "Option::is_none"
        )
    )]
    pub delay: Option<Duration>,
    /// `latency`: the longest added latency.
    #[cfg_attr(
        feature = "serde",
        serde(
            default,
            with = "seawall_core::duration_format::option",
            skip_serializing_if = "Option::is_none"
        )
    )]
    pub delay_max: Option<Duration>,
    /// `http_status`: the status answered.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub status: Option<u16>,
    /// `grpc_status`: the gRPC status code answered.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub grpc_code: Option<i32>,
    /// `hang`: the longest hang when no deadline comes first.
    #[cfg_attr(
        feature = "serde",
        serde(
            default,
            with = "seawall_core::duration_format::option",
            skip_serializing_if = "Option::is_none"
        )
    )]
    pub at_most: Option<Duration>,
    /// `failing_body`: the bytes passed on before the body fails.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub after_bytes: Option<u64>,
}

#[cfg(feature = "serde")]
fn hundred() -> f64 {
    100.0
}

impl InjectionConfig {
    /// `fault` for every matching call until `until`.
    pub fn new(fault: &Fault, until: SystemTime) -> Self {
        let mut c = Self {
            kind: fault.kind(),
            percent: 100.0,
            until,
            route: None,
            key: None,
            delay: None,
            delay_max: None,
            status: None,
            grpc_code: None,
            at_most: None,
            after_bytes: None,
        };
        match fault {
            Fault::Latency { delay, up_to } => {
                c.delay = Some(*delay);
                c.delay_max = *up_to;
            }
            Fault::HttpStatus(s) => c.status = Some(s.as_u16()),
            Fault::GrpcStatus(code) => c.grpc_code = Some(*code),
            Fault::Refused | Fault::Reset => {}
            Fault::Hang { at_most } => c.at_most = Some(*at_most),
            Fault::SlowBody { per_frame } => c.delay = Some(*per_frame),
            Fault::FailingBody { after_bytes } => c.after_bytes = Some(*after_bytes),
        }
        c
    }

    /// `fault` for every matching call for `lasting` from the wall clock now.
    pub fn lasting(fault: &Fault, lasting: Duration) -> Self {
        let until = SystemTime::now()
            .checked_add(lasting)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        Self::new(fault, until)
    }

    /// Only `percent` (0 to 100) of the matching calls.
    pub fn percent(mut self, percent: f64) -> Self {
        self.percent = percent;
        self
    }

    /// Only calls to `route`.
    pub fn route(mut self, route: impl Into<String>) -> Self {
        self.route = Some(route.into());
        self
    }

    /// Only calls with `key`.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// The fault this table describes, or the field at fault.
    pub fn fault(&self) -> Result<Fault, ConfigError> {
        let takes: &[&str] = match self.kind {
            FaultKind::Latency => &["delay", "delay_max"],
            FaultKind::HttpStatus => &["status"],
            FaultKind::GrpcStatus => &["grpc_code"],
            FaultKind::Refused | FaultKind::Reset => &[],
            FaultKind::Hang => &["at_most"],
            FaultKind::SlowBody => &["delay"],
            FaultKind::FailingBody => &["after_bytes"],
        };
        let given = [
            ("delay", self.delay.is_some()),
            ("delay_max", self.delay_max.is_some()),
            ("status", self.status.is_some()),
            ("grpc_code", self.grpc_code.is_some()),
            ("at_most", self.at_most.is_some()),
            ("after_bytes", self.after_bytes.is_some()),
        ];
        for (field, is_given) in given {
            if is_given && !takes.contains(&field) {
                return Err(ConfigError::new(
                    field,
                    format!("does not apply to kind `{}`", self.kind.as_str()),
                ));
            }
        }
        let needed = |field: &'static str| {
            ConfigError::new(field, format!("kind `{}` needs it", self.kind.as_str()))
        };
        Ok(match self.kind {
            FaultKind::Latency => {
                let delay = check_duration("delay", self.delay.ok_or_else(|| needed("delay"))?)?;
                let up_to = match self.delay_max {
                    Some(max) if max < delay => {
                        return Err(ConfigError::new(
                            "delay_max",
                            format!("must be at least `delay` ({delay:?}), got {max:?}"),
                        ))
                    }
                    Some(max) => Some(check_duration("delay_max", max)?),
                    None => None,
                };
                Fault::Latency { delay, up_to }
            }
            FaultKind::HttpStatus => {
                let status = self.status.ok_or_else(|| needed("status"))?;
                let status = http::StatusCode::from_u16(status)
                    .ok()
                    .filter(|_| (100..=599).contains(&status))
                    .ok_or_else(|| {
                        ConfigError::new("status", format!("must be 100 to 599, got {status}"))
                    })?;
                Fault::HttpStatus(status)
            }
            FaultKind::GrpcStatus => {
                let code = self.grpc_code.ok_or_else(|| needed("grpc_code"))?;
                if !(1..=16).contains(&code) {
                    return Err(ConfigError::new(
                        "grpc_code",
                        format!("must be a gRPC error code, 1 to 16, got {code}"),
                    ));
                }
                Fault::GrpcStatus(code)
            }
            FaultKind::Refused => Fault::Refused,
            FaultKind::Reset => Fault::Reset,
            FaultKind::Hang => Fault::Hang {
                at_most: match self.at_most {
                    Some(d) => check_duration("at_most", d)?.min(MAX_INJECTION),
                    None => DEFAULT_HANG_BOUND,
                },
            },
            FaultKind::SlowBody => Fault::SlowBody {
                per_frame: check_duration("delay", self.delay.ok_or_else(|| needed("delay"))?)?,
            },
            FaultKind::FailingBody => Fault::FailingBody {
                after_bytes: self.after_bytes.unwrap_or(0),
            },
        })
    }

    /// Checks the fault's parameters, the rate, the route and the expiry as of
    /// `now` (after it, at most [`MAX_INJECTION`] later).
    pub fn validate_at(&self, now: SystemTime) -> Result<(), ConfigError> {
        self.fault()?;
        if !(0.0..=100.0).contains(&self.percent) {
            return Err(ConfigError::new(
                "percent",
                format!("must be between 0 and 100, got {}", self.percent),
            ));
        }
        if let Some(route) = &self.route {
            if !route.starts_with('/') {
                return Err(ConfigError::new(
                    "route",
                    format!("a path starting with `/`, got `{route}`"),
                ));
            }
        }
        match self.until.duration_since(now) {
            Err(_) => Err(ConfigError::new(
                "until",
                format!(
                    "{} is past: an injection whose time is up is never started again",
                    describe_time(self.until)
                ),
            )),
            Ok(d) if d.is_zero() => Err(ConfigError::new("until", "is now: nothing to inject")),
            Ok(d) if d > MAX_INJECTION => Err(ConfigError::new(
                "until",
                format!(
                    "{} is more than a day ahead: an injection lasts at most {MAX_INJECTION:?}",
                    describe_time(self.until)
                ),
            )),
            Ok(_) => Ok(()),
        }
    }
}

/// A wall time as an operator reads it: RFC 3339 where it can be written.
pub(crate) fn describe_time(t: SystemTime) -> String {
    /// 10000-01-01T00:00:00Z: the formatter writes four-digit years only.
    #[cfg(feature = "serde")]
    const YEAR_10000: Duration = Duration::from_secs(253_402_300_800);
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        #[cfg(feature = "serde")]
        Ok(d) if d < YEAR_10000 => humantime::format_rfc3339_seconds(t).to_string(),
        Ok(d) => format!("{}s after the Unix epoch", d.as_secs()),
        Err(_) => "a time before the Unix epoch".to_owned(),
    }
}

/// RFC 3339 times in UTC (`"2026-12-07T20:00:00Z"`) in configuration files and
/// admin requests (feature `serde`).
#[cfg(feature = "serde")]
pub mod rfc3339 {
    use std::time::SystemTime;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes `t` as RFC 3339, to the second.
    pub fn serialize<S: Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::describe_time(*t))
    }

    /// Reads an RFC 3339 time in UTC.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
        let text = String::deserialize(d)?;
        parse(&text).map_err(serde::de::Error::custom)
    }

    /// Parses an RFC 3339 time in UTC (`Z` or `+00:00`): another offset is refused
    /// rather than misread.
    pub fn parse(text: &str) -> Result<SystemTime, String> {
        humantime::parse_rfc3339(text.trim()).map_err(|e| {
            format!("`{text}` is not an RFC 3339 time in UTC ({e}), e.g. \"2026-12-07T20:00:00Z\"")
        })
    }
}
