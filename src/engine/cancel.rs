//! Cancel: `scancel` every given Slurm job in one round trip. A job Slurm no longer knows, or that has
//! already finished, counts as cancelled.

use crate::error::Result;
use crate::remote::{Idempotency, Remote};
use crate::script::shell::quote;
use crate::status::PlatformStatus;
use crate::store::{JobRecord, StatusUpdate, Store};

pub fn cancel_script(slurm_ids: &[String]) -> String {
    let ids: Vec<String> = slurm_ids.iter().map(|i| quote(i)).collect();
    // scancel of a finished or unknown job prints an error and exits 1; that is a cancelled job too.
    format!("scancel {} 2>&1 || true\nexit 0\n", ids.join(" "))
}

/// Cancel the jobs that are not yet terminal; returns the ids whose status changed.
pub fn cancel(remote: &dyn Remote, store: &Store, jobs: &[JobRecord]) -> Result<Vec<String>> {
    let active: Vec<&JobRecord> = jobs.iter().filter(|j| !j.status.is_terminal()).collect();
    let slurm_ids: Vec<String> = active.iter().filter_map(|j| j.slurm_job_id.clone()).collect();
    if !slurm_ids.is_empty() {
        let out = remote.run_script(&cancel_script(&slurm_ids), Idempotency::Idempotent)?;
        if !out.stdout.trim().is_empty() {
            tracing::info!(output = %out.stdout.trim(), "scancel");
        }
    }
    let mut changed = Vec::new();
    for job in active {
        store.update_status(
            &job.job_id,
            &StatusUpdate {
                status: PlatformStatus::Canceled,
                message: "cancelled by the user".into(),
                slurm_state: job.slurm_state.clone(),
                exit_code: job.exit_code,
                node_list: None,
                progress: None,
            },
        )?;
        changed.push(job.job_id.clone());
    }
    Ok(changed)
}
