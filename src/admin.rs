//! An admin router for axum services (feature `admin`): every policy's snapshot as
//! JSON for anyone who can reach it; changes only with the bearer token configured
//! at start.
//!
//! | method and path | what | token |
//! |---|---|---|
//! | `GET /` (and `/dashboard.js`, `/dashboard.css`, `/events`) | the incident dashboard: every policy live in a browser, with controls once the operator enters the token ([below](#the-dashboard)) | no |
//! | `GET /policies` | [`PoliciesSnapshot`] of every policy: configuration in force, breaker state and counters, bulkhead occupancy, degradation level, fallback counters (the policy file by name only; its full path with the token) | no |
//! | `GET /policies/{name}` | one policy's [`PolicySnapshot`](crate::config::PolicySnapshot) | no |
//! | `GET /fleet` | [`FleetStatus`](crate::config::FleetStatus) (feature `fleet`): the `[fleet]` settings in force (store URL with its password as `***`, prefix, timeouts, `trip_together`, `caps`) and, under `policies`, each policy whose coordination or cap the application registered ([`Policies::register_coordination`], [`Policies::register_cap`]): `connected`, the coordination (lease, verdicts applied, store errors) and the cap (G configured and stored, allotment, demand, mode, fleet reserved total, lapses), also in the policy's entry of `GET /policies`; `404` with neither | no |
//! | `GET /fleet/policies/{name}/instances` | every instance's latest report on the policy's breaker (state, time in it, open spell, calls, failures, the fleet action holding it; one every 5 s, gone after 15 s), the worst first, with counts by state and each report's age | no |
//! | `GET /fleet/policies/{name}/actions` | the fleet actions kept for the policy's breaker and its audit log's 50 newest entries (feature `fleet`, a coordination registered) | no |
//! | `POST /fleet/policies/{name}/breaker/{force-open, force-closed, reset}?reason=R&ttl=15m` | the same on **every instance** of the fleet, signed with the fleet's secret, until `ttl` (default 15 min, at most 4 h), audited; `409` when the fleet has no secret | yes |
//! | `POST /fleet/policies/{name}/degradation/floor?level=L&reason=R&ttl=15m` | holds the degradation floor at level `L` (name or index) on **every instance** whose floor follows the fleet ([`Policies::follow_fleet_floor`]), signed, expiring and audited as the breaker actions; `404` without a follower, `422` naming `level` for a level this instance lacks | yes |
//! | `POST /fleet/policies/{name}/revert/{id}?reason=R` | ends fleet action `id` (a breaker's or a floor's) on every instance before its expiry | yes |
//! | `POST /reload` | re-read the policy file and apply it ([`Policies::reload`]) | yes |
//! | `POST /revert` | back to the start-up document ([`Policies::revert`]) | yes |
//! | `POST /policies/{name}/breaker/{force-open, force-closed, reset}` | hold the breaker open or closed; `reset` ends either and starts closed with an empty window | yes |
//! | `POST /policies/{name}/degradation/{set-floor, clear-floor, force, release}?level=L` | bound or force the degradation level (`level` by name or index, percent-encoded as any query) | yes |
//! | `POST /policies/{name}/fallback/{force, unforce, enable, disable}` | answer from the fallback without calling the primary, or let everything pass through | yes |
//! | `POST /policies/{name}/bulkhead/force?limit=N`, `POST /policies/{name}/bulkhead/release` | hold the bulkhead's limit of active calls at `N` (1 to 2^20; it overrides an adaptive algorithm), or let the algorithm (or `max_concurrent`) go on from there | yes |
//! | `POST /policies/{name}/fault/inject?kind=K&for=D&…` | start a fault injection (feature `fault`): the fields of a policy file's injection table as query parameters (`kind`, `percent`, `route`, `key`, `delay`, `status`, …; see [`InjectionConfig`](crate::fault::InjectionConfig)) and its mandatory end, `for=<duration>` (at most a day) or `until=<RFC 3339 time in UTC>`; refused, changing nothing, when the end is missing, past or too far | yes |
//! | `POST /policies/{name}/fault/stop[?id=N]` | stop one injection, or every one | yes |
//! | `POST /policies/{name}/{deadline, bulkhead, breaker, degradation}/{shadow-on, shadow-off}` | shadow mode: the layer decides and counts as it would but lets through what it would reject (see each layer's docs); an override of this instance like `force-open`, undone by `shadow-off`, by `revert`, or by a reload that changes that section | yes |
//!
//! Nest it where you like (`Router::new().nest("/admin", admin::router(..))`) and
//! bind it to loopback or an internal interface: the snapshots are readable by
//! anyone who can reach them.
//!
//! **Authorization.** Changes need `Authorization: Bearer <token>` with the
//! [`AdminToken`] given at start (from an environment variable or a flag, never
//! from the policy file). Without the header the answer is `401` (with
//! `WWW-Authenticate: Bearer`); with another token, `403`; when no token was
//! configured, every change is refused with `403`. The comparison takes the same
//! time whatever the first wrong byte. A change answers `200` with the policy's
//! (or all policies') new snapshot; an invalid one (an unknown level, a refused
//! document) `422` with an `error` that names the field at fault. Changes take
//! no body: one sent with a body is refused with `415` and changes nothing, so
//! parameters put there by mistake are never silently ignored. Every
//! attempt, allowed or not, is logged (`tracing`, target `seawall::admin`).
//!
//! Changes made here act on **this instance only**: limits and breakers are per
//! process. To change the fleet, change the file and reload every instance, or,
//! for a breaker, use the `/fleet/…` actions: every instance applies them at its
//! next health check and ends them by itself at their expiry (a later local
//! change on an instance wins there; at the end the breaker returns to what it
//! was before).
//!
//! # The dashboard
//!
//! `GET /` serves one page (HTML, CSS and script embedded in the crate) that shows
//! one card per policy, grouped by dependency: the breaker's state with a minute of
//! failure rate and short-circuits per second, the time to its next probe, its last
//! transition and why; the bulkhead's active and queued calls against their limits;
//! the degradation level, its floor and the time at it; the fallback's answers per
//! second by step. It follows a Server-Sent Events stream (`GET /events`: a frame a
//! second and at every transition, level change and bulkhead event, such as a
//! saturation or a forced limit), reconnects by itself, and says when its data is
//! stale. Without a token it is read-only; once the operator types the token (kept
//! in the page's memory, never in the URL or storage), it offers force open, force
//! closed, reset, floors and revert, each after a confirmation, as the same `POST`s
//! as above. The page is served with a strict Content-Security-Policy (no inline
//! script or style). Nested at `/admin`, it is at `/admin`.
//!
//! Its **fleet page** (`/admin#fleet`, feature `fleet`) shows each policy whose
//! breaker coordinates with a fleet, the worst first: how many instances are
//! closed, open, half-open or forced, one card per instance (the worst first,
//! opened for its details: counts, open spell, who holds it, its stuck-open flag
//! with the evidence, the age of its report), the fleet actions kept and the
//! audit log, from `GET /fleet/policies/{name}/instances` and `…/actions` every
//! 2 s (the stream rests meanwhile). With the token it issues fleet-wide force
//! open, force closed, reset, a degradation floor and revert, each with a
//! reason and an expiry. It
//! says which actions are local and which fleet-wide, and which wins when both
//! apply; the card of a coordinated policy says who holds this instance's breaker.
//!
//! ```
//! use axum::{body::Body, http::{Request, StatusCode}, Router};
//! use seawall::admin::{self, AdminToken};
//! use seawall::config::Policies;
//! use tower::ServiceExt;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let policies = Policies::from_toml("[policies.freight]\nbreaker = {}\n")?;
//! let _breaker = policies.circuit_breaker("freight", |b| b)?;
//! let token = AdminToken::new("correct-horse-battery-staple")?;
//! let app: Router = Router::new().nest("/admin", admin::router(policies, Some(token)));
//!
//! let read = Request::get("/admin/policies").body(Body::empty())?;
//! assert_eq!(app.clone().oneshot(read).await?.status(), StatusCode::OK);
//!
//! let open = |auth: Option<&str>| {
//!     let mut req = Request::post("/admin/policies/freight/breaker/force-open");
//!     if let Some(auth) = auth {
//!         req = req.header("authorization", auth);
//!     }
//!     req.body(Body::empty()).unwrap()
//! };
//! assert_eq!(app.clone().oneshot(open(None)).await?.status(), StatusCode::UNAUTHORIZED);
//! assert_eq!(app.clone().oneshot(open(Some("Bearer guess-guess-guess-guess"))).await?.status(), StatusCode::FORBIDDEN);
//! let res = app.oneshot(open(Some("Bearer correct-horse-battery-staple"))).await?;
//! assert_eq!(res.status(), StatusCode::OK);
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::sync::Arc;

