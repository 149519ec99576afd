//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A unique file under the system's temporary directory, removed on drop.
pub struct TempFile(pub PathBuf);

impl TempFile {
    pub fn with(text: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "seawall-test-{}-{}.toml",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&path, text).unwrap();
        Self(path)
    }

    pub fn write(&self, text: &str) {
        std::fs::write(&self.0, text).unwrap();
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The `freight` policy the policy documents of these tests start with: a
/// deadline, a bulkhead that queues nothing, a count-window breaker. A macro, so
/// `concat!` can extend it into a longer document.
macro_rules! freight_policy {
    () => {
        r#"
[policies.freight]
deadline = "300ms"

[policies.freight.bulkhead]
max_concurrent = 2
max_queue = 0
max_wait = "20ms"

[policies.freight.breaker]
policy = { kind = "count_window", size = 4, min_calls = 4, failure_rate = 0.5 }
open_for = "10s"
"#
    };
}
#[allow(unused_imports)] // each test file uses a part
pub(crate) use freight_policy;
