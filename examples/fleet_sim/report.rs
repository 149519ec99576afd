//! The simulation's table, its goals, and the SVG timeline.
#![allow(unreachable_pub)] // a module of the example

use std::fmt::Write as _;
use std::time::Duration;

use super::model::{Figures, Mode, Observations};

pub struct Row {
    pub instances: usize,
    pub mode: Mode,
    pub figures: Figures,
    pub store_ops: u64,
    pub store_errors: u64,
    pub other_errors: u64,
}

impl Row {
    pub fn new(instances: usize, mode: Mode, obs: &Observations) -> Self {
        Self {
            instances,
            mode,
            figures: obs.figures(),
            store_ops: obs.store_ops,
            store_errors: obs.store_errors,
            other_errors: obs.other_errors,
        }
    }
}

fn secs(d: Option<Duration>) -> String {
    d.map_or_else(
        || "never".to_owned(),
        |d| format!("{:.2} s", d.as_secs_f64()),
    )
}

pub fn table(rows: &[Row]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| N | mode | probes per open interval (max) | most probes in 100 ms | probes in all | recovery → first good probe | first good probe → all closed | supplier calls in the 1st s after it (steady load) | store ops (errors) | calls failed by the store |"
    );
    let _ = writeln!(s, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let f = &r.figures;
        let store = match r.mode {
            Mode::Fleet { .. } => format!("{} ({})", r.store_ops, r.store_errors),
            Mode::Local | Mode::LocalJitter => "–".to_owned(),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} ({}) | {} | {} |",
            r.instances,
            r.mode.label(),
            f.probes_per_interval,
            f.probes_per_100ms,
            f.total_probes,
            secs(f.recovery_to_first_good_probe),
            secs(f.first_good_probe_to_all_closed),
            f.load_first_second,
            f.steady_load,
            store,
            r.other_errors,
        );
    }
    s
}

/// The issue's goals, checked against the rows.
pub fn goals(rows: &[Row]) -> String {
    let mut s = String::new();
    let interval = Duration::from_secs(12); // 10 s open, jittered by up to 20 %
    for r in rows {
        let f = &r.figures;
        let closed = f.first_good_probe_to_all_closed;
        let verdict = match r.mode {
            Mode::Fleet {
                loss: 0.0,
                push_loss: 0.0,
            } => Some((
                "≤ 1 probe per interval, all closed within 1 s of the first good probe",
                f.probes_per_interval <= 1 && closed.is_some_and(|c| c <= Duration::from_secs(1)),
            )),
            Mode::Fleet {
                loss: 0.0,
                push_loss,
            } if push_loss >= 1.0 => Some((
                "≤ 1 probe per interval, all closed within one open interval of the first good probe",
                f.probes_per_interval <= 1 && closed.is_some_and(|c| c <= interval),
            )),
            Mode::Fleet { .. } => Some((
                "≤ 2 probes per interval",
                f.probes_per_interval <= 2 && closed.is_some(),
            )),
            Mode::Local | Mode::LocalJitter => None,
        };
        if let Some((goal, met)) = verdict {
            let _ = writeln!(
                s,
                "- N = {}, {}: {goal}: {}",
                r.instances,
                r.mode.label(),
                if met && r.other_errors == 0 {
                    "met"
                } else {
                    "NOT MET"
                }
            );
        }
    }
    s
}

const WIDTH: f64 = 1200.0;
const LEFT: f64 = 170.0;
const ROW: f64 = 120.0;