use ::axum::body::{Body, HttpBody};
use ::axum::extract::rejection::QueryRejection;
use ::axum::extract::{Path, Query, State};
use ::axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use ::axum::response::Response;
use ::axum::routing::{get, post};
use ::axum::Router;
use seawall_core::{ConfigError, LayerHandle};

use crate::config::{Policies, PoliciesSnapshot};
use crate::telemetry;

/// The shortest token accepted.
pub const MIN_TOKEN_LEN: usize = 16;

/// The bearer token that allows changes through the admin router.
///
/// Only a SHA-256 digest of the token is kept, and a presented token is checked by
/// comparing its digest with that one: the comparison always covers 32 bytes, so
/// its time says nothing about the token's length or where a guess goes wrong.
/// Its `Debug` output never shows the token.
#[derive(Clone)]
pub struct AdminToken(Arc<[u8; 32]>);

impl fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AdminToken(<redacted>)")
    }
}

impl AdminToken {
    /// A token of at least [`MIN_TOKEN_LEN`] visible ASCII characters (no spaces).
    pub fn new(token: impl Into<String>) -> Result<Self, ConfigError> {
        let token = token.into();
        if token.len() < MIN_TOKEN_LEN {
            return Err(ConfigError::new(
                "admin_token",
                format!("must be at least {MIN_TOKEN_LEN} characters long"),
            ));
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ConfigError::new(
                "admin_token",
                "must be visible ASCII characters, without spaces",
            ));
        }
        Ok(Self(Arc::new(digest(token.as_bytes()))))
    }

    /// The token in the environment variable `var`: `Ok(None)` when it is unset
    /// or empty (changes are then disabled), an error when it is set but invalid.
    pub fn from_env(var: &str) -> Result<Option<Self>, ConfigError> {
        match std::env::var(var) {
            Ok(v) if !v.is_empty() => Self::new(v).map(Some),
            _ => Ok(None),
        }
    }

    /// Names the token in logs and audit entries without showing it: the first
    /// 6 bytes of its digest, in hex (`token:…`).
    pub(crate) fn fingerprint(&self) -> String {
        let hex: String = self.0.iter().take(6).map(|b| format!("{b:02x}")).collect();
        format!("token:{hex}")
    }

    /// Whether `presented` is this token, in time independent of its length and of
    /// where it differs.
    fn matches(&self, presented: &[u8]) -> bool {
        same_digest(&self.0, &digest(presented))
    }
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).into()
}

