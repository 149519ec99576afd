//! Turns the drill's observations into the per-phase table and the SVG timeline.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use tokio::time::Instant;

use super::freight::{Mode, PRICE_CENTS};
use super::load::{Answer, Endpoint};
use super::shop::Running;
use super::tap::Admitted;

/// One step of the schedule.
#[derive(Debug, Clone)]
pub struct Phase {
    pub mode: Mode,
    pub start: Instant,
    pub end: Instant,
}

/// A change of state with its instant, e.g. a breaker transition or a level change.
#[derive(Debug, Clone)]
pub struct Change {
    pub at: Instant,
    pub from: String,
    pub to: String,
}

/// A reading of the bulkhead's gauges.
#[derive(Debug, Clone, Copy)]
pub struct Gauges {
    pub at: Instant,
    pub active: usize,
    pub queued: usize,
}

/// Everything the drill saw.
#[derive(Debug, Default)]
pub struct Observations {
    pub phases: Vec<Phase>,
    pub answers: Vec<Answer>,
    /// Calls the bulkhead admitted (tap between bulkhead and breaker).
    pub admitted: Vec<Admitted>,
    /// Calls that left the breaker for the dependency (tap between the breaker and
    /// the fault layer in front of the client): in the phases the fault layer
    /// plays, it answers some of them without the supplier.
    pub dependency_calls: Vec<Admitted>,
    pub breaker_changes: Vec<Change>,
    pub level_changes: Vec<Change>,
    /// High-water marks of (active, queued) per phase, as the bulkhead recorded them.
    pub high_water: Vec<(usize, usize)>,
    /// Gauge readings for the timeline picture.
    pub gauges: Vec<Gauges>,
    pub freight_arrivals: Vec<Instant>,
    pub budget: Duration,
    pub max_concurrent: usize,
    pub max_queue: usize,
    /// Slots the bulkhead still held once the load had stopped and answers were in.
    pub held_at_end: usize,
}

/// The per-phase summary printed as the drill's table.
#[derive(Debug, Clone, Default)]
pub struct PhaseRow {
    pub name: String,
    pub requests: usize,
    pub quotes_served: usize,
    pub unavailable: BTreeMap<String, usize>,
    pub max_active: usize,
    pub max_queued: usize,
    pub wait_p50: Duration,
    pub wait_p99: Duration,
    pub dependency_calls: usize,
    /// Requests the supplier received (the whole fleet's in fleet mode).
    pub supplier_received: usize,
    pub calls_while_open: usize,
    pub probes: usize,
    pub transitions: Vec<String>,
    pub level_changes: Vec<String>,
    pub held_after: usize,
    pub quote_p50: Duration,
    pub quote_p99: Duration,
    pub products_p50: Duration,
    pub products_p99: Duration,
    pub products_failed: usize,
    pub checkouts_confirmed: usize,
    pub checkouts_refused: usize,
    pub invented_prices: usize,
}

