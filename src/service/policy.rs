//! The operator's policy applied to a job of the service: the org's layer and the workspace's layer
//! together (`tao_slurm_core::policy`), checked on the job's resolved plan before anything reaches a
//! cluster, at every start (create, `:retry`, `:resume`); a job outside it gets 403 with the request
//! field named. Counted limits (active jobs, an org's workspaces) are taken as places under one lock
//! ([`super::places::Places`]), so parallel requests cannot overshoot them.

use super::error::ApiError;
use super::places::Place;
use super::state::AppState;
use super::workspace::Workspace;
use axum::http::StatusCode;
use std::sync::Arc;
use tao_slurm_core::policy::{JobAsk, Policy};

/// Check a job's plan against `policy`, counting the org's active jobs (but `except`, the job that
/// restarts) and the places other starts hold, and take a place. Keep the place until the job is in
/// the published cache (or its start failed).
pub fn admit(
    state: &Arc<AppState>,
    org: &str,
    policy: &Policy,
    plan: &crate::plan::Plan,
    except: Option<&str>,
) -> Result<Place, ApiError> {
    state.job_places.take(org, || active_jobs(state, org, except), |n| check(policy, plan, n))
}

/// Take a place for one more workspace of `org`'s own, within the operator's cap (403 naming it).
pub fn admit_workspace(state: &Arc<AppState>, org: &str) -> Result<Place, ApiError> {
    let cap = state.operator.max_workspaces(org);
    let owned = || {
        state.workspaces().iter().filter(|w| w.access == super::workspace::Access::Owned(org.to_string())).count()
            as u32
    };
    state.workspace_places.take(org, owned, |n| {
        if n < cap {
            return Ok(());
        }
        let mut e = ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "org {org} has {n} workspaces of its own, the most it may have (max_workspaces = {cap}, set by the operator in clusters.toml): delete one first"
            ),
        );
        e.body.field = Some("max_workspaces".into());
        Err(e)
    })
}

/// What applies to `org`'s jobs in `ws`.
pub fn effective(state: &AppState, org: &str, ws: &Workspace) -> Policy {
    state.operator.org(org).policy.and(&ws.policy)
}

/// The org's jobs that are not terminal (but `except`).
pub fn active_jobs(state: &AppState, org: &str, except: Option<&str>) -> u32 {
    let snapshot = state.snapshot();
    let all = snapshot.active.get(org).copied().unwrap_or(0);
    let counted_in = |id: &str| snapshot.jobs.get(id).is_some_and(|j| j.out.org == org && !j.status.is_terminal());
    all.saturating_sub(u32::from(except.is_some_and(counted_in)))
}

/// Check a job's plan; Err is the 403 that names the field.
pub fn check(policy: &Policy, plan: &crate::plan::Plan, active_jobs: u32) -> Result<(), ApiError> {
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