/// Compares every byte whatever the first difference (no early exit).
fn same_digest(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(feature = "bulkhead")]
mod bulkhead;
mod dashboard;
#[cfg(feature = "fault")]
mod fault;
#[cfg(feature = "fleet")]
mod fleet_actions;

struct Admin {
    policies: Policies,
    token: Option<AdminToken>,
    dashboard: dashboard::Hub,
}

impl Admin {
    /// Whether `headers` carry the configured token (for reads that show more to
    /// operators; changes go through [`refusal`], which also says why not).
    fn authorized(&self, headers: &HeaderMap) -> bool {
        match (&self.token, bearer(headers)) {
            (Some(token), Some(presented)) => token.matches(presented.as_bytes()),
            _ => false,
        }
    }
}

/// The credentials of an `Authorization: Bearer <token>` header.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, rest) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        })
}

/// The admin routes over `policies` (see the [module docs](self)); changes need
/// `token`, and with `None` every change is refused.
pub fn router<S>(policies: Policies, token: Option<AdminToken>) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    let dashboard = dashboard::Hub::new(&policies);
    let admin = Arc::new(Admin {
        policies,
        token,
        dashboard,
    });
    let router = Router::new()
        .route("/", get(dashboard::page))
        .route("/dashboard.js", get(dashboard::script))
        .route("/dashboard.css", get(dashboard::style))
        .route("/events", get(dashboard::events))
        .route("/policies", get(all))
        .route("/policies/{name}", get(one))
        .route("/fleet", get(fleet))
        .route("/reload", post(reload))
        .route("/revert", post(revert))
        .route("/policies/{name}/{layer}/{action}", post(act));
    #[cfg(feature = "fleet")]
    let router = fleet_actions::routes(router);
    router.with_state(admin)
}

