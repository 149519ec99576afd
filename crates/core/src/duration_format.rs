//! Human-readable durations for configuration files: `"300ms"`, `"1.5s"`, `"1m30s"`.
//!
//! Use on a `Duration` field with `#[serde(with = "seawall_core::duration_format")]`,
//! or [`option`] for an `Option<Duration>`. Parsing accepts what `humantime` users
//! write (it is `humantime::parse_duration`): units `ns`, `us`, `ms`, `s`, `m`, `h`,
//! `d` and their long forms, fractions (`1.5s`), and several spans (`1m30s`,
//! `1h 30m`). A number without a unit is refused: `"20"` could be seconds or
//! milliseconds. Serialising picks the largest unit that represents the value
//! exactly, down to microseconds; a value of a millisecond or more that no such unit
//! represents (a measured time in a snapshot, say `9956450818ns`) is rounded to the
//! nearest millisecond (`9956ms`) to stay readable.

use std::time::Duration;

use serde::{de, Deserialize, Deserializer, Serializer};

const UNITS: &str = "use ns, us, ms, s, m or h, as in `250ms`, `1.5s` or `1m30s`";

/// Parses `"300ms"`-style durations.
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    humantime::parse_duration(text).map_err(|e| match e {
        humantime::DurationError::UnknownUnit { unit, .. } if unit.is_empty() => {
            format!("`{text}` has no unit ({UNITS})")
        }
        humantime::DurationError::UnknownUnit { unit, .. } => {
            format!("unknown unit `{unit}` in `{text}` ({UNITS})")
        }
        other => format!("`{text}` is not a duration: {other} ({UNITS})"),
    })
}

/// Formats a duration with the largest exact unit (see the module docs for rounding).
pub fn format(d: Duration) -> String {
    let nanos = d.as_nanos();
    for (scale, unit) in [
        (3_600_000_000_000u128, "h"),
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
    ] {
        if nanos != 0 && nanos.is_multiple_of(scale) {
            return format!("{}{unit}", nanos / scale);
        }
    }
    if nanos >= 1_000_000 {
        return format!("{}ms", (nanos + 500_000) / 1_000_000);
    }
    format!("{nanos}ns")
}

/// Serialises a `Duration` as `"300ms"`.
pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format(*d))
}

/// Deserialises a `Duration` from `"300ms"`.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    parse(&text).map_err(de::Error::custom)
}

/// The same format for `Option<Duration>` fields.
pub mod option {
    use super::*;

    /// Serialises `Some(d)` as `"300ms"` and `None` as none.
    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&super::format(*d)),
            None => s.serialize_none(),
        }
    }

    /// Deserialises an optional `"300ms"`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|t| parse(&t).map_err(de::Error::custom))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_formats() {
        assert_eq!(parse("300ms"), Ok(Duration::from_millis(300)));
        assert_eq!(parse("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse(" 2m "), Ok(Duration::from_secs(120)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("20 ms"), Ok(Duration::from_millis(20)));
        assert!(parse("10").unwrap_err().contains("no unit"));
        assert!(parse("ms").is_err());
        assert!(parse("").is_err());
        // What humantime users write.
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("1h 30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("2d"), Ok(Duration::from_secs(2 * 86_400)));
        assert!(parse("3x").unwrap_err().contains("unknown unit `x`"));
        assert_eq!(format(Duration::from_millis(300)), "300ms");
        assert_eq!(format(Duration::from_secs(120)), "2m");
        assert_eq!(format(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format(Duration::ZERO), "0ns");
        // Measured times are rounded to the millisecond once they reach one.
        assert_eq!(format(Duration::from_nanos(9_956_450_818)), "9956ms");
        assert_eq!(format(Duration::from_nanos(43_549_182)), "44ms");
        assert_eq!(format(Duration::from_nanos(1_234)), "1234ns");
        for d in [
            Duration::from_nanos(7),
            Duration::from_micros(20),
            Duration::from_secs(7200),
        ] {
            assert_eq!(parse(&format(d)), Ok(d));
        }
    }
}
