//! TAO's `POST /jobs/{id}:pause` (body `{graceful}`) and `:resume` (body `{specs, parent_job_id?}`,
//! TAO's JobResumeReq), over the client's `pause_job` and `resume_job`. Both answer the job as it
//! then is (TAO's client reads no reply of either).

use super::common::{act_on_job, parse_json, AppStateRef};
use super::error::{ApiResult, ErrorBody};
use super::token_info::TokenInfo;
use super::types::JobOut;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::HeaderMap;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use tao_slurm_engine::status::PlatformStatus;
use utoipa::ToSchema;

/// TAO's pause body.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PauseBody {
    /// Send the checkpoint signal (USR2) first, and cancel only when the job ends or its checkpoint
    /// grace passes (Pausing until then); false or absent: cancelled at once.
    #[serde(default)]
    pub graceful: bool,
}

/// TAO's resume body (JobResumeReq).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResumeBody {
    /// Specs replacing the job's own (a JSON object); empty or absent: as they were.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub specs: Option<serde_json::Value>,
    /// TAO's parent job: accepted and not used (the job's dependencies stay as recorded).
    #[serde(default)]
    pub parent_job_id: Option<String>,
}

/// A body that may be absent (TAO's client always sends one; curl users may not).
fn body_or_default<T: serde::de::DeserializeOwned + Default>(
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<T> {
    match &body {
        Ok(b) if b.iter().all(u8::is_ascii_whitespace) => Ok(T::default()),
        _ => parse_json(headers, body),
    }
}

#[utoipa::path(post, path = "/api/v2/orgs/{org}/jobs/{job_id}:pause", tag = "jobs", security(("bearer" = [])),
    params(("org" = String, Path), ("job_id" = String, Path)),
    request_body(content = PauseBody, description = "TAO's pause body (optional)"),
    responses((status = 200, description = "Paused (its allocation released), or Pausing while a graceful pause waits for the job to save a checkpoint; idempotent", body = JobOut),
        (status = 400, description = "A job that ended", body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 502, description = "The cluster could not confirm the cancel: the job stays Pausing and the monitor tries again", body = ErrorBody)))]
pub async fn pause_job(
    state: AppStateRef,
    token: &TokenInfo,
    org: String,
    id: String,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let ask: PauseBody = body_or_default(&headers, body)?;
    let reply = act_on_job(state, token, &org, &id, move |c, jid| c.pause_job(jid, ask.graceful).map(|_| ())).await?;
    tracing::info!(%org, job = %id, graceful = ask.graceful, "job paused");
    Ok(reply)
}

#[utoipa::path(post, path = "/api/v2/orgs/{org}/jobs/{job_id}:resume", tag = "jobs", security(("bearer" = [])),
    params(("org" = String, Path), ("job_id" = String, Path)),
    request_body(content = ResumeBody, description = "TAO's JobResumeReq (optional)"),
    responses((status = 200, description = "The job with its new attempt, from its newest checkpoint: Resuming until Slurm runs it (idempotent: concurrent resumes make one Slurm job; a job already resumed is returned as it is)", body = JobOut),
        (status = 400, description = "A job that ended or is still pausing; specs that are not an object, or for a job without specs", body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
pub async fn resume_job(
    state: AppStateRef,
    token: &TokenInfo,
    org: String,
    id: String,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let ask: ResumeBody = body_or_default(&headers, body)?;
    let placed = super::common::admit_restart(&state, token, &org, &id, |s| s == PlatformStatus::Paused).await?;
    let acted =
        act_on_job(state.clone(), token, &org, &id, move |c, jid| c.resume_job(jid, ask.specs.as_ref()).map(|_| ()))
            .await;
    let reply = super::common::give_back_if_not_started(&state, &org, &id, placed, acted)?;
    tracing::info!(%org, job = %id, "job resumed");
    Ok(reply)
}
