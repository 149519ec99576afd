//! The fleet's routes (feature `fleet`): one view of every replica's breaker,
//! and fleet-wide actions issued through a policy's registered coordination,
//! signed by the fleet's secret, applied and ended by every instance itself.

use std::sync::Arc;
use std::time::Duration;

use ::axum::body::Body;
use ::axum::extract::rejection::QueryRejection;
use ::axum::extract::{Path, Query, State};
use ::axum::http::{HeaderMap, StatusCode};
use ::axum::response::Response;
use ::axum::routing::{get, post};
use ::axum::Router;
use seawall_fleet::{
    ActionError, ActionKind, AuditEntry, Coordinated, FleetAction, FloorFollower,
    DEFAULT_ACTION_TTL,
};

use super::{json, message, refusal, with_body, Admin, AdminToken};
use crate::telemetry;

/// The newest audit entries `GET …/actions` shows.
const AUDIT_SHOWN: usize = 50;

pub(super) fn routes(router: Router<Arc<Admin>>) -> Router<Arc<Admin>> {
    router
        .route("/fleet/policies/{name}/actions", get(list))
        .route("/fleet/policies/{name}/instances", get(instances))
        .route("/fleet/policies/{name}/breaker/{action}", post(issue))
        .route(
            "/fleet/policies/{name}/degradation/floor",
            post(issue_floor),
        )
        .route("/fleet/policies/{name}/revert/{id}", post(issue_revert))
}

/// `reason` (required) and `ttl` (`"15m"` by default) of a fleet action, and
/// `level` (by name or index) of a floor.
#[derive(Debug, Default, serde::Deserialize)]
struct Params {
    reason: Option<String>,
    ttl: Option<String>,
    level: Option<String>,
}

/// Where a policy's fleet actions are issued and read: its breaker's
/// coordination, or its degradation floor's follower.
enum Desk {
    Breaker(Arc<Coordinated>),
    Floor(Arc<FloorFollower>),
}

impl Desk {
    /// The coordination if there is one, else the floor's follower.
    fn of(admin: &Admin, name: &str) -> Option<Self> {
        admin
            .policies
            .coordination(name)
            .map(Desk::Breaker)
            .or_else(|| admin.policies.floor_follower(name).map(Desk::Floor))
    }

    async fn act(
        &self,
        kind: ActionKind,
        reason: &str,
        signer: &str,
        ttl: Duration,
    ) -> Result<FleetAction, ActionError> {
        match self {
            Desk::Breaker(c) => c.act(kind, reason, signer, ttl).await,
            Desk::Floor(f) => f.act(kind, reason, signer, ttl).await,
        }
    }

    async fn actions(&self) -> Result<Vec<FleetAction>, ActionError> {
        match self {
            Desk::Breaker(c) => c.fleet_actions().await,
            Desk::Floor(f) => f.fleet_actions().await,
        }
    }

    async fn audit_log(&self, n: usize) -> Result<Vec<AuditEntry>, ActionError> {
        match self {
            Desk::Breaker(c) => c.audit_log(n).await,
            Desk::Floor(f) => f.audit_log(n).await,
        }
    }
}

#[derive(serde::Serialize)]
struct Listing {
    /// The actions kept in the store (in force or not yet deleted).
    actions: Vec<FleetAction>,
    /// The newest audit entries, newest first.
    audit: Vec<AuditEntry>,
}

