//! GPU health, run and recorded: what a refresh read of running jobs' GPU samples is kept (the view
//! every door shows, with each node's recent history), and a job that turned idle or hung is told of (an event, so its webhooks), and
//! cancelled or restarted when it asked for that, once per spell. The decisions are the core's
//! (`gpu::assess`, `ops::failure::hang_outcome`).

use crate::error::Result;
use crate::gpu::{
    assess, history_with, last_progress, newest_per_node, same_spell, GpuView, HangAction, Health, IdleAction,
};
use crate::ops::cancel::{cancel_script, parse_cancel_output, target_of};
use crate::ops::failure::{hang_outcome, RetryPolicy};
use crate::ops::refresh::Observations;
use crate::remote::{Idempotency, Remote};
use crate::status::PlatformStatus;
use crate::store::{JobRecord, JobSummary, StatusUpdate, Store};

/// Keep each running job's GPU view and act on a new idle or hung spell; `moved`: the jobs the same
/// refresh found no longer running (left alone). Returns the ids of the jobs it wrote.
pub fn record(
    remote: &dyn Remote,
    store: &Store,
    policy: &RetryPolicy,
    jobs: &[JobSummary],
    moved: &std::collections::HashSet<&str>,
    obs: &Observations,
    now: i64,
) -> Result<Vec<String>> {
    let mut touched = Vec::new();
    for job in jobs.iter().filter(|j| j.status == PlatformStatus::Running && !moved.contains(j.job_id.as_str())) {
        // The samples newer than the view held (none when no node wrote one since): a node keeps its
        // newest, and the health is assessed again either way (a spell lengthens without a sample).
        let read = obs.gpu.get(&job.job_id).map(Vec::as_slice).unwrap_or(&[]);
        if read.is_empty() && job.gpu.is_none() {
            continue;
        }
        let samples = newest_per_node(job.gpu.as_ref(), read, job.submitted_at);
        // The job's watch is read only when some node is idle (the plan is not in the summary).
        let assessed = if samples.iter().any(|s| s.idle_since.is_some()) {
            let record = store.get(&job.job_id)?;
            let sig = obs.status_sigs.get(&job.job_id).or(job.status_sig.as_ref());
            let progress = last_progress(sig.map(String::as_str), job.submitted_at.unwrap_or(job.created_at));
            assess(&samples, &record.plan.gpu_watch, progress, now).map(|h| (h, record))
        } else {
            None
        };
        let view = GpuView::of(samples, assessed.as_ref().map(|(h, _)| h.clone()))
            .with_history(history_with(job.gpu.as_ref(), read));
        if job.gpu.as_ref() != Some(&view) {
            store.set_gpu(&job.job_id, job.attempt, &view)?;
            touched.push(job.job_id.clone());
        }
        let before = job.gpu.as_ref().and_then(|v| v.health.as_ref());
        if let Some((health, record)) = assessed.filter(|(h, _)| !same_spell(before, h)) {
            act(remote, store, policy, &record, &health, now)?;
        }
    }
    Ok(touched)
}

/// Tell of a new spell (an event, which the job's webhooks hear), then do what the job asked.
fn act(
    remote: &dyn Remote,
    store: &Store,
    policy: &RetryPolicy,
    job: &JobRecord,
    health: &Health,
    now: i64,
) -> Result<()> {
    let watch = &job.plan.gpu_watch;
    match health {
        Health::Idle { since } => {
            let said = format!("every GPU under {}% for {} s", watch.idle_percent, now - since);
            store.add_event(&job.job_id, "gpu_idle", &said, now)?;
            if watch.idle_action == IdleAction::Cancel {
                let why = format!("cancelled for idle GPUs ({said}; gpu_watch.idle_action = cancel)");
                crate::engine::cancel::cancel_because(remote, store, std::slice::from_ref(job), &why)?;
            }
        }
        Health::Hung { since, nodes } => {
            let said = format!(
                "GPUs of {} under {}% and no progress for {} s",
                nodes.join(","),
                watch.idle_percent,
                now - since
            );
            store.add_event(&job.job_id, "gpu_hung", &said, now)?;
            match watch.hang_action {
                HangAction::Notify => {}
                HangAction::Cancel => {
                    let why = format!("cancelled as hung ({said}; gpu_watch.hang_action = cancel)");
                    crate::engine::cancel::cancel_because(remote, store, std::slice::from_ref(job), &why)?;
                }
                HangAction::Restart => restart(remote, store, policy, job, nodes, &said, now)?,
            }
        }
    }
    Ok(())
}

/// Cancel the hung attempt's Slurm job and, on evidence it stopped, make the next attempt (due now,
/// from the newest checkpoint, without the hung nodes) or, once the retries are spent, end the job.
pub(crate) fn restart(
    remote: &dyn Remote,
    store: &Store,
    policy: &RetryPolicy,
    job: &JobRecord,
    nodes: &[String],
    said: &str,
    now: i64,
) -> Result<()> {
    let targets = [target_of(job)];
    let out = remote.run_script(&cancel_script(&targets), Idempotency::Idempotent)?;
    if let Some(Err(why)) = parse_cancel_output(&out.stdout, &targets).into_iter().next() {
        // Still running: the next refresh finds it hung again and tries again.
        store.add_event(&job.job_id, "gpu_restart_failed", &why, now)?;
        return Ok(());
    }
    let attempts = store.attempts(&job.job_id)?;
    let outcome = hang_outcome(job, nodes, said, policy, &attempts, now);
    store.in_transaction(|| -> Result<()> {
        let ended = StatusUpdate::keeping_slurm_of(job, PlatformStatus::Running, said);
        store.record_attempt_end(&job.job_id, job.attempt, &ended, now)?;
        let verdict = |message| StatusUpdate::keeping_slurm_of(job, PlatformStatus::Error, message);
        crate::engine::retry::record_outcome(store, job, &outcome, verdict, now)
    })
}
