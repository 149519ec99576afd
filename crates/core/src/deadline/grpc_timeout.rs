//! The `grpc-timeout` header's codec: how a deadline crosses a gRPC hop.

use std::time::Duration;

/// The `grpc-timeout` header name.
pub const GRPC_TIMEOUT: &str = "grpc-timeout";

/// Parses a `grpc-timeout` value (`1-8 digits` then one of `H M S m u n`).
pub fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    if value.len() < 2 || value.len() > 9 {
        return None;
    }
    let (digits, unit) = value.split_at(value.len() - 1);
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.checked_mul(3600)?),
        "M" => Duration::from_secs(n.checked_mul(60)?),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Formats a duration as a `grpc-timeout` value, rounding up to the unit so that the
/// server never gets a shorter budget than remains (at most 8 digits).
pub fn format_grpc_timeout(d: Duration) -> String {
    const LIMIT: u128 = 100_000_000;
    let nanos = d.as_nanos();
    let units: [(u128, char); 6] = [
        (1, 'n'),
        (1_000, 'u'),
        (1_000_000, 'm'),
        (1_000_000_000, 'S'),
        (60_000_000_000, 'M'),
        (3_600_000_000_000, 'H'),
    ];
    for (scale, unit) in units {
        let value = nanos.div_ceil(scale);
        if value < LIMIT {
            return format!("{value}{unit}");
        }
    }
    format!("{}H", LIMIT - 1)
}