fn store_failure(e: &ActionError) -> Response {
    match e {
        ActionError::Config(e) => message(StatusCode::UNPROCESSABLE_ENTITY, &e.to_string()),
        ActionError::Off => message(StatusCode::CONFLICT, &e.to_string()),
        _ => message(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    }
}

async fn list(State(admin): State<Arc<Admin>>, Path(name): Path<String>) -> Response {
    let Some(desk) = Desk::of(&admin, &name) else {
        return message(
            StatusCode::NOT_FOUND,
            "no coordination or floor follower registered for this policy",
        );
    };
    let actions = match desk.actions().await {
        Ok(actions) => actions,
        Err(e) => return store_failure(&e),
    };
    match desk.audit_log(AUDIT_SHOWN).await {
        Ok(audit) => json(StatusCode::OK, &Listing { actions, audit }),
        Err(e) => store_failure(&e),
    }
}

/// Every instance's latest report on the policy's breaker, the worst first.
async fn instances(State(admin): State<Arc<Admin>>, Path(name): Path<String>) -> Response {
    let Some(coordinated) = admin.policies.coordination(&name) else {
        return message(
            StatusCode::NOT_FOUND,
            "no coordination registered for this policy",
        );
    };
    match coordinated.fleet_view().await {
        Ok(view) => json(StatusCode::OK, &view),
        Err(e) => store_failure(&e),
    }
}

async fn issue(
    State(admin): State<Arc<Admin>>,
    Path((name, action)): Path<(String, String)>,
    params: Result<Query<Params>, QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let kind = match action.as_str() {
        "force-open" => ActionKind::ForceOpen,
        "force-closed" => ActionKind::ForceClosed,
        "reset" => ActionKind::Reset,
        _ => return message(StatusCode::NOT_FOUND, "no such fleet action"),
    };
    if let Some(refused) = allowed(&admin, &kind, &name, &headers, &body) {
        return refused;
    }
    drop(body);
    let Some(coordinated) = admin.policies.coordination(&name) else {
        return message(
            StatusCode::NOT_FOUND,
            "no coordination registered for this policy",
        );
    };
    act(&admin, &name, &Desk::Breaker(coordinated), kind, params).await
}

/// `POST …/degradation/floor?level=L`: the level by name or index, checked
/// against this instance's levels (an instance without it refuses and audits it).
async fn issue_floor(
    State(admin): State<Arc<Admin>>,
    Path(name): Path<String>,
    params: Result<Query<Params>, QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let what = "fleet/floor";
    if let Some(refused) =
        refusal(&admin, &headers, what, Some(&name)).or_else(|| with_body(&body, what, Some(&name)))
    {
        return refused;
    }
    drop(body);
    let Some(follower) = admin.policies.floor_follower(&name) else {
        return message(
            StatusCode::NOT_FOUND,
            "no floor follower registered for this policy",
        );
    };
    let query = match &params {
        Ok(Query(query)) => query,
        Err(e) => return message(StatusCode::BAD_REQUEST, &e.body_text()),
    };
    let levels = level_names(&admin, &name);
    let level = match query.level.as_deref() {
        None | Some("") => {
            return message(
                StatusCode::UNPROCESSABLE_ENTITY,
                "level: a floor needs one (`?level=<name or index>`)",
            )
        }
        Some(text) => text
            .parse::<usize>()
            .ok()
            .filter(|i| *i < levels.len())
            .or_else(|| levels.iter().position(|l| l == text)),
    };
    let Some(level) = level.and_then(|l| u32::try_from(l).ok()) else {
        return message(
            StatusCode::UNPROCESSABLE_ENTITY,
            &format!("level: no such level; the levels are {}", levels.join(", ")),
        );
    };
    act(
        &admin,
        &name,
        &Desk::Floor(follower),
        ActionKind::Floor(level),
        params,
    )
    .await
}

/// The names of policy `name`'s degradation levels, best first.
fn level_names(admin: &Admin, name: &str) -> Vec<String> {
    #[cfg(feature = "degradation")]
    if let Some(d) = admin.policies.handles(name).and_then(|h| h.degradation) {
        return d.levels().iter().map(ToString::to_string).collect();
    }
    let _ = (admin, name);
    Vec::new()
}

async fn issue_revert(
    State(admin): State<Arc<Admin>>,
    Path((name, id)): Path<(String, String)>,
    params: Result<Query<Params>, QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let kind = ActionKind::Revert(id);
    if let Some(refused) = allowed(&admin, &kind, &name, &headers, &body) {
        return refused;
    }
    drop(body);
    let Some(desk) = Desk::of(&admin, &name) else {
        return message(
            StatusCode::NOT_FOUND,
            "no coordination or floor follower registered for this policy",
        );
    };
    act(&admin, &name, &desk, kind, params).await
}

/// The token and no body, as for every change (the body is dropped before
/// the change awaits the store: it is not `Sync`).
fn allowed(
    admin: &Admin,
    kind: &ActionKind,
    name: &str,
    headers: &HeaderMap,
    body: &Body,
) -> Option<Response> {
    let what = format!("fleet/{kind}");
    refusal(admin, headers, &what, Some(name)).or_else(|| with_body(body, &what, Some(name)))
}

async fn act(
    admin: &Admin,
    name: &str,
    desk: &Desk,
    kind: ActionKind,
    params: Result<Query<Params>, QueryRejection>,
) -> Response {
    let what = format!("fleet/{kind}");
    let params = match params {
        Ok(Query(params)) => params,
        Err(e) => return message(StatusCode::BAD_REQUEST, &e.body_text()),
    };
    let Some(reason) = params.reason.filter(|r| !r.is_empty()) else {
        return message(
            StatusCode::UNPROCESSABLE_ENTITY,
            "reason: a fleet action needs one (`?reason=…`)",
        );
    };
    let ttl: Duration = match params.ttl.as_deref() {
        None => DEFAULT_ACTION_TTL,
        Some(text) => match seawall_core::duration_format::parse(text) {
            Ok(ttl) => ttl,
            Err(e) => return message(StatusCode::UNPROCESSABLE_ENTITY, &format!("ttl: {e}")),
        },
    };
    // Who signed: the configured token (the one presented matched it), never shown.
    let signer = admin
        .token
        .as_ref()
        .map_or_else(String::new, AdminToken::fingerprint);
    match desk.act(kind, &reason, &signer, ttl).await {
        Ok(action) => {
            telemetry::admin_action(&what, Some(name), "issued to the fleet");
            json(StatusCode::OK, &action)
        }
        Err(e) => {
            telemetry::admin_action(&what, Some(name), "refused");
            store_failure(&e)
        }
    }
}
