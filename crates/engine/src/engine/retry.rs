//! The retry engine: classify failed attempts (one round trip for their log tails), schedule
//! resubmissions of infrastructure failures with a compare-and-set in the store, submit retries when
//! they are due, and resume submissions that were interrupted.

use crate::ops::failure::*;

use crate::error::Result;
use crate::ops::refresh::Decision;
use crate::ops::submit::AttemptTicket;
use crate::remote::{Idempotency, Remote};
use crate::spec::SecretValues;
use crate::status::PlatformStatus;
use crate::store::{JobRecord, RetryPlan, StatusUpdate, Store};

/// Reopen a job that ended as its next attempt, due now, from its newest checkpoint (a
/// compare-and-set on the attempt it was read with): false when another caller reopened it first.
pub fn reopen_ended(store: &Store, job: &JobRecord, now: i64) -> Result<bool> {
    let next = crate::ops::submit::attempt_name(&job.plan, job.attempt + 1);
    let message = format!("retried: attempt {} resumes from the newest checkpoint, if any", job.attempt + 1);
    Ok(store.reopen_ended(&job.job_id, job.attempt, &next, "retried", &message, now)?)
}

/// Decide what each failed attempt means (the core's [`decide_failure`]) and record it: a scheduled
/// retry, or the job's final Error with the evidence. One round trip for all the evidence.
pub fn handle_failures(
    remote: &dyn Remote,
    store: &Store,
    policy: &RetryPolicy,
    failed: &[(&JobRecord, &Decision)],
) -> Result<()> {
    if failed.is_empty() {
        return Ok(());
    }
    let out = remote.run_script(&evidence_script(failed), Idempotency::Idempotent)?;
    let evidence = parse_evidence(&out.stdout);
    let now = crate::clock::now();
    for (job, d) in failed {
        let attempts = store.attempts(&job.job_id)?;
        let outcome = decide_failure(job, d, &evidence, policy, &attempts, now);
        store.in_transaction(|| -> Result<()> {
            if let Some(id) = &d.adopt {
                store.set_submitted(&job.job_id, id, &out.host, now)?;
            }
            store.record_attempt_end(&job.job_id, job.attempt, &d.update, now)?;
            record_outcome(store, job, &outcome, |message| StatusUpdate { message, ..d.update.clone() }, now)
        })?;
    }
    Ok(())
}

/// Record what an ended attempt comes to (within the caller's transaction): its retry, scheduled by
/// a compare-and-set; or its class and evidence and the job's final status (`verdict` of the
/// outcome's message), written only while the job is as read (a retry, resume or cancel made during
/// the caller's round trip stands).
pub fn record_outcome(
    store: &Store,
    job: &JobRecord,
    outcome: &FailureOutcome,
    verdict: impl FnOnce(String) -> StatusUpdate,
    now: i64,
) -> Result<()> {
    match outcome {
        FailureOutcome::Retry { failure, cause, resumed_from, next_name, exclude, not_before, message } => {
            let retry = RetryPlan {
                cause: cause.as_str(),
                resumed_from: resumed_from.as_deref(),
                class: failure.class.as_str(),
                evidence: &failure.evidence,
                next_name,
                excluded_nodes: exclude,
                not_before: *not_before,
                message,
            };
            store.schedule_retry(&job.job_id, job.attempt, &retry, now)?;
        }
        FailureOutcome::Final { failure, message } => {
            store.close_attempt(&job.job_id, job.attempt, failure.class.as_str(), &failure.evidence, now)?;
            store.update_status_of(&job.job_id, Some(crate::store::AsRead::of(job)), &verdict(message.clone()), now)?;
        }
    }
    Ok(())
}

/// What a door's rule says of an automatic restart (a retry after an infrastructure failure, a
/// restart after a GPU hang) about to be submitted, asked with the job as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestartVerdict {
    /// Submit it.
    Go,
    /// Never: the job ends Error with this message (which names the rule).
    Refused(String),
    /// Not in this cycle (the rule could not be read); the retry stays due.
    NotNow(String),
}

/// A door's rule on automatic restarts (the service's policy: `Client::with_restart_gate`).
pub type RestartGate = std::sync::Arc<dyn Fn(&JobRecord) -> RestartVerdict + Send + Sync>;

