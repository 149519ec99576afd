//! The state every service built from one layer shares.

use std::sync::Arc;

use crate::handle::Runtime;
use crate::machine::Triggers;

/// What every service built from one layer shares.
pub(crate) struct Shared<Cap, P, C, M> {
    pub(crate) capture: Cap,
    pub(crate) plan: P,
    pub(crate) triggers: Triggers<C>,
    pub(crate) mode: M,
    pub(crate) rt: Arc<Runtime>,
    pub(crate) uses_deadline: bool,
}
