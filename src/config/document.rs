//! The policy document: plain data, parsed from TOML and validated with the path of
//! every field at fault.

use std::collections::BTreeMap;
use std::time::Duration;

use seawall_core::{check_duration, ConfigError};

use super::error::LoadError;
use super::layers::each_section;

/// A whole policy document: named policies, and which route or dependency uses
/// which. See the [module docs](super) for the format.
///
/// `Deserialize` alone checks the shape (unknown fields, types, `"300ms"`
/// durations); [`validate`](Self::validate) checks the values.
/// [`from_toml`](Self::from_toml) does both and names the field at fault.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct PolicyDocument {
    /// The policies, by name. The name labels every layer built from the policy
    /// (rejections, metrics, logs).
    pub policies: BTreeMap<String, PolicyConfig>,
    /// Server routes (as given to axum's `route`, e.g. `"/quote"`) and the policy
    /// each one uses. A route not listed is untouched.
    pub routes: BTreeMap<String, String>,
    /// Dependencies (clients: a supplier's HTTP client, a gRPC channel) and the
    /// policy each one uses.
    pub dependencies: BTreeMap<String, String>,
    /// The fleet's store and coordination settings (`[fleet]`), if the service
    /// coordinates its breakers across instances.
    #[cfg(feature = "fleet")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleet: Option<super::FleetSection>,
}

macro_rules! policy_config {
    ($($field:ident {
        feature: $feature:literal, section: $section:ident, module: $module:ident,
        config: $config:ident, config_doc: $doc:literal, $($_docs:tt)*
    })*) => {
        /// One named policy: which layers protect the route or dependency that uses it,
        /// and their settings. Every section is optional; a policy needs at least one.
        ///
        /// The sections are each crate's own configuration type, with its defaults for
        /// the fields left out (the crates' defaults):
        ///
        /// | key | type | what |
        /// |---|---|---|
        /// | `deadline` | `"300ms"` | the budget of the segment, admission included ([`DeadlineLayer`](seawall_core::DeadlineLayer)) |
        /// | `deadline_shadow` | `true` \| `false` | shadow mode for the deadline: computed and counted, not enforced (default `false`; needs `deadline`; may change at run time) |
        /// | `hold` | `"body"` \| `"response"` | for the HTTP constructors ([`Policies::http_bulkhead`](super::Policies::http_bulkhead), [`Policies::http_circuit_breaker`](super::Policies::http_circuit_breaker)): the call ends when the response body ends (`"body"`, the default: a client's connection is busy until then, and a gRPC status comes in the trailers) or at the response's headers (`"response"`: a server route streaming to its own caller); the other constructors' calls end with the response future. Cannot change at run time. |
        /// | `bulkhead` | table | [`BulkheadConfig`](crate::bulkhead::BulkheadConfig): `max_concurrent`, `queue = { … }` (the options of [`QueuePolicy`](crate::bulkhead::QueuePolicy), listed there), and `adaptive = { algorithm = "aimd" \| "gradient", min_limit, max_limit, initial_limit, … }` for a limit found at run time ([`AdaptiveConfig`](crate::bulkhead::AdaptiveConfig)) |
        /// | `breaker` | table | [`CircuitBreakerConfig`](crate::circuit_breaker::CircuitBreakerConfig): `policy = { kind = "count_window", size, min_calls, failure_rate }`, `open_for`, … |
        /// | `degradation` | table | [`DegradationConfig`](crate::degradation::DegradationConfig): `failures_to_degrade`, `min_dwell`, `probe_ratio`, … |
        /// | `fallback` | table | [`FallbackConfig`](crate::fallback::FallbackConfig): `on_rejections`, `step_timeouts`, `enabled` |
        /// | `fault` | table | feature `fault`: [`FaultConfig`](crate::fault::FaultConfig), its `injections` ([`InjectionConfig`](crate::fault::InjectionConfig)) each with an RFC 3339 `until` that must be ahead, and at most a day away, when the document is loaded or applied; an empty table builds the layer for the admin routes' injections |
        #[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
        #[serde(default, deny_unknown_fields)]
        #[non_exhaustive]
        pub struct PolicyConfig {
            /// The budget of the protected segment, admission included.
            #[serde(
                with = "seawall_core::duration_format::option",
                skip_serializing_if = "Option::is_none"
            )]
            pub deadline: Option<Duration>,
            /// Shadow mode for the deadline: each request's deadline is computed and the
            /// requests that outlive it are counted, but nothing is enforced (see
            /// [`DeadlineLayer`](seawall_core::DeadlineLayer#shadow-mode)). The other
            /// sections have their own `shadow` field.
            #[serde(skip_serializing_if = "std::ops::Not::not")]
            pub deadline_shadow: bool,
            /// When an HTTP call ends for the HTTP constructors: at the end of the response
            /// body (the default) or at its headers.
            #[serde(skip_serializing_if = "Hold::is_body")]
            pub hold: Hold,
            $(
                #[doc = $doc]
                #[cfg(feature = $feature)]
                #[serde(skip_serializing_if = "Option::is_none")]
                pub $field: Option<crate::$module::$config>,
            )*
        }
    };
}

