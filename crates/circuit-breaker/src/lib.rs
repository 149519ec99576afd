//! seawall's circuit-breaker layer (under construction; see the workspace issues).
#![cfg_attr(docsrs, feature(doc_cfg))]
