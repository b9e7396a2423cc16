//! The retry engine: classify failed attempts (one round trip for their log tails), schedule
//! resubmissions of infrastructure failures with a compare-and-set in the store, submit retries when
//! they are due, and resume submissions that were interrupted.

use crate::engine::submit::{attempt_name, submit, AttemptTicket};
use crate::engine::{sections, unprefix_lines, PREFIX_LINES, SECTION};
use crate::error::Result;
use crate::ops::refresh::Decision;
use crate::remote::{Idempotency, Remote};
use crate::retry::{backoff_secs, classify, FailureClass};
use crate::script::shell::quote;
use crate::script::StagedFile;
use crate::slurm::SlurmState;
use crate::spec::SecretValues;
use crate::status::PlatformStatus;
use crate::store::{now_secs, JobRecord, StatusUpdate, Store};
use std::collections::HashMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub max_retries: u32,
    pub backoff_base_secs: u64,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy { max_retries: crate::retry::MAX_JOB_RETRIES, backoff_base_secs: 30 }
    }
}

/// An attempt that has recorded nothing for this long without reaching Slurm was interrupted
/// (its submitter died or lost its connection); its submission is run again, which is safe.
pub const RESUME_SUBMISSION_AFTER_SECS: i64 = 30;

/// Lines of each log read to classify a failure.
const EVIDENCE_LINES: u32 = 200;

/// Is this verdict a failure of the attempt that may deserve a retry (and so must be classified)?
pub fn is_attempt_failure(update: &StatusUpdate) -> bool {
    update.status == PlatformStatus::Error
        && update.slurm_state.as_deref().map(SlurmState::parse).is_some_and(|s| {
            matches!(
                s,
                SlurmState::Failed
                    | SlurmState::NodeFail
                    | SlurmState::BootFail
                    | SlurmState::OutOfMemory
                    | SlurmState::Timeout
                    | SlurmState::Deadline
            )
        })
}

/// One round trip: the end of both logs of each failed attempt, and which of its nodes are down now.
fn evidence_script(failed: &[(&JobRecord, &Decision)]) -> String {
    let mut s = String::new();
    for (job, d) in failed {
        let Some(slurm_id) = d.adopt.as_ref().or(job.slurm_job_id.as_ref()) else { continue };
        let dir = job.plan.layout.log_dir(&job.attempt_name, slurm_id);
        s.push_str(&format!(
            "echo '{SECTION}tail {id}'\ntail -q -n {EVIDENCE_LINES} {e} {o} 2>/dev/null | {PREFIX_LINES}\n",
            id = job.job_id,
            e = quote(&format!("{dir}/main.err")),
            o = quote(&format!("{dir}/main.out")),
        ));
        // Cosmos-RL jobs name the role that failed first.
        s.push_str(&format!(
            // Read only as a regular file, briefly: the log directory is the job's to write.
            "if [ -f {f} ] && [ ! -L {f} ]; then echo \"{SECTION}failed_role {id} $(timeout 10 head -c 64 -- {f} | head -n 1)\"; fi\n",
            f = quote(&format!("{dir}/{}", crate::script::cosmos::FAILED_ROLE_FILE)),
            id = job.job_id,
        ));
        if let Some(nodes) = d.update.node_list.as_ref().or(job.node_list.as_ref()) {
            s.push_str(&format!(
                "echo \"{SECTION}down {id} $(sinfo -h -N -n {n} -t down,drain,fail,no_respond -o %N 2>/dev/null | sort -u | paste -sd, -)\"\n",
                id = job.job_id,
                n = quote(nodes)
            ));
        }
    }
    s
}

