//! The state one bulkhead shares between its layer, services, futures, permits and handle.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use seawall_core::{ConfigError, Name};

use crate::config::BulkheadConfig;
use crate::handle::{Snapshot, WaitStats};
use crate::machine::Machine;
use crate::telemetry::Telemetry;

/// One bulkhead: the admission machine plus its name, limits and telemetry.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Shared {
    pub(crate) machine: Machine,
    pub(crate) name: Name,
    max_wait_nanos: AtomicU64,
    config: Mutex<BulkheadConfig>,
    built: BulkheadConfig,
    pub(crate) telemetry: Telemetry,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Shared {
    /// A bulkhead with a validated `config`.
    pub(crate) fn new(name: Name, config: BulkheadConfig) -> Self {
        let telemetry = Telemetry::new(&name, &config);
        Self {
            machine: Machine::new(config.max_concurrent, config.max_queue),
            name,
            max_wait_nanos: AtomicU64::new(nanos(config.max_wait)),
            config: Mutex::new(config),
            built: config,
            telemetry,
        }
    }

    /// Frees one slot (called by the permit's drop).
    #[inline]
    pub(crate) fn release_slot(&self) {
        self.machine.release();
        self.telemetry.released();
    }

    /// The current `max_wait`.
    pub(crate) fn max_wait(&self) -> Duration {
        Duration::from_nanos(self.max_wait_nanos.load(Ordering::Relaxed))
    }

    /// The current limits.
    pub(crate) fn config(&self) -> BulkheadConfig {
        *self.config.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The limits the bulkhead was built with.
    pub(crate) fn built(&self) -> BulkheadConfig {
        self.built
    }

    /// Validates and applies `new`, keeping every running call and waiter.
    pub(crate) fn reconfigure(&self, new: BulkheadConfig) -> Result<(), ConfigError> {
        new.validate()?;
        let old = {
            let mut current = self.config.lock().unwrap_or_else(PoisonError::into_inner);
            let old = *current;
            *current = new;
            self.max_wait_nanos
                .store(nanos(new.max_wait), Ordering::Relaxed);
            self.machine.set_limits(new.max_concurrent, new.max_queue);
            old
        };
        self.telemetry.reconfigured(&self.name, &old, &new);
        Ok(())
    }

    /// Counts and states now.
    pub(crate) fn snapshot(&self) -> Snapshot {
        let config = self.config();
        let counts = self.machine.counts();
        let peaks = self.machine.peaks();
        let admitted = self.machine.admitted();
        let waits = self.machine.waits().summary(admitted);
        Snapshot {
            name: self.name.to_string(),
            max_concurrent: config.max_concurrent,
            max_queue: config.max_queue,
            max_wait: config.max_wait,
            active: counts.active,
            queued: counts.queued,
            peak_active: peaks.active,
            peak_queued: peaks.queued,
            admitted,
            rejected_full: self.machine.rejected_full(),
            rejected_timeout: self.machine.rejected_timeout(),
            abandoned: self.machine.abandoned(),
            wait: WaitStats {
                p50: waits.p50,
                p99: waits.p99,
                max: waits.max,
                queued_admissions: waits.queued_admissions,
            },
        }
    }
}
