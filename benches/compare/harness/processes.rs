//! The single-task rounds spread over several processes, each with its own layout.
//!
//! Where a process's stack and mappings start is random (address-space layout
//! randomisation), and the alignment of the futures and state a call touches moves
//! a per-call figure by up to about 10 ns between two runs of the same binary,
//! while its quartiles within one run stay within a few nanoseconds. So the rounds
//! run in child processes of this binary, one after the other, and are pooled: the
//! quartiles then include what the layout does, and a verdict does not rest on one
//! lucky or unlucky layout.

use std::fmt::Write as _;
use std::process::{Command, Stdio};

use super::{Mode, Probe};

/// The flag that makes this binary a child: measure this many rounds, print them.
pub(crate) const CHILD: &str = "--child-rounds";

/// Runs `rounds` rounds in `processes` children (same arguments, each a share of
/// the rounds) and pools what they measured into `probes`.
pub(crate) fn pooled(probes: &mut [&mut Probe], rounds: usize, processes: usize) {
    let share = rounds.div_ceil(processes).max(3);
    let exe = std::env::current_exe().expect("the bench's own path");
    let args: Vec<String> = std::env::args().skip(1).collect();
    for i in 0..processes {
        let out = Command::new(&exe)
            .args(&args)
            .arg(CHILD)
            .arg(share.to_string())
            .stderr(Stdio::inherit())
            .output()
            .expect("a child process");
        assert!(out.status.success(), "child process {i} failed");
        absorb(probes, &String::from_utf8_lossy(&out.stdout));
    }
}

/// What a child prints: per probe and mode, `probe mode allocs pending samples…`.
pub(crate) fn export(probes: &[&mut Probe]) -> String {
    let mut out = String::new();
    for (i, p) in probes.iter().enumerate() {
        for mode in Mode::ALL {
            let f = p.figures(mode);
            let _ = write!(
                out,
                "{i} {} {} {}",
                mode.index(),
                f.allocs.unwrap_or(f64::NAN),
                f.pending
            );
            for s in &f.samples {
                let _ = write!(out, " {s}");
            }
            out.push('\n');
        }
    }
    out
}

/// Adds a child's figures to `probes`: its samples after theirs (every probe has
/// one per round, so rounds stay paired), the larger allocation and pending counts.
fn absorb(probes: &mut [&mut Probe], text: &str) {
    for line in text.lines() {
        let v: Vec<f64> = line
            .split(' ')
            .map(|x| x.parse().expect("a child's figure"))
            .collect();
        let [i, mode, allocs, pending, samples @ ..] = &v[..] else {
            panic!("a child's line is short: {line}");
        };
        let f = &mut probes[*i as usize].figures[*mode as usize];
        f.allocs = Some(f.allocs.map_or(*allocs, |a| a.max(*allocs)));
        f.pending = f.pending.max(*pending);
        f.waited = f.pending >= 0.5;
        f.samples.extend_from_slice(samples);
    }
}
