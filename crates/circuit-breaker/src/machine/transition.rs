//! What the machine reports: its states, why it moves between them, and the
//! transitions and other events it leaves for its driver to count and send.

use tokio::time::Instant;

/// The state of a breaker, as reported to operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum State {
    /// Calls go through; outcomes are recorded and may trip the breaker.
    Closed,
    /// Tripped: every call is rejected until the open interval has passed.
    Open,
    /// The open interval has passed: a few probes go through to test the dependency.
    HalfOpen,
    /// Held open by an operator: every call is rejected, nothing changes it but an operator.
    ForcedOpen,
    /// Held closed by an operator: every call goes through, outcomes are recorded, it never trips.
    ForcedClosed,
    /// Switched off by an operator: every call goes through, only the counters move.
    Disabled,
}

impl State {
    /// Every state, in a fixed order (the order of the metrics gauge).
    pub const ALL: [State; 6] = [
        State::Closed,
        State::Open,
        State::HalfOpen,
        State::ForcedOpen,
        State::ForcedClosed,
        State::Disabled,
    ];

    /// A short, stable, lower-case label (for metrics and logs).
    pub const fn as_str(self) -> &'static str {
        match self {
            State::Closed => "closed",
            State::Open => "open",
            State::HalfOpen => "half_open",
            State::ForcedOpen => "forced_open",
            State::ForcedClosed => "forced_closed",
            State::Disabled => "disabled",
        }
    }

    pub(crate) const fn index(self) -> usize {
        match self {
            State::Closed => 0,
            State::Open => 1,
            State::HalfOpen => 2,
            State::ForcedOpen => 3,
            State::ForcedClosed => 4,
            State::Disabled => 5,
        }
    }

    /// Whether an operator put the breaker in this state.
    pub const fn is_forced(self) -> bool {
        matches!(
            self,
            State::ForcedOpen | State::ForcedClosed | State::Disabled
        )
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a transition happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum Reason {
    /// Closed → open: consecutive failures reached the threshold.
    ConsecutiveFailures,
    /// Closed → open: the window's failure rate reached the threshold.
    FailureRate,
    /// Closed → open: the window's slow-call rate reached the threshold.
    SlowCallRate,
    /// Open → half-open: the open interval has passed (noticed at the next call).
    OpenIntervalElapsed,
    /// Half-open → closed: enough probes succeeded.
    ProbesSucceeded,
    /// Half-open → open: a probe failed.
    ProbeFailed,
    /// Half-open → open: a probe ran longer than the half-open timeout.
    ProbeTimedOut,
    /// An operator forced the breaker open.
    ForcedOpen,
    /// An operator forced the breaker closed.
    ForcedClosed,
    /// An operator disabled the breaker.
    Disabled,
    /// An operator reset the breaker to a fresh closed state.
    Reset,
    /// Open or half-open → closed: a verdict from outside (a probe elsewhere
    /// succeeded), see [`Verdict::Close`](crate::Verdict::Close).
    VerdictClosed,
    /// Open or half-open → open: a verdict from outside (a probe elsewhere failed)
    /// restarted the open interval, see [`Verdict::Reopen`](crate::Verdict::Reopen).
    VerdictReopened,
    /// Closed → open: enough peers (other instances of a fleet) tripped together,
    /// see [`Handle::trip_with_peers`](crate::Handle::trip_with_peers).
    PeersTripped,
}

impl Reason {
    /// A short, stable, lower-case label (for metrics and logs).
    pub const fn as_str(self) -> &'static str {
        match self {
            Reason::ConsecutiveFailures => "consecutive_failures",
            Reason::FailureRate => "failure_rate",
            Reason::SlowCallRate => "slow_call_rate",
            Reason::OpenIntervalElapsed => "open_interval_elapsed",
            Reason::ProbesSucceeded => "probes_succeeded",
            Reason::ProbeFailed => "probe_failed",
            Reason::ProbeTimedOut => "probe_timed_out",
            Reason::ForcedOpen => "forced_open",
            Reason::ForcedClosed => "forced_closed",
            Reason::Disabled => "disabled",
            Reason::Reset => "reset",
            Reason::VerdictClosed => "verdict_closed",
            Reason::VerdictReopened => "verdict_reopened",
            Reason::PeersTripped => "peers_tripped",
        }
    }

    pub(crate) const fn is_operator(self) -> bool {
        matches!(
            self,
            Reason::ForcedOpen | Reason::ForcedClosed | Reason::Disabled | Reason::Reset
        )
    }
}

/// One change of state, as sent to subscribers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Transition {
    /// The state left.
    pub from: State,
    /// The state entered.
    pub to: State,
    /// Why.
    pub reason: Reason,
    /// When it took effect (for a lazy transition, the instant it became due).
    pub at: Instant,
    /// The breaker's epoch after the transition.
    pub epoch: u32,
}

/// Something the machine did on its own account, to be taken with
/// [`CircuitBreakerMachine::take_events`](super::CircuitBreakerMachine::take_events): whoever drives the machine counts, logs and
/// broadcasts these; the machine keeps no counters and sends nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CircuitBreakerEvent {
    /// A change of state.
    Transition(Transition),
    /// A streaming probe was judged a success at its half-open timeout (its body
    /// still open): a probe success that no call's end reported.
    StreamJudged,
}
