//! What the machine reports: its states, why it moves between them, and the
//! transitions and other events it leaves for its driver to count and send.

use tokio::time::Instant;

/// Declares a label enum from one list: the variants in order, [`ALL`](State::ALL) in
/// that order, each one's label ([`as_str`](State::as_str)) and its position, so a
/// metric's labels and a table indexed by variant cannot drift from the enum.
macro_rules! labels {
    ($(#[$meta:meta])* pub enum $name:ident {
        $( $(#[$doc:meta])* $variant:ident => $label:literal, )*
    }) => {
        $(#[$meta])*
        pub enum $name {
            $( $(#[$doc])* $variant, )*
        }

        impl $name {
            /// Every variant, in declaration order (the order of per-variant tables,
            /// such as the state gauge).
            pub const ALL: [$name; [$($label),*].len()] = [$(Self::$variant),*];

            /// A short, stable, lower-case label (for metrics and logs).
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( Self::$variant => $label, )*
                }
            }

            /// This variant's position in [`ALL`](Self::ALL), for per-variant tables.
            pub const fn index(self) -> usize {
                self as usize
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

labels! {
    /// The state of a breaker, as reported to operators.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
    #[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
    pub enum State {
        /// Calls go through; outcomes are recorded and may trip the breaker.
        Closed => "closed",
        /// Tripped: every call is rejected until the open interval has passed.
        Open => "open",
        /// The open interval has passed: a few probes go through to test the dependency.
        HalfOpen => "half_open",
        /// Held open by an operator: every call is rejected, nothing changes it but an operator.
        ForcedOpen => "forced_open",
        /// Held closed by an operator: every call goes through, outcomes are recorded, it never trips.
        ForcedClosed => "forced_closed",
        /// Switched off by an operator: every call goes through, only the counters move.
        Disabled => "disabled",
    }
}

impl State {
    /// Whether an operator put the breaker in this state.
    pub const fn is_forced(self) -> bool {
        matches!(
            self,
            State::ForcedOpen | State::ForcedClosed | State::Disabled
        )
    }
}

labels! {
    /// Why a transition happened.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    #[non_exhaustive]
    #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
    #[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
    pub enum Cause {
        /// Closed → open: consecutive failures reached the threshold.
        ConsecutiveFailures => "consecutive_failures",
        /// Closed → open: the window's failure rate reached the threshold.
        FailureRate => "failure_rate",
        /// Closed → open: the window's slow-call rate reached the threshold.
        SlowCallRate => "slow_call_rate",
        /// Open → half-open: the open interval has passed (noticed at the next call).
        OpenIntervalElapsed => "open_interval_elapsed",
        /// Half-open → closed: enough probes succeeded.
        ProbesSucceeded => "probes_succeeded",
        /// Half-open → open: a probe failed.
        ProbeFailed => "probe_failed",
        /// Half-open → open: a probe ran longer than the half-open timeout.
        ProbeTimedOut => "probe_timed_out",
        /// An operator forced the breaker open.
        ForcedOpen => "forced_open",
        /// An operator forced the breaker closed.
        ForcedClosed => "forced_closed",
        /// An operator disabled the breaker.
        Disabled => "disabled",
        /// An operator reset the breaker to a fresh closed state.
        Reset => "reset",
        /// Open or half-open → closed: a verdict from outside (a probe elsewhere
        /// succeeded), see [`Verdict::Close`](crate::Verdict::Close).
        VerdictClosed => "verdict_closed",
        /// Open or half-open → open: a verdict from outside (a probe elsewhere failed)
        /// restarted the open interval, see [`Verdict::Reopen`](crate::Verdict::Reopen).
        VerdictReopened => "verdict_reopened",
        /// Closed → open: enough peers (other instances of a fleet) tripped together,
        /// see [`Handle::trip_with_peers`](crate::Handle::trip_with_peers).
        PeersTripped => "peers_tripped",
    }
}

impl Cause {
    pub(crate) const fn is_operator(self) -> bool {
        matches!(
            self,
            Cause::ForcedOpen | Cause::ForcedClosed | Cause::Disabled | Cause::Reset
        )
    }
}

/// One change of state, as sent to subscribers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CircuitBreakerEvent {
    /// The state left.
    pub from: State,
    /// The state entered.
    pub to: State,
    /// Why.
    pub cause: Cause,
    /// When it took effect (for a lazy transition, the instant it became due).
    pub at: Instant,
    /// The breaker's epoch after the transition.
    pub epoch: u32,
    /// The outcome that completed it was injected by a rehearsal (its classifier
    /// gave the reason [`REHEARSAL`](seawall_core::REHEARSAL)): a rehearsed failure
    /// trips the breaker as a real one would, and says so here, in the log and on
    /// the dashboard. Never set on a transition made by time or an operator.
    pub rehearsal: bool,
}

/// Something the machine did on its own account, to be taken with
/// [`CircuitBreakerMachine::take_events`](super::CircuitBreakerMachine::take_events): whoever drives the machine counts, logs and
/// broadcasts these; the machine keeps no counters and sends nothing. Not what
/// subscribers receive: they get the [`CircuitBreakerEvent`]s (transitions) only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MachineEvent {
    /// A change of state.
    Transition(CircuitBreakerEvent),
    /// A streaming probe was judged a success at its half-open timeout (its body
    /// still open): a probe success that no call's end reported.
    StreamJudged,
}
