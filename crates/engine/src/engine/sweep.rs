//! A sweep's submission in one round trip: every variant's files and the array's script staged, one
//! `sbatch --array`, every task's log directory, release (the core's `ops::sweep`); then each
//! variant's first attempt recorded as its task `<array>_<index>`.

use crate::ops::sweep::*;

use crate::error::{Error, Result};
use crate::ops::submit::Outcome;
use crate::remote::{Idempotency, Remote, RemoteError};
use crate::script::StagedFile;
use crate::spec::SecretValues;
use crate::status::PlatformStatus;
use crate::store::{JobRecord, StatusUpdate, Store};

/// A submitted sweep: its id, its array's Slurm job id and each variant's job and task ids.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct SweepSubmitted {
    pub sweep_id: String,
    pub slurm_array_id: String,
    pub login_host: String,
    pub variants: Vec<VariantSubmitted>,
    /// What the submission changed or fell back to, for the caller to show.
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct VariantSubmitted {
    pub index: u32,
    pub job_id: String,
    pub slurm_job_id: String,
    /// What varies: `NAME=value` words and the appended arguments.
    pub values: String,
}

fn mark_all(store: &Store, sweep: &SweepPlan, status: PlatformStatus, message: &str) -> Result<()> {
    let now = crate::clock::now();
    store.in_transaction(|| -> Result<()> {
        for (_, plan) in &sweep.variants {
            store.update_status(&plan.layout.job_id, &StatusUpdate::bare(status, message), now)?;
        }
        Ok(())
    })
}

/// Submit a sweep whose variants are already recorded in the store (as a group).
pub fn submit_sweep(
    remote: &dyn Remote,
    store: &Store,
    sweep: &SweepPlan,
    files: &[Vec<StagedFile>],
    secrets: &SecretValues,
) -> Result<SweepSubmitted> {
    crate::engine::redact::register_values(secrets);
    crate::engine::submit::pause_at_failpoint("after-record");
    let script = sweep_submit_script(sweep, files, secrets);
    let now = crate::clock::now();
    let out = match remote.run_script(&script, Idempotency::RunAtMostOnce) {
        Ok(out) => out,
        Err(e @ (RemoteError::Lost { .. } | RemoteError::TimedOut { .. } | RemoteError::OutputTooLarge { .. })) => {
            // Outcome unknown: each variant is looked up by the array's name and its index.
            mark_all(store, sweep, PlatformStatus::Pending, &format!("submission outcome unknown: {e}"))?;
            return Err(e.into());
        }
        // Nothing reached the cluster: the caller decides (a first submission ends the variants; a
        // resumed one is tried again later).
        Err(e) => return Err(e.into()),
    };
    let outcome = crate::ops::submit::parse_outcome(&out.stdout, out.exit_code);
    if let Some(id) = outcome.slurm_job_id() {
        crate::engine::submit::pause_at_failpoint("after-sbatch");
        store.set_array_submitted(&sweep.sweep_id, id, &out.host, now)?;
    }
    let detail = out.stderr.trim();
    let array_id = match outcome {
        Outcome::Submitted(id) => id,
        Outcome::NoJobId => {
            return Err(Error::RemoteCommand(format!("sbatch printed no job id: {}", out.stdout.trim())));
        }
        Outcome::NotStarted(id) => {
            return Err(Error::RemoteCommand(format!(
                "sweep {} (Slurm job array {id}) was submitted but not started: {detail}",
                sweep.sweep_id
            )));
        }
        // In flight: another run of this submission owns the variants, which stay as they are.
        Outcome::InFlight | Outcome::Refused => {
            let message = format!("submission of sweep {} failed on {}: {detail}", sweep.sweep_id, out.host);
            if outcome == Outcome::Refused {
                mark_all(store, sweep, PlatformStatus::Error, &message)?;
            }
            return Err(Error::RemoteCommand(message));
        }
    };
    Ok(SweepSubmitted {
        sweep_id: sweep.sweep_id.clone(),
        slurm_array_id: array_id.clone(),
        login_host: out.host,
        variants: sweep
            .variants
            .iter()
            .map(|(v, p)| VariantSubmitted {
                index: v.index,
                job_id: p.layout.job_id.clone(),
                slurm_job_id: task_id(&array_id, v.index),
                values: v.describe(),
            })
            .collect(),
        warnings: Vec::new(),
    })
}

/// Resume the submissions of sweeps whose submitter stopped before it learned the array's id (the
/// variants' first attempts have none): once [`crate::ops::failure::RESUME_SUBMISSION_AFTER_SECS`]
/// have passed, the sweep's submission script runs again. Its lock makes that safe: it adopts the
/// array if one was submitted (the refresh usually finds it first, by the lock's id), else submits it.
/// Secret values are not known here: a variant that needs them relies on the secrets files already
/// on the cluster (without them it ends at start, exit 85, naming the file).
pub fn resume(
    remote: &dyn Remote,
    store: &Store,
    waiting: &[JobRecord],
    settings: &crate::config::Settings,
) -> Result<()> {
    let now = crate::clock::now();
    let mut sweeps: Vec<&str> = waiting
        .iter()
        .filter(|j| !j.status.is_terminal() && j.slurm_job_id.is_none() && j.array_index().is_some())
        .filter(|j| j.next_retry_at.is_none() && now - j.created_at > crate::ops::failure::RESUME_SUBMISSION_AFTER_SECS)
        .filter_map(|j| j.sweep_id.as_deref())
        .collect();
    sweeps.sort();
    sweeps.dedup();
    for sweep_id in sweeps {
        let Some((group, members)) = store.group(sweep_id)? else { continue };
        let ids: Vec<&str> = members.iter().map(String::as_str).collect();
        let mut records = store.get_many(&ids)?;
        // All or nothing: a sweep's variants reach Slurm in one array.
        if records.iter().any(|r| r.slurm_job_id.is_some() || r.attempt != 1) {
            continue;
        }
        records.sort_by_key(|r| r.sweep_index);
        let plan = SweepPlan {
            sweep_id: group.sweep_id.clone(),
            array_name: group.array_name.clone().unwrap_or_else(|| array_name(sweep_id)),
            max_concurrent: group.max_concurrent,
            variants: records
                .iter()
                .map(|r| {
                    let v =
                        crate::spec::Variant { index: r.sweep_index.unwrap_or(0), env: Vec::new(), args: Vec::new() };
                    (v, r.plan.clone())
                })
                .collect(),
        };
        let files: Vec<Vec<StagedFile>> =
            records.iter().map(|r| crate::ops::submit::staged_files_of(settings, r)).collect();
        tracing::info!(sweep = %sweep_id, variants = records.len(), "resuming the sweep's submission");
        match submit_sweep(remote, store, &plan, &files, &SecretValues::default()) {
            Ok(s) => {
                for r in &records {
                    store.add_event(
                        &r.job_id,
                        "resume",
                        &format!("the sweep's job array is Slurm job {}", s.slurm_array_id),
                        now,
                    )?;
                }
            }
            Err(e) => tracing::warn!(sweep = %sweep_id, error = %e, "resuming the sweep's submission failed"),
        }
    }
    Ok(())
}
