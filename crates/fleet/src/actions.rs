//! Operator actions for the whole fleet: force a breaker open or closed on every
//! instance, reset it, or end such an action early, each with a reason and an
//! expiry that every instance enforces by itself.
//!
//! # Why signed, and what a store writer can still do
//!
//! The store is shared by every instance, and anyone who can write to it could
//! otherwise steer the whole fleet (open every breaker, say). So an action is
//! signed: an HMAC-SHA256 under a fleet secret that lives in the instances'
//! environment ([`FleetSecret::from_env`]), never in the store, over the
//! action's id, prefix, policy, kind, issue and expiry instants, signer and
//! reason. An instance applies an action only if the signature checks under the
//! current or the previous secret (so the secret can be rotated: deploy the new
//! one as current with the old as previous, then drop the old), the action is
//! not expired, its life is at most [`MAX_ACTION_TTL`], and it was not issued
//! in this instance's future (beyond [`CLOCK_SKEW`]). Anything else is refused,
//! counted and logged, and written to the audit log.
//!
//! Someone with write access to the store but not the secret can still delete
//! actions (an instance that already applied one keeps it until its expiry, by
//! its own timer), fill the audit log, and disturb leases and verdicts as
//! before; they cannot make an instance apply an action nobody signed, extend
//! one, or replay one after its expiry.
//!
//! # Clocks
//!
//! The issue and expiry instants are wall-clock milliseconds of the host that
//! signed the action, compared with each receiving host's wall clock: an
//! instance whose clock is ahead by `d` reverts `d` early, one behind reverts
//! `d` late. An action issued more than [`CLOCK_SKEW`] in a receiver's future
//! is refused there (it would otherwise outlive its stated expiry on a host
//! whose clock is behind). Keep the fleet's clocks synchronised (NTP keeps them
//! within milliseconds); everything else the fleet measures uses each
//! instance's monotonic clock.
//!
//! # What wins
//!
//! A fleet action, once applied, holds the breaker as a local force would. If
//! an operator changes the breaker on one instance meanwhile (a local force,
//! release or reset), that later local change wins: at the fleet action's end
//! the instance leaves the breaker as the local operator set it. Otherwise, at
//! its end (expiry or a revert action) the breaker returns to what it was
//! before the action: the local force it had, or its own policy.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use seawall_circuit_breaker::{Forced, Handle, State};
use seawall_core::ConfigError;
use sha2::Sha256;
use tokio::time::Instant;

use std::future::Future;
use std::pin::Pin;

use crate::store::StoreError;
use crate::view::FleetView;

/// How long a fleet action lasts when the operator gives no expiry.
pub const DEFAULT_ACTION_TTL: Duration = Duration::from_secs(15 * 60);

/// The longest a fleet action may last: a forgotten action ends within this.
pub const MAX_ACTION_TTL: Duration = Duration::from_secs(4 * 60 * 60);

/// How far in a receiving host's future an action's issue instant may be
/// (clock skew between hosts) before the action is refused.
pub const CLOCK_SKEW: Duration = Duration::from_secs(30);

/// The longest reason or signer accepted, in bytes.
pub const MAX_TEXT_LEN: usize = 200;

/// The fewest bytes a fleet secret may have.
pub const MIN_SECRET_LEN: usize = 32;

/// The environment variable holding the current fleet secret.
pub const SECRET_ENV: &str = "SEAWALL_FLEET_SECRET";

/// The environment variable holding the previous fleet secret (during a rotation).
pub const PREVIOUS_SECRET_ENV: &str = "SEAWALL_FLEET_SECRET_PREVIOUS";

/// What a fleet action does to a policy's breaker on every instance.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum ActionKind {
    /// Every call rejected until the action ends.
    ForceOpen,
    /// Every call let through, the breaker never trips, until the action ends.
    ForceClosed,
    /// A fresh closed breaker, once (the expiry bounds only when it may apply).
    Reset,
    /// Ends the action with this id before its expiry, where it was applied.
    Revert(String),
    /// Holds a degradation policy's floor at this level (an index, 0 the best)
    /// until the action ends ([`Fleet::follow_floor`](crate::Fleet::follow_floor)).
    Floor(u32),
}

impl ActionKind {
    fn encode(&self) -> String {
        match self {
            ActionKind::ForceOpen => "force_open".to_owned(),
            ActionKind::ForceClosed => "force_closed".to_owned(),
            ActionKind::Reset => "reset".to_owned(),
            ActionKind::Revert(id) => format!("revert:{id}"),
            ActionKind::Floor(level) => format!("floor:{level}"),
        }
    }

