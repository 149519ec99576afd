//! The fault injection's admin actions: start an injection, stop one or all.
//!
//! An injection started here needs an end, as one in a file does: `for=<duration>`
//! (at most a day) or `until=<RFC 3339 time in UTC>`; a request without either, or
//! with an end already past, is refused and changes nothing. The injection's other
//! fields come in the query string under the names of the file's table
//! ([`InjectionConfig`]): `kind`, `percent`, `route`, `key`, and the kind's own
//! parameters (`delay`, `delay_max`, `status`, `grpc_code`, `at_most`,
//! `after_bytes`). Each refusal names the parameter at fault.

use std::time::SystemTime;

use seawall_core::{duration_format, ConfigError};

use super::{FaultParams as Params, Refusal};
use crate::fault::{FaultKind, InjectionConfig, MAX_INJECTION};

/// Carries out `action` (`inject`, or `stop` with an optional `id`) on the policy's
/// fault layer.
pub(super) fn carry_out(
    handles: &crate::config::PolicyHandles,
    action: &str,
    params: &Params,
) -> Result<(), Refusal> {
    let handle = super::built(&handles.fault)?;
    match action {
        "inject" => {
            let injection = injection(params, SystemTime::now())?;
            handle
                .inject(injection)
                .map(|_| ())
                .map_err(|e| Refusal::Invalid(e.to_string()))
        }
        "stop" => match &params.id {
            None => {
                handle.stop_all();
                Ok(())
            }
            Some(id) => {
                let id: u64 = number("id", id)?;
                if handle.stop(id) {
                    Ok(())
                } else {
                    Err(Refusal::NotFound("no injection in force with that id"))
                }
            }
        },
        _ => Err(Refusal::NotFound(super::NO_ACTION)),
    }
}

fn invalid(field: &'static str, why: impl Into<String>) -> Refusal {
    Refusal::Invalid(ConfigError::new(field, why.into()).to_string())
}

fn number<T: std::str::FromStr>(field: &'static str, text: &str) -> Result<T, Refusal> {
    text.trim()
        .parse()
        .map_err(|_| invalid(field, format!("must be a number, got `{text}`")))
}

fn duration(field: &'static str, text: &str) -> Result<std::time::Duration, Refusal> {
    duration_format::parse(text).map_err(|why| invalid(field, why))
}

/// The injection the query asks for, ending at `until` or `for` after `now`.
fn injection(p: &Params, now: SystemTime) -> Result<InjectionConfig, Refusal> {
    let kind = p
        .kind
        .as_deref()
        .ok_or_else(|| invalid("kind", "needed: latency, http_status, grpc_status, refused, reset, hang, slow_body or failing_body"))?;
    let kind = FaultKind::from_name(kind.trim())
        .ok_or_else(|| invalid("kind", format!("no fault kind `{kind}`")))?;
    let until = match (&p.until, &p.lasting) {
        (Some(_), Some(_)) => return Err(invalid("for", "give `for` or `until`, not both")),
        (None, None) => {
            return Err(invalid(
                "for",
                "needed (or `until`): every injection ends by itself, at most a day from now",
            ))
        }
        (Some(until), None) => {
            crate::fault::rfc3339::parse(until).map_err(|why| invalid("until", why))?
        }
        (None, Some(lasting)) => {
            let lasting = duration("for", lasting)?;
            if lasting > MAX_INJECTION {
                return Err(invalid("for", format!("at most {MAX_INJECTION:?}")));
            }
            now.checked_add(lasting)
                .ok_or_else(|| invalid("for", "too long"))?
        }
    };
    let mut config = InjectionConfig::new(&crate::fault::Fault::Refused, until);
    config.kind = kind;
    if let Some(percent) = &p.percent {
        config.percent = number("percent", percent)?;
    }
    config.route = p.route.clone();
    config.key = p.key.clone();
    config.delay = p
        .delay
        .as_deref()
        .map(|d| duration("delay", d))
        .transpose()?;
    config.delay_max = p
        .delay_max
        .as_deref()
        .map(|d| duration("delay_max", d))
        .transpose()?;
    config.at_most = p
        .at_most
        .as_deref()
        .map(|d| duration("at_most", d))
        .transpose()?;
    config.status = p
        .status
        .as_deref()
        .map(|s| number("status", s))
        .transpose()?;
    config.grpc_code = p
        .grpc_code
        .as_deref()
        .map(|c| number("grpc_code", c))
        .transpose()?;
    config.after_bytes = p
        .after_bytes
        .as_deref()
        .map(|b| number("after_bytes", b))
        .transpose()?;
    Ok(config)
}
