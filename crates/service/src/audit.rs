//! The audit trail: one layer records every state-changing request under `/api/v2/orgs/{org}/`
//! (any method but GET, HEAD and OPTIONS, on any route, present or added later) with its token,
//! org, action, target, time and outcome; `GET /api/v2/orgs/{org}:audit` lists the org's entries to
//! its admin tokens. Request bodies are never recorded (they may hold secrets); nothing in the API
//! changes or removes an entry.

use super::common::AppStateRef;
use super::error::{ApiError, ApiResult};
use super::token_info::TokenInfo;
use axum::body::Body;
use axum::extract::{MatchedPath, Path, Request, State};
use axum::http::{header, Method, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::Response;
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use tao_slurm_engine::client::AuditEntry;
use utoipa::ToSchema;

const ORG_PREFIX: &str = "/api/v2/orgs/{org}";
/// Replies read for the created id or the error's type are at most this long (others are not read).
const READ_REPLY_BYTES: u64 = 64 * 1024;

/// What an audited request did: (`jobs.create`, target) from its method, route template and path.
/// `jobs.cancel` for `POST .../jobs/ID:cancel`; the target is the item the path names.
pub fn action_of(method: &Method, route: &str, path: &str) -> (String, Option<String>) {
    let rest = route.strip_prefix(ORG_PREFIX).unwrap_or(route);
    let resource = rest.trim_start_matches('/').split(['/', ':']).next().filter(|r| !r.is_empty()).unwrap_or("org");
    let last = path.rsplit('/').next().unwrap_or("");
    let (item, suffix) = match last.split_once(':') {
        Some((item, suffix)) => (item, Some(suffix)),
        None => (last, None),
    };
    // The path names an item when the route has a parameter past the org's.
    let target = rest.contains('{').then(|| item.to_string()).filter(|t| !t.is_empty());
    let verb = match (suffix, method.as_str()) {
        (Some(s), _) => s.to_string(),
        (None, "POST") => "create".into(),
        (None, "PUT") => "put".into(),
        (None, "PATCH") => "update".into(),
        (None, "DELETE") => "delete".into(),
        (None, m) => m.to_ascii_lowercase(),
    };
    (format!("{resource}.{verb}"), target)
}

fn changes_state(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Record the request when it changes state (this layer runs inside authentication: the token is
/// known, and requests refused for want of one are not the org's).
pub async fn record(State(state): State<AppStateRef>, req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let token = req.extensions().get::<TokenInfo>().cloned();
    let route = req.extensions().get::<MatchedPath>().map(|p| p.as_str().to_string());
    let (Some(token), Some(route)) = (token, route) else { return next.run(req).await };
    if !changes_state(&method) || !route.starts_with(ORG_PREFIX) {
        return next.run(req).await;
    }
    let at = tao_slurm_engine::client::now_secs();
    let response = next.run(req).await;
    let (response, reply) = read_small_json(response).await;
    let (action, mut target) = action_of(&method, &route, &path);
    let status = response.status();
    let outcome = if status.is_success() {
        if target.is_none() {
            target = reply.as_ref().and_then(|v| v["id"].as_str()).map(String::from);
        }
        "ok".to_string()
    } else {
        reply.as_ref().and_then(|v| v["error_type"].as_str()).unwrap_or("error").to_string()
    };
    let entry = AuditEntry {
        id: 0,
        at,
        org: token.org.clone(),
        token_id: Some(token.id),
        token_name: Some(token.name),
        person: token.person,
        action,
        method: method.to_string(),
        path,
        target,
        status: status.as_u16(),
        outcome,
    };
    let st = state.clone();
    match tokio::task::spawn_blocking(move || st.records.audit().append(&entry)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::error!(error = %e, "cannot record a request in the audit trail"),
        Err(e) => tracing::error!(error = %e, "cannot record a request in the audit trail"),
    }
    response
}

/// A JSON reply of known, small length, read (and put back) to learn a created id or an error's
/// type; any other reply (a stream, an archive) passes untouched.
async fn read_small_json(response: Response) -> (Response, Option<serde_json::Value>) {
    use axum::body::HttpBody;
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let small = response.body().size_hint().exact().is_some_and(|n| n <= READ_REPLY_BYTES);
    if !json || !small {
        return (response, None);
    }
    let (parts, body) = response.into_parts();
    match axum::body::to_bytes(body, READ_REPLY_BYTES as usize).await {
        Ok(bytes) => {
            let value = serde_json::from_slice(&bytes).ok();
            (Response::from_parts(parts, Body::from(bytes)), value)
        }
        Err(_) => (Response::from_parts(parts, Body::empty()), None),
    }
}

/// `?after=ID&size=N` of the audit listing.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// Entries after this id (the last one of the previous page).
    pub after: Option<i64>,
    /// At most this many (default 100, at most 1000).
    pub size: Option<usize>,
}

/// A page of the org's audit trail, oldest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditList {
    #[schema(value_type = Vec<Object>)]
    pub entries: Vec<AuditEntry>,
    /// Pass as `after` for the next page; None when this page is the last.
    pub next_after: Option<i64>,
}

#[utoipa::path(get, path = "/api/v2/orgs/{org}:audit", tag = "service", security(("bearer" = [])),
    params(("org" = String, Path), AuditQuery),
    responses((status = 200, description = "The org's state-changing requests, oldest first (org admin tokens only)", body = AuditList),
        (status = 401, body = super::error::ErrorBody), (status = 403, body = super::error::ErrorBody)))]
