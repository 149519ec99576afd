//! seawall's degradation layer (under construction).
#![cfg_attr(docsrs, feature(doc_cfg))]

mod config;
mod machine;

pub use config::{DegradationConfig, Trigger};
pub use machine::{
    Change, DegradationMachine, Direction, MachineSnapshot, ProbeProgress, Reason, Ticket,
    MAX_LEVELS,
};
