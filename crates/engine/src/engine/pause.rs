//! Pause's remote work: the checkpoint signal of a graceful pause, and the cancellation that makes a
//! pausing job Paused (at once, or by the refresh cycle once a graceful pause's bound has passed).
//! The decisions are the core's (`ops::pause`); a cancellation counts only on the evidence
//! `ops::cancel` reads, as for `cancel`.

use crate::ops::cancel::{cancel_script, parse_cancel_output, target_of, CancelTarget};
use crate::ops::pause::{graceful_bound, parse_signal_output, signal_script, with_new_specs, PauseStep};

use crate::error::Result;
use crate::remote::{Idempotency, Remote};
use crate::status::PlatformStatus;
use crate::store::{JobRecord, NewDocs, PauseAsk, Store};
use std::collections::HashSet;

/// Mark a job Pausing for `step` (a compare-and-set on the attempt and status it was read with):
/// false when another caller changed it first.
pub fn begin(store: &Store, job: &JobRecord, step: &PauseStep, graceful: bool, now: i64) -> Result<bool> {
    let (cancel_at, message) = match step {
        PauseStep::Signal { .. } => {
            let bound = graceful_bound(&job.plan);
            (now + bound as i64, format!("pausing: checkpoint signal (USR2) sent; cancelled in at most {bound} s"))
        }
        _ => (now, "pausing: cancelling its Slurm job".to_string()),
    };
    let ask = PauseAsk { attempt: job.attempt, from: job.status, graceful, cancel_at, message: &message };
    Ok(store.begin_pause(&job.job_id, &ask, now)?)
}

/// Reopen a job tao-slurm paused as its next attempt, due now, from its newest checkpoint, with
/// `specs` replacing its specs when given and not empty (a compare-and-set on the attempt it was
/// read with): false when it is not reopened (another caller did, or tao-slurm did not pause it).
pub fn reopen(store: &Store, job: &JobRecord, specs: Option<&serde_json::Value>, now: i64) -> Result<bool> {
    let changed = match specs {
        Some(s) => with_new_specs(&job.job_id, &job.plan, &job.spec_json, s)?,
        None => None,
    };
    let plan_json = match &changed {
        Some((plan, _)) => Some(serde_json::to_string(plan).map_err(|e| crate::store::StoreError::Corrupt {
            job_id: job.job_id.clone(),
            message: e.to_string(),
        })?),
        None => None,
    };
    let docs = match (&changed, &plan_json) {
        (Some((_, spec_json)), Some(plan_json)) => Some(NewDocs { spec_json, plan_json }),
        _ => None,
    };
    let next = crate::ops::submit::attempt_name(&job.plan, job.attempt + 1);
    let message = format!(
        "resumed{}: attempt {} resumes from the newest checkpoint, if any",
        if docs.is_some() { " with new specs" } else { "" },
        job.attempt + 1
    );
    Ok(store.reopen_paused(&job.job_id, job.attempt, &next, docs, &message, now)?)
}

/// Send the checkpoint signal (USR2) to the steps of `slurm_job_id`; Err(reason) when scancel refused.
pub fn signal(remote: &dyn Remote, slurm_job_id: &str) -> Result<std::result::Result<(), String>> {
    let out = remote.run_script(&signal_script(slurm_job_id), Idempotency::Idempotent)?;
    Ok(parse_signal_output(&out.stdout))
}

/// Cancel the Slurm jobs of pausing jobs in one round trip and record each Paused on evidence that
/// it stopped; one that may not have is left Pausing (the next cycle tries again), with an event.
/// Returns the ids of the jobs now Paused.
pub fn stop(remote: &dyn Remote, store: &Store, jobs: &[JobRecord]) -> Result<Vec<String>> {
    let jobs: Vec<&JobRecord> = jobs.iter().filter(|j| j.status == PlatformStatus::Pausing).collect();
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let targets: Vec<CancelTarget> = jobs.iter().map(|j| target_of(j)).collect();
    let results = if targets.iter().all(|t| *t == CancelTarget::Nothing) {
        vec![Ok(()); targets.len()]
    } else {
        let out = remote.run_script(&cancel_script(&targets), Idempotency::Idempotent)?;
        parse_cancel_output(&out.stdout, &targets)
    };
    let now = crate::clock::now();
    let mut paused = Vec::new();
    for (job, result) in jobs.into_iter().zip(results) {
        match result {
            Ok(()) => {
                let message = match &job.slurm_job_id {
                    Some(id) => format!("paused: Slurm job {id} cancelled, its allocation released"),
                    None => "paused before it reached Slurm".to_string(),
                };
                if store.finish_pause(&job.job_id, job.attempt, &message, now)? {
                    paused.push(job.job_id.clone());
                }
            }
            Err(reason) => store.add_event(&job.job_id, "pause_failed", &reason, now)?,
        }
    }
    Ok(paused)
}

/// Cancel the pausing jobs among `ids` whose graceful bound has passed. Returns the ids it paused.
pub fn stop_overdue(remote: &dyn Remote, store: &Store, ids: &HashSet<&str>) -> Result<Vec<String>> {
    let overdue: Vec<String> = store
        .overdue_pauses(crate::clock::now())?
        .into_iter()
        .map(|(id, _)| id)
        .filter(|id| ids.contains(id.as_str()))
        .collect();
    if overdue.is_empty() {
        return Ok(Vec::new());
    }
    let records = store.get_many(&overdue.iter().map(String::as_str).collect::<Vec<_>>())?;
    stop(remote, store, &records)
}
