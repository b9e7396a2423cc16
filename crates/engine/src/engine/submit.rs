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
/// `after-sbatch`, and `batch-second-before-sbatch` (the remote pause, in the second member of a
/// batch only: the batch's round trip times out with its other members submitted).
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

/// Submit one recorded attempt under its gate (a retry, a resumed submission, a pipeline step): a
/// batch of one, through [`submit_request`] like a job's first attempt.
pub fn submit_gated(
    remote: &dyn Remote,
    store: &Store,
    plan: &Plan,
    files: &[StagedFile],
    secrets: &SecretValues,
    ticket: AttemptTicket,
    gate: Option<&crate::ops::depend::Gate>,
) -> Result<Submitted> {
    let request = SubmitRequest {
        plan: plan.clone(),
        files: files.to_vec(),
        secrets: secrets.clone(),
        ticket,
        gate: gate.cloned(),
        checks: String::new(),
    };
    submit_request(remote, store, request)
}

/// The sbatch options the attempt's gate gives it now (its dependency, or a hold).
fn gate_ticket(ticket: &mut AttemptTicket, gate: Option<&crate::ops::depend::Gate>) {
    if let Some(g) = gate {
        (ticket.dependency, ticket.hold) = g.sbatch();
    }
}

/// A submitted attempt keeps the gate it was submitted under.
fn keep_gate(
    store: &Store,
    plan: &Plan,
    result: &Result<Submitted>,
    gate: Option<&crate::ops::depend::Gate>,
) -> Result<()> {
    if let (Ok(_), Some(g)) = (result, gate) {
        store.set_gate(&plan.layout.job_id, &g.stored())?;
    }
    Ok(())
}

/// Jobs whose submission never reached the cluster (nothing was sent): they end Error, saying why.
pub fn record_not_submitted(store: &Store, job_ids: &[&str], why: &RemoteError, now: i64) -> Result<()> {
    for id in job_ids {
        store.update_status(id, &StatusUpdate::bare(PlatformStatus::Error, format!("not submitted: {why}")), now)?;
    }
    Ok(())
}

/// A recorded job (`job`, as the store has it) whose door was answered before its submission, which
/// then failed: ended Error with the failure as its message. One whose outcome is unknown stays
/// Pending (it is found by its unique name), and one Slurm took (or that ended already) is left as it is.
pub fn keep_refused(store: &Store, job: &crate::store::JobRecord, e: &Error, now: i64) -> Result<()> {
    if matches!(e, Error::Remote(r) if outcome_unknown(r)) {
        return Ok(());
    }
    if job.slurm_job_id.is_none() && !job.status.is_terminal() {
        let update = StatusUpdate::bare(PlatformStatus::Error, format!("not submitted: {e}"));
        store.update_status(&job.job_id, &update, now)?;
    }
    Ok(())
}

/// Submit one recorded attempt, the submission running `checks` (core `ops::cluster::submission_checks_script`) once
/// its lock is held: a failed check ends it before anything is written, and comes back as the error
/// the online checks would have given ([`checks_failed`]), the store untouched.
fn submit_checked(
    remote: &dyn Remote,
    store: &Store,
    plan: &Plan,
    files: &[StagedFile],
    secrets: &SecretValues,
    ticket: &AttemptTicket,
    checks: &str,
) -> Result<Submitted> {
    crate::engine::redact::register_values(secrets);
    pause_at_failpoint("after-record");
    let hook = format!("{checks}{}", failpoint_hook());
    let script = submit_script_with_hook(plan, files, secrets, ticket, &hook);
    match remote.run_script(&script, Idempotency::RunAtMostOnce) {
        Ok(out) => settle(store, plan, &out.stdout, &out.stderr, out.exit_code, &out.host),
        Err(e) => Err(unsent_or_unknown(store, &plan.layout.job_id, e)?),
    }
}

/// The remote pause of the fault-injection tests, if one is asked for.
fn failpoint_hook() -> &'static str {
    if failpoint("remote-before-sbatch") {
        "echo 'tao-slurm: failpoint remote-before-sbatch reached' >&2\nsleep 20\n"
    } else {
        ""
    }
}

