//! TAO's job verbs for training longer than the queue allows: `POST /jobs/{id}:retry` (TAO's
//! client `retry_job`): a new attempt of a job that ended Error or Canceled, from its newest
//! checkpoint. The work is `Client::retry_job`'s; this is the route.

use super::api::{blocking, json_text, org_job, workspace_of, AppStateRef};
use super::error::{ApiError, ApiResult};
use axum::http::StatusCode;
use axum::response::Response;

#[utoipa::path(post, path = "/api/v2/orgs/{org}/jobs/{job_id}:retry", tag = "jobs", security(("bearer" = [])),
    params(("org" = String, Path), ("job_id" = String, Path)),
    responses((status = 200, description = "The job with its new attempt, from its newest checkpoint (idempotent: a job already running again is returned as it is)", body = super::types::JobOut),
        (status = 400, description = "A job that completed, or had secrets", body = super::error::ErrorBody),
        (status = 404, body = super::error::ErrorBody), (status = 401, body = super::error::ErrorBody), (status = 403, body = super::error::ErrorBody)))]
pub async fn retry_job(state: AppStateRef, org: String, id: String) -> ApiResult<Response> {
    let job = org_job(&state, &org, &id)?;
    let ws = workspace_of(&state, &job)?;
    let (st, w, jid) = (state.clone(), ws.clone(), id.clone());
    let _in_pool = ws.pool.enter(&ws.id).await?;
    blocking(move || {
        w.with_client(|client| {
            let result = client.retry_job(&jid);
            st.publish(client);
            result.map(|_| ())
        })
        .map_err(ApiError::engine)
    })
    .await?;
    ws.wake_monitor();
    tracing::info!(%org, job = %id, "job retried");
    Ok(json_text(StatusCode::OK, org_job(&state, &org, &id)?.json.to_string()))
}
