//! The TAO service's routes that TAO's own client (nvidia-tao-client's `TaoClient`) calls beyond the
//! jobs: login (a tao-slurm token in place of the NGC key), health, the GPU types of the clusters,
//! and a 501 with a sentence for TAO's features that have no meaning on Slurm here.

use super::common::{parse_json, AppStateRef};
use super::error::{ApiError, ApiResult, ErrorBody};
use super::token_info::TokenInfo;
use super::types::ClusterQuery;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// TAO's LoginReq: `ngc_key` is a tao-slurm token of the org `ngc_org_name`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct LoginReq {
    /// A token made by `tao-slurm token create --org ORG` (TAO's NGC key takes its place).
    pub ngc_key: String,
    pub ngc_org_name: String,
    /// TAO's flag; nothing is sent anywhere.
    pub enable_telemetry: Option<bool>,
}

/// TAO's LoginRsp.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct LoginRsp {
    /// A UUID drawn from the token's id (the same for every login with it).
    pub user_id: String,
    /// The bearer token for the other calls: the token itself.
    pub token: String,
    /// `token <token id>`.
    pub user_name: Option<String>,
    pub user_email: Option<String>,
}

/// A UUID (version 8 layout) from a token id, stable across logins.
fn user_id_of(token_id: &str) -> String {
    use sha2::Digest;
    let mut b: [u8; 16] =
        sha2::Sha256::digest(format!("tao-slurm-user:{token_id}").as_bytes())[..16].try_into().unwrap();
    b[6] = (b[6] & 0x0f) | 0x80;
    b[8] = (b[8] & 0x3f) | 0x80;
    uuid::Uuid::from_bytes(b).to_string()
}

#[utoipa::path(post, path = "/api/v2/login", tag = "service", request_body = LoginReq,
    responses((status = 200, description = "The token is valid for the org: use it as the bearer token (TAO's login flow, with a tao-slurm token as the NGC key)", body = LoginRsp),
        (status = 400, body = ErrorBody), (status = 401, description = "Not a valid token of that org", body = ErrorBody)))]
pub async fn login(
    State(state): State<AppStateRef>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<LoginRsp>> {
    // TAO's client posts its JSON without a Content-Type: take the body as JSON regardless.
    let mut headers = headers;
    headers.insert(axum::http::header::CONTENT_TYPE, axum::http::HeaderValue::from_static("application/json"));
    let req: LoginReq = parse_json(&headers, body)?;
    let hash = tao_slurm_engine::client::records::token_hash(req.ngc_key.trim());
    let token = state.tokens.read().unwrap_or_else(|e| e.into_inner()).get(&hash).cloned();
    let refused = || {
        ApiError::unauthorized(
            "Unauthorized: ngc_key is not a valid tao-slurm token of org ngc_org_name (an admin makes one with `tao-slurm token create --org ORG`)",
        )
    };
    let token: TokenInfo = token.ok_or_else(refused)?;
    if token.org != req.ngc_org_name || token.expired(tao_slurm_engine::client::now_secs()) {
        return Err(refused());
    }
    tracing::info!(org = %token.org, token = %token.id, "login");
    Ok(Json(LoginRsp {
        user_id: user_id_of(&token.id),
        token: req.ngc_key.trim().to_string(),
        user_name: Some(format!("token {}", token.id)),
        user_email: None,
    }))
}

#[utoipa::path(get, path = "/api/v2/health/liveness", tag = "service",
    responses((status = 200, description = "\"OK\" (TAO's liveness)", body = String)))]
pub async fn liveness() -> Json<&'static str> {
    Json("OK")
}

#[utoipa::path(get, path = "/api/v2/health/readiness", tag = "service",
    responses((status = 200, description = "\"OK\": the service takes requests and its database takes writes (TAO's readiness)", body = String),
        (status = 503, description = "Stopping, or the database does not take writes within 2 s", body = ErrorBody)))]