/// A submission whose round trip failed: when its outcome is unknown, the job stays Pending and is
/// found again by its unique Slurm job name (or submitted again later, which its lock makes safe).
/// When nothing reached the cluster, the attempt stays as it was (a retry stays due, and is tried
/// again at the next refresh); the caller decides what a first submission's failure means.
fn unsent_or_unknown(store: &Store, job_id: &str, e: RemoteError) -> Result<Error> {
    if outcome_unknown(&e) {
        store.update_status(
            job_id,
            &StatusUpdate::bare(PlatformStatus::Pending, format!("submission outcome unknown: {e}")),
            crate::clock::now(),
        )?;
    }
    Ok(e.into())
}

/// Whether a round trip that failed this way may have run its script (its answer was lost).
fn outcome_unknown(e: &RemoteError) -> bool {
    matches!(e, RemoteError::Lost { .. } | RemoteError::TimedOut { .. } | RemoteError::OutputTooLarge { .. })
}

/// Record what a submission script's run says (its output, exit status and host).
fn settle(store: &Store, plan: &Plan, stdout: &str, stderr: &str, exit_code: i32, host: &str) -> Result<Submitted> {
    let job_id = &plan.layout.job_id;
    let now = crate::clock::now();
    if exit_code == tao_slurm_core::exit_codes::CHECKS_FAILED {
        return Err(checks_failed(stdout, host));
    }
    let outcome = parse_outcome(stdout, exit_code);
    if let Some(id) = outcome.slurm_job_id() {
        pause_at_failpoint("after-sbatch");
        // Recorded even if a later step failed: a submitted job is never forgotten.
        store.set_submitted(job_id, id, host, now)?;
    }
    let detail = stderr.trim();
    let slurm_job_id = match outcome {
        Outcome::Submitted(id) => id,
        Outcome::NoJobId => {
            return Err(Error::RemoteCommand(format!("sbatch printed no job id: {}", stdout.trim())));
        }
        Outcome::NotStarted(id) => {
            let message = format!("job {job_id} (Slurm job {id}) was submitted but not started: {detail}");
            store.add_event(job_id, "submit_failed", &message, now)?;
            return Err(Error::RemoteCommand(message));
        }
        // In flight: another run of this submission owns it, and the job stays as it is.
        Outcome::InFlight | Outcome::Refused => {
            let message = format!("submission of job {job_id} failed on {host}: {detail}");
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
        login_host: host.to_string(),
        job_dir: plan.layout.base_dir.clone(),
        warnings: Vec::new(),
    })
}

/// What a submission's own checks found failing, as the online checks say it: missing inputs are
/// the spec's `inputs` error; a squashfs file gone from the cache is the `image`'s (the caller checks
/// again and submits once more).
fn checks_failed(stdout: &str, host: &str) -> Error {
    let (missing, stale_image) = crate::ops::cluster::failed_checks(stdout);
    if !missing.is_empty() {
        return crate::spec::SpecError::new("inputs", missing_inputs_message(host, &missing)).into();
    }
    let what = if stale_image { "its squashfs file left the image cache" } else { "a check failed" };
    crate::spec::SpecError::new("image", format!("{STALE_FACTS}: {what}; nothing was staged or submitted")).into()
}

/// The start of the error of a submission whose known facts were out of date (see [`checks_failed`]).
pub const STALE_FACTS: &str = "the cluster changed since its last checks";

/// The error for required paths the cluster does not have.
pub fn missing_inputs_message(host: &str, missing: &[String]) -> String {
    format!(
        "these paths do not exist on the cluster (checked with test -e on {host}); nothing was staged or submitted:\n  {}",
        missing.join("\n  ")
    )
}

/// The online checks one submit asks of the cluster (see [`facts_batch`]).
pub struct CheckRequest {
    pub paths: Vec<String>,
    /// Script text appended to the checks (the squashfs cache probe).
    pub probe: String,
}

/// The checks of several submits in one round trip (one `scontrol show partition` for all): each
/// one's facts, or the error of the round trip for each.
pub fn facts_batch(remote: &dyn Remote, requests: Vec<CheckRequest>) -> Vec<Result<crate::ops::cluster::SubmitFacts>> {
    if let [one] = requests.as_slice() {
        return vec![crate::engine::cluster::submit_facts(remote, &one.paths, &one.probe)];
    }
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    let members: Vec<(&[String], &str)> = requests.iter().map(|r| (r.paths.as_slice(), r.probe.as_str())).collect();
    let script = crate::ops::cluster::submit_facts_batch_script(&members, &nonce);
    match remote.run_script(&script, Idempotency::Idempotent) {
        Ok(out) if out.exit_code == 0 => {
            crate::ops::cluster::parse_submit_facts_batch(&out.stdout, &out.host, &nonce, requests.len())
                .into_iter()
                .map(Ok)
                .collect()
        }
        Ok(out) => {
            requests.iter().map(|_| Err(Error::RemoteCommand(format!("on {}: {}", out.host, out.stderr.trim())))).collect()
        }
        Err(e) => requests.iter().map(|_| Err(e.for_each_member().into())).collect(),
    }
}