fn json<T: serde::Serialize>(status: StatusCode, value: &T) -> Response {
    match serde_json::to_vec_pretty(value) {
        Ok(bytes) => {
            let mut res = Response::new(Body::from(bytes));
            *res.status_mut() = status;
            res.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            res
        }
        Err(_) => message(
            StatusCode::INTERNAL_SERVER_ERROR,
            "snapshot not serialisable",
        ),
    }
}

fn message(status: StatusCode, text: &str) -> Response {
    #[derive(serde::Serialize)]
    struct Message<'a> {
        error: &'a str,
    }
    let body = serde_json::to_vec(&Message { error: text }).unwrap_or_default();
    let mut res = Response::new(Body::from(body));
    *res.status_mut() = status;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    res
}

/// `None` when the request may change things; the refusal otherwise.
fn refusal(
    admin: &Admin,
    headers: &HeaderMap,
    action: &str,
    policy: Option<&str>,
) -> Option<Response> {
    let refuse = |status, text: &str, outcome: &str| {
        telemetry::admin_action(action, policy, outcome);
        Some(message(status, text))
    };
    let Some(token) = &admin.token else {
        return refuse(
            StatusCode::FORBIDDEN,
            "changes are disabled on this instance: no admin token was configured at start",
            "refused: no token configured",
        );
    };
    match bearer(headers) {
        None => {
            telemetry::admin_action(action, policy, "refused: no credentials");
            let mut res = message(
                StatusCode::UNAUTHORIZED,
                "changes need an `Authorization: Bearer <token>` header",
            );
            res.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"seawall-admin\""),
            );
            Some(res)
        }
        Some(p) if token.matches(p.as_bytes()) => None,
        Some(_) => refuse(
            StatusCode::FORBIDDEN,
            "wrong admin token",
            "refused: wrong token",
        ),
    }
}

async fn all(State(admin): State<Arc<Admin>>, headers: HeaderMap) -> Response {
    let mut snapshot = admin.policies.snapshot();
    if !admin.authorized(&headers) {
        snapshot.file = snapshot.file.as_deref().map(file_name);
    }
    json::<PoliciesSnapshot>(StatusCode::OK, &snapshot)
}

/// The `[fleet]` settings in force, redacted as in the policies' snapshot, and
/// each registered policy's coordination and cap.
async fn fleet(State(admin): State<Arc<Admin>>) -> Response {
    #[cfg(feature = "fleet")]
    if let Some(fleet) = admin.policies.fleet_status() {
        return json(StatusCode::OK, &fleet);
    }
    let _ = admin;
    message(
        StatusCode::NOT_FOUND,
        "no [fleet] table in the policy document",
    )
}