    /// Parses `force_open`, `force_closed`, `reset`, `revert:<id>` or
    /// `floor:<level>`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "force_open" => Some(ActionKind::ForceOpen),
            "force_closed" => Some(ActionKind::ForceClosed),
            "reset" => Some(ActionKind::Reset),
            _ if s.starts_with("floor:") => {
                let level = s.strip_prefix("floor:")?;
                // Digits only: one level, one text, one signature.
                (!level.is_empty() && level.len() <= 9 && level.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| level.parse().ok().map(ActionKind::Floor))
                    .flatten()
            }
            _ => {
                let id = s.strip_prefix("revert:")?;
                is_id(id).then(|| ActionKind::Revert(id.to_owned()))
            }
        }
    }
}

impl fmt::Display for ActionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.encode())
    }
}

/// An operator's action for every instance of the fleet, as kept in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct FleetAction {
    /// 32 hex digits, drawn at random when issued.
    pub id: String,
    /// The breaker (policy) it acts on.
    pub policy: String,
    /// What it does.
    pub kind: ActionKind,
    /// Why, as the operator said.
    pub reason: String,
    /// Who: a named token, or a fingerprint of the token used.
    pub signer: String,
    /// When it was issued: ms since the Unix epoch, by the issuing host's clock.
    pub issued_at_ms: u64,
    /// When it ends by itself, in the same terms.
    pub expires_at_ms: u64,
    /// HMAC-SHA256 of the fields above (and the prefix), lowercase hex.
    #[cfg_attr(feature = "serde", serde(skip))]
    pub mac: String,
}

/// Why an instance did not apply an action it read.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ActionRefusal {
    /// Not in the store's format (a hand-written or damaged record).
    Malformed,
    /// This instance has no fleet secret to check a signature with.
    NoSecret,
    /// No signature, or one that no accepted secret gives.
    BadSignature,
    /// Its expiry has passed.
    Expired,
    /// It lasts longer than [`MAX_ACTION_TTL`], or ends before it starts.
    TooLong,
    /// Issued further in this host's future than [`CLOCK_SKEW`].
    NotYetIssued,
    /// Kept under an id other than its own: a copy of another action.
    Replayed,
}

impl fmt::Display for ActionRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ActionRefusal::Malformed => "malformed",
            ActionRefusal::NoSecret => "no fleet secret to check it",
            ActionRefusal::BadSignature => "bad signature",
            ActionRefusal::Expired => "expired",
            ActionRefusal::TooLong => "lasts longer than the maximum",
            ActionRefusal::NotYetIssued => "issued in the future",
            ActionRefusal::Replayed => "replayed under another id",
        })
    }
}

/// The fleet secret the instances sign and check actions with: the current one,
/// and during a rotation the previous one (accepted, never used to sign).
#[derive(Clone)]
pub struct FleetSecret {
    current: Vec<u8>,
    previous: Option<Vec<u8>>,
}

impl fmt::Debug for FleetSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FleetSecret")
            .field("current", &"***")
            .field("previous", &self.previous.as_ref().map(|_| "***"))
            .finish()
    }
}

impl FleetSecret {
    /// A secret of at least [`MIN_SECRET_LEN`] bytes.
    pub fn new(current: impl Into<Vec<u8>>) -> Result<Self, ConfigError> {
        let current = current.into();
        check_secret("secret", &current)?;
        Ok(Self {
            current,
            previous: None,
        })
    }

    /// Also accepts signatures under `previous` (a rotation in progress).
    pub fn with_previous(mut self, previous: impl Into<Vec<u8>>) -> Result<Self, ConfigError> {
        let previous = previous.into();
        check_secret("previous_secret", &previous)?;
        self.previous = Some(previous);
        Ok(self)
    }

    /// From [`SECRET_ENV`] and, if set, [`PREVIOUS_SECRET_ENV`]; `Ok(None)`
    /// when no secret is set (fleet actions are then refused, never applied).
    pub fn from_env() -> Result<Option<Self>, ConfigError> {
        let Some(current) = std::env::var_os(SECRET_ENV) else {
            return Ok(None);
        };
        let current = current
            .into_string()
            .map_err(|_| ConfigError::new(SECRET_ENV, "must be UTF-8"))?;
        let secret = Self::new(current).map_err(|e| ConfigError::new(SECRET_ENV, e.to_string()))?;
        match std::env::var_os(PREVIOUS_SECRET_ENV) {
            None => Ok(Some(secret)),
            Some(previous) => {
                let previous = previous
                    .into_string()
                    .map_err(|_| ConfigError::new(PREVIOUS_SECRET_ENV, "must be UTF-8"))?;
                secret
                    .with_previous(previous)
                    .map(Some)
                    .map_err(|e| ConfigError::new(PREVIOUS_SECRET_ENV, e.to_string()))
            }
        }
    }

