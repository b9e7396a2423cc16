//! The operator's policy applied to a job of the service: the org's layer and the workspace's layer
//! together (`tao_slurm_core::policy`), checked on the job's resolved plan before anything reaches a
//! cluster, at every start (create, `:retry`, `:resume`, and the engine's own restarts: an automatic
//! retry, a restart after a GPU hang); a job outside it gets 403 with the request field named.
//! Counted limits (an org's active jobs, its workspaces) are counted and taken in the service's
//! database, in one statement of a write transaction (`records::ApiJobs::insert_within`,
//! `records::OrgWorkspaces::insert_within`): every replica counts the same rows, so parallel
//! requests on any number of replicas cannot overshoot them.

use super::error::ApiError;
use super::places::Place;
use super::state::AppState;
use super::workspace::Workspace;
use axum::http::StatusCode;
use std::sync::Arc;
use tao_slurm_core::policy::{JobAsk, Policy};

/// Check a job's plan against `policy`'s rules but its count of active jobs, which the database
/// counts when the job's place is taken ([`at_cap`] is the refusal).
pub fn admit(policy: &Policy, plan: &tao_slurm_engine::plan::Plan) -> Result<(), ApiError> {
    check(policy, plan, 0)
}

/// The 403 of a job refused at its org's `max_active_jobs`, the org holding `active` places.
pub fn at_cap(policy: &Policy, plan: &tao_slurm_engine::plan::Plan, active: u32) -> ApiError {
    check(policy, plan, active).err().unwrap_or_else(|| {
        // The cap changed between the count and this answer: the count is what refused.
        let mut e = ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("outside this org's policy: the org has {active} active jobs, its most (max_active_jobs); wait for one to end or cancel one"),
        );
        e.body.field = Some("active_jobs".into());
        e
    })
}

/// Check that `org` may have one more workspace of its own, counting those stored (every
/// replica's) and the creates in flight here, and take a place for this create (held until it is
/// recorded, where the database counts again: [`workspace_at_cap`]).
pub fn admit_workspace(state: &Arc<AppState>, org: &str) -> Result<Place, ApiError> {
    let cap = state.operator.max_workspaces(org);
    let stored = state.records.workspaces().count(org).map_err(|m| {
        tracing::warn!(%org, error = %m, "cannot count the org's workspaces");
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "database_unavailable",
            "the service could not count the org's workspaces; ask again later (the operator finds why in its log)",
        )
        .retry_after(5)
    })?;
    state.workspace_places.take(org, || stored, |n| if n < cap { Ok(()) } else { Err(workspace_at_cap(org, n, cap)) })
}

/// The 403 of a workspace past the operator's cap.
pub fn workspace_at_cap(org: &str, n: u32, cap: u32) -> ApiError {
    let mut e = ApiError::new(
        StatusCode::FORBIDDEN,
        "forbidden",
        format!(
            "org {org} has {n} workspaces of its own, the most it may have (max_workspaces = {cap}, set by the operator in clusters.toml): delete one first"
        ),
    );
    e.body.field = Some("max_workspaces".into());
    e
}

/// The service's rule on the engine's automatic restarts (a retry after an infrastructure failure, a
/// restart after a GPU hang), given to its workspaces' clients: the job's stored plan against its
/// org's and workspace's policy as they are now, and its place among the org's active jobs kept in
/// the database (itself not counted). A job the API did not create is not the service's to judge.
pub fn restart_gate(state: std::sync::Weak<AppState>) -> tao_slurm_engine::client::RestartGate {
    Arc::new(move |job: &tao_slurm_engine::model::JobRecord| match state.upgrade() {
        Some(st) => restart_verdict(&st, job),
        None => tao_slurm_engine::client::RestartVerdict::NotNow("the service is stopping".into()),
    })
}

fn restart_verdict(
    state: &AppState,
    job: &tao_slurm_engine::model::JobRecord,
) -> tao_slurm_engine::client::RestartVerdict {
    use tao_slurm_engine::client::RestartVerdict::{Go, NotNow, Refused};
    let meta = match state.api_job(&job.job_id) {
        Ok(Some(meta)) => meta,
        Ok(None) => return Go,
        Err(m) => return NotNow(m),
    };
    // Its workspace gone from this service: nothing here to judge it by (its monitor is stopping).
    let Some(ws) = state.workspace(&meta.workspace) else { return Go };
    let policy = effective(state, &meta.org, &ws);
    if let Err(e) = admit(&policy, &job.plan) {
        return Refused(e.body.error_desc);
    }
    let now = tao_slurm_engine::client::now_secs();
    match state.records.jobs().take_place(&job.job_id, &meta.org, job.attempt, policy.max_active_jobs, now) {
        Ok(Ok(())) => Go,
        Ok(Err(tao_slurm_engine::client::AtCap(n))) => Refused(at_cap(&policy, &job.plan, n).body.error_desc),
        Err(m) => NotNow(m),
    }
}

/// What applies to `org`'s jobs in `ws`.
pub fn effective(state: &AppState, org: &str, ws: &Workspace) -> Policy {
    state.operator.org(org).policy.and(&ws.policy)
}

/// Check a job's plan; Err is the 403 that names the field.
pub fn check(policy: &Policy, plan: &tao_slurm_engine::plan::Plan, active_jobs: u32) -> Result<(), ApiError> {
    let ask = JobAsk {
        partition: plan.partition.clone(),
        account: plan.account.clone(),
        qos: plan.qos.clone(),
        reservation: plan.reservation.clone(),
        total_gpus: plan.resources.nodes * plan.resources.gpus_per_node,
        mounts: plan.mounts.clone(),
        mount_home: plan.mount_home,
        sbatch_options: plan.sbatch_options.iter().map(|(k, _)| k.clone()).collect(),
        active_jobs,
    };
    policy.check(&ask).map_err(|v| {
        let mut e =
            ApiError::new(StatusCode::FORBIDDEN, "forbidden", format!("outside this org's policy: {}", v.message));
        e.body.field = Some(v.field);
        e
    })
}
