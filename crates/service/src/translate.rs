//! The TAO-shaped create request as an engine job: the workspace it goes to (among those the org may
//! use), TAO's GPU count, the command, Cosmos-RL, and `after` limited to the org's own jobs.

use super::error::{ApiError, ApiResult};
use super::state::AppState;
use super::token_info::TokenInfo;
use super::types::{BackendDetailsIn, CommandIn, JobCreate};
use super::workspace::Workspace;
use axum::http::StatusCode;
use std::sync::Arc;
use tao_slurm_engine::spec::JobSpec;

/// The engine's job for a request, the workspace it goes to, and what the service keeps of it.
pub fn to_spec(
    state: &AppState,
    token: &TokenInfo,
    org: &str,
    req: &JobCreate,
) -> ApiResult<(JobSpec, Arc<Workspace>)> {
    let backend = req.backend_details.clone().unwrap_or_default();
    let ws = workspace_for(state, org, req, &backend)?;
    for (i, a) in req.after.iter().enumerate() {
        check_after(state, token, org, &format!("after[{i}]"), a)?;
    }
    let partition = match (&req.partition, &backend.partition) {
        (Some(a), Some(b)) if a != b => {
            return Err(ApiError::field("backend_details.partition", format!("{b:?} differs from partition {a:?}")))
        }
        (a, b) => a.clone().or(b.clone()),
    };
    let (gpus, total_gpus, nodes) = gpu_ask(req, &ws)?;
    let (command, shell) = match &req.command {
        None => (Vec::new(), req.shell),
        Some(CommandIn::Argv(v)) => (v.clone(), req.shell),
        Some(CommandIn::Shell(s)) => (vec![s.clone()], true),
    };
    let cosmos_rl = cosmos_of(req)?;
    let spec = JobSpec {
        image: req.image.clone(),
        command,
        shell,
        gpus,
        total_gpus,
        nodes,
        partition,
        time_hours: req.time_hours,
        timeout_hours: req.timeout_hours,
        requeue: req.requeue,
        env: req.env.clone(),
        secret_env: req.secret_env.clone(),
        mounts: req.mounts.clone(),
        replace_default_mounts: req.replace_default_mounts,
        container_workdir: req.container_workdir.clone(),
        workdir: None,
        workdir_archive: None,
        no_container_mount_home: req.no_container_mount_home,
        sbatch_options: req.sbatch_options.clone(),
        name: req.name.clone(),
        max_timeout_requeues: req.max_timeout_requeues,
        checkpoint_grace_seconds: req.checkpoint_grace_seconds,
        checkpoint_patterns: req.checkpoint_patterns.clone(),
        on_preempt: req
            .on_preempt
            .as_deref()
            .map(tao_slurm_engine::attempts::OnPreempt::parse)
            .transpose()
            .map_err(|m| ApiError::field("on_preempt", m))?,
        max_preemptions: req.max_preemptions,
        total_time_hours: req.total_time_hours,
        inputs: req.inputs.clone(),
        specs: req.specs.clone().map(serde_json::Value::Object),
        dataset_root: req.dataset_root.clone(),
        dataset_files: req.dataset_files.clone(),
        no_sqsh: req.no_sqsh,
        allow_registry_pull: req.allow_registry_pull,
        cosmos_rl,
        gpu_watch: req.gpu_watch.clone(),
        exclusive: req.exclusive,
        after: req.after.clone(),
        // Sweeps and pipelines are not in the service's create body (yet).
        sweep: None,
        steps: Vec::new(),
        // A workspace's webhooks are its profile's `TAO_SLURM_NOTIFY`.
        notify: Vec::new(),
        ..req.placement.spec()
    };
    if let Some(a) = &req.action {
        tao_slurm_engine::spec::check_text("action", a).map_err(|e| ApiError::field("action", e.message))?;
    }
    Ok((spec, ws))
}