    /// The HMAC-SHA256 of `text` under `key` (`None` never happens: HMAC takes
    /// a key of any length; kept total rather than asserted).
    fn mac(key: &[u8], text: &str) -> Option<Hmac<Sha256>> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).ok()?;
        mac.update(text.as_bytes());
        Some(mac)
    }

    /// The HMAC-SHA256 of `text` under the current secret.
    pub(crate) fn sign_bytes(&self, text: &str) -> [u8; 32] {
        let mut out = [0; 32];
        if let Some(m) = Self::mac(&self.current, text) {
            out.copy_from_slice(&m.finalize().into_bytes());
        }
        out
    }

    /// Whether `mac` is `text`'s under the current or the previous secret.
    pub(crate) fn verifies(&self, text: &str, mac: &[u8]) -> bool {
        let signed = |key: &[u8]| Self::mac(key, text).is_some_and(|m| m.verify_slice(mac).is_ok());
        signed(&self.current) || self.previous.as_deref().is_some_and(signed)
    }

    fn sign(&self, text: &str) -> String {
        Self::mac(&self.current, text)
            .map(|m| hex(&m.finalize().into_bytes()))
            .unwrap_or_default()
    }
}

fn check_secret(field: &'static str, secret: &[u8]) -> Result<(), ConfigError> {
    if secret.len() < MIN_SECRET_LEN {
        return Err(ConfigError::new(
            field,
            format!(
                "must be at least {MIN_SECRET_LEN} bytes, got {}",
                secret.len()
            ),
        ));
    }
    Ok(())
}

