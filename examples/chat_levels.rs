//! An LLM-style chat service with four degradation levels —
//! full model → reduced model → keyword router → fixed message — through a provider
//! outage, in simulated time (ten simulated minutes run in a moment).
//!
//! Run with `cargo run --example chat_levels`. Watch the level fall at once when the
//! large model's provider fails, and climb back only after the 60 s dwell and a whole
//! probe window of successful probes (5 % of requests) — one level at a time.
#![allow(clippy::print_stdout)]

#[path = "shared/logs.rs"]
mod logs;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use seawall::degradation::{DegradationLayer, Fixed};
use seawall::BoxError;
use tokio::time::Instant;
use tower::{service_fn, Layer, Service, ServiceExt};

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() -> Result<(), BoxError> {
    logs::install();
    // The large model's provider: down between 0:30 and 3:30.
    let provider_down = Arc::new(AtomicBool::new(false));
    let full = {
        let down = provider_down.clone();
        service_fn(move |prompt: String| {
            let down = down.load(Ordering::SeqCst);
            async move {
                if down {
                    Err::<String, BoxError>("provider: 503 overloaded".into())
                } else {
                    Ok(format!("[full model] a thoughtful answer to {prompt:?}"))
                }
            }
        })
    };
    // The reduced model shares the outage for its first minute, so the level falls twice.
    let reduced_down = Arc::new(AtomicBool::new(false));
    let reduced = {
        let down = reduced_down.clone();
        service_fn(move |prompt: String| {
            let down = down.load(Ordering::SeqCst);
            async move {
                if down {
                    Err::<String, BoxError>("small model: 503".into())
                } else {
                    Ok(format!("[reduced model] a short answer to {prompt:?}"))
                }
            }
        })
    };
    let router = service_fn(|prompt: String| async move {
        let canned = if prompt.contains("refund") {
            "[router] Refunds: see https://example.com/refunds"
        } else {
            "[router] Help topics: https://example.com/help"
        };
        Ok::<_, BoxError>(canned.to_owned())
    });
    let message = Fixed::new("[message] We are having trouble; please try again soon.".to_owned());

    let layer = DegradationLayer::builder("chat")
        .inner_level("full")
        .level("reduced", reduced)
        .level("router", router)
        .level("message", message)
        .consecutive_failures(5)
        .min_dwell(Duration::from_secs(60))
        .probe_ratio(0.05)
        .probe_window(Duration::from_secs(60))
        .probe_successes_to_recover(20)
        .seed(7)
        .build()?;
    let handle = layer.handle();
    let mut changes = handle.subscribe();
    let mut chat = layer.layer(full);

    let start = Instant::now();
    let clock = |at: Instant| {
        let s = at.saturating_duration_since(start).as_secs();
        format!("{}:{:02}", s / 60, s % 60)
    };
    let mut failed_answers = 0u32;
    let mut answered_at = [0u32; 4];
    // Ten requests a second for ten simulated minutes.
    for tick in 0..6000u32 {
        let t = Duration::from_millis(100) * tick;
        provider_down.store((30..210).contains(&t.as_secs()), Ordering::SeqCst);
        reduced_down.store((30..90).contains(&t.as_secs()), Ordering::SeqCst);
        match chat.ready().await?.call(format!("question {tick}")).await {
            Ok(answer) => {
                let level = ["[full", "[reduced", "[router", "[message"]
                    .iter()
                    .position(|p| answer.starts_with(p))
                    .unwrap_or(3);
                answered_at[level] += 1;
            }
            // A fallback layer outside this one would answer these better.
            Err(_) => failed_answers += 1,
        }
        while let Ok(change) = changes.try_recv() {
            println!(
                "{}  {:>8} → {:<8} ({})",
                clock(change.at),
                change.from.name,
                change.to.name,
                change.cause.as_str()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "\nanswers by level: full {}, reduced {}, router {}, message {}; failed answers {} \
         (each fall takes 5 consecutive failures)",
        answered_at[0], answered_at[1], answered_at[2], answered_at[3], failed_answers
    );
    Ok(())
}
