//! Injectable randomness, so jitter and probe sampling are reproducible in tests.

use std::fmt;

/// A source of uniform samples in `[0, 1)`.
///
/// Policies take one so that a fleet does not act in lockstep (jittered open
/// intervals, probe sampling) while tests stay deterministic with a fixed seed.
/// Any `FnMut() -> f64 + Send` closure is a source.
pub trait RandomSource: Send + 'static {
    /// The next sample, in `[0, 1)`.
    fn next_f64(&mut self) -> f64;
}

impl fmt::Debug for dyn RandomSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RandomSource")
    }
}

impl<F> RandomSource for F
where
    F: FnMut() -> f64 + Send + 'static,
{
    fn next_f64(&mut self) -> f64 {
        self()
    }
}

/// A small, fast, seedable generator (wyrand, via `fastrand`). Not for cryptography.
#[derive(Debug, Clone)]
pub struct SeededRandom(fastrand::Rng);

impl SeededRandom {
    /// A generator whose sequence is fixed by `seed`.
    pub fn new(seed: u64) -> Self {
        Self(fastrand::Rng::with_seed(seed))
    }

    /// A generator seeded from the process's entropy: different on every instance.
    pub fn from_entropy() -> Self {
        Self(fastrand::Rng::new())
    }
}

impl RandomSource for SeededRandom {
    fn next_f64(&mut self) -> f64 {
        self.0.f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_sources_repeat_and_stay_in_range() {
        let mut a = SeededRandom::new(7);
        let mut b = SeededRandom::new(7);
        for _ in 0..1000 {
            let x = a.next_f64();
            assert_eq!(x, b.next_f64());
            assert!((0.0..1.0).contains(&x));
        }
        let mut fixed = || 0.25;
        assert_eq!(RandomSource::next_f64(&mut fixed), 0.25);
    }
}
