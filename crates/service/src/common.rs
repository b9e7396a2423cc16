//! What every handler shares: the state's handle, a job or workspace of the org, a JSON body or query
//! with the field at fault named, blocking engine work off the runtime, and the shape of a job action.
//! It imports the service's foundation (state, types, errors, policy), never a handler's module.

use super::error::{ApiError, ApiResult};
use super::state::{AppState, CachedJob};
use super::token_info::TokenInfo;
use super::workspace::Workspace;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::Query;
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use tao_slurm_engine::status::PlatformStatus;

pub type AppStateRef = Arc<AppState>;

/// A JSON reply from text that is already JSON.
pub fn json_text(status: StatusCode, text: String) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], text).into_response()
}

/// Run blocking engine work off the async runtime.
pub async fn blocking<T: Send + 'static>(f: impl FnOnce() -> ApiResult<T> + Send + 'static) -> ApiResult<T> {
    joined(tokio::task::spawn_blocking(f).await)
}

/// The result of blocking work that was spawned, its panic an internal error.
pub fn joined<T>(done: Result<ApiResult<T>, tokio::task::JoinError>) -> ApiResult<T> {
    done.unwrap_or_else(|e| Err(ApiError::internal(format!("internal error (a bug in tao-slurm): {e}"))))
}

/// A job of the org from the cache (a job of another org is not found, as if it did not exist).
pub fn org_job(state: &AppState, org: &str, id: &str) -> ApiResult<Arc<CachedJob>> {
    state
        .snapshot()
        .jobs
        .get(id)
        .filter(|j| j.out.org == org)
        .cloned()
        .ok_or_else(|| ApiError::not_found(format!("no job {id} in org {org}")))
}

/// A person's job is changed (cancelled, retried, paused, resumed, deleted) by that person only when
/// it runs as their own Unix user (`identity::may_reach`), else by them or an org admin; a job no
/// person created, by any token of the org.
pub fn may_change(token: &TokenInfo, job: &CachedJob) -> ApiResult<()> {
    super::identity::may_reach(token, job)?;
    match &job.out.user {
        Some(person) if token.person.as_deref() != Some(person.as_str()) && !token.admin => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("job {} is {person}'s: only they or an org admin may change it", job.out.id),
        )),
        _ => Ok(()),
    }
}

/// The workspace whose identity acts on `job` for `token`: decided by `identity` alone.
pub fn workspace_of(state: &AppState, token: &TokenInfo, job: &CachedJob) -> ApiResult<Arc<Workspace>> {
    super::identity::job_workspace(state, token, job)
}

pub fn query<T: serde::de::DeserializeOwned>(uri: &Uri) -> ApiResult<T> {
    Query::<T>::try_from_uri(uri).map(|q| q.0).map_err(|e| ApiError::field("query", e.body_text()))
}

/// The request body as JSON of type `T`, with the field of the first error named.
pub fn parse_json<T: serde::de::DeserializeOwned>(
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<T> {
    let body = body.map_err(|e| {
        let status = e.status();
        let code = if status == StatusCode::PAYLOAD_TOO_LARGE { "payload_too_large" } else { "invalid_body" };
        ApiError::new(status, code, e.body_text())
    })?;
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(';').next().is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json")));
    if !json {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send the body as JSON with Content-Type: application/json",
        ));
    }
    let de = &mut serde_json::Deserializer::from_slice(&body);
    serde_path_to_error::deserialize(de).map_err(field_error)
}

/// A JSON value as type `T`, with the field of the first error named.
pub fn from_value<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> ApiResult<T> {
    serde_path_to_error::deserialize(value).map_err(field_error)
}

fn field_error<E: std::fmt::Display>(e: serde_path_to_error::Error<E>) -> ApiError {
    let path = e.path().to_string();
    let inner = e.into_inner();
    // The path names the field at fault (an unknown field included).
    let field = if path == "." || path == "?" || path.is_empty() { "body".to_string() } else { path };
    ApiError::field(field, inner.to_string())
}