/// The last component of `path`: where the policy file lives on the host is for
/// operators, not for whoever can reach the snapshots.
fn file_name(path: &str) -> String {
    std::path::Path::new(path)
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
}

async fn one(State(admin): State<Arc<Admin>>, Path(name): Path<String>) -> Response {
    match admin.policies.snapshot().policies.get(&name) {
        Some(p) => json(StatusCode::OK, p),
        None => message(StatusCode::NOT_FOUND, "no such policy"),
    }
}

/// A refusal of a change sent with a body: no change reads one, and a caller who
/// sent parameters there must not be told `200` for a change made without them.
fn with_body(body: &Body, action: &str, policy: Option<&str>) -> Option<Response> {
    if body.is_end_stream() {
        return None;
    }
    telemetry::admin_action(action, policy, "refused: unexpected body");
    Some(message(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "changes take no body: send parameters in the query string (`?level=<name or index>`, `?limit=<calls>`)",
    ))
}

async fn reload(State(admin): State<Arc<Admin>>, headers: HeaderMap, body: Body) -> Response {
    if let Some(refused) = refusal(&admin, &headers, "reload", None) {
        return refused;
    }
    if let Some(refused) = with_body(&body, "reload", None) {
        return refused;
    }
    match admin.policies.reload() {
        Ok(()) => {
            telemetry::admin_action("reload", None, "applied");
            json(StatusCode::OK, &admin.policies.snapshot())
        }
        Err(e) => {
            telemetry::admin_action("reload", None, "refused: invalid document");
            message(StatusCode::UNPROCESSABLE_ENTITY, &e.to_string())
        }
    }
}

async fn revert(State(admin): State<Arc<Admin>>, headers: HeaderMap, body: Body) -> Response {
    if let Some(refused) = refusal(&admin, &headers, "revert", None) {
        return refused;
    }
    if let Some(refused) = with_body(&body, "revert", None) {
        return refused;
    }
    admin.policies.revert();
    telemetry::admin_action("revert", None, "applied");
    json(StatusCode::OK, &admin.policies.snapshot())
}

/// The query parameters of a change, percent-decoded by axum's [`Query`].
#[derive(Debug, Default, serde::Deserialize)]
struct Params {
    /// A degradation level, by name or index.
    level: Option<String>,
    /// A bulkhead's limit of active calls, to force.
    #[cfg_attr(not(feature = "bulkhead"), allow(dead_code))]
    limit: Option<String>,
    /// A fault injection's fields (see `admin/fault.rs`).
    #[cfg(feature = "fault")]
    #[serde(flatten)]
    injection: FaultParams,
}

/// The query parameters of a fault injection: the fields of a file's injection
/// table, and `for` (a duration) as an alternative to `until`.
#[cfg(feature = "fault")]
#[derive(Debug, Default, serde::Deserialize)]
struct FaultParams {
    kind: Option<String>,
    percent: Option<String>,
    #[serde(rename = "for")]
    lasting: Option<String>,
    until: Option<String>,
    route: Option<String>,
    key: Option<String>,
    delay: Option<String>,
    delay_max: Option<String>,
    status: Option<String>,
    grpc_code: Option<String>,
    at_most: Option<String>,
    after_bytes: Option<String>,
    /// The injection to stop.
    id: Option<String>,
}

