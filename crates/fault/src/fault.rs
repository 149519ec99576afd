//! What can be injected: the faults, as typed values.

use std::time::Duration;

/// How long a hang lasts at most when no deadline travels with the call: a
/// rehearsal must never hold a caller (or its slot) forever.
pub const DEFAULT_HANG_BOUND: Duration = Duration::from_secs(30);

/// A fault to inject into a call.
///
/// Every kind works for any request type but the answers and body faults
/// ([`HttpStatus`](Fault::HttpStatus), [`GrpcStatus`](Fault::GrpcStatus),
/// [`SlowBody`](Fault::SlowBody), [`FailingBody`](Fault::FailingBody)), which need a
/// layer built for HTTP ([`FaultLayer::http`](crate::FaultLayer::http), feature
/// `http`); a layer built for other requests never fires them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// The dependency's answer is held back by `delay`, or by a duration drawn
    /// uniformly between `delay` and `up_to` when that is given. The request reaches
    /// the dependency at once, so it sees a healthy caller; the caller sees a slow
    /// dependency.
    Latency {
        /// The added latency (the shortest, with `up_to`).
        delay: Duration,
        /// The longest added latency, for a spread instead of a fixed delay.
        up_to: Option<Duration>,
    },
    /// An HTTP answer with this status, without calling the dependency.
    HttpStatus(http::StatusCode),
    /// A gRPC answer with this status code (1 to 16), trailers-only, without calling
    /// the dependency.
    GrpcStatus(i32),
    /// The call fails as a refused connection (`io::ErrorKind::ConnectionRefused`),
    /// without calling the dependency.
    Refused,
    /// The call fails as a reset connection (`io::ErrorKind::ConnectionReset`),
    /// without calling the dependency.
    Reset,
    /// The call never answers: it waits for the caller's deadline
    /// ([`Deadline::current`](seawall_core::Deadline::current)), or `at_most` if that
    /// comes first or no deadline travels with the call, and then fails as timed out.
    /// The dependency is not called.
    Hang {
        /// The bound of the hang.
        at_most: Duration,
    },
    /// The response's headers come on time, then each frame of its body waits
    /// `per_frame` before it is passed on.
    SlowBody {
        /// The wait before each frame.
        per_frame: Duration,
    },
    /// The response's body fails as a reset connection once `after_bytes` bytes
    /// have been passed on (0: before the first).
    FailingBody {
        /// The bytes passed on before the failure.
        after_bytes: u64,
    },
}

/// The kinds of [`Fault`], as the configuration, the metrics and the events name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case")
)]
#[non_exhaustive]
pub enum FaultKind {
    /// [`Fault::Latency`]
    Latency,
    /// [`Fault::HttpStatus`]
    HttpStatus,
    /// [`Fault::GrpcStatus`]
    GrpcStatus,
    /// [`Fault::Refused`]
    Refused,
    /// [`Fault::Reset`]
    Reset,
    /// [`Fault::Hang`]
    Hang,
    /// [`Fault::SlowBody`]
    SlowBody,
    /// [`Fault::FailingBody`]
    FailingBody,
}

impl FaultKind {
    /// Every kind, in declaration order.
    pub const ALL: [FaultKind; 8] = [
        FaultKind::Latency,
        FaultKind::HttpStatus,
        FaultKind::GrpcStatus,
        FaultKind::Refused,
        FaultKind::Reset,
        FaultKind::Hang,
        FaultKind::SlowBody,
        FaultKind::FailingBody,
    ];

    /// The kind's name: `latency`, `http_status`, `grpc_status`, `refused`,
    /// `reset`, `hang`, `slow_body`, `failing_body`.
    pub const fn as_str(self) -> &'static str {
        match self {
            FaultKind::Latency => "latency",
            FaultKind::HttpStatus => "http_status",
            FaultKind::GrpcStatus => "grpc_status",
            FaultKind::Refused => "refused",
            FaultKind::Reset => "reset",
            FaultKind::Hang => "hang",
            FaultKind::SlowBody => "slow_body",
            FaultKind::FailingBody => "failing_body",
        }
    }

    /// The kind named `name`, as [`as_str`](Self::as_str) writes it.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// Whether only a layer built for HTTP can inject it.
    pub const fn needs_http(self) -> bool {
        matches!(
            self,
            FaultKind::HttpStatus
                | FaultKind::GrpcStatus
                | FaultKind::SlowBody
                | FaultKind::FailingBody
        )
    }
}

impl Fault {
    /// The fault's kind.
    pub fn kind(&self) -> FaultKind {
        match self {
            Fault::Latency { .. } => FaultKind::Latency,
            Fault::HttpStatus(_) => FaultKind::HttpStatus,
            Fault::GrpcStatus(_) => FaultKind::GrpcStatus,
            Fault::Refused => FaultKind::Refused,
            Fault::Reset => FaultKind::Reset,
            Fault::Hang { .. } => FaultKind::Hang,
            Fault::SlowBody { .. } => FaultKind::SlowBody,
            Fault::FailingBody { .. } => FaultKind::FailingBody,
        }
    }

    /// A fixed added latency.
    pub fn latency(delay: Duration) -> Self {
        Fault::Latency { delay, up_to: None }
    }

    /// A hang bounded by the caller's deadline, or by [`DEFAULT_HANG_BOUND`].
    pub fn hang() -> Self {
        Fault::Hang {
            at_most: DEFAULT_HANG_BOUND,
        }
    }
}