pub async fn readiness(State(state): State<AppStateRef>) -> ApiResult<Json<&'static str>> {
    let unready = |m: String| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "busy", m).retry_after(5);
    if state.shutdown.is_cancelled() {
        return Err(unready("the service is stopping".into()));
    }
    // One probe at a time: a stuck database is not asked again by every probe that comes in.
    let Ok(_one) = state.readiness_probe.try_lock() else {
        return Err(unready("the previous readiness probe of the database has not finished".into()));
    };
    let st = state.clone();
    let probed = tokio::task::spawn_blocking(move || st.records.probe_write(READINESS_WAIT)).await;
    match probed {
        Ok(Ok(())) => Ok(Json("OK")),
        Ok(Err(e)) => Err(unready(format!("the service's database does not take writes: {e}"))),
        Err(e) => Err(unready(format!("the readiness probe failed: {e}"))),
    }
}

/// How long readiness waits for the database to take a write.
const READINESS_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// TAO's GpuDetails: one entry per partition with GPUs of each workspace the org may use.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct GpuDetails {
    /// The workspace (cluster profile).
    pub cluster: String,
    /// The partition.
    pub node: String,
    /// Slurm's GRES name (`gpu`).
    pub gpu_type: String,
    /// `<workspace>/<partition>`.
    pub instance_type: String,
    /// GPUs per node jobs may ask (the workspace's `max_gpus_per_node`).
    pub gpu_count: u32,
    /// CPUs per node (the partition's CPUs over its nodes).
    pub cpu_cores: u32,
    /// GPUs of the partition, in use, and free on usable nodes now.
    pub max_limit: u32,
    pub current_used: u32,
    pub current_available: u32,
    /// "slurm_partition".
    pub node_type: String,
    /// "slurm".
    pub backend_type: String,
}

#[utoipa::path(get, path = "/api/v2/orgs/{org}/jobs:gpu_types", tag = "jobs", security(("bearer" = [])),
    params(("org" = String, Path)),
    responses((status = 200, description = "The GPU partitions of every workspace the org may use, from each cluster's view (cached for a minute)", body = [GpuDetails]),
        (status = 401, body = ErrorBody), (status = 404, description = "No cluster answered", body = ErrorBody)))]
pub async fn gpu_types(State(state): State<AppStateRef>, Path(org): Path<String>) -> ApiResult<Json<Vec<GpuDetails>>> {
    let workspaces = state.org_workspaces(&org);
    gpus_of(state, org, workspaces).await
}