/// Why an action could not be carried out.
#[cfg_attr(
    not(any(feature = "degradation", feature = "bulkhead")),
    allow(dead_code)
)]
enum Refusal {
    NotFound(&'static str),
    Invalid(String),
}

async fn act(
    State(admin): State<Arc<Admin>>,
    Path((name, layer, action)): Path<(String, String, String)>,
    params: Result<Query<Params>, QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let what = format!("{layer}/{action}");
    if let Some(refused) = refusal(&admin, &headers, &what, Some(&name)) {
        return refused;
    }
    if let Some(refused) = with_body(&body, &what, Some(&name)) {
        return refused;
    }
    let params = match params {
        Ok(Query(params)) => params,
        Err(e) => {
            telemetry::admin_action(&what, Some(&name), "refused: malformed query");
            return message(StatusCode::BAD_REQUEST, &e.body_text());
        }
    };
    let Some(handles) = admin.policies.handles(&name) else {
        return message(
            StatusCode::NOT_FOUND,
            "no such policy, or none of its layers is built",
        );
    };
    let done = match (layer.as_str(), action.as_str()) {
        (_, "shadow-on") => set_shadow(&handles, &layer, true),
        (_, "shadow-off") => set_shadow(&handles, &layer, false),
        #[cfg(feature = "bulkhead")]
        ("bulkhead", _) => bulkhead::carry_out(&handles, &action, params.limit.as_deref()),
        #[cfg(feature = "fault")]
        ("fault", _) => fault::carry_out(&handles, &action, &params.injection),
        _ => carry_out(&handles, &layer, &action, params.level.as_deref()),
    };
    match done {
        Ok(()) => {
            telemetry::admin_action(&what, Some(&name), "applied");
            match admin.policies.snapshot().policies.get(&name) {
                Some(p) => json(StatusCode::OK, p),
                None => message(StatusCode::NOT_FOUND, "no such policy"),
            }
        }
        Err(Refusal::NotFound(why)) => message(StatusCode::NOT_FOUND, why),
        Err(Refusal::Invalid(why)) => {
            telemetry::admin_action(&what, Some(&name), "refused: invalid");
            message(StatusCode::UNPROCESSABLE_ENTITY, &why)
        }
    }
}

const NO_LAYER: &str = "this policy has no such layer built";
#[cfg_attr(not(feature = "bulkhead"), allow(dead_code))]
const NO_ACTION: &str = "no such action for this layer";

/// The handle in `slot`, or why there is none.
fn built<H>(slot: &Option<H>) -> Result<&H, Refusal> {
    slot.as_ref().ok_or(Refusal::NotFound(NO_LAYER))
}

for_the_policy_layers! {
    /// Holds the layer in `forced` (the verb of every layer, see [`LayerHandle::force`]).
    fn force<H: LayerHandle>(slot: &Option<H>, forced: H::Forced) -> Result<(), Refusal> {
        built(slot)?
            .force(forced)
            .map_err(|e| Refusal::Invalid(e.to_string()))
    }
}

/// Hands the layer back to its own policy ([`LayerHandle::release`]).
#[cfg_attr(
    not(any(feature = "bulkhead", feature = "degradation", feature = "fallback")),
    allow(dead_code)
)]
fn release<H: LayerHandle>(slot: &Option<H>) -> Result<(), Refusal> {
    built(slot)?.release();
    Ok(())
}

#[cfg_attr(
    not(all(
        feature = "circuit-breaker",
        feature = "degradation",
        feature = "fallback"
    )),
    allow(unused_variables, dead_code)
)]
fn carry_out(
    handles: &crate::config::PolicyHandles,
    layer: &str,
    action: &str,
    level: Option<&str>,
) -> Result<(), Refusal> {
    match layer {
        #[cfg(feature = "circuit-breaker")]
        "breaker" => {
            use crate::circuit_breaker::Forced;
            let slot = &handles.breaker;
            let h = built(slot)?;
            match action {
                "force-open" => force(slot, Forced::Open),
                "force-closed" => force(slot, Forced::Closed),
                "reset" => {
                    h.reset();
                    Ok(())
                }
                _ => Err(Refusal::NotFound(NO_ACTION)),
            }
        }
        #[cfg(feature = "degradation")]
        "degradation" => {
            let slot = &handles.degradation;
            let h = built(slot)?;
            let pick = || -> Result<usize, Refusal> {
                let l = level
                    .ok_or_else(|| Refusal::Invalid("needs `?level=<name or index>`".into()))?;
                h.level_index(l)
                    .or_else(|| l.parse::<usize>().ok().filter(|i| *i < h.levels().len()))
                    .ok_or_else(|| Refusal::Invalid(format!("no level `{l}`")))
            };
            match action {
                "set-floor" => h
                    .set_floor(pick()?)
                    .map_err(|e| Refusal::Invalid(e.to_string())),
                "clear-floor" => {
                    h.clear_floor();
                    Ok(())
                }
                "force" => force(slot, pick()?),
                "release" => release(slot),
                _ => Err(Refusal::NotFound(NO_ACTION)),
            }
        }
        #[cfg(feature = "fallback")]
        "fallback" => {
            let slot = &handles.fallback;
            let h = built(slot)?;
            match action {
                "force" => force(slot, ()),
                "unforce" => release(slot),
                "enable" => {
                    h.enable();
                    Ok(())
                }
                "disable" => {
                    h.disable();
                    Ok(())
                }
                _ => Err(Refusal::NotFound(NO_ACTION)),
            }
        }
        _ => Err(Refusal::NotFound(
            "no such layer: breaker, bulkhead, degradation or fallback",
        )),
    }
}

