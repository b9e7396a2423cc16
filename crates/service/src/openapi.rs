//! The OpenAPI 3.1 document, derived by utoipa from the handlers' annotations and the types'
//! schemas, served at `/api/v2/openapi.json`.

use super::common::json_text;
use super::error::ErrorBody;
use super::types::Health;
use super::{api, error, sse, types, workspaces};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Json;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("A token made by `tao-slurm token create --org ORG`, for that org"))
                    .build(),
            ),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "tao-slurm service",
        description = "Jobs on Slurm clusters in the TAO service's shape: workspaces of cloud_type slurm (cluster profiles), jobs with backend_details.slurm_metadata, logs, events and server-sent event streams. Statuses: Pending, Running, Done (tao-slurm Complete), Error, Canceled, Paused, Pausing, Resuming. Errors are {error_desc, error_code (the HTTP status, an integer as in TAO), error_type, field?}. TAO's own client (nvidia-tao-client) works against it: POST /api/v2/login with a tao-slurm token as ngc_key, TAO's ExperimentJobReq/DatasetJobReq bodies, TAO's listing filters; TAO routes with no meaning here answer 501.",
        license(name = "Apache-2.0")
    ),
    paths(
        health,
        super::tao_routes::liveness,
        super::tao_routes::readiness,
        super::tao_routes::login,
        openapi_json,
        api::stats,
        super::audit::org_ref,
        workspaces::list_workspaces,
        workspaces::get_workspace,
        workspaces::workspace_cluster,
        super::workspaces::create_workspace,
        super::workspaces::delete_workspace,
        super::workspaces::ssh_key,
        super::secrets::put_secret,
        super::secrets::list_secrets,
        super::secrets::delete_secret,
        api::create_job,
        api::list_jobs,
        sse::jobs_stream,
        api::get_job,
        api::delete_job,
        api::cancel_job,
        api::retry_job,
        super::pause::pause_job,
        super::pause::resume_job,
        super::tensorboard::open,
        api::job_logs,
        api::job_events,
        api::job_attempts,
        super::kpis::job_kpis,
        sse::job_stream,
        super::tao_routes::gpu_types,
        super::tao_routes::workspace_gpu_types,
        super::results::list_files,
        super::results::download,
        super::results::download_selective,
    ),
    components(schemas(
        error::ErrorBody,
        super::pause::PauseBody,
        super::pause::ResumeBody,
        super::audit::AuditList,
        types::TaoStatus,
        types::JobCreate,
        types::DryRunOut,
        tao_slurm_engine::script::StagedFile,
        tao_slurm_engine::spec::Placement,
        types::CommandIn,
        types::BackendDetailsIn,
        types::JobOut,
        types::TaoJobFields,
        super::types::TaoJobCreate,
        types::JobResultOut,
        super::tao_routes::LoginReq,
        super::tao_routes::LoginRsp,
        super::tao_routes::GpuDetails,
        types::JobList,
        types::JobListChange,
        types::LogChunkOut,
        types::PaginationInfo,
        types::EventList,
        types::AttemptList,
        // The generic attempt's time type: utoipa refers to it but does not collect it.
        tao_slurm_engine::model::Rfc3339,
        super::kpis::KpiList,
        super::kpis::KpiOut,
        types::WorkspaceOut,
        types::WorkspaceList,
        super::workspaces::WorkspaceCreate,
        super::workspaces::SlurmDetailsIn,
        super::workspaces::SshKeyOut,
        super::secrets::SecretPut,
        super::secrets::SecretList,
        super::secrets::SecretNameOut,
        types::ClusterOut,
        types::Deleted,
        super::tensorboard::TensorBoardLink,
        types::Health,
        types::Stats,
    )),
    modifiers(&BearerAuth),
    tags(
        (name = "jobs", description = "Jobs: create, list, get, cancel, delete, logs, events, attempts, KPIs, streams"),
        (name = "workspaces", description = "Slurm workspaces: the operator's cluster profiles granted to the org, and the org's own (each with its own slurm_user)"),
        (name = "secrets", description = "The org's secrets: write-only values for secret_env, encrypted at rest"),
        (name = "service", description = "Health, this document, counters"),
    )
)]
pub struct ApiDoc;

/// The document as JSON (built once).
pub fn document_json() -> String {
    static DOC: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DOC.get_or_init(|| ApiDoc::openapi().to_pretty_json().expect("the OpenAPI document serialises")).clone()
}

#[utoipa::path(get, path = "/api/v2/health", tag = "service",
    responses((status = 200, description = "The service is up", body = Health)))]
pub async fn health() -> Json<Health> {
    Json(Health { status: "ok".into() })
}

#[utoipa::path(get, path = "/api/v2/openapi.json", tag = "service", security(("bearer" = [])),
    responses((status = 200, description = "This OpenAPI 3.1 document", content_type = "application/json"),
        (status = 401, description = "No valid token", body = ErrorBody)))]
pub async fn openapi_json() -> Response {
    json_text(StatusCode::OK, document_json())
}

#[cfg(test)]
mod tests {
    /// Every `$ref` of the document names a schema it has (a core type used in a body, such as a
    /// cluster view's `PartitionUsage`, is collected with the body that uses it).
    #[test]
    fn every_reference_resolves() {
        let doc: serde_json::Value = serde_json::from_str(&super::document_json()).unwrap();
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        let text = super::document_json();
        let refs: Vec<&str> =
            text.split("\"$ref\": \"#/components/schemas/").skip(1).filter_map(|r| r.split('"').next()).collect();
        assert!(refs.contains(&"PartitionUsage"), "the cluster view's partitions are the core's type");
        let dangling: Vec<&&str> = refs.iter().filter(|r| !schemas.contains_key(**r)).collect();
        assert!(dangling.is_empty(), "references to no schema: {dangling:?}");
    }
}