fn is_id(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn check_text(field: &'static str, text: &str, may_be_empty: bool) -> Result<(), ConfigError> {
    if text.is_empty() && !may_be_empty {
        return Err(ConfigError::new(field, "must not be empty"));
    }
    if text.len() > MAX_TEXT_LEN {
        return Err(ConfigError::new(
            field,
            format!("must be at most {MAX_TEXT_LEN} bytes, got {}", text.len()),
        ));
    }
    if text.chars().any(char::is_control) {
        return Err(ConfigError::new(
            field,
            "must not contain control characters",
        ));
    }
    Ok(())
}

/// Milliseconds since the Unix epoch by this host's wall clock.
pub fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

impl FleetAction {
    /// A new action on `policy`, issued `now_ms` (wall clock) for `ttl`,
    /// signed under `secret`'s current key for the fleet's `prefix`. Refused,
    /// naming the field, if `ttl` is zero or above [`MAX_ACTION_TTL`], or the
    /// policy, reason or signer is empty (the signer may be), too long or has
    /// control characters.
    #[allow(clippy::too_many_arguments)]
    pub fn issue(
        secret: &FleetSecret,
        prefix: &str,
        policy: &str,
        kind: ActionKind,
        reason: &str,
        signer: &str,
        ttl: Duration,
        now_ms: u64,
    ) -> Result<Self, ConfigError> {
        check_text("policy", policy, false)?;
        check_text("reason", reason, false)?;
        check_text("signer", signer, true)?;
        if ttl.is_zero() || ttl > MAX_ACTION_TTL {
            return Err(ConfigError::new(
                "ttl",
                format!("must be above 0 and at most {}", humanize(MAX_ACTION_TTL)),
            ));
        }
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let mut action = Self {
            id: format!("{:032x}", fastrand::u128(..)),
            policy: policy.to_owned(),
            kind,
            reason: reason.to_owned(),
            signer: signer.to_owned(),
            issued_at_ms: now_ms,
            expires_at_ms: now_ms.saturating_add(ttl_ms),
            mac: String::new(),
        };
        action.mac = secret.sign(&action.signed_text(prefix));
        Ok(action)
    }

    /// What the signature covers: every field, and the fleet's prefix (an
    /// action signed for one fleet does not apply in another sharing a secret).
    fn signed_text(&self, prefix: &str) -> String {
        format!(
            "seawall-fleet-action-v1\n{}\n{prefix}\n{}\n{}\n{}\n{}\n{}\n{}",
            self.id,
            self.policy,
            self.kind,
            self.issued_at_ms,
            self.expires_at_ms,
            self.signer,
            self.reason
        )
    }

    /// Whether an instance of the fleet under `prefix` applies this action,
    /// read under the store's field `field`, at `now_ms` by its wall clock.
    pub fn check(
        &self,
        secret: Option<&FleetSecret>,
        prefix: &str,
        field: &str,
        now_ms: u64,
    ) -> Result<(), ActionRefusal> {
        if field != self.id {
            return Err(ActionRefusal::Replayed);
        }
        let secret = secret.ok_or(ActionRefusal::NoSecret)?;
        let mac = unhex(&self.mac).ok_or(ActionRefusal::BadSignature)?;
        let text = self.signed_text(prefix);
        let signed =
            |key: &[u8]| FleetSecret::mac(key, &text).is_some_and(|m| m.verify_slice(&mac).is_ok());
        if !(signed(&secret.current) || secret.previous.as_deref().is_some_and(signed)) {
            return Err(ActionRefusal::BadSignature);
        }
        let max = u64::try_from(MAX_ACTION_TTL.as_millis()).unwrap_or(u64::MAX);
        if self.expires_at_ms <= self.issued_at_ms || self.expires_at_ms - self.issued_at_ms > max {
            return Err(ActionRefusal::TooLong);
        }
        let skew = u64::try_from(CLOCK_SKEW.as_millis()).unwrap_or(u64::MAX);
        if self.issued_at_ms > now_ms.saturating_add(skew) {
            return Err(ActionRefusal::NotYetIssued);
        }
        if now_ms >= self.expires_at_ms {
            return Err(ActionRefusal::Expired);
        }
        Ok(())
    }

    /// The store's form: one line of tab-separated fields, the reason last.
    pub fn encode(&self) -> String {
        format!(
            "v1\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            self.id,
            self.policy,
            self.kind,
            self.issued_at_ms,
            self.expires_at_ms,
            self.mac,
            self.signer,
            self.reason
        )
    }

    /// Parses [`encode`](Self::encode)'s form; `None` if it is not that.
    pub fn decode(s: &str) -> Option<Self> {
        let mut f = s.splitn(9, '\t');
        if f.next()? != "v1" {
            return None;
        }
        let id = f.next()?.to_owned();
        let policy = f.next()?.to_owned();
        let kind = ActionKind::parse(f.next()?)?;
        let issued_at_ms = f.next()?.parse().ok()?;
        let expires_at_ms = f.next()?.parse().ok()?;
        let mac = f.next()?.to_owned();
        let signer = f.next()?.to_owned();
        let reason = f.next()?.to_owned();
        (is_id(&id) && check_text("reason", &reason, false).is_ok()).then_some(Self {
            id,
            policy,
            kind,
            reason,
            signer,
            issued_at_ms,
            expires_at_ms,
            mac,
        })
    }

    /// How long until it expires, from `now_ms`.
    pub fn remaining(&self, now_ms: u64) -> Duration {
        Duration::from_millis(self.expires_at_ms.saturating_sub(now_ms))
    }
}

fn humanize(d: Duration) -> String {
    let s = d.as_secs();
    if s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else {
        format!("{s}s")
    }
}

/// One line of a policy's audit log in the store: what happened to which
/// action, where and when.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct AuditEntry {
    /// When, ms since the Unix epoch by the writing host's clock.
    pub at_ms: u64,
    /// Which instance wrote it (32 hex digits).
    pub instance: String,
    /// `issued`, `applied`, `reverted`, `expired`, or `refused: <why>`.
    pub event: String,
    /// The action's id (as read, for a refused one).
    pub action: String,
    /// The action's kind, signer, reason and expiry, as read.
    pub kind: String,
    /// See [`FleetAction::signer`].
    pub signer: String,
    /// See [`FleetAction::reason`].
    pub reason: String,
    /// See [`FleetAction::expires_at_ms`].
    pub expires_at_ms: u64,
}

impl AuditEntry {
    /// An entry about `action` written by `instance` at `at_ms`.
    pub fn about(action: &FleetAction, instance: String, event: String, at_ms: u64) -> Self {
        Self {
            at_ms,
            instance,
            event,
            action: action.id.clone(),
            kind: action.kind.to_string(),
            signer: action.signer.clone(),
            reason: action.reason.clone(),
            expires_at_ms: action.expires_at_ms,
        }
    }

    /// The store's form, as [`FleetAction::encode`]'s.
    pub fn encode(&self) -> String {
        format!(
            "v1\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            self.at_ms,
            self.instance,
            self.event.replace(['\t', '\n'], " "),
            self.action.replace(['\t', '\n'], " "),
            self.kind.replace(['\t', '\n'], " "),
            self.expires_at_ms,
            self.signer.replace(['\t', '\n'], " "),
            self.reason.replace(['\t', '\n'], " ")
        )
    }

    /// Parses [`encode`](Self::encode)'s form.
    pub fn decode(s: &str) -> Option<Self> {
        let mut f = s.splitn(9, '\t');
        if f.next()? != "v1" {
            return None;
        }
        Some(Self {
            at_ms: f.next()?.parse().ok()?,
            instance: f.next()?.to_owned(),
            event: f.next()?.to_owned(),
            action: f.next()?.to_owned(),
            kind: f.next()?.to_owned(),
            expires_at_ms: f.next()?.parse().ok()?,
            signer: f.next()?.to_owned(),
            reason: f.next()?.to_owned(),
        })
    }
}