/// Switches shadow mode of one of the policy's layers.
fn set_shadow(
    handles: &crate::config::PolicyHandles,
    layer: &str,
    shadow: bool,
) -> Result<(), Refusal> {
    match layer {
        "deadline" => built(&handles.deadline)?.set_shadow(shadow),
        #[cfg(feature = "bulkhead")]
        "bulkhead" => built(&handles.bulkhead)?.set_shadow(shadow),
        #[cfg(feature = "circuit-breaker")]
        "breaker" => built(&handles.breaker)?.set_shadow(shadow),
        #[cfg(feature = "degradation")]
        "degradation" => built(&handles.degradation)?
            .set_shadow(shadow)
            .map_err(|e| Refusal::Invalid(e.to_string()))?,
        "fallback" => {
            return Err(Refusal::NotFound(
                "a fallback rejects nothing, so it has no shadow mode",
            ))
        }
        _ => {
            return Err(Refusal::NotFound(
                "no such layer with a shadow mode: deadline, bulkhead, breaker or degradation",
            ))
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_checked_and_never_printed() {
        assert!(AdminToken::new("short").is_err());
        assert!(AdminToken::new("has a space in it, too long").is_err());
        let t = AdminToken::new("0123456789abcdef").unwrap();
        assert!(t.matches(b"0123456789abcdef"));
        assert!(!t.matches(b"0123456789abcdeF"));
        assert!(!t.matches(b"0123456789abcde"));
        assert!(!t.matches(b"0123456789abcdef0"));
        assert!(!t.matches(b""));
        assert!(!format!("{t:?}").contains("0123"));
    }

    #[test]
    fn the_token_is_kept_and_compared_only_as_a_fixed_size_digest() {
        // SHA-256 of "0123456789abcdef", from a reference implementation.
        let known = "9f9f5111f7b27a781f1f1ddde5ebc2dd2b796bfc7365c9c28b548e564176929f";
        let t = AdminToken::new("0123456789abcdef").unwrap();
        let hex: String = t.0.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, known);
        // Whatever the lengths, the comparison is between two 32-byte digests.
        let long = "x".repeat(10_000);
        let t = AdminToken::new(long.clone()).unwrap();
        assert!(t.matches(long.as_bytes()));
        assert!(!t.matches(&long.as_bytes()[..9_999]));
        assert!(!t.matches(b"x"));
        assert!(same_digest(&[7; 32], &[7; 32]));
        let mut last_differs = [7; 32];
        last_differs[31] = 8;
        assert!(!same_digest(&[7; 32], &last_differs));
    }

    #[test]
    fn only_the_file_name_of_the_policy_file_is_shown() {
        assert_eq!(file_name("/etc/shop/policies.toml"), "policies.toml");
        assert_eq!(file_name("policies.toml"), "policies.toml");
    }
}
