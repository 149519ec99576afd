//! Number formatting and what the report says about the machine and the build.

use std::process::Command;
use std::time::Duration;

use crate::harness::stats::Spread;

pub(crate) fn ns(x: f64) -> String {
    if x.abs() < 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.0}")
    }
}

pub(crate) fn added(x: f64) -> String {
    let s = ns(x);
    if x >= 0.0 {
        format!("+{s}")
    } else {
        s
    }
}

/// `+32 (29–35)`: the median added cost and its quartiles.
pub(crate) fn added_spread(s: Spread) -> String {
    format!("{} ({}–{})", added(s.median), ns(s.p25), ns(s.p75))
}

/// `0.92× (0.85–1.01)`.
pub(crate) fn ratio_spread(s: Spread) -> String {
    format!("{:.2}× ({:.2}–{:.2})", s.median, s.p25, s.p75)
}

pub(crate) fn rate(x: f64) -> String {
    if x >= 100e6 {
        format!("{:.0} M", x / 1e6)
    } else if x >= 1e6 {
        format!("{:.1} M", x / 1e6)
    } else {
        format!("{:.0} k", x / 1e3)
    }
}

/// `7.5 M (6.3–8.2)`: the median rate and its quartiles.
pub(crate) fn rate_spread(s: Spread) -> String {
    format!("{} ({}–{})", rate(s.median), rate(s.p25), rate(s.p75))
}

/// `0 allocs`, `1 alloc`, `0.95 allocs`.
pub(crate) fn allocs_counted(x: f64) -> String {
    let n = allocs(x);
    if n == "1" {
        "1 alloc".to_owned()
    } else {
        format!("{n} allocs")
    }
}

pub(crate) fn allocs(x: f64) -> String {
    if (x - x.round()).abs() < 0.01 {
        format!("{}", x.round())
    } else {
        format!("{x:.2}")
    }
}

pub(crate) fn time(t: Duration) -> String {
    let ns = t.as_nanos() as f64;
    if ns >= 1e6 {
        format!("≈{:.1} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("≈{:.1} µs", ns / 1e3)
    } else {
        self::ns(ns)
    }
}

/// YYYY-MM-DD (UTC) from the system clock.
pub(crate) fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    // Howard Hinnant's civil_from_days.
    let z = (secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

pub(crate) fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned())
}

pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "?".to_owned())
}

/// The commit the bench was run at (with `+changes` when tracked files differ
/// from it), if git can say.
pub(crate) fn commit() -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    match git(&["rev-parse", "--short", "HEAD"]) {
        Some(sha) => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{sha}+changes")
            } else {
                sha
            }
        }
        None => "unknown".to_owned(),
    }
}