policy_layers!(policy_config);

/// When an HTTP call ends, for the layers a policy's HTTP constructors build.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Hold {
    /// When the response body has been read to its end, has failed or is dropped:
    /// the bulkhead's slot and the breaker's verdict last until then.
    #[default]
    Body,
    /// When the response's headers arrive: for a server route whose body streams to
    /// its own caller (server-sent events, long polling), which would otherwise pin
    /// a slot for as long as the caller reads.
    Response,
}

impl Hold {
    /// Whether this is [`Hold::Body`], the default.
    pub fn is_body(&self) -> bool {
        *self == Hold::Body
    }
}

/// The kinds of section a policy may have, in the order of the recommended stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Section {
    /// `fallback`
    Fallback,
    /// `degradation`
    Degradation,
    /// `deadline`
    Deadline,
    /// `bulkhead`
    Bulkhead,
    /// `breaker`
    Breaker,
    /// `fault` (innermost, in front of the client)
    Fault,
}

impl Section {
    /// The section's key in the document.
    pub const fn key(self) -> &'static str {
        match self {
            Section::Fallback => "fallback",
            Section::Degradation => "degradation",
            Section::Deadline => "deadline",
            Section::Bulkhead => "bulkhead",
            Section::Breaker => "breaker",
            Section::Fault => "fault",
        }
    }
}

impl PolicyConfig {
    /// The sections this policy declares, in the order of the recommended stack.
    pub fn sections(&self) -> Vec<Section> {
        let mut out = Vec::new();
        each_section(self, |section, _| out.push(section));
        if self.deadline.is_some() {
            out.push(Section::Deadline);
        }
        out.sort();
        out
    }

    /// Every problem of this policy, one per section at most, each naming its
    /// field relative to the policy (`breaker.policy.failure_rate`).
    pub fn problems(&self) -> Vec<ConfigError> {
        let mut out = Vec::new();
        if self.sections().is_empty() {
            out.push(ConfigError::new(
                "",
                "declares no layer: add at least one of deadline, bulkhead, breaker, degradation, fallback",
            ));
        }
        if let Some(d) = self.deadline {
            if let Err(e) = check_duration("deadline", d) {
                out.push(e);
            }
        }
        if self.deadline_shadow && self.deadline.is_none() {
            out.push(ConfigError::new(
                "deadline_shadow",
                "needs a `deadline` to shadow",
            ));
        }
        each_section(self, |section, valid| {
            if let Err(e) = valid {
                out.push(e.within(section.key()));
            }
        });
        out
    }
}

/// A key as it would be written in a dotted TOML path: bare when it can be,
/// quoted otherwise (`routes."/quote"`).
pub(crate) fn key(k: &str) -> String {
    let bare = !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if bare {
        k.to_owned()
    } else {
        format!("{k:?}")
    }
}

/// `section.key`, or `section` alone for an empty field (a problem of the whole table).
pub(crate) fn within(e: ConfigError, section: &str) -> ConfigError {
    if e.field().is_empty() {
        ConfigError::new(section.to_owned(), e.problem().to_owned())
    } else {
        e.within(section)
    }
}

impl PolicyDocument {
    /// Parses and validates a TOML document. The error names the field at fault
    /// (e.g. `policies.quote.breaker.policy.failure_rate`) and, for a malformed
    /// document, the line and column.
    pub fn from_toml(text: &str) -> Result<Self, LoadError> {
        let doc: PolicyDocument =
            toml::from_str(text).map_err(|e| LoadError::from_toml(None, text, &e))?;
        doc.validate()
            .map_err(|errors| LoadError::Invalid { path: None, errors })?;
        Ok(doc)
    }

