//! seawall: Tower middleware that keeps a service useful while its dependencies fail.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use seawall_core as core;
