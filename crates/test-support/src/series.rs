//! A metrics recorder of our own, keeping every series as an exporter would.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};

/// A metric's key as an exporter shows it: `name{k=v,...}`, labels sorted.
fn render(key: &Key) -> String {
    let mut labels: Vec<String> = key
        .labels()
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect();
    labels.sort();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

/// Every series ever registered, under its key as an exporter shows it
/// (`name{k=v,...}`, labels sorted), to its value. Runs
/// `on_register` (user code) at each registration, so a test can check what a
/// recorder calling back into the layer does.
#[derive(Default)]
pub struct Series {
    values: Mutex<BTreeMap<String, Arc<AtomicU64>>>,
    /// Run at each registration, before the series is looked up.
    pub on_register: OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// Registrations made (a recorder's cost, paid by each new key if per key).
    pub registrations: AtomicU64,
}

impl fmt::Debug for Series {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Series")
            .field("names", &self.names())
            .finish_non_exhaustive()
    }
}

impl Series {
    fn slot(&self, key: &Key) -> Arc<AtomicU64> {
        if let Some(f) = self.on_register.get() {
            f();
        }
        self.registrations.fetch_add(1, Ordering::Relaxed);
        Arc::clone(self.values.lock().unwrap().entry(render(key)).or_default())
    }

    fn value(&self, series: &str) -> Option<u64> {
        self.values
            .lock()
            .unwrap()
            .get(series)
            .map(|v| v.load(Ordering::SeqCst))
    }

    /// Every series registered so far, rendered, in order.
    pub fn names(&self) -> Vec<String> {
        self.values.lock().unwrap().keys().cloned().collect()
    }

    /// A counter's value; 0 for a series never registered.
    pub fn counter(&self, series: &str) -> u64 {
        self.value(series).unwrap_or(0)
    }

    /// A gauge's value; NaN for a series never registered, so that a test
    /// expecting a gauge at zero fails when the gauge is missing.
    pub fn gauge(&self, series: &str) -> f64 {
        self.value(series).map_or(f64::NAN, f64::from_bits)
    }

    /// The sum of the gauges named `name` whose series contain `filter`.
    pub fn gauges_sum(&self, name: &str, filter: &str) -> f64 {
        let prefix = format!("{name}{{");
        let names: Vec<String> = self
            .names()
            .into_iter()
            .filter(|n| n.starts_with(&prefix) && n.contains(filter))
            .collect();
        names.iter().map(|n| self.gauge(n)).sum()
    }
}

impl Recorder for Series {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.slot(key))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.slot(key))
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        self.slot(key);
        Histogram::noop()
    }
}
