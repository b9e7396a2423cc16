//! The operator's policy applied to a job of the service: the org's layer and the workspace's layer
//! together (`tao_slurm_core::policy`), checked on the job's resolved plan before anything reaches a
//! cluster, at every start (create, `:retry`, `:resume`); a job outside it gets 403 with the request
//! field named. Counted limits (active jobs, an org's workspaces) are taken as places under one lock
//! ([`Places`]), so parallel requests cannot overshoot them.

use super::error::ApiError;
use super::state::AppState;
use super::workspace::Workspace;
use axum::http::StatusCode;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tao_slurm_core::policy::{JobAsk, Policy};

/// Places taken by requests between their check and the moment what they make is counted (a job in
/// the published cache, a workspace in the service's list), by org: checked and taken under one lock.
#[derive(Default)]
pub struct Places(Mutex<HashMap<String, u32>>);

impl Places {
    /// Count what `org` has now (`counted`, read under the lock) plus the places taken; `check` that
    /// number; then take one more place.
    fn take(
        &self,
        org: &str,
        counted: impl FnOnce() -> u32,
        check: impl FnOnce(u32) -> Result<(), ApiError>,
    ) -> Result<(), ApiError> {
        let mut taken = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = counted() + taken.get(org).copied().unwrap_or(0);
        check(n)?;
        *taken.entry(org.to_string()).or_default() += 1;
        Ok(())
    }

    fn give_back(&self, org: &str) {
        let mut taken = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = taken.get_mut(org) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                taken.remove(org);
            }
        }
    }
}

/// A place taken: given back when dropped (after what it was for is counted, or failed).
pub struct Place {
    state: Arc<AppState>,
    org: String,
    of: fn(&AppState) -> &Places,
}

impl Drop for Place {
    fn drop(&mut self) {
        (self.of)(&self.state).give_back(&self.org);
    }
}

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
    state.job_places.take(org, || active_jobs(state, org, except), |n| check(policy, plan, n))?;
    Ok(Place { state: state.clone(), org: org.to_string(), of: |s| &s.job_places })
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
    })?;
    Ok(Place { state: state.clone(), org: org.to_string(), of: |s| &s.workspace_places })
}

/// What applies to `org`'s jobs in `ws`.
pub fn effective(state: &AppState, org: &str, ws: &Workspace) -> Policy {
    state.operator.org(org).policy.and(&ws.policy)
}

/// The org's jobs that are not terminal (but `except`).
pub fn active_jobs(state: &AppState, org: &str, except: Option<&str>) -> u32 {
    state
        .snapshot()
        .jobs
        .values()
        .filter(|j| j.out.org == org && !j.status.is_terminal() && Some(j.out.id.as_str()) != except)
        .count() as u32
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
