//! Side-by-side benchmarks of seawall and its peers (under construction).
fn main() {}
