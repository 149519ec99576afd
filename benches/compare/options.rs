//! Command-line options: how long to measure, and what.

use std::time::Duration;

use crate::harness::{Mode, CHILD};

pub(crate) struct Options {
    pub(crate) single: Rounds,
    pub(crate) contended: Runs,
    /// Only rows whose label contains this (lowercase; `a|b`: either); the bare row always stays.
    pub(crate) filter: Option<String>,
    pub(crate) quick: bool,
    /// Run the matching rows' paths instead of measuring them (for `perf`).
    pub(crate) spin: Option<Spin>,
}

/// Running paths for a profiler: each matching path for `length`, in `mode`;
/// with `second`, only the second paths (`Some(true)`) or only the admitted ones.
#[derive(Clone, Copy)]
pub(crate) struct Spin {
    pub(crate) length: Duration,
    pub(crate) mode: Mode,
    pub(crate) second: Option<bool>,
}

/// The single-task rounds.
pub(crate) struct Rounds {
    /// Each measures every path once in each mode.
    pub(crate) rounds: usize,
    /// Child processes the rounds are spread over (1: this process).
    pub(crate) processes: usize,
    /// Set in a child: measure the rounds and print them.
    pub(crate) child: bool,
}

/// The contended runs.
pub(crate) struct Runs {
    /// Runs per number of tasks.
    pub(crate) runs: usize,
    pub(crate) warm: Duration,
    pub(crate) measure: Duration,
    /// Numbers of tasks.
    pub(crate) tasks: Vec<usize>,
}

/// Whether `label` contains `filter`, or one of its `|`-separated alternatives
/// (`bulkhead|concurrencylimit`: seawall's bulkheads and the peers they are judged by).
pub(crate) fn matches(filter: &str, label: &str) -> bool {
    let label = label.to_lowercase();
    filter.split('|').any(|f| label.contains(f))
}

const USAGE: &str =
    "options: [--quick] [--rounds N] [--processes N] [--runs N] [--measure-ms N] [--warm-ms N] \
                     [--tasks 1,2,64|none] [--spin SECONDS [--awaited] [--admitted|--second]] [FILTER]";

fn value<T: std::str::FromStr>(args: &mut impl Iterator<Item = String>, flag: &str) -> T {
    args.next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{flag} wants a number; {USAGE}"))
}

impl Options {
    pub(crate) fn from_args() -> Options {
        let mut o = Options {
            single: Rounds {
                rounds: 400,
                processes: 8,
                child: false,
            },
            contended: Runs {
                runs: 9,
                warm: Duration::from_millis(20),
                measure: Duration::from_millis(100),
                tasks: vec![1, 2, 64],
            },
            filter: None,
            quick: false,
            spin: None,
        };
        let mut spin: Option<Spin> = None;
        let mut spin_mode = Mode::Hand;
        let mut spin_second = None;
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            match a.as_str() {
                "--quick" => {
                    o.quick = true;
                    o.single.rounds = 40;
                    o.single.processes = 2;
                    o.contended.runs = 3;
                    o.contended.warm = Duration::from_millis(10);
                    o.contended.measure = Duration::from_millis(40);
                }
                "--rounds" => o.single.rounds = value(&mut args, &a),
                "--processes" => o.single.processes = value(&mut args, &a),
                CHILD => {
                    o.single.child = true;
                    o.single.rounds = value(&mut args, CHILD);
                }
                "--runs" => o.contended.runs = value(&mut args, &a),
                "--measure-ms" => {
                    o.contended.measure = Duration::from_millis(value(&mut args, &a));
                }
                "--warm-ms" => o.contended.warm = Duration::from_millis(value(&mut args, &a)),
                "--tasks" => {
                    let list: String = value(&mut args, "--tasks");
                    o.contended.tasks = list
                        .split(',')
                        .filter(|t| *t != "none")
                        .map(|t| t.trim().parse().expect("--tasks 1,2,64 or none"))
                        .collect();
                }
                "--spin" => {
                    spin = Some(Spin {
                        length: Duration::from_secs_f64(value(&mut args, &a)),
                        mode: Mode::Hand,
                        second: None,
                    });
                }
                "--awaited" => spin_mode = Mode::Awaited,
                "--admitted" => spin_second = Some(false),
                "--second" => spin_second = Some(true),
                "--help" | "-h" => {
                    eprintln!("{USAGE}");
                    std::process::exit(0);
                }
                // cargo passes `--bench`; other flags are ignored too.
                s if s.starts_with('-') => {}
                s => o.filter = Some(s.to_lowercase()),
            }
        }
        o.single.rounds = o.single.rounds.max(3);
        o.single.processes = o.single.processes.max(1);
        o.contended.runs = o.contended.runs.max(1);
        o.spin = spin.map(|s| Spin {
            mode: spin_mode,
            second: spin_second,
            ..s
        });
        o
    }
}