    /// Checks every value and every reference; returns every problem found, each
    /// naming its field by its full path in the document.
    pub fn validate(&self) -> Result<(), Vec<ConfigError>> {
        let mut errors = Vec::new();
        for (name, policy) in &self.policies {
            let section = format!("policies.{}", key(name));
            if name.trim().is_empty() {
                errors.push(ConfigError::new(section.clone(), "a policy needs a name"));
            }
            errors.extend(policy.problems().into_iter().map(|e| within(e, &section)));
        }
        #[cfg(feature = "fleet")]
        if let Some(fleet) = &self.fleet {
            errors.extend(fleet.problems().into_iter().map(|e| within(e, "fleet")));
            for policy in fleet.caps.keys() {
                if self
                    .policies
                    .get(policy)
                    .is_none_or(|p| p.bulkhead.is_none())
                {
                    errors.push(ConfigError::new(
                        format!("fleet.caps.{}", key(policy)),
                        format!("caps the policy `{policy}`, which declares no bulkhead"),
                    ));
                }
            }
        }
        for (table, map) in [
            ("routes", &self.routes),
            ("dependencies", &self.dependencies),
        ] {
            for (from, policy) in map {
                if !self.policies.contains_key(policy) {
                    errors.push(ConfigError::new(
                        format!("{table}.{}", key(from)),
                        format!("names the policy `{policy}`, which [policies] does not declare"),
                    ));
                }
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    /// The policy a route uses, if any.
    pub fn policy_for_route(&self, route: &str) -> Option<&str> {
        self.routes.get(route).map(String::as_str)
    }

    /// The policy a dependency uses, if any.
    pub fn policy_for_dependency(&self, dependency: &str) -> Option<&str> {
        self.dependencies.get(dependency).map(String::as_str)
    }

    /// What in `next` cannot be applied to a running service built from `self`:
    /// a policy or a section added or removed, a deadline changed, a route or a
    /// dependency mapped differently. Each error names the field.
    pub fn unchangeable_at_run_time(&self, next: &PolicyDocument) -> Vec<ConfigError> {
        const RESTART: &str = "cannot change at run time; restart the service to apply it";
        let mut errors = Vec::new();
        for name in self.policies.keys() {
            if !next.policies.contains_key(name) {
                errors.push(ConfigError::new(
                    format!("policies.{}", key(name)),
                    format!("removed, but {RESTART}"),
                ));
            }
        }
        for (name, policy) in &next.policies {
            let path = format!("policies.{}", key(name));
            let Some(old) = self.policies.get(name) else {
                errors.push(ConfigError::new(path, format!("added, but {RESTART}")));
                continue;
            };
            let (before, after) = (old.sections(), policy.sections());
            for s in &before {
                if !after.contains(s) {
                    errors.push(ConfigError::new(
                        format!("{path}.{}", s.key()),
                        format!("removed, but {RESTART}"),
                    ));
                }
            }
            for s in &after {
                if !before.contains(s) {
                    errors.push(ConfigError::new(
                        format!("{path}.{}", s.key()),
                        format!("added, but {RESTART}"),
                    ));
                }
            }
            if old.hold != policy.hold {
                errors.push(ConfigError::new(
                    format!("{path}.hold"),
                    format!("changed, but the layers were built with it: it {RESTART}"),
                ));
            }
            if old.deadline.is_some()
                && policy.deadline.is_some()
                && old.deadline != policy.deadline
            {
                errors.push(ConfigError::new(
                    format!("{path}.deadline"),
                    format!("changed, but a deadline {RESTART}"),
                ));
            }
        }
        // Past the policies and the wiring, the document's one table is `[fleet]`
        // (feature `fleet`): its store and settings were built at start.
        let set_aside = |d: &PolicyDocument| PolicyDocument {
            policies: BTreeMap::new(),
            routes: BTreeMap::new(),
            dependencies: BTreeMap::new(),
            ..d.clone()
        };
        if set_aside(self) != set_aside(next) {
            errors.push(ConfigError::new(
                "fleet",
                format!("changed, but the fleet's store and settings {RESTART}"),
            ));
        }
        for (table, before, after) in [
            ("routes", &self.routes, &next.routes),
            ("dependencies", &self.dependencies, &next.dependencies),
        ] {
            let keys: std::collections::BTreeSet<&String> =
                before.keys().chain(after.keys()).collect();
            for k in keys {
                if before.get(k) != after.get(k) {
                    errors.push(ConfigError::new(
                        format!("{table}.{}", key(k)),
                        format!("changed, but the wiring of routes and dependencies {RESTART}"),
                    ));
                }
            }
        }
        errors
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_quoted_only_when_they_must_be() {
        assert_eq!(key("quote"), "quote");
        assert_eq!(key("freight-eu_2"), "freight-eu_2");
        assert_eq!(key("/quote"), "\"/quote\"");
        assert_eq!(key(""), "\"\"");
    }
}
