//! The operator's policy applied to a job of the service: the org's layer and the workspace's layer
//! together (`tao_slurm_core::policy`), checked on the job's resolved plan before anything reaches a
//! cluster; a job outside it gets 403 with the request field named.

use super::error::ApiError;
use super::state::AppState;
use super::workspace::Workspace;
use axum::http::StatusCode;
use tao_slurm_core::policy::{JobAsk, Policy};

/// What applies to `org`'s jobs in `ws`.
pub fn effective(state: &AppState, org: &str, ws: &Workspace) -> Policy {
    state.operator.org(org).policy.and(&ws.policy)
}

/// The org's jobs that are not terminal.
pub fn active_jobs(state: &AppState, org: &str) -> u32 {
    state.snapshot().jobs.values().filter(|j| j.out.org == org && !j.status.is_terminal()).count() as u32
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