pub async fn org_ref(
    State(state): State<AppStateRef>,
    Path(org_ref): Path<String>,
    Extension(token): Extension<TokenInfo>,
    uri: Uri,
) -> ApiResult<Json<AuditList>> {
    let Some((org, "audit")) = org_ref.split_once(':') else {
        return Err(ApiError::not_found("no such route; the API is described at /api/v2/openapi.json"));
    };
    if !token.admin {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "the audit trail is for org admin tokens (`tao-slurm token create --admin`)",
        ));
    }
    let q =
        axum::extract::Query::<AuditQuery>::try_from_uri(&uri).map_err(|e| ApiError::field("query", e.body_text()))?.0;
    let size = q.size.unwrap_or(100);
    if size == 0 || size > 1000 {
        return Err(ApiError::field("size", "size must be between 1 and 1000"));
    }
    let org = org.to_string();
    let entries = super::common::blocking(move || {
        state.records.audit().page(Some(&org), q.after.unwrap_or(0), size + 1).map_err(ApiError::internal)
    })
    .await?;
    let more = entries.len() > size;
    let entries: Vec<AuditEntry> = entries.into_iter().take(size).collect();
    let next_after = more.then(|| entries.last().map(|e| e.id)).flatten();
    Ok(Json(AuditList { entries, next_after }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_and_targets_come_from_the_method_route_and_path() {
        let org = "/api/v2/orgs/{org}";
        for (method, route, path, action, target) in [
            (Method::POST, "/jobs", "/api/v2/orgs/a/jobs", "jobs.create", None),
            (Method::POST, "/jobs/{job_ref}", "/api/v2/orgs/a/jobs/J1:cancel", "jobs.cancel", Some("J1")),
            (Method::POST, "/jobs/{job_ref}", "/api/v2/orgs/a/jobs/J1:pause", "jobs.pause", Some("J1")),
            (Method::DELETE, "/jobs/{job_ref}", "/api/v2/orgs/a/jobs/J1", "jobs.delete", Some("J1")),
            (Method::PATCH, "/jobs/{job_ref}", "/api/v2/orgs/a/jobs/J1", "jobs.update", Some("J1")),
            (Method::PUT, "/secrets/{name}", "/api/v2/orgs/a/secrets/HF", "secrets.put", Some("HF")),
            (Method::POST, "/workspaces", "/api/v2/orgs/a/workspaces", "workspaces.create", None),
            (Method::POST, "/workspaces:backup", "/api/v2/orgs/a/workspaces:backup", "workspaces.backup", None),
        ] {
            let got = action_of(&method, &format!("{org}{route}"), path);
            assert_eq!(got, (action.to_string(), target.map(String::from)), "{method} {path}");
        }
    }
}
