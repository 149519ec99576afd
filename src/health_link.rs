//! A dependency's health check as evidence for a coordinated breaker's stuck-open
//! flag: the one place the degradation crate's health monitor and the fleet's
//! coordination meet, so neither policy crate depends on the other.

use crate::degradation::health::{HealthMonitor, HealthStatus};
use crate::fleet::Coordinated;

/// Lets `coordinated` ask `monitor`'s latest check of `dependency` when its
/// breaker has been open long enough to be suspected of being stuck.
///
/// A breaker open while the check passes (healthy or degraded), and no other
/// instance open, is flagged [`LocalOnly`](crate::fleet::StuckCause::LocalOnly):
/// the dependency answers, so look at this instance. While the check fails
/// (unhealthy) it is [`ExternalFailure`](crate::fleet::StuckCause::ExternalFailure).
/// Before the first check, the fleet's reports decide alone. The monitor checks on
/// its own schedule; the flag reads its last report and never waits for a check.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use seawall::circuit_breaker::CircuitBreakerLayer;
/// use seawall::degradation::health::{CheckConfig, HealthMonitor};
/// use seawall::fleet::{Fleet, LocalStore};
///
/// let breaker = CircuitBreakerLayer::builder("freight").build()?;
/// let fleet = Fleet::builder(LocalStore::new()).build()?;
/// let coordinated = fleet.coordinate(&breaker.handle())?;
/// let monitor = HealthMonitor::builder()
///     .check("freight", CheckConfig::default(), || async {
///         Ok::<_, std::io::Error>(()) // e.g. GET the supplier's /health
///     })
///     .start()?;
/// seawall::link_health_check(&coordinated, &monitor, "freight");
/// # Ok(())
/// # }
/// ```
pub fn link_health_check(coordinated: &Coordinated, monitor: &HealthMonitor, dependency: &str) {
    let reports = monitor.subscribe();
    let dependency = dependency.to_owned();
    coordinated.link_dependency_check(move || match reports.borrow().status(&dependency)? {
        HealthStatus::Unknown => None,
        status => Some(status.is_usable()),
    });
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use seawall_circuit_breaker::{CircuitBreakerLayer, State};
    use seawall_core::BoxError;
    use seawall_degradation::health::{CheckConfig, HealthMonitor};
    use seawall_fleet::{Fleet, LocalStore, StuckCause};
    use tower::{service_fn, Layer, ServiceExt};

    use super::link_health_check;

    /// One instance whose own calls fail while the monitor's direct check of the
    /// same dependency passes, then fails.
    #[tokio::test(start_paused = true)]
    async fn a_breaker_open_while_its_dependency_checks_healthy_is_flagged_local() {
        let breaker = CircuitBreakerLayer::builder("freight")
            .consecutive_failures(3)
            .jitter(0.0)
            .build()
            .unwrap();
        let fleet = Fleet::builder(LocalStore::new()).seed(3).build().unwrap();
        let coordinated = fleet.coordinate(&breaker.handle()).unwrap();
        let answers = Arc::new(AtomicBool::new(true));
        let checked = Arc::clone(&answers);
        let check = CheckConfig {
            interval: Duration::from_secs(1),
            ..CheckConfig::default()
        };
        let monitor = HealthMonitor::builder()
            .check("freight", check, move || {
                let up = checked.load(Ordering::SeqCst);
                async move {
                    if up {
                        Ok(())
                    } else {
                        Err::<(), BoxError>("supplier down".into())
                    }
                }
            })
            .start()
            .unwrap();
        link_health_check(&coordinated, &monitor, "freight");
        let service = breaker.layer(service_fn(|_: ()| async {
            Err::<(), BoxError>("connection reset on this instance's path".into())
        }));
        let mut stuck = None;
        for _ in 0..900 {
            let _ = service.clone().oneshot(()).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            stuck = coordinated.snapshot().stuck_open;
            if stuck.is_some() {
                break;
            }
        }
        assert_eq!(breaker.handle().state(), State::Open);
        let flag = stuck.expect("flagged within 90 s");
        assert_eq!(
            (flag.cause, flag.dependency_check),
            (StuckCause::LocalOnly, Some(true))
        );

        // The direct check fails too: an external failure.
        answers.store(false, Ordering::SeqCst);
        let mut cause = flag.cause;
        for _ in 0..600 {
            let _ = service.clone().oneshot(()).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            if let Some(flag) = coordinated.snapshot().stuck_open {
                cause = flag.cause;
                if cause == StuckCause::ExternalFailure {
                    break;
                }
            }
        }
        assert_eq!(cause, StuckCause::ExternalFailure);
    }
}