/// Counts by cause as a table cell: `breaker_open 3, timeout 1`, or `–` for none.
pub fn by_cause(counts: &BTreeMap<String, usize>) -> String {
    if counts.is_empty() {
        return "–".to_owned();
    }
    counts
        .iter()
        .map(|(cause, n)| format!("{cause} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `p` quantile of `v` (nearest rank), zero for none.
pub fn percentile(mut v: Vec<Duration>, p: f64) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v.sort();
    let rank = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

fn within(t: Instant, phase: &Phase) -> bool {
    t >= phase.start && t < phase.end
}

impl Observations {
    pub fn rows(&self) -> Vec<PhaseRow> {
        self.phases
            .iter()
            .enumerate()
            .map(|(i, phase)| self.row(i, phase))
            .collect()
    }

    fn row(&self, index: usize, phase: &Phase) -> PhaseRow {
        let answers: Vec<&Answer> = self.answers.iter().filter(|a| a.phase == index).collect();
        let of = |e: Endpoint| answers.iter().filter(move |a| a.endpoint == e);
        let mut row = PhaseRow {
            name: format!("{} {}", index + 1, phase.mode.label()),
            requests: answers.len(),
            ..PhaseRow::default()
        };
        for a in of(Endpoint::Quote) {
            match a.price_cents {
                Some(_) => row.quotes_served += 1,
                None => {
                    let why = a
                        .reason
                        .clone()
                        .unwrap_or_else(|| format!("http {}", a.status));
                    *row.unavailable.entry(why).or_default() += 1;
                }
            }
        }
        for a in of(Endpoint::Checkout) {
            if a.status == 200 {
                row.checkouts_confirmed += 1;
            } else {
                row.checkouts_refused += 1;
            }
        }
        row.invented_prices = answers
            .iter()
            .filter(|a| a.price_cents.is_some_and(|p| p != PRICE_CENTS))
            .count();
        row.quote_p50 = percentile(of(Endpoint::Quote).map(|a| a.latency).collect(), 0.5);
        row.quote_p99 = percentile(of(Endpoint::Quote).map(|a| a.latency).collect(), 0.99);
        row.products_p50 = percentile(of(Endpoint::Products).map(|a| a.latency).collect(), 0.5);
        row.products_p99 = percentile(of(Endpoint::Products).map(|a| a.latency).collect(), 0.99);
        row.products_failed = of(Endpoint::Products).filter(|a| a.status != 200).count();

        let admitted: Vec<&Admitted> = self
            .admitted
            .iter()
            .filter(|c| within(c.started, phase))
            .collect();
        row.wait_p50 = percentile(admitted.iter().map(|c| c.admission_wait).collect(), 0.5);
        row.wait_p99 = percentile(admitted.iter().map(|c| c.admission_wait).collect(), 0.99);
        let grace = phase.end + self.budget;
        row.held_after = admitted
            .iter()
            .filter(|c| c.ended.is_none_or(|e| e > grace))
            .count();
        if let Some((active, queued)) = self.high_water.get(index) {
            row.max_active = *active;
            row.max_queued = *queued;
        }

        let calls: Vec<&Admitted> = self
            .dependency_calls
            .iter()
            .filter(|c| within(c.started, phase))
            .collect();
        row.dependency_calls = calls.len();
        row.supplier_received = self
            .freight_arrivals
            .iter()
            .filter(|t| within(**t, phase))
            .count();
        row.calls_while_open = calls.iter().filter(|c| c.breaker_state == "open").count();
        row.probes = calls
            .iter()
            .filter(|c| c.breaker_state == "half_open")
            .count();
        row.transitions = self
            .breaker_changes
            .iter()
            .filter(|c| within(c.at, phase))
            .map(|c| format!("{}→{}", c.from, c.to))
            .collect();
        row.level_changes = self
            .level_changes
            .iter()
            .filter(|c| within(c.at, phase))
            .map(|c| format!("{}→{}", c.from, c.to))
            .collect();
        row
    }
}

fn ms(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1000.0)
}

fn ms1(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

/// Probes a fleet sent its supplier in one phase, grouped by open interval: probes
/// starting within half an open interval of a round's first belong to that round.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rounds {
    pub probes: usize,
    pub intervals: usize,
    /// The most probes in one interval.
    pub most: usize,
}

impl Rounds {
    /// The probes (calls reaching the supplier from a half-open breaker) of every
    /// shop in `shops` that started during `phase`.
    pub fn of(shops: &[Running], phase: &Phase, open_for: Duration) -> Self {
        let mut starts: Vec<Instant> = shops
            .iter()
            .flat_map(|s| s.dependency_calls.log())
            .filter(|c| c.breaker_state == "half_open" && within(c.started, phase))
            .map(|c| c.started)
            .collect();
        starts.sort();
        Self::from_starts(&starts, open_for)
    }

    /// Groups sorted probe starts into rounds.
    pub fn from_starts(starts: &[Instant], open_for: Duration) -> Self {
        let mut rounds = Self::default();
        let mut round: Option<(Instant, usize)> = None;
        for &at in starts {
            match &mut round {
                Some((first, n)) if at.saturating_duration_since(*first) <= open_for / 2 => {
                    *n += 1;
                }
                _ => {
                    rounds.intervals += 1;
                    round = Some((at, 1));
                }
            }
            rounds.probes += 1;
            rounds.most = rounds.most.max(round.map_or(0, |(_, n)| n));
        }
        rounds
    }
}

/// The most probes in flight at once across `shops` (a probe ending as another
/// starts does not overlap it; one never seen to end counts until `budget` after
/// its start, when the deadline ended it).
pub fn most_probes_at_once(shops: &[Running], budget: Duration) -> usize {
    most_at_once(shops, budget, |c| c.breaker_state == "half_open")
}

/// The most freight calls in flight at once across `shops`, as their clients see
/// them (between the breaker and the fault layer in front of the client): what the
/// fleet asks of its supplier, slow answers included, which the supplier no longer
/// sees since the fault layer holds them back on the client's side.
pub fn most_calls_at_once(shops: &[Running], budget: Duration) -> usize {
    most_at_once(shops, budget, |_| true)
}

fn most_at_once(shops: &[Running], budget: Duration, pick: fn(&Admitted) -> bool) -> usize {
    let calls: Vec<Admitted> = shops
        .iter()
        .flat_map(|s| s.dependency_calls.log())
        .filter(pick)
        .collect();
    most_in_flight(&calls, budget)
}

/// The most of `calls` in flight at once; a call not seen to end counts until
/// its budget ran out.
pub fn most_in_flight<'a>(
    calls: impl IntoIterator<Item = &'a Admitted>,
    budget: Duration,
) -> usize {
    let mut edges: Vec<(Instant, i32)> = calls
        .into_iter()
        .flat_map(|c| [(c.started, 1), (c.ended.unwrap_or(c.started + budget), -1)])
        .collect();
    // An end and a start at the same instant: the end first.
    edges.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, delta) in edges {
        now += delta;
        most = most.max(now);
    }
    usize::try_from(most).unwrap_or(0)
}