/// One band per mode: supplier calls per 100 ms (a line, scaled to the steady
/// load), probes (red ticks), and the share of instances closed (green fill).
pub fn svg(instances: usize, runs: &[(Mode, Observations)]) -> String {
    let Some((_, first)) = runs.first() else {
        return String::new();
    };
    let span = first.end.as_secs_f64().max(0.001);
    let x = |t: Duration| LEFT + t.as_secs_f64() / span * (WIDTH - LEFT - 20.0);
    let height = 60.0 + ROW * runs.len() as f64;
    let mut s = start_svg(WIDTH, height);
    let _ = writeln!(
        s,
        r#"<text x="8" y="16">N = {instances}: supplier calls per 100 ms (blue line, steady load at two thirds), probes (ticks: red failed, green good), instances closed (green area)</text>"#
    );
    // The outage.
    let _ = writeln!(
        s,
        r##"<rect x="{:.1}" y="24" width="{:.1}" height="{:.1}" fill="#fbeaea"/><text x="{:.1}" y="36">supplier down</text>"##,
        x(first.fail_at),
        x(first.recover_at) - x(first.fail_at),
        height - 40.0,
        x(first.fail_at) + 4.0
    );
    time_axis(&mut s, span, height, x, "#dddddd");
    for (row, (mode, obs)) in runs.iter().enumerate() {
        let top = 44.0 + ROW * row as f64;
        let bottom = top + ROW - 24.0;
        let _ = writeln!(
            s,
            r#"<text x="8" y="{:.1}">{}</text>"#,
            top + 20.0,
            mode.label()
        );
        // Share of instances closed, as a filled step area.
        let mut closed = obs.instances as f64;
        let mut state = vec![true; obs.instances];
        let mut path = format!("M{:.1},{bottom:.1} ", x(Duration::ZERO));
        let y_closed = |c: f64| bottom - (c / obs.instances as f64) * (ROW - 40.0);
        let _ = write!(path, "L{:.1},{:.1} ", x(Duration::ZERO), y_closed(closed));
        for &(at, i, to) in &obs.transitions {
            let now_closed = to == seawall::circuit_breaker::State::Closed;
            if state[i] != now_closed {
                let _ = write!(path, "L{:.1},{:.1} ", x(at), y_closed(closed));
                closed += if now_closed { 1.0 } else { -1.0 };
                state[i] = now_closed;
                let _ = write!(path, "L{:.1},{:.1} ", x(at), y_closed(closed));
            }
        }
        let _ = write!(
            path,
            "L{:.1},{:.1} L{:.1},{bottom:.1} Z",
            x(obs.end),
            y_closed(closed),
            x(obs.end)
        );
        let _ = writeln!(
            s,
            r##"<path d="{path}" fill="#5cb85c" fill-opacity="0.25" stroke="none"/>"##
        );
        // Supplier calls per 100 ms, scaled to the steady load's 100 ms share.
        let buckets = (obs.end.as_millis() / 100) as usize + 1;
        let mut counts = vec![0usize; buckets];
        for c in &obs.dependency_calls {
            counts[(c.as_millis() / 100) as usize] += 1;
        }
        let steady = (obs.instances as f64 * f64::from(obs.rps) / 10.0).max(1.0);
        let mut line = String::new();
        for (b, n) in counts.iter().enumerate() {
            let y = bottom - ((*n as f64 / steady).min(1.5) / 1.5) * (ROW - 40.0);
            let _ = write!(
                line,
                "{}{:.1},{y:.1} ",
                if b == 0 { "M" } else { "L" },
                x(Duration::from_millis(b as u64 * 100))
            );
        }
        let _ = writeln!(
            s,
            r##"<path d="{line}" fill="none" stroke="#337ab7" stroke-width="1"/>"##
        );
        // Probes.
        for &(at, _, ok) in &obs.probes {
            let color = if ok { "#2e7d32" } else { "#d9534f" };
            let _ = writeln!(
                s,
                r#"<line x1="{0:.1}" y1="{1:.1}" x2="{0:.1}" y2="{2:.1}" stroke="{color}" stroke-opacity="0.6"/>"#,
                x(at),
                top + 26.0,
                top + 38.0
            );
        }
        let f = obs.figures();
        let _ = writeln!(
            s,
            r#"<text x="8" y="{:.1}" font-size="11">{} probes, max {} per interval</text>"#,
            top + 38.0,
            f.total_probes,
            f.probes_per_interval
        );
    }
    let _ = writeln!(s, "</svg>");
    s
}

/// A chart `width` by `height` on white, for the caller to draw on and close.
pub fn start_svg(width: f64, height: f64) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    s
}

/// A time axis under a chart `height` high, a gridline and a label every 10 s up
/// to `span` seconds, with `x` placing an instant.
pub fn time_axis(s: &mut String, span: f64, height: f64, x: impl Fn(Duration) -> f64, grid: &str) {
    let mut t = 0;
    while (t as f64) <= span {
        let xt = x(Duration::from_secs(t));
        let _ = writeln!(
            s,
            r#"<line x1="{xt:.1}" y1="24" x2="{xt:.1}" y2="{:.1}" stroke="{grid}"/><text x="{:.1}" y="{:.1}">{t} s</text>"#,
            height - 16.0,
            xt - 8.0,
            height - 4.0
        );
        t += 10;
    }
}