/// Decide what each failed attempt means: a scheduled retry, or the job's final Error with the evidence.
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
    let mut tails: HashMap<String, String> = HashMap::new();
    let mut down: HashMap<String, String> = HashMap::new();
    let mut failed_roles: HashMap<String, String> = HashMap::new();
    for (name, arg, body) in sections(&out.stdout) {
        match name.as_str() {
            "tail" => {
                tails.insert(arg, unprefix_lines(&body));
            }
            "failed_role" => {
                if let Some((job, text)) = arg.split_once(' ') {
                    failed_roles
                        .extend(crate::script::cosmos::failed_role_evidence(text).map(|e| (job.to_string(), e)));
                }
            }
            "down" => {
                if let Some((job, nodes)) = arg.split_once(' ') {
                    down.insert(job.to_string(), nodes.trim().to_string());
                }
            }
            _ => {}
        }
    }
    for (job, d) in failed {
        let state = SlurmState::parse(d.update.slurm_state.as_deref().unwrap_or(""));
        let tail = tails.get(&job.job_id).map(String::as_str).unwrap_or("");
        let mut failure = classify(&state, d.update.exit_code, tail);
        if let Some(role) = failed_roles.get(&job.job_id) {
            failure.evidence.insert(0, role.clone());
        }
        let evidence = failure.evidence.join(" | ");
        let retries_so_far = job.attempt.saturating_sub(1);
        let nodes = d.update.node_list.clone().or(job.node_list.clone()).unwrap_or_default();
        store.in_transaction(|| -> Result<()> {
            if let Some(id) = &d.adopt {
                store.set_submitted(&job.job_id, id, &out.host)?;
            }
            store.record_attempt_end(&job.job_id, job.attempt, &d.update)?;
            if failure.class == FailureClass::Infra && retries_so_far < policy.max_retries {
                let exclude = down.get(&job.job_id).filter(|n| !n.is_empty()).cloned().unwrap_or(nodes.clone());
                let retry = retries_so_far + 1;
                let wait = backoff_secs(retry, policy.backoff_base_secs);
                let message = format!(
                    "attempt {} failed on {} ({evidence}); retry {retry} of {} in {wait} s, excluding {}",
                    job.attempt,
                    if nodes.is_empty() { "?" } else { &nodes },
                    policy.max_retries,
                    if exclude.is_empty() { "no node" } else { &exclude }
                );
                store.schedule_retry(
                    &job.job_id,
                    job.attempt,
                    failure.class.as_str(),
                    &failure.evidence,
                    &attempt_name(&job.plan, job.attempt + 1),
                    &exclude,
                    now_secs() + wait as i64,
                    &message,
                )?;
                return Ok(());
            }
            let message = if failure.class == FailureClass::Infra {
                let attempts = store.attempts(&job.job_id)?;
                let list: Vec<String> = attempts
                    .iter()
                    .map(|a| {
                        format!(
                            "#{} Slurm job {} on {}",
                            a.number,
                            a.slurm_job_id.as_deref().unwrap_or("-"),
                            a.node_list.as_deref().unwrap_or("-")
                        )
                    })
                    .collect();
                format!("retry budget exhausted: {} attempts failed ({evidence}): {}", attempts.len(), list.join("; "))
            } else {
                format!("{} ({} failure, not retried: {evidence})", d.update.message, failure.class.as_str())
            };
            store.close_attempt(&job.job_id, job.attempt, failure.class.as_str(), &failure.evidence)?;
            store.update_status(&job.job_id, &StatusUpdate { message, ..d.update.clone() })?;
            Ok(())
        })?;
    }
    Ok(())
}

/// Submit the retries that are due and resume interrupted submissions. `files_for` regenerates a
/// job's staged files (the same every time); `secrets` are only available to the process that
/// submitted the job, so a resumed job with secrets relies on the secrets file already on the cluster.
pub fn advance(
    remote: &dyn Remote,
    store: &Store,
    jobs: &[JobRecord],
    files_for: &dyn Fn(&JobRecord) -> Vec<StagedFile>,
) -> Result<()> {
    let now = now_secs();
    for job in jobs.iter().filter(|j| !j.status.is_terminal() && j.slurm_job_id.is_none()) {
        let ticket = AttemptTicket {
            number: job.attempt,
            slurm_job_name: job.attempt_name.clone(),
            exclude: job.excluded_nodes.clone(),
        };
        let due = match job.next_retry_at {
            Some(at) => at <= now && store.claim_due_retry(&job.job_id, job.attempt)?,
            None => {
                let recorded = store.attempts(&job.job_id)?.last().map(|a| a.recorded_at).unwrap_or(job.created_at);
                now - recorded > RESUME_SUBMISSION_AFTER_SECS
            }
        };
        if !due {
            continue;
        }
        let kind = if job.next_retry_at.is_some() { "retry" } else { "resume" };
        tracing::info!(job = %job.job_id, attempt = job.attempt, kind, "submitting");
        match submit(remote, store, &job.plan, &files_for(job), &SecretValues::default(), &ticket) {
            Ok(s) => store.add_event(
                &job.job_id,
                kind,
                &format!("attempt {} is Slurm job {}", job.attempt, s.slurm_job_id),
            )?,
            Err(e) => tracing::warn!(job = %job.job_id, error = %e, "submission of attempt {} failed", job.attempt),
        }
    }
    Ok(())
}
