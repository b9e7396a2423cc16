//! Cancel: `scancel` every given Slurm job in one round trip, and record Canceled only on evidence
//! that the job is stopped: scancel succeeded, or (when it failed) squeue shows the job finished or
//! no longer knows it. A cancel that could not reach the controller changes nothing and says why.

use crate::ops::cancel::*;

use crate::error::Result;
use crate::remote::{Idempotency, Remote};
use crate::status::PlatformStatus;
use crate::store::{JobRecord, StatusUpdate, Store};

/// Cancel the jobs that are not yet terminal, at the user's word.
pub fn cancel(remote: &dyn Remote, store: &Store, jobs: &[JobRecord]) -> Result<CancelOutcome> {
    cancel_because(remote, store, jobs, "cancelled by the user")
}

/// Cancel the jobs that are not yet terminal, recording `reason` as their message.
pub fn cancel_because(remote: &dyn Remote, store: &Store, jobs: &[JobRecord], reason: &str) -> Result<CancelOutcome> {
    let now = crate::clock::now();
    let active: Vec<&JobRecord> = jobs.iter().filter(|j| !j.status.is_terminal()).collect();
    let targets: Vec<CancelTarget> = active.iter().map(|j| target_of(j)).collect();
    let results = if targets.iter().all(|t| *t == CancelTarget::Nothing) {
        vec![Ok(()); targets.len()]
    } else {
        let out = remote.run_script(&cancel_script(&targets), Idempotency::Idempotent)?;
        parse_cancel_output(&out.stdout, &targets)
    };
    let mut outcome = CancelOutcome::default();
    for (job, result) in active.into_iter().zip(results) {
        match result {
            Ok(()) => {
                store.update_status(
                    &job.job_id,
                    &StatusUpdate::keeping_slurm_of(job, PlatformStatus::Canceled, reason),
                    now,
                )?;
                outcome.cancelled.push(job.job_id.clone());
            }
            Err(reason) => {
                store.add_event(&job.job_id, "cancel_failed", &reason, now)?;
                outcome.failed.push((job.job_id.clone(), reason));
            }
        }
    }
    crate::engine::secrets::sweep_or_warn(remote, store);
    Ok(outcome)
}
