//! seawall's circuit-breaker layer (under construction).
#![cfg_attr(docsrs, feature(doc_cfg))]
#![allow(dead_code)]

mod config;
mod machine;

pub use config::{
    CircuitBreakerConfig, RampConfig, SlowCallConfig, TripPolicy, MAX_COUNT_WINDOW,
    MAX_HALF_OPEN_PROBES, MAX_INTERVAL,
};
pub use machine::{Reason, State, Transition};
