//! The bulkhead's admin actions: force its limit of active calls, release it.
//!
//! A forced limit is the operator's hand on the valve during an incident: it overrides
//! the adaptive algorithm (or `max_concurrent`) on this instance until released,
//! and a release lets the algorithm go on from the forced value. The limit comes
//! in the query string, as a degradation level does; a missing, malformed or
//! out-of-range limit is refused with the field named, and changes nothing.

use seawall_core::ConfigError;

use super::Refusal;

/// The query parameter that carries the limit.
const FIELD: &str = "limit";

/// Carries out `action` (`force` with `limit`, or `release`) on the
/// policy's bulkhead.
pub(super) fn carry_out(
    handles: &crate::config::PolicyHandles,
    action: &str,
    limit: Option<&str>,
) -> Result<(), Refusal> {
    let slot = &handles.bulkhead;
    super::built(slot)?;
    match action {
        "force" => super::force(slot, parse(limit)?),
        "release" => super::release(slot),
        _ => Err(Refusal::NotFound(super::NO_ACTION)),
    }
}

/// The limit as a whole number; its range is checked by the handle. Refusals
/// read as the handle's (``invalid `limit`: …``).
fn parse(limit: Option<&str>) -> Result<usize, Refusal> {
    let invalid = |why: String| Refusal::Invalid(ConfigError::new(FIELD, why).to_string());
    let text = limit.ok_or_else(|| invalid(format!("needed, as `?{FIELD}=<calls>`")))?;
    text.trim()
        .parse::<usize>()
        .map_err(|_| invalid(format!("must be a whole number of calls, got `{text}`")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn why(r: Result<usize, Refusal>) -> String {
        match r {
            Err(Refusal::Invalid(why)) => why,
            Err(Refusal::NotFound(why)) => format!("not found: {why}"),
            Ok(n) => format!("parsed {n}"),
        }
    }

    #[test]
    fn a_limit_is_a_whole_number_and_its_absence_is_named() {
        assert!(matches!(parse(Some("12")), Ok(12)));
        assert_eq!(
            why(parse(None)),
            "invalid `limit`: needed, as `?limit=<calls>`"
        );
        assert_eq!(
            why(parse(Some("-3"))),
            "invalid `limit`: must be a whole number of calls, got `-3`"
        );
        assert_eq!(
            why(parse(Some("99999999999999999999999"))),
            "invalid `limit`: must be a whole number of calls, got `99999999999999999999999`"
        );
    }
}
