//! Submission in one round trip: stage the job's files, `sbatch --hold`, create the attempt's log
//! directory (its name holds the Slurm job id, so it can only be made after sbatch and must exist
//! before the job starts), then release the hold.

use crate::ops::submit::*;

use crate::error::{Error, Result};
use crate::plan::Plan;
use crate::remote::{Idempotency, Remote, RemoteError};
use crate::script::StagedFile;
use crate::spec::SecretValues;
use crate::status::PlatformStatus;
use crate::store::StatusUpdate;
use crate::store::Store;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct Submitted {
    pub job_id: String,
    pub slurm_job_id: String,
    pub login_host: String,
    pub job_dir: String,
    /// What the submission changed or fell back to (a capped wall time, a registry pull), for the
    /// caller to show: nothing below the client prints.
    pub warnings: Vec<String>,
}

/// Test hook: `TAO_SLURM_FAILPOINT=<name>` stops the submission at that point (it sleeps) so that a
/// fault-injection test can kill the process there. Names: `after-record`, `remote-before-sbatch`,
/// `after-sbatch`.
pub const FAILPOINT_ENV: &str = "TAO_SLURM_FAILPOINT";

fn failpoint(name: &str) -> bool {
    std::env::var(FAILPOINT_ENV).is_ok_and(|v| v == name)
}

pub(crate) fn pause_at_failpoint(name: &str) {
    if failpoint(name) {
        tracing::warn!("tao-slurm: failpoint {name} reached");
        std::thread::sleep(std::time::Duration::from_secs(120));
    }
}

/// Submit a recorded attempt under `gate` (the sbatch options its dependencies give it now) and
/// record the gate it was given: the one way a recorded attempt is submitted, whether its first
/// (the client), a retry or an interrupted submission resumed (the cycle).
pub fn submit_gated(
    remote: &dyn Remote,
    store: &Store,
    plan: &Plan,
    files: &[StagedFile],
    secrets: &SecretValues,
    mut ticket: AttemptTicket,
    gate: Option<&crate::ops::depend::Gate>,
) -> Result<Submitted> {
    if let Some(g) = gate {
        (ticket.dependency, ticket.hold) = g.sbatch();
    }
    let result = submit(remote, store, plan, files, secrets, &ticket);
    if let (Ok(_), Some(g)) = (&result, gate) {
        store.set_gate(&plan.layout.job_id, &g.stored())?;
    }
    result
}

/// Jobs whose submission never reached the cluster (nothing was sent): they end Error, saying why.
pub fn record_not_submitted(store: &Store, job_ids: &[&str], why: &RemoteError, now: i64) -> Result<()> {
    for id in job_ids {
        store.update_status(id, &StatusUpdate::bare(PlatformStatus::Error, format!("not submitted: {why}")), now)?;
    }
    Ok(())
}

/// Submit one attempt of a plan whose job (and attempt) is already recorded in the store.
pub fn submit(
    remote: &dyn Remote,
    store: &Store,
    plan: &Plan,
    files: &[StagedFile],
    secrets: &SecretValues,
    ticket: &AttemptTicket,
) -> Result<Submitted> {
    let job_id = &plan.layout.job_id;
    let now = crate::clock::now();
    crate::engine::redact::register_values(secrets);
    pause_at_failpoint("after-record");
    let hook = if failpoint("remote-before-sbatch") {
        "echo 'tao-slurm: failpoint remote-before-sbatch reached' >&2\nsleep 20\n"
    } else {
        ""
    };
    let script = submit_script_with_hook(plan, files, secrets, ticket, hook);
    let out = match remote.run_script(&script, Idempotency::RunAtMostOnce) {
        Ok(out) => out,
        Err(e @ (RemoteError::Lost { .. } | RemoteError::TimedOut { .. } | RemoteError::OutputTooLarge { .. })) => {
            // The outcome is unknown: the job stays Pending and is found again by its unique Slurm
            // job name (or submitted again later, which its lock makes safe).
            store.update_status(
                job_id,
                &StatusUpdate::bare(PlatformStatus::Pending, format!("submission outcome unknown: {e}")),
                now,
            )?;
            return Err(e.into());
        }
        // Nothing reached the cluster: the attempt stays as it was (a retry stays due, and is tried
        // again at the next refresh); the caller decides what a first submission's failure means.
        Err(e) => return Err(e.into()),
    };
    let outcome = parse_outcome(&out.stdout, out.exit_code);
    if let Some(id) = outcome.slurm_job_id() {
        pause_at_failpoint("after-sbatch");
        // Recorded even if a later step failed: a submitted job is never forgotten.
        store.set_submitted(job_id, id, &out.host, now)?;
    }
    let detail = out.stderr.trim();
    let slurm_job_id = match outcome {
        Outcome::Submitted(id) => id,
        Outcome::NoJobId => {
            return Err(Error::RemoteCommand(format!("sbatch printed no job id: {}", out.stdout.trim())));
        }
        Outcome::NotStarted(id) => {
            let message = format!("job {job_id} (Slurm job {id}) was submitted but not started: {detail}");
            store.add_event(job_id, "submit_failed", &message, now)?;
            return Err(Error::RemoteCommand(message));
        }
        // In flight: another run of this submission owns it, and the job stays as it is.
        Outcome::InFlight | Outcome::Refused => {
            let message = format!("submission of job {job_id} failed on {}: {detail}", out.host);
            store.add_event(job_id, "submit_failed", &message, now)?;
            if outcome == Outcome::Refused {
                store.update_status(job_id, &StatusUpdate::bare(PlatformStatus::Error, message.clone()), now)?;
            }
            return Err(Error::RemoteCommand(message));
        }
    };
    Ok(Submitted {
        job_id: job_id.clone(),
        slurm_job_id,
        login_host: out.host,
        job_dir: plan.layout.base_dir.clone(),
        warnings: Vec::new(),
    })
}