/// Why a fleet action was not issued or read.
#[derive(Debug)]
#[non_exhaustive]
pub enum ActionError {
    /// A setting refused, naming the field (`policy`, `reason`, `signer`, `ttl`).
    Config(ConfigError),
    /// The fleet has no secret: fleet actions are off.
    Off,
    /// The store failed or timed out.
    Store(StoreError),
}

impl fmt::Display for ActionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ActionError::Config(e) => write!(f, "{e}"),
            ActionError::Off => f.write_str(
                "fleet actions are off: the fleet has no secret (set SEAWALL_FLEET_SECRET)",
            ),
            ActionError::Store(e) => write!(f, "the store failed: {e}"),
        }
    }
}

impl std::error::Error for ActionError {}

impl From<ConfigError> for ActionError {
    fn from(e: ConfigError) -> Self {
        ActionError::Config(e)
    }
}

impl Default for WallClock {
    fn default() -> Self {
        Self::new()
    }
}

pub(crate) type Boxed<'a, T> = Pin<Box<dyn Future<Output = Result<T, ActionError>> + Send + 'a>>;

/// A fleet's actions without its store's type.
pub(crate) trait Desk: Send + Sync {
    fn act<'a>(
        &'a self,
        policy: &'a str,
        kind: ActionKind,
        reason: &'a str,
        signer: &'a str,
        ttl: Duration,
    ) -> Boxed<'a, FleetAction>;
    fn actions<'a>(&'a self, policy: &'a str) -> Boxed<'a, Vec<FleetAction>>;
    fn audit_log<'a>(&'a self, policy: &'a str, n: usize) -> Boxed<'a, Vec<AuditEntry>>;
    fn view<'a>(&'a self, policy: &'a str) -> Boxed<'a, FleetView>;
}

/// The wall clock fleet actions are issued and checked with: the host's clock
/// read once, then moved by the monotonic clock, so a step of the host's clock
/// (a manual change, a leap) cannot end or extend an action in force. Each
/// fleet reads its own when built ([`FleetBuilder::wall_clock`](crate::FleetBuilder::wall_clock)
/// shares one, as tests in paused time need).
#[derive(Debug, Clone, Copy)]
pub struct WallClock {
    anchor_ms: u64,
    at: Instant,
}

impl WallClock {
    /// Reads the host's clock now. Within a Tokio runtime with paused time,
    /// the clock then moves with the paused time.
    pub fn new() -> Self {
        Self {
            anchor_ms: wall_ms(),
            at: Instant::now(),
        }
    }

    /// Milliseconds since the Unix epoch.
    pub fn now_ms(&self) -> u64 {
        let elapsed = u64::try_from(self.at.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.anchor_ms.saturating_add(elapsed)
    }
}

/// The fleet action in force on one instance's breaker, for its snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct AppliedAction {
    /// The action.
    #[cfg_attr(feature = "serde", serde(flatten))]
    pub action: FleetAction,
    /// Until it ends by itself, by this instance's clock.
    #[cfg_attr(feature = "serde", serde(with = "seawall_core::duration_format"))]
    pub remaining: Duration,
}

/// What a fleet action acts on: a breaker (its [`Handle`]) or a degradation
/// policy's floor ([`FloorTarget`](crate::FloorTarget)). One [`Applier`] per
/// target decides the actions of its kinds; the rules (signature, replay,
/// expiry, reverts first, a later local change wins) are the same for all.
pub(crate) trait ActionTarget {
    /// What an action sets and its end puts back: a breaker's state, a floor.
    type Setting: Copy + PartialEq + fmt::Debug;

    /// Records that are not actions at all are reported by one target of a
    /// policy only: its breaker's coordination.
    const REPORTS_UNREADABLE: bool;

    /// Whether actions of `kind` are for this target (a revert is when what it
    /// reverts is).
    fn takes(kind: &ActionKind) -> bool;

    /// The policy's name: actions on this name apply to it.
    fn name(&self) -> &str;

    /// The setting now.
    fn setting(&self) -> Self::Setting;

    /// Applies `kind`: `Ok(true)` if it holds until its expiry, `Ok(false)`
    /// if it is done at once (a reset), `Err(why)` if this target refuses it.
    fn apply(&self, kind: &ActionKind) -> Result<bool, String>;

    /// Puts back `setting`, what the target was before an action held it.
    fn put_back(&self, setting: Self::Setting);
}

impl ActionTarget for Handle {
    type Setting = State;