/// One phase of the fleet mode: each fleet's probes per open interval.
#[derive(Debug, Clone, Copy, Default)]
pub struct FleetProbes {
    pub coordinated: Rounds,
    pub independent: Rounds,
}

fn rounds(r: Rounds) -> String {
    if r.probes == 0 {
        "–".to_owned()
    } else {
        format!("{} ({} in {})", r.most, r.probes, r.intervals)
    }
}

/// The table, one line per phase, in markdown.
pub fn table(rows: &[PhaseRow]) -> String {
    table_with_fleet(rows, None)
}

/// [`table`], with two more columns in fleet mode: the supplier's probes per open
/// interval across each fleet (the most in one interval, then probes in intervals).
pub fn table_with_fleet(rows: &[PhaseRow], fleet: Option<&[FleetProbes]>) -> String {
    let mut out = String::new();
    let (fleet_head, fleet_rule) = match fleet {
        Some(_) => (
            " fleet probes/interval, coordinated | fleet probes/interval, independent |",
            "---:|---:|",
        ),
        None => ("", ""),
    };
    let _ = writeln!(
        out,
        "| phase | requests | quotes served | quote unavailable (by cause) | checkout ok/refused | max active | max queued | wait p50/p99 ms | dependency calls | supplier received | calls while open | probes | breaker | degradation | held after | /quote p50/p99 ms | /products p50/p99 ms | /products failed | invented prices |{fleet_head}"
    );
    let _ = writeln!(
        out,
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---:|{fleet_rule}"
    );
    for (i, r) in rows.iter().enumerate() {
        let causes = by_cause(&r.unavailable);
        let list = |v: &[String]| {
            if v.is_empty() {
                "–".to_owned()
            } else {
                v.join(", ")
            }
        };
        let fleet_cells = match fleet.and_then(|f| f.get(i)) {
            Some(f) => format!(" {} | {} |", rounds(f.coordinated), rounds(f.independent)),
            None if fleet.is_some() => " – | – |".to_owned(),
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {}/{} | {} | {} | {}/{} | {} | {} | {} | {} | {} | {} | {} | {}/{} | {}/{} | {} | {} |{}",
            r.name,
            r.requests,
            r.quotes_served,
            causes,
            r.checkouts_confirmed,
            r.checkouts_refused,
            r.max_active,
            r.max_queued,
            ms1(r.wait_p50),
            ms1(r.wait_p99),
            r.dependency_calls,
            r.supplier_received,
            r.calls_while_open,
            r.probes,
            list(&r.transitions),
            list(&r.level_changes),
            r.held_after,
            ms(r.quote_p50),
            ms(r.quote_p99),
            ms(r.products_p50),
            ms(r.products_p99),
            r.products_failed,
            r.invented_prices,
            fleet_cells,
        );
    }
    out
}

