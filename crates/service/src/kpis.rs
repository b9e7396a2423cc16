//! `GET /jobs/{job_id}:kpis` (issue 26): what a job reported in its status.json over time (epoch,
//! iteration, ETA, the numbers of `kpi`), oldest first, for the dashboard's live chart; a long job's
//! many reports thinned to [`MAX_POINTS`], evenly, the newest always among them. (The store keeps at
//! most `kpi::MAX_POINTS_PER_JOB` a job in the first place, thinned as they are written.)

use super::common::{blocking, org_job, workspace_of, AppStateRef};
use super::error::{ApiError, ApiResult, ErrorBody};
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

/// The most points one reply holds.
pub const MAX_POINTS: usize = 1000;

/// One progress report of the job: the core's, its time as RFC 3339 text.
pub type KpiOut = tao_slurm_engine::kpi::KpiPoint<tao_slurm_engine::model::Rfc3339>;

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct KpiList {
    pub points: Vec<KpiOut>,
}

#[utoipa::path(get, path = "/api/v2/orgs/{org}/jobs/{job_id}:kpis", tag = "jobs", security(("bearer" = [])),
    params(("org" = String, Path), ("job_id" = String, Path)),
    responses((status = 200, description = "The job's progress reports from status.json, oldest first (state file only; at most 1000, evenly spread, the newest kept)", body = KpiList),
        (status = 404, body = ErrorBody), (status = 401, body = ErrorBody)))]
pub async fn job_kpis(
    state: AppStateRef,
    token: &super::token_info::TokenInfo,
    org: String,
    id: String,
) -> ApiResult<Json<KpiList>> {
    let job = org_job(&state, &org, &id)?;
    let ws = workspace_of(&state, token, &job)?;
    let points = blocking(move || ws.with_client(|c| c.kpi_history(&id)).map_err(ApiError::engine)).await?;
    Ok(Json(KpiList {
        points: tao_slurm_engine::kpi::thin(points, MAX_POINTS)
            .into_iter()
            .map(|p| p.map_time(|at| tao_slurm_engine::model::Rfc3339(tao_slurm_engine::clock::rfc3339(at))))
            .collect(),
    }))
}