/// One recorded attempt to submit in a batch (see [`submit_batch`]).
pub struct SubmitRequest {
    pub plan: Plan,
    pub files: Vec<StagedFile>,
    pub secrets: SecretValues,
    pub ticket: AttemptTicket,
    pub gate: Option<crate::ops::depend::Gate>,
    /// The checks the submission makes itself (made with known facts), or empty.
    pub checks: String,
}

/// Submit one recorded attempt in a round trip of its own (a batch of one): the one submission of a
/// recorded attempt, its gate's options given and the gate kept once it is submitted.
pub fn submit_request(remote: &dyn Remote, store: &Store, mut r: SubmitRequest) -> Result<Submitted> {
    gate_ticket(&mut r.ticket, r.gate.as_ref());
    let result = submit_checked(remote, store, &r.plan, &r.files, &r.secrets, &r.ticket, &r.checks);
    keep_gate(store, &r.plan, &result, r.gate.as_ref())?;
    result
}

/// Submit recorded attempts in one round trip: each one's own lock, staging and sbatch (one failing
/// is refused alone), each outcome recorded as [`submit_request`] records it. A round trip that fails
/// fails each member the way it fails a lone submission: outcome unknown (each one found again by
/// its name) or nothing sent.
pub fn submit_batch(remote: &dyn Remote, store: &Store, mut requests: Vec<SubmitRequest>) -> Vec<Result<Submitted>> {
    if requests.len() == 1 {
        return vec![submit_request(remote, store, requests.pop().expect("one request"))];
    }
    pause_at_failpoint("after-record");
    for r in &mut requests {
        crate::engine::redact::register_values(&r.secrets);
        gate_ticket(&mut r.ticket, r.gate.as_ref());
    }
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    let hooks: Vec<String> = requests
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let pause = if i == 1 && failpoint("batch-second-before-sbatch") {
                "echo 'tao-slurm: failpoint batch-second-before-sbatch reached' >&2\nsleep 20\n"
            } else {
                failpoint_hook()
            };
            format!("{}{pause}", r.checks)
        })
        .collect();
    let members: Vec<crate::ops::submit_batch::BatchMember> = requests
        .iter()
        .zip(&hooks)
        .map(|(r, hook)| crate::ops::submit_batch::BatchMember {
            plan: &r.plan,
            files: &r.files,
            secrets: &r.secrets,
            ticket: &r.ticket,
            before_sbatch: hook,
        })
        .collect();
    let script = crate::ops::submit_batch::batch_script(&members, &nonce);
    let deadline = remote.default_deadline()
        + std::time::Duration::from_secs(crate::config::SUBMIT_BATCH_SECS_PER_MEMBER * requests.len() as u64);
    let out = match remote.run_script_within(&script, Idempotency::RunAtMostOnce, deadline) {
        Ok(out) => out,
        Err(e) => {
            return requests
                .iter()
                .map(|r| unsent_or_unknown(store, &r.plan.layout.job_id, e.for_each_member()).and_then(Err))
                .collect()
        }
    };
    let runs = crate::ops::submit_batch::split_batch_output(&out.stdout, &out.stderr, &nonce, requests.len());
    // Every member's outcome in one commit, each in a savepoint of its own: a member whose record
    // fails is undone alone (and found again by its name, as a lone submission's would be).
    let settled = store.each_in_savepoint(requests.iter().zip(runs).collect(), |(r, run)| {
        let result = match run {
            Some(run) => settle(store, &r.plan, &run.stdout, &run.stderr, run.exit_code, &out.host),
            // The script stopped before this member's end (it never printed its mark): what
            // the script said is all there is, and any id it gave was not this member's.
            None => settle(store, &r.plan, "", &out.stderr, out.exit_code.max(1), &out.host),
        };
        keep_gate(store, &r.plan, &result, r.gate.as_ref())?;
        match result {
            Err(e @ Error::Store(_)) => Err(e),
            outcome => Ok(outcome),
        }
    });
    settled.into_iter().map(|r| r.unwrap_or_else(Err)).collect()
}