const WIDTH: f64 = 1200.0;
const LEFT: f64 = 150.0;

/// The SVG timeline: phases, breaker state, degradation level, bulkhead gauges,
/// /quote latency and served-vs-unavailable answers, on one time axis.
pub fn svg(obs: &Observations) -> String {
    let (Some(first), Some(last)) = (obs.phases.first(), obs.phases.last()) else {
        return String::new();
    };
    let t0 = first.start;
    let span = (last.end - t0).as_secs_f64().max(0.001);
    let x = |t: Instant| {
        LEFT + (t.saturating_duration_since(t0).as_secs_f64() / span) * (WIDTH - LEFT - 20.0)
    };
    let mut s = String::new();
    let height = 620.0;
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    // Phases.
    for (i, p) in obs.phases.iter().enumerate() {
        let fill = if i % 2 == 0 { "#f4f4f4" } else { "#ffffff" };
        let _ = writeln!(
            s,
            r#"<rect x="{:.1}" y="20" width="{:.1}" height="{}" fill="{fill}"/><text x="{:.1}" y="14">{}</text>"#,
            x(p.start),
            x(p.end) - x(p.start),
            height - 40.0,
            x(p.start) + 4.0,
            p.mode.label()
        );
    }
    // Rows: label, top.
    let rows = [
        ("breaker", 40.0),
        ("degradation", 100.0),
        ("active / queued", 180.0),
        ("/quote latency", 320.0),
        ("/quote answers / s", 460.0),
    ];
    for (label, top) in rows {
        let _ = writeln!(s, r#"<text x="8" y="{}">{label}</text>"#, top + 20.0);
    }
    // Breaker state bands.
    let state_at_start = "closed".to_owned();
    let mut marks: Vec<(Instant, String)> = vec![(t0, state_at_start)];
    marks.extend(obs.breaker_changes.iter().map(|c| (c.at, c.to.clone())));
    for (i, (at, state)) in marks.iter().enumerate() {
        let until = marks.get(i + 1).map(|m| m.0).unwrap_or(last.end);
        let color = match state.as_str() {
            "open" | "forced_open" => "#d9534f",
            "half_open" => "#f0ad4e",
            _ => "#5cb85c",
        };
        let _ = writeln!(
            s,
            r#"<rect x="{:.1}" y="40" width="{:.1}" height="40" fill="{color}"><title>{state}</title></rect>"#,
            x(*at),
            (x(until) - x(*at)).max(1.0)
        );
    }
    // Degradation level as a step line (0 = best, at the top).
    let mut levels: Vec<(Instant, String)> = vec![(t0, String::new())];
    levels.extend(obs.level_changes.iter().map(|c| (c.at, c.to.clone())));
    let mut path = String::new();
    for (i, (at, level)) in levels.iter().enumerate() {
        let until = levels.get(i + 1).map(|m| m.0).unwrap_or(last.end);
        let y = 100.0 + level_depth(level) * 25.0;
        let _ = write!(
            path,
            "{}{:.1},{:.1} L{:.1},{:.1} ",
            if i == 0 { "M" } else { "L" },
            x(*at),
            y,
            x(until),
            y
        );
    }
    let _ = writeln!(
        s,
        r##"<path d="{path}" stroke="#337ab7" stroke-width="2" fill="none"/>"##
    );
    for (i, name) in ["personalized", "popular", "none"].iter().enumerate() {
        let _ = writeln!(
            s,
            r##"<text x="{}" y="{}" fill="#337ab7" font-size="10">{name}</text>"##,
            LEFT - 70.0,
            104.0 + i as f64 * 25.0
        );
    }
    // Gauges.
    let scale = (obs.max_concurrent + obs.max_queue).max(1) as f64;
    for (color, pick) in [("#5bc0de", 0usize), ("#9b59b6", 1usize)] {
        let mut p = String::new();
        for (i, g) in obs.gauges.iter().enumerate() {
            let v = if pick == 0 { g.active } else { g.queued } as f64;
            let _ = write!(
                p,
                "{}{:.1},{:.1} ",
                if i == 0 { "M" } else { "L" },
                x(g.at),
                300.0 - v / scale * 110.0
            );
        }
        let _ = writeln!(
            s,
            r#"<path d="{p}" stroke="{color}" stroke-width="1.5" fill="none"/>"#
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="8" y="216" fill="#5bc0de" font-size="10">active</text><text x="48" y="216" fill="#9b59b6" font-size="10">queued (of {scale})</text>"##
    );
    // Latency dots (log-ish: 0..1 s).
    for a in obs.answers.iter().filter(|a| a.endpoint == Endpoint::Quote) {
        let y = 440.0 - (a.latency.as_secs_f64().min(1.0)) * 110.0;
        let color = if a.price_cents.is_some() {
            "#5cb85c"
        } else {
            "#d9534f"
        };
        let _ = writeln!(
            s,
            r#"<circle cx="{:.1}" cy="{:.1}" r="1.2" fill="{color}"/>"#,
            x(a.sent_at),
            y
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="{}" y="335" font-size="10">1 s</text><text x="{}" y="440" font-size="10">0</text>"##,
        LEFT - 30.0,
        LEFT - 30.0
    );
    // Answers per second: served (green), business refusals (grey), unavailable (red), stacked.
    let secs = span.ceil() as usize;
    let mut bins = vec![[0usize; 3]; secs + 1];
    for a in obs.answers.iter().filter(|a| a.endpoint == Endpoint::Quote) {
        let i = a.sent_at.saturating_duration_since(t0).as_secs() as usize;
        let kind = match (a.price_cents, a.reason.as_deref()) {
            (Some(_), _) => 0,
            (None, Some("business_refusal")) => 1,
            _ => 2,
        };
        if let Some(bin) = bins.get_mut(i) {
            bin[kind] += 1;
        }
    }
    let peak = bins
        .iter()
        .map(|b| b.iter().sum::<usize>())
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    for (i, bin) in bins.iter().enumerate() {
        let at = t0 + Duration::from_secs(i as u64);
        let w = (x(at + Duration::from_secs(1)) - x(at)).max(1.0) - 0.5;
        let mut base = 580.0;
        for (count, color) in bin.iter().zip(["#5cb85c", "#999999", "#d9534f"]) {
            let h = *count as f64 / peak * 110.0;
            let _ = writeln!(
                s,
                r#"<rect x="{:.1}" y="{:.1}" width="{w:.1}" height="{h:.1}" fill="{color}"/>"#,
                x(at),
                base - h
            );
            base -= h;
        }
    }
    let _ = writeln!(
        s,
        r##"<text x="8" y="496" font-size="10"><tspan fill="#5cb85c">served</tspan> <tspan fill="#999999">no quote</tspan> <tspan fill="#d9534f">unavailable</tspan></text>"##
    );
    let _ = writeln!(s, "</svg>");
    s
}

fn level_depth(name: &str) -> f64 {
    match name {
        "popular" => 1.0,
        "none" => 2.0,
        _ => 0.0,
    }
}

/// The most requests the load had in flight at once (open loop: every request is
/// sent at its scheduled time on its own task, whatever the shop's answers).
pub fn peak_in_flight(answers: &[Answer]) -> usize {
    let mut edges: Vec<(Instant, i32)> = answers
        .iter()
        .flat_map(|a| [(a.sent_at, 1), (a.sent_at + a.latency, -1)])
        .collect();
    // An answer ending at the instant another is sent is not in flight with it.
    edges.sort_by_key(|&(at, step)| (at, step));
    let mut now = 0i32;
    let mut peak = 0i32;
    for (_, step) in edges {
        now += step;
        peak = peak.max(now);
    }
    usize::try_from(peak).unwrap_or(0)
}