#[utoipa::path(get, path = "/api/v2/orgs/{org}/workspaces/{workspace_id}/gpu_types", tag = "workspaces", security(("bearer" = [])),
    params(("org" = String, Path), ("workspace_id" = String, Path)),
    responses((status = 200, description = "The GPU partitions of one workspace (TAO's per-workspace GPU types)", body = [GpuDetails]),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn workspace_gpu_types(
    State(state): State<AppStateRef>,
    Path((org, id)): Path<(String, String)>,
) -> ApiResult<Json<Vec<GpuDetails>>> {
    let w = state
        .org_workspace(&org, &id)
        .ok_or_else(|| ApiError::not_found(format!("no workspace {id} for org {org}")))?;
    gpus_of(state, org, vec![w]).await
}

async fn gpus_of(
    state: AppStateRef,
    org: String,
    workspaces: Vec<std::sync::Arc<super::workspace::Workspace>>,
) -> ApiResult<Json<Vec<GpuDetails>>> {
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for w in workspaces {
        let view = match super::workspaces::workspace_cluster(
            state.clone(),
            org.clone(),
            w.id.clone(),
            ClusterQuery::default(),
        )
        .await
        {
            Ok(Json(v)) => v,
            Err(e) => {
                errors.push(format!("{}: {}", w.id, e.body.error_desc));
                continue;
            }
        };
        if let Some(e) = &view.partitions_error {
            errors.push(format!("{}: {e}", w.id));
        }
        for p in view.partitions.iter().filter(|p| p.gpus_total > 0) {
            out.push(GpuDetails {
                cluster: w.id.clone(),
                node: p.name.clone(),
                gpu_type: "gpu".into(),
                instance_type: format!("{}/{}", w.id, p.name),
                gpu_count: w.settings.max_gpus_per_node,
                cpu_cores: p.cpus_total.checked_div(p.nodes).unwrap_or(0),
                max_limit: p.gpus_total,
                current_used: p.gpus_used,
                current_available: p.gpus_free,
                node_type: "slurm_partition".into(),
                backend_type: "slurm".into(),
            });
        }
    }
    if out.is_empty() && !errors.is_empty() {
        // TAO answers 404 when its backend cannot tell.
        return Err(ApiError::not_found(format!("GPU types can't be retrieved: {}", errors.join("; "))));
    }
    Ok(Json(out))
}

/// TAO's routes with no meaning here, each with why.
pub const NOT_HERE: &[(&str, &str)] = &[
    ("datasets", "TAO's dataset registry is not kept here: give dataset paths (lustre://) in the job's train_dataset_uris, eval_dataset_uri..."),
    ("inference_microservices", "inference microservices are long-running TAO deployments, not Slurm batch jobs"),
    ("jobs:schema", "TAO's spec schemas come with its networks' configs; send the specs you want as they are"),
    ("jobs:list_base_experiments", "base experiments live in TAO's NGC registry; put the checkpoint on shared storage and name it in specs"),
    ("jobs:load_airgapped", "base experiments live in TAO's NGC registry; put the checkpoint on shared storage and name it in specs"),
    ("publish_model", "publishing to NGC is TAO's; download the job's files (:download) and publish them yourself"),
    ("remove_published_model", "publishing to NGC is TAO's"),
    ("log_update", "containers here write their logs and status.json to shared storage; nothing calls back"),
    ("status_update", "containers here write their logs and status.json to shared storage; nothing calls back"),
    ("automl", "AutoML is TAO's own scheduler; run variants as separate jobs"),
    ("workspaces:backup", "workspaces here are cluster profiles; there is no workspace data to back up"),
    ("workspaces:restore", "workspaces here are cluster profiles; there is no workspace data to restore"),
    ("workspace_update", "a workspace's settings are fixed once made: delete it and make it again"),
    ("job_update", "a job's fields are fixed once it is submitted"),
];

/// A 501 naming the TAO feature and why it is not here.
pub fn not_here(feature: &str) -> ApiError {
    let why = NOT_HERE.iter().find(|(f, _)| *f == feature).map_or("not available on this service", |(_, w)| w);
    ApiError::new(
        StatusCode::NOT_IMPLEMENTED,
        "not_implemented",
        format!("{feature}: not implemented by tao-slurm: {why}"),
    )
}

/// Handlers of the 501 routes, by feature.
pub async fn datasets() -> ApiError {
    not_here("datasets")
}
pub async fn inference_microservices() -> ApiError {
    not_here("inference_microservices")
}
pub async fn automl() -> ApiError {
    not_here("automl")
}
pub async fn workspace_update() -> ApiError {
    not_here("workspace_update")
}
pub async fn job_update(Extension(_t): Extension<TokenInfo>) -> ApiError {
    not_here("job_update")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_ids_are_uuids_stable_per_token() {
        let a = user_id_of("abc");
        assert_eq!(a, user_id_of("abc"));
        assert_ne!(a, user_id_of("abd"));
        assert!(uuid::Uuid::parse_str(&a).is_ok(), "{a}");
    }

    #[test]
    fn every_501_says_why() {
        for (f, _) in NOT_HERE {
            let e = not_here(f);
            assert_eq!((e.status, e.body.error_code), (StatusCode::NOT_IMPLEMENTED, 501));
            assert!(e.body.error_desc.len() > f.len() + 40, "{}", e.body.error_desc);
        }
    }
}