/// The workspace a request names (`workspace` or `backend_details.cluster_name`, the same if both),
/// among those the org may use, or the org's default.
fn workspace_for(
    state: &AppState,
    org: &str,
    req: &JobCreate,
    backend: &BackendDetailsIn,
) -> ApiResult<Arc<Workspace>> {
    if let Some(t) = &backend.backend_type {
        if t != "slurm" {
            return Err(ApiError::field(
                "backend_details.backend_type",
                format!("{t:?}: this service runs \"slurm\" jobs only"),
            ));
        }
    }
    let ws_name = match (&req.workspace, &backend.cluster_name) {
        (Some(a), Some(b)) if a != b => {
            return Err(ApiError::field(
                "backend_details.cluster_name",
                format!("{b:?} differs from workspace {a:?}; give one, or the same in both"),
            ))
        }
        (a, b) => a.clone().or(b.clone()),
    };
    let names = || state.org_workspaces(org).iter().map(|w| w.id.clone()).collect::<Vec<_>>().join(", ");
    Ok(match &ws_name {
        // One answer for a workspace that does not exist and one the org may not use.
        Some(n) => state.org_workspace(org, n).ok_or_else(|| {
            let mut e = ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("org {org} may not use a workspace {n:?}; the ones it may use: {}", names()),
            );
            e.body.field = Some("workspace".into());
            e
        })?,
        None => state.default_workspace(org).ok_or_else(|| {
            ApiError::field("workspace", format!("is required: org {org} may use several or none ({})", names()))
        })?,
    })
}

/// TAO's `num_gpu` (or our `gpus`/`total_gpus`, not both) as (gpus, total_gpus, nodes), by the one
/// packing rule of every door.
fn gpu_ask(req: &JobCreate, ws: &Workspace) -> ApiResult<(Option<u32>, Option<u32>, Option<u32>)> {
    match req.num_gpu {
        None | Some(-1) => Ok((req.gpus, req.total_gpus, req.nodes)),
        Some(_) if req.gpus.is_some() || req.total_gpus.is_some() => {
            Err(ApiError::field("num_gpu", "give num_gpu, or gpus/total_gpus, not both"))
        }
        Some(n) => {
            let ask = tao_slurm_engine::plan::gpus_from_count("num_gpu", n, req.nodes, ws.settings.max_gpus_per_node)
                .map_err(ApiError::from_spec)?;
            Ok((ask.gpus, ask.total_gpus, ask.nodes))
        }
    }
}

/// The Cosmos-RL section, with the field at fault named; its config must come as text.
fn cosmos_of(req: &JobCreate) -> ApiResult<Option<tao_slurm_engine::spec::CosmosRlSpec>> {
    let Some(v) = &req.cosmos_rl else { return Ok(None) };
    let c: tao_slurm_engine::spec::CosmosRlSpec = serde_path_to_error::deserialize(v.clone())
        .map_err(|e| ApiError::field(format!("cosmos_rl.{}", e.path()), e.into_inner().to_string()))?;
    if c.config.is_some() {
        return Err(ApiError::field("cosmos_rl.config", "a file of the service's machine: send config_text"));
    }
    Ok(Some(c))
}

/// An `after` entry names an exact id of one of the org's jobs (`JOB[:ok|:notok|:any]`): no prefix,
/// no group id, and the same answer for a job that does not exist and another org's; a job run as a
/// person, only for that person (`identity::may_reach`).
fn check_after(state: &AppState, token: &TokenInfo, org: &str, field: &str, entry: &str) -> ApiResult<()> {
    let id = match entry.rsplit_once(':') {
        Some((id, "ok" | "notok" | "any")) => id,
        _ => entry,
    };
    if let Some(job) = state.snapshot().jobs.get(id).filter(|j| j.out.org == org) {
        return super::identity::may_reach(token, job).map_err(|mut e| {
            e.body.field = Some(field.into());
            e
        });
    }
    Err(ApiError::field(field, format!("{id:?} is not the full id of a job of org {org} (JOB[:ok|:notok|:any])")))
}
