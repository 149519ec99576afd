//! Logs a user can see: every example installs this first.

use tracing_subscriber::EnvFilter;

/// Writes seawall's events (breaker transitions, degradation changes, admin
/// actions, reloads) to stderr, filtered by `RUST_LOG` (`info` when unset or
/// unreadable), so the example's own output on stdout stays readable.
///
/// `RUST_LOG=seawall=debug` adds each rejection; `RUST_LOG=warn` keeps only the trips,
/// the falls and the operators' actions.
pub(crate) fn install() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // A subscriber installed already (a test, say) stays.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}