/// Run `act` on the org's job with a client of its workspace (within the request pool, off the
/// runtime), publish what it changed, wake the monitor, and reply with the job as it now is: the
/// shape of every job action (cancel, retry, pause, resume).
pub async fn act_on_job(
    state: AppStateRef,
    token: &TokenInfo,
    org: &str,
    id: &str,
    act: impl FnOnce(&tao_slurm_engine::Client, &str) -> tao_slurm_engine::Result<()> + Send + 'static,
) -> ApiResult<Response> {
    let job = org_job(&state, org, id)?;
    let ws = workspace_of(&state, token, &job)?;
    let (st, w, jid) = (state.clone(), ws.clone(), id.to_string());
    let _in_pool = ws.pool.enter(&ws.id).await?;
    blocking(move || {
        w.with_client(|client| {
            let result = act(client, &jid);
            // The job acted on; what it changes in others (its dependants) comes with the monitor's.
            st.publish_jobs(client, std::slice::from_ref(&jid));
            result
        })
        .map_err(ApiError::engine)
    })
    .await?;
    ws.wake_monitor();
    Ok(json_text(StatusCode::OK, org_job(&state, org, id)?.json.to_string()))
}

/// The policy check of a job that starts again (`:retry`, `:resume`) when `restarts` says its status
/// is one the action starts from: decided on the job as stored (not the cache, which another
/// replica's change may not have reached), its recorded plan against the org's and the workspace's
/// policy as they are now, and its place among the org's active jobs taken in the database (itself
/// not counted; a paused job keeps the place it holds). False: the action starts nothing (it answers
/// the job as it is).
pub async fn admit_restart(
    state: &AppStateRef,
    token: &TokenInfo,
    org: &str,
    id: &str,
    restarts: impl Fn(PlatformStatus) -> bool,
) -> ApiResult<bool> {
    let job = org_job(state, org, id)?;
    let ws = workspace_of(state, token, &job)?;
    let (w, jid) = (ws.clone(), id.to_string());
    let (plan, stored) = blocking(move || {
        w.with_client(|c| {
            let stored = c.known_jobs(std::slice::from_ref(&jid))?;
            Ok((c.recorded_plan(&jid)?, stored.into_iter().next()))
        })
        .map_err(ApiError::engine)
    })
    .await?;
    let Some(stored) = stored.filter(|v| restarts(v.status)) else { return Ok(false) };
    let policy = super::policy::effective(state, org, &ws);
    super::policy::admit(&policy, &plan)?;
    let (st, o, jid, cap) = (state.clone(), org.to_string(), id.to_string(), policy.max_active_jobs);
    let next = stored.attempt + 1;
    let taken = blocking(move || {
        st.records.jobs().take_place(&jid, &o, next, cap, tao_slurm_engine::client::now_secs()).map_err(|m| {
            tracing::warn!(job = %jid, error = %m, "cannot take a job's place in the service's database");
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "database_unavailable",
                "the service could not count the org's active jobs, so it did not start the job; ask again later (the operator finds why in its log)",
            )
            .retry_after(5)
        })
    })
    .await?;
    match taken {
        Ok(()) => Ok(true),
        Err(tao_slurm_engine::client::AtCap(n)) => Err(super::policy::at_cap(&policy, &plan, n)),
    }
}

/// A restart's reply; when it failed after its place was taken (`placed`) and the job is still
/// terminal, the place is given back.
pub fn give_back_if_not_started(
    state: &AppState,
    org: &str,
    id: &str,
    placed: bool,
    reply: ApiResult<Response>,
) -> ApiResult<Response> {
    if placed && reply.is_err() && org_job(state, org, id).is_ok_and(|j| j.status.is_terminal()) {
        if let Err(m) = state.records.jobs().free_place(id) {
            tracing::warn!(job = %id, error = %m, "cannot give back a job's place");
        }
    }
    reply
}