    const REPORTS_UNREADABLE: bool = true;

    fn takes(kind: &ActionKind) -> bool {
        matches!(
            kind,
            ActionKind::ForceOpen | ActionKind::ForceClosed | ActionKind::Reset
        )
    }

    fn name(&self) -> &str {
        Handle::name(self)
    }

    fn setting(&self) -> State {
        self.state()
    }

    fn apply(&self, kind: &ActionKind) -> Result<bool, String> {
        match kind {
            ActionKind::ForceOpen => self.force(Forced::Open),
            ActionKind::ForceClosed => self.force(Forced::Closed),
            _ => {
                self.reset();
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn put_back(&self, before: State) {
        match before {
            State::ForcedOpen => self.force(Forced::Open),
            State::ForcedClosed => self.force(Forced::Closed),
            State::Disabled => self.disable(),
            _ => self.release(),
        }
    }
}

/// An action holding its target, with what it found and what it set.
#[derive(Debug, Clone)]
pub(crate) struct Held<S> {
    pub(crate) action: FleetAction,
    /// When it ends, by this instance's timer.
    pub(crate) until: Instant,
    /// The setting before the first action of the run held it.
    pub(crate) before: S,
    /// The setting the action left: if the target is elsewhere at the end, a
    /// local operator changed it meanwhile, and that wins.
    pub(crate) set: S,
}

impl<S: Copy + PartialEq> Held<S> {
    /// Ends the hold on `target`: back to `before` if the target is still as
    /// the action set it.
    pub(crate) fn end<T: ActionTarget<Setting = S> + ?Sized>(&self, target: &T) {
        if target.setting() == self.set {
            target.put_back(self.before);
        }
    }

    /// As the snapshot shows it, at `now`.
    pub(crate) fn applied(&self, now: Instant) -> AppliedAction {
        AppliedAction {
            action: self.action.clone(),
            remaining: self.until.saturating_duration_since(now),
        }
    }
}

/// The most action ids an instance remembers having decided.
const KNOWN: usize = 256;

/// Decides, applies and ends the fleet's actions on one target of one
/// instance (`S` is the target's [`ActionTarget::Setting`]).
#[derive(Debug)]
pub(crate) struct Applier<S> {
    secret: Option<Arc<FleetSecret>>,
    prefix: String,
    instance: String,
    clock: WallClock,
    in_force: Option<Held<S>>,
    /// Ids decided (applied, refused, ended), with their expiry: each is
    /// decided once.
    known: BTreeMap<String, u64>,
    /// Ids of actions of this target's kinds seen, so that a revert of one is
    /// recognised as this target's.
    taken: BTreeSet<String>,
    pub(crate) refused: u64,
}

impl<S: Copy + PartialEq> Applier<S> {
    pub(crate) fn new(
        secret: Option<Arc<FleetSecret>>,
        prefix: &str,
        instance: String,
        clock: WallClock,
    ) -> Self {
        Self {
            secret,
            prefix: prefix.to_owned(),
            instance,
            clock,
            in_force: None,
            known: BTreeMap::new(),
            taken: BTreeSet::new(),
            refused: 0,
        }
    }

    /// The action holding the target now, with what ending it early (its
    /// owner dropped) must restore.
    pub(crate) fn in_force(&self) -> Option<Held<S>>
    where
        S: Clone,
    {
        self.in_force.clone()
    }

    /// This fleet's wall clock now, ms.
    pub(crate) fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Without a secret, fleet actions are off: nothing is read or applied.
    pub(crate) fn off(&self) -> bool {
        self.secret.is_none()
    }

    /// When the action in force ends.
    pub(crate) fn due(&self) -> Option<Instant> {
        self.in_force.as_ref().map(|f| f.until)
    }

    fn entry(&self, action: &FleetAction, event: String) -> AuditEntry {
        AuditEntry::about(action, self.instance.clone(), event, self.clock.now_ms())
    }

    /// Decides the records read from the store (`(field, record)`), applying
    /// the new valid actions of `target`'s kinds, and reverts of them, to
    /// `target`; the audit entries to write.
    pub(crate) fn consider<T: ActionTarget<Setting = S> + ?Sized>(
        &mut self,
        target: &T,
        read: Vec<(String, String)>,
    ) -> Vec<AuditEntry> {
        let now_ms = self.clock.now_ms();
        let mut audit = Vec::new();
        let mut decoded = Vec::new();
        for (field, record) in read {
            if self.known.contains_key(&field) {
                continue;
            }
            match FleetAction::decode(&record) {
                Some(action) if action.policy == target.name() => {
                    if T::takes(&action.kind) {
                        self.taken.insert(action.id.clone());
                    }
                    decoded.push((field, action));
                }
                Some(_) => {}
                None => {
                    self.known.insert(field.clone(), now_ms);
                    if T::REPORTS_UNREADABLE {
                        self.refused += 1;
                        audit.push(AuditEntry {
                            at_ms: now_ms,
                            instance: self.instance.clone(),
                            event: format!("refused: {}", ActionRefusal::Malformed),
                            action: field.chars().take(MAX_TEXT_LEN).collect(),
                            kind: String::new(),
                            signer: String::new(),
                            reason: String::new(),
                            expires_at_ms: 0,
                        });
                    }
                }
            }
        }
        let mut fresh = Vec::new();
        for (field, action) in decoded {
            let mine = match &action.kind {
                ActionKind::Revert(id) => self.taken.contains(id),
                kind => T::takes(kind),
            };
            if !mine {
                // Another target's: its applier decides it.
                self.known.insert(field, action.expires_at_ms);
                continue;
            }
            match action.check(self.secret.as_deref(), &self.prefix, &field, now_ms) {
                Ok(()) => fresh.push(action),
                Err(ActionRefusal::Expired) => {
                    // Ended before this instance read it: nothing to do, nothing wrong.
                    self.known.insert(field, action.expires_at_ms);
                }
                Err(why) => {
                    self.refused += 1;
                    self.known.insert(field, action.expires_at_ms);
                    audit.push(self.entry(&action, format!("refused: {why}")));
                }
            }
        }
        // Reverts first, so an action and its revert read together never apply.
        fresh.sort_by_key(|a| (!matches!(a.kind, ActionKind::Revert(_)), a.issued_at_ms));
        for action in fresh {
            self.known.insert(action.id.clone(), action.expires_at_ms);
            if let ActionKind::Revert(id) = &action.kind {
                if self.in_force.as_ref().is_some_and(|f| &f.action.id == id) {
                    if let Some(ended) = self.end(target) {
                        audit.push(self.entry(&ended, format!("reverted by {}", action.id)));
                    }
                }
                self.known.entry(id.clone()).or_insert(action.expires_at_ms);
                audit.push(self.entry(&action, "applied".into()));
                continue;
            }
            // A later action takes the place of the one in force, and keeps
            // what the target was before the first.
            let before = self
                .in_force
                .as_ref()
                .map_or_else(|| target.setting(), |f| f.before);
            match target.apply(&action.kind) {
                Err(why) => {
                    self.refused += 1;
                    audit.push(self.entry(&action, format!("refused: {why}")));
                }
                Ok(false) => audit.push(self.entry(&action, "applied".into())),
                Ok(true) => {
                    if let Some(earlier) = self.in_force.take() {
                        audit.push(
                            self.entry(&earlier.action, format!("superseded by {}", action.id)),
                        );
                    }
                    audit.push(self.entry(&action, "applied".into()));
                    self.in_force = Some(Held {
                        until: Instant::now() + action.remaining(now_ms),
                        set: target.setting(),
                        action,
                        before,
                    });
                }
            }
        }
        if self.known.len() > KNOWN {
            self.known.retain(|_, expires| *expires > now_ms);
            let known = &self.known;
            self.taken.retain(|id| known.contains_key(id));
        }
        audit
    }

    /// Ends the action in force if its expiry has come; the audit entry.
    pub(crate) fn expire<T: ActionTarget<Setting = S> + ?Sized>(
        &mut self,
        target: &T,
        now: Instant,
    ) -> Option<AuditEntry> {
        if self.in_force.as_ref().is_none_or(|f| f.until > now) {
            return None;
        }
        let ended = self.end(target)?;
        Some(self.entry(&ended, "expired".into()))
    }

    /// Takes the action in force off: back to what the target was before it,
    /// unless a local operator changed it meanwhile (that wins).
    fn end<T: ActionTarget<Setting = S> + ?Sized>(&mut self, target: &T) -> Option<FleetAction> {
        let held = self.in_force.take()?;
        held.end(target);
        Some(held.action)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(byte: u8) -> FleetSecret {
        FleetSecret::new(vec![byte; 32]).unwrap()
    }

    const NOW: u64 = 1_800_000_000_000;

    fn open(ttl: Duration) -> FleetAction {
        FleetAction::issue(
            &secret(1),
            "shop",
            "freight",
            ActionKind::ForceOpen,
            "supplier migrating",
            "ops",
            ttl,
            NOW,
        )
        .unwrap()
    }

    #[test]
    fn a_signed_action_applies_until_its_expiry_and_survives_the_store() {
        let a = open(Duration::from_secs(600));
        let read = FleetAction::decode(&a.encode()).unwrap();
        assert_eq!(read, a);
        let s = secret(1);
        assert_eq!(read.check(Some(&s), "shop", &a.id, NOW), Ok(()));
        assert_eq!(read.check(Some(&s), "shop", &a.id, NOW + 599_999), Ok(()));
        assert_eq!(
            read.check(Some(&s), "shop", &a.id, NOW + 600_000),
            Err(ActionRefusal::Expired)
        );
        // Up to the tolerated skew in this host's past, not beyond.
        assert_eq!(read.check(Some(&s), "shop", &a.id, NOW - 30_000), Ok(()));
        assert_eq!(
            read.check(Some(&s), "shop", &a.id, NOW - 30_001),
            Err(ActionRefusal::NotYetIssued)
        );
    }

    #[test]
    fn forged_altered_replayed_and_unverifiable_actions_are_refused() {
        let a = open(Duration::from_secs(600));
        let s = secret(1);
        // Another secret, another fleet's prefix, or any field changed.
        assert_eq!(
            a.check(Some(&secret(2)), "shop", &a.id, NOW),
            Err(ActionRefusal::BadSignature)
        );
        assert_eq!(
            a.check(Some(&s), "other", &a.id, NOW),
            Err(ActionRefusal::BadSignature)
        );
        let mut longer = a.clone();
        longer.expires_at_ms += 1;
        assert_eq!(
            longer.check(Some(&s), "shop", &a.id, NOW),
            Err(ActionRefusal::BadSignature)
        );
        let mut closed = a.clone();
        closed.kind = ActionKind::ForceClosed;
        assert_eq!(
            closed.check(Some(&s), "shop", &a.id, NOW),
            Err(ActionRefusal::BadSignature)
        );
        let mut unsigned = a.clone();
        unsigned.mac = String::new();
        assert_eq!(
            unsigned.check(Some(&s), "shop", &a.id, NOW),
            Err(ActionRefusal::BadSignature)
        );
        // Copied under another field: a replay.
        assert_eq!(
            a.check(Some(&s), "shop", &"0".repeat(32), NOW),
            Err(ActionRefusal::Replayed)
        );
        assert_eq!(
            a.check(None, "shop", &a.id, NOW),
            Err(ActionRefusal::NoSecret)
        );
        assert!(FleetAction::decode("v1\tnot an action").is_none());
        assert!(FleetAction::decode("").is_none());
    }

    #[test]
    fn the_previous_secret_is_accepted_during_a_rotation() {
        let a = open(Duration::from_secs(60));
        let rotated = secret(2).with_previous(vec![1; 32]).unwrap();
        assert_eq!(a.check(Some(&rotated), "shop", &a.id, NOW), Ok(()));
        assert_eq!(
            a.check(Some(&secret(2)), "shop", &a.id, NOW),
            Err(ActionRefusal::BadSignature)
        );
    }

    #[test]
    fn bad_settings_are_refused_naming_the_field() {
        let s = secret(1);
        let issue = |reason: &str, ttl: Duration| {
            FleetAction::issue(
                &s,
                "shop",
                "freight",
                ActionKind::Reset,
                reason,
                "",
                ttl,
                NOW,
            )
            .map(|_| ())
            .map_err(|e| e.field().to_owned())
        };
        assert_eq!(issue("why", Duration::ZERO), Err("ttl".to_owned()));
        assert_eq!(
            issue("why", MAX_ACTION_TTL + Duration::from_secs(1)),
            Err("ttl".to_owned())
        );
        assert_eq!(issue("why", MAX_ACTION_TTL), Ok(()));
        assert_eq!(issue("", Duration::from_secs(1)), Err("reason".to_owned()));
        assert_eq!(
            issue("a\tb", Duration::from_secs(1)),
            Err("reason".to_owned())
        );
        assert_eq!(
            issue(&"x".repeat(MAX_TEXT_LEN + 1), Duration::from_secs(1)),
            Err("reason".to_owned())
        );
        assert_eq!(FleetSecret::new(vec![0; 31]).unwrap_err().field(), "secret");
        // A signed action claiming a life above the maximum is refused even so.
        let mut long = open(Duration::from_secs(60));
        long.expires_at_ms = long.issued_at_ms + 5 * 3_600_000;
        long.mac = s.sign(&long.signed_text("shop"));
        assert_eq!(
            long.check(Some(&s), "shop", &long.id, NOW),
            Err(ActionRefusal::TooLong)
        );
    }

    #[test]
    fn audit_entries_survive_the_store() {
        let a = open(Duration::from_secs(60));
        let e = AuditEntry::about(&a, "ab".repeat(16), "applied".into(), NOW + 5);
        assert_eq!(AuditEntry::decode(&e.encode()), Some(e));
    }
}