/// End a job whose due retry the door's rule refused (the retry claimed first, so one process does
/// it): its attempt closed with the rule's word and the job Error, as read.
fn refuse_retry(store: &Store, job: &JobRecord, why: &str, now: i64) -> Result<()> {
    if !store.claim_due_retry(&job.job_id, job.attempt, now)? {
        return Ok(());
    }
    let message = format!("not retried: {why}");
    store.in_transaction(|| -> Result<()> {
        store.close_attempt(&job.job_id, job.attempt, "policy", std::slice::from_ref(&message), now)?;
        store.add_event(&job.job_id, "retry_refused", &message, now)?;
        let update = crate::store::StatusUpdate::bare(PlatformStatus::Error, message.clone());
        Ok(store.update_status_of(&job.job_id, Some(crate::store::AsRead::of(job)), &update, now)?)
    })
}

/// Submit the retries that are due and resume interrupted submissions, each with its staged files
/// regenerated from its stored spec and plan and `settings` (the same every time). A retry is first
/// put to `restart_gate`, the door's rule, if any: refused, the job ends Error instead. Secret values are
/// only available to the process that submitted the job, so a resumed job with secrets relies on
/// the secrets file already on the cluster.
pub fn advance(
    remote: &dyn Remote,
    store: &Store,
    jobs: &[JobRecord],
    settings: &crate::config::Settings,
    restart_gate: Option<&RestartGate>,
) -> Result<()> {
    let now = crate::clock::now();
    // A sweep variant's first attempt is its array's task: the array's submission is resumed by
    // finding it (by the sweep's lock or name), never by submitting the variant's script under the
    // array's name.
    // A paused job is submitted again only when resumed (its status is then Resuming).
    let submittable = |j: &&JobRecord| {
        !j.status.is_terminal()
            && !matches!(j.status, PlatformStatus::Paused | PlatformStatus::Pausing)
            && j.slurm_job_id.is_none()
            && j.array_index().is_none()
    };
    for job in jobs.iter().filter(submittable) {
        // A job that runs after others is submitted with the dependency as it stands now; one that
        // can never run is not submitted (the cycle cancels it).
        let gate = crate::engine::depend::gate_of(store, &job.job_id)?;
        if matches!(gate, Some(crate::ops::depend::Gate::Never(_))) {
            continue;
        }
        let ticket = AttemptTicket {
            number: job.attempt,
            slurm_job_name: job.attempt_name.clone(),
            exclude: job.excluded_nodes.clone(),
            dependency: None,
            hold: false,
            await_other_run: false,
        };
        let due = match job.next_retry_at {
            Some(at) if at > now => false,
            // A new attempt: the door's rule first, on the job as stored.
            Some(_) => match restart_gate.map_or(RestartVerdict::Go, |g| g(job)) {
                RestartVerdict::Go => store.claim_due_retry(&job.job_id, job.attempt, now)?,
                RestartVerdict::Refused(why) => {
                    tracing::info!(job = %job.job_id, attempt = job.attempt, %why, "retry refused by the door's rule");
                    refuse_retry(store, job, &why, now)?;
                    false
                }
                RestartVerdict::NotNow(why) => {
                    tracing::warn!(job = %job.job_id, attempt = job.attempt, %why, "retry put off: its rule cannot be read");
                    false
                }
            },
            // Interrupted: recorded long ago, and not being submitted by this process.
            None => {
                let recorded = store.attempts(&job.job_id)?.last().map(|a| a.recorded_at).unwrap_or(job.created_at);
                now - recorded > RESUME_SUBMISSION_AFTER_SECS
                    && !crate::engine::in_flight::is_in_flight(&job.attempt_name)
            }
        };
        if !due {
            continue;
        }
        let kind = if job.next_retry_at.is_some() { "retry" } else { "resume" };
        tracing::info!(job = %job.job_id, attempt = job.attempt, kind, "submitting");
        match crate::engine::submit::submit_gated(
            remote,
            store,
            &job.plan,
            &crate::ops::submit::staged_files_of(settings, job),
            &SecretValues::default(),
            ticket,
            gate.as_ref(),
        ) {
            Ok(s) => {
                store.add_event(
                    &job.job_id,
                    kind,
                    &crate::notify::resubmitted_detail(job.attempt, &s.slurm_job_id),
                    now,
                )?
            }
            Err(e) => tracing::warn!(job = %job.job_id, error = %e, "submission of attempt {} failed", job.attempt),
        }
    }
    Ok(())
}
