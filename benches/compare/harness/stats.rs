//! Medians and quartiles, and figures paired by round.
//!
//! Every round measures every path once, close together in time, so a figure is
//! compared with its baseline (or a peer) *in the same round* and the quartiles are
//! taken over those per-round values: drift between rounds moves both sides alike
//! and drops out of the difference.

/// The 25th, 50th and 75th percentiles of some values.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Spread {
    pub(crate) p25: f64,
    pub(crate) median: f64,
    pub(crate) p75: f64,
}

impl Spread {
    /// The quartiles of `values` (NaNs left out); `None` if there are none.
    pub(crate) fn of(values: &[f64]) -> Option<Spread> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        Some(Spread {
            p25: percentile(&v, 0.25),
            median: percentile(&v, 0.5),
            p75: percentile(&v, 0.75),
        })
    }
}

/// The `q` quantile of sorted `v`, linearly interpolated.
fn percentile(v: &[f64], q: f64) -> f64 {
    let pos = q * (v.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

/// The median of `values` (NaN if there are none).
pub(crate) fn median(values: &[f64]) -> f64 {
    Spread::of(values).map_or(f64::NAN, |s| s.median)
}

/// `f` applied round by round to two series of the same rounds.
pub(crate) fn paired(a: &[f64], b: &[f64], f: impl Fn(f64, f64) -> f64) -> Vec<f64> {
    a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect()
}
