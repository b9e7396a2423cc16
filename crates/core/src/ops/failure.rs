//! A failed attempt: the script that fetches its evidence (log tails, the role that failed, which
//! of its nodes are down now), the reading of it, and the decision: a retry (with backoff and node
//! exclusion) or a final verdict. Pure: the engine runs the script and records the outcome.

use crate::attempts::{after_preemption, preempted_message, Cause, PreemptNext};
use crate::model::{AttemptRecord, JobRecord, StatusUpdate};
use crate::ops::refresh::Decision;
use crate::ops::submit::attempt_name;
use crate::protocol::{sections, unprefix_lines, PREFIX_LINES, SECTION};
use crate::retry::{backoff_secs, classify, Failure, FailureClass};
use crate::script::shell::quote;
use crate::slurm::SlurmState;
use crate::status::PlatformStatus;
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
/// A preemption (Canceled, by Slurm) is one: the job may resume.
pub fn is_attempt_failure(update: &StatusUpdate) -> bool {
    let state = update.slurm_state.as_deref().map(SlurmState::parse);
    if update.status == PlatformStatus::Canceled {
        return state == Some(SlurmState::Preempted);
    }
    update.status == PlatformStatus::Error
        && state.is_some_and(|s| {
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
pub fn evidence_script(failed: &[(&JobRecord, &Decision)]) -> String {
    let mut s = String::new();
    for (job, d) in failed {
        let Some(slurm_id) = d.adopt.as_ref().or(job.slurm_job_id.as_ref()) else { continue };
        let dir = job.plan.layout.log_dir(&job.attempt_name, slurm_id);
        // The job's own files, read by the one reader of job-written files (regular files only,
        // briefly, the last 64 KiB of each).
        s.push_str(&format!("echo '{SECTION}tail {id}'\n", id = job.job_id));
        // Where Slurm opened them stands in when the script never linked them (a failed launch).
        for ext in ["err", "out"] {
            s.push_str(&format!(
                "f={f}\n{slurm}read -r kind size <<<\"$(tao_jf_stat \"$f\")\"; [ \"$kind\" = regular ] && tao_jf_read \"$f\" $((size > 65536 ? size - 65536 : 0)) 65536 | tail -n {EVIDENCE_LINES} | {PREFIX_LINES}\n",
                f = quote(&format!("{dir}/main.{ext}")),
                slurm = crate::ops::logs::or_slurms_file(&job.plan.layout.slurm_output(&job.attempt_name, slurm_id, ext)),
            ));
        }
        // Cosmos-RL jobs name the role that failed first.
        s.push_str(&format!(
            "echo \"{SECTION}failed_role {id} $(tao_jf_read {f} 0 64 | head -n 1)\"\n",
            f = quote(&format!("{dir}/{}", crate::script::cosmos::FAILED_ROLE_FILE)),
            id = job.job_id,
        ));
        // The newest checkpoint, which the next attempt would start from.
        s.push_str(&format!(
            "echo \"{SECTION}checkpoint {id} $({})\"\n",
            crate::checkpoint::newest_pipeline(
                &quote(&format!("{}/", job.plan.layout.results_dir())),
                "%p",
                &job.plan.checkpoint_patterns
            ),
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
    if s.is_empty() {
        return s;
    }
    crate::ops::job_file::with_functions(&s)
}

/// What the evidence script found, per platform job id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Evidence {
    pub tails: HashMap<String, String>,
    /// Nodes of the attempt that are down, drained or not responding now.
    pub down: HashMap<String, String>,
    /// For Cosmos-RL jobs, the role that failed first (as evidence text).
    pub failed_roles: HashMap<String, String>,
    /// The newest checkpoint in each job's results directory, where it has one.
    pub checkpoints: HashMap<String, String>,
}

/// Read the evidence script's output.
pub fn parse_evidence(stdout: &str) -> Evidence {
    let mut e = Evidence::default();
    for (name, arg, body) in sections(stdout) {
        match name.as_str() {
            "tail" => {
                e.tails.insert(arg, unprefix_lines(&body));
            }
            "failed_role" => {
                if let Some((job, text)) = arg.split_once(' ') {
                    e.failed_roles
                        .extend(crate::script::cosmos::failed_role_evidence(text).map(|r| (job.to_string(), r)));
                }
            }
            "checkpoint" => {
                if let Some((job, path)) = arg.split_once(' ').filter(|(_, p)| !p.trim().is_empty()) {
                    e.checkpoints.insert(job.to_string(), path.trim().to_string());
                }
            }
            "down" => {
                if let Some((job, nodes)) = arg.split_once(' ') {
                    e.down.insert(job.to_string(), nodes.trim().to_string());
                }
            }
            _ => {}
        }
    }
    e
}

/// What a failed attempt leads to.
#[derive(Debug, Clone, PartialEq)]
pub enum FailureOutcome {
    /// An infrastructure failure within the budget (after a backoff, avoiding nodes), or a
    /// preemption (at once): the next attempt, made for `cause`, from `resumed_from`.
    Retry {
        failure: Failure,
        cause: Cause,
        resumed_from: Option<String>,
        next_name: String,
        exclude: String,
        not_before: i64,
        message: String,
    },
    /// The job ends Error with this message.
    Final { failure: Failure, message: String },
}

/// Decide a failed attempt's outcome from its evidence. `attempts` are the job's attempts so far
/// (named in the message when the retry budget is exhausted).
pub fn decide_failure(
    job: &JobRecord,
    d: &Decision,
    evidence: &Evidence,
    policy: &RetryPolicy,
    attempts: &[AttemptRecord],
    now: i64,
) -> FailureOutcome {
    let state = SlurmState::parse(d.update.slurm_state.as_deref().unwrap_or(""));
    let tail = evidence.tails.get(&job.job_id).map(String::as_str).unwrap_or("");
    let mut failure = classify(&state, d.update.exit_code, tail);
    if let Some(role) = evidence.failed_roles.get(&job.job_id) {
        failure.evidence.insert(0, role.clone());
    }
    let said = failure.evidence.join(" | ");
    // Attempts made before causes were recorded were infrastructure retries.
    let retries_so_far =
        made_for(attempts, Cause::Infra) + attempts.iter().filter(|a| a.number > 1 && a.cause.is_none()).count() as u32;
    let nodes = d.update.node_list.clone().or(job.node_list.clone()).unwrap_or_default();
    let checkpoint = evidence.checkpoints.get(&job.job_id).cloned();
    if failure.class == FailureClass::Preempted {
        return after_preempted(job, failure, attempts, &nodes, checkpoint, now);
    }
    if failure.class == FailureClass::Infra && retries_so_far < policy.max_retries {
        let exclude = evidence.down.get(&job.job_id).filter(|n| !n.is_empty()).cloned().unwrap_or(nodes.clone());
        let retry = retries_so_far + 1;
        let wait = backoff_secs(retry, policy.backoff_base_secs);
        let message = format!(
            "attempt {} failed on {} ({said}); retry {retry} of {} in {wait} s, excluding {}",
            job.attempt,
            if nodes.is_empty() { "?" } else { &nodes },
            policy.max_retries,
            if exclude.is_empty() { "no node" } else { &exclude }
        );
        return FailureOutcome::Retry {
            failure,
            cause: Cause::Infra,
            resumed_from: checkpoint,
            next_name: attempt_name(&job.plan, job.attempt + 1),
            exclude,
            not_before: now + wait as i64,
            message,
        };
    }
    let message = if failure.class == FailureClass::Infra {
        let list: Vec<String> = attempts
            .iter()
            .map(|a| {
                // The attempt that just failed has its nodes in this refresh's update, not yet stored.
                let on =
                    a.node_list.as_deref().or((a.number == job.attempt && !nodes.is_empty()).then_some(&nodes[..]));
                format!("#{} Slurm job {} on {}", a.number, a.slurm_job_id.as_deref().unwrap_or("-"), on.unwrap_or("-"))
            })
            .collect();
        format!("retry budget exhausted: {} attempts failed ({said}): {}", attempts.len(), list.join("; "))
    } else if let (FailureClass::Timeout, Some(total)) = (failure.class, job.plan.total_time_seconds) {
        crate::attempts::budget_spent_message(job.timeout_runs, total)
    } else {
        format!("{} ({} failure, not retried: {said})", d.update.message, failure.class.as_str())
    };
    FailureOutcome::Final { failure, message }
}
/// How many of the job's attempts were made for `cause`.
/// A hung attempt restarted (`gpu_watch.hang_action = restart`): its Slurm job cancelled, a new
/// attempt at once from the newest checkpoint without the hung nodes, counted as an infrastructure
/// retry; Final once those are spent.
pub fn hang_outcome(
    job: &JobRecord,
    hung_nodes: &[String],
    said: &str,
    policy: &RetryPolicy,
    attempts: &[AttemptRecord],
    now: i64,
) -> FailureOutcome {
    let failure = Failure { class: FailureClass::Infra, evidence: vec![said.to_string()] };
    let retries_so_far =
        made_for(attempts, Cause::Infra) + attempts.iter().filter(|a| a.number > 1 && a.cause.is_none()).count() as u32;
    if retries_so_far >= policy.max_retries {
        let message = format!("hung ({said}); retry budget exhausted: {} attempts", attempts.len());
        return FailureOutcome::Final { failure, message };
    }
    let mut exclude: Vec<String> =
        job.excluded_nodes.split(',').filter(|n| !n.is_empty()).map(str::to_string).collect();
    for n in hung_nodes {
        if !exclude.contains(n) {
            exclude.push(n.clone());
        }
    }
    let exclude = exclude.join(",");
    let message = format!(
        "attempt {} hung ({said}); restarted as retry {} of {} from its newest checkpoint, excluding {exclude}",
        job.attempt,
        retries_so_far + 1,
        policy.max_retries
    );
    FailureOutcome::Retry {
        failure,
        cause: Cause::Infra,
        resumed_from: job.checkpoint.clone(),
        next_name: attempt_name(&job.plan, job.attempt + 1),
        exclude,
        not_before: now,
        message,
    }
}

pub fn made_for(attempts: &[AttemptRecord], cause: Cause) -> u32 {
    attempts.iter().filter(|a| a.cause.as_deref() == Some(cause.as_str())).count() as u32
}

/// A preempted attempt: a new attempt at once from the newest checkpoint (on any node: the nodes did
/// nothing wrong), or the job ends Canceled with the reason (`--on-preempt cancel`, or too many).
fn after_preempted(
    job: &JobRecord,
    failure: Failure,
    attempts: &[AttemptRecord],
    nodes: &str,
    checkpoint: Option<String>,
    now: i64,
) -> FailureOutcome {
    let next = after_preemption(job.plan.on_preempt, made_for(attempts, Cause::Preempted), job.plan.max_preemptions);
    let message = preempted_message(&crate::utc::rfc3339(now), nodes, checkpoint.as_deref(), next);
    match next {
        PreemptNext::Resume { .. } => FailureOutcome::Retry {
            failure,
            cause: Cause::Preempted,
            resumed_from: checkpoint,
            next_name: attempt_name(&job.plan, job.attempt + 1),
            exclude: job.excluded_nodes.clone(),
            not_before: now,
            message,
        },
        PreemptNext::Cancel | PreemptNext::BudgetSpent { .. } => FailureOutcome::Final { failure, message },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tails come from main.err and main.out, or, when the batch script never linked them (a
    /// launch that failed before it ran), from the files Slurm opened in the logs root.
    #[test]
    fn the_evidence_reads_slurms_files_when_the_log_directory_has_none() {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = crate::fixtures::settings();
        settings.base_results_dir = Some(dir.path().join("base").display().to_string());
        let plan = crate::plan::resolve_with_id(&crate::fixtures::spec(), &settings, "job-e").unwrap();
        let job = JobRecord {
            summary: crate::fixtures::summary(&plan, Some("77"), 0),
            spec_json: "{}".into(),
            plan: plan.clone(),
        };
        let decision = Decision {
            job_id: "job-e".into(),
            adopt: None,
            update: StatusUpdate::bare(PlatformStatus::Error, "failed"),
        };
        let layout = &plan.layout;
        std::fs::create_dir_all(layout.log_dir(&job.attempt_name, "77")).unwrap();
        std::fs::write(layout.slurm_output(&job.attempt_name, "77", "err"), "slurmstepd: error: launch failed\n")
            .unwrap();
        std::fs::write(layout.slurm_output(&job.attempt_name, "77", "out"), "").unwrap();
        let tail = || {
            let script = evidence_script(&[(&job, &decision)]);
            let out = std::process::Command::new("bash").arg("-c").arg(&script).output().unwrap();
            parse_evidence(&String::from_utf8_lossy(&out.stdout)).tails.remove("job-e").unwrap_or_default()
        };
        assert!(tail().contains("slurmstepd: error: launch failed"), "{}", tail());
        let main_err = format!("{}/main.err", layout.log_dir(&job.attempt_name, "77"));
        std::fs::write(&main_err, "CUDA error: an illegal memory access\n").unwrap();
        let linked = tail();
        assert!(linked.contains("illegal memory access") && !linked.contains("launch failed"), "{linked}");
    }
}
