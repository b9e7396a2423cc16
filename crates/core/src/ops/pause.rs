//! Pause and resume, tao-slurm's own steps (the allocation is released; Slurm's SUSPENDED is not
//! used). Pure: what a pause or a resume does from the job's status, the checkpoint signal's script,
//! and what a refresh makes of a job that is pausing or resuming.
//!
//! The states: Running --pause --graceful--> Pausing (USR2 sent to the job's steps: the same signal
//! as the warning before a time limit) --the job ends, or its grace passes and it is cancelled-->
//! Paused. Any other pause (not graceful, or of a job not running yet) cancels at once: Paused.
//! Paused --resume--> Resuming (a new attempt, due now; it resumes from the newest checkpoint like
//! every later attempt) --Slurm runs it--> Running.

use crate::model::{JobRecord, StatusUpdate};
use crate::plan::Plan;
use crate::protocol::{sections, unprefix_lines, PREFIX_LINES, SECTION};
use crate::script::shell::quote;
use crate::spec::SpecError;
use crate::status::PlatformStatus;

/// The bound of a graceful pause of a job that opted out of the warning (checkpoint grace 0).
pub const DEFAULT_GRACE_SECONDS: u64 = 300;

/// How long a graceful pause waits for the job to save a checkpoint and end before cancelling it:
/// the job's checkpoint grace (the time it has before a time limit), or [`DEFAULT_GRACE_SECONDS`].
pub fn graceful_bound(plan: &Plan) -> u64 {
    match plan.checkpoint_grace_seconds {
        0 => DEFAULT_GRACE_SECONDS,
        g => g,
    }
}

/// What a pause does to a job as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PauseStep {
    /// Paused or pausing already: nothing (a pause is idempotent).
    Nothing,
    /// Running with a Slurm job: send the checkpoint signal; cancelled once it ends or the bound passes.
    Signal { slurm_job_id: String },
    /// Stop it now (not graceful, or nothing running to save a checkpoint) and record it Paused.
    Cancel,
}

/// The pause of `job` (`graceful`: let it save a checkpoint first); Err for a job that ended.
pub fn pause_step(job: &JobRecord, graceful: bool) -> Result<PauseStep, String> {
    match job.status {
        s if s.is_terminal() => Err(format!("job {} ended {s}: there is nothing to pause", job.job_id)),
        PlatformStatus::Paused | PlatformStatus::Pausing => Ok(PauseStep::Nothing),
        PlatformStatus::Running if graceful => match &job.slurm_job_id {
            Some(id) => Ok(PauseStep::Signal { slurm_job_id: id.clone() }),
            None => Ok(PauseStep::Cancel),
        },
        _ => Ok(PauseStep::Cancel),
    }
}

/// What a resume does to a job as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResumeStep {
    /// Reopen it under its next attempt (a compare-and-set in the store).
    Reopen,
    /// Resumed already, or never paused and still going: answered as it is (idempotent).
    Nothing,
}

/// The resume of a job in `status`; Err says why it cannot be resumed (yet).
pub fn resume_step(job_id: &str, status: PlatformStatus) -> Result<ResumeStep, String> {
    match status {
        PlatformStatus::Paused => Ok(ResumeStep::Reopen),
        PlatformStatus::Pausing => {
            Err(format!("job {job_id} is still pausing (saving a checkpoint): resume it once it is Paused"))
        }
        PlatformStatus::Complete => Err(format!("job {job_id} completed: there is nothing to resume")),
        PlatformStatus::Error | PlatformStatus::Canceled => {
            Err(format!("job {job_id} ended {status}: `retry` runs it again from its newest checkpoint"))
        }
        PlatformStatus::Pending | PlatformStatus::Running | PlatformStatus::Resuming => Ok(ResumeStep::Nothing),
    }
}

/// The plan and spec (JSON) of a job resumed with new specs (TAO's resume body): they replace its
/// specs, checked as a submission's are. None when `specs` is empty (TAO's client sends `{}` for
/// "as they were").
pub fn with_new_specs(
    job_id: &str,
    plan: &Plan,
    spec_json: &str,
    specs: &serde_json::Value,
) -> Result<Option<(Plan, String)>, SpecError> {
    let Some(map) = specs.as_object() else {
        return Err(SpecError::new("specs", "must be a JSON object (a mapping of spec keys)"));
    };
    if map.is_empty() {
        return Ok(None);
    }
    if plan.specs.is_none() {
        return Err(SpecError::new(
            "specs",
            format!("job {job_id} was submitted without specs: its command reads none"),
        ));
    }
    let bytes = specs.to_string().len();
    if bytes > crate::spec::MAX_SPECS_BYTES {
        return Err(SpecError::new(
            "specs",
            format!("is {bytes} bytes as JSON; at most {} are staged", crate::spec::MAX_SPECS_BYTES),
        ));
    }
    let mut spec: serde_json::Value = serde_json::from_str(spec_json).unwrap_or_else(|_| serde_json::json!({}));
    if let Some(obj) = spec.as_object_mut() {
        obj.insert("specs".into(), specs.clone());
    }
    let plan = Plan { specs: Some(specs.clone()), ..plan.clone() };
    Ok(Some((plan, spec.to_string())))
}

/// What a refresh decided of a job, given the status it had: a pausing job stays Pausing while its
/// Slurm job runs and is Paused once it ended any way but completing (its cancellation is the pause,
/// not a failure, so it is neither retried nor Canceled); a resuming job stays Resuming while Slurm
/// keeps it pending.
pub fn held(stored: PlatformStatus, mut update: StatusUpdate) -> StatusUpdate {
    match (stored, update.status) {
        (PlatformStatus::Pausing, PlatformStatus::Pending | PlatformStatus::Running) => {
            update.status = PlatformStatus::Pausing;
            update.message = format!("pausing: {}", update.message);
            update.pending_reason = None;
        }
        (PlatformStatus::Pausing, PlatformStatus::Complete) => {}
        (PlatformStatus::Pausing, _) => {
            update.status = PlatformStatus::Paused;
            update.message = format!("paused: {}", update.message);
        }
        (PlatformStatus::Resuming, PlatformStatus::Pending) => {
            update.status = PlatformStatus::Resuming;
            update.message = format!("resuming: {}", update.message);
        }
        _ => {}
    }
    update
}

/// The checkpoint signal to every step of a Slurm job (not its batch shell, whose trap would take
/// it for the time limit and requeue the job): what the step of the long-training warning gets.
pub fn signal_script(slurm_job_id: &str) -> String {
    format!(
        "echo '{SECTION}signal'\nscancel --signal=USR2 {} 2>&1 | {PREFIX_LINES}\necho \"{SECTION}rc ${{PIPESTATUS[0]}}\"\nexit 0\n",
        quote(slurm_job_id)
    )
}

/// Whether the signal was sent; Err with what scancel said.
pub fn parse_signal_output(stdout: &str) -> Result<(), String> {
    let mut said = String::new();
    for (name, arg, body) in sections(stdout) {
        match name.as_str() {
            "signal" => said = unprefix_lines(&body).trim().to_string(),
            "rc" if arg.trim() == "0" => return Ok(()),
            "rc" => return Err(format!("scancel --signal=USR2 failed: {said}")),
            _ => {}
        }
    }
    Err(format!("no answer from scancel: {said}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use PlatformStatus::*;

    fn update(status: PlatformStatus) -> StatusUpdate {
        StatusUpdate { pending_reason: Some("Resources".into()), ..StatusUpdate::bare(status, "Slurm state X") }
    }

    #[test]
    fn a_pausing_job_is_paused_once_it_ended_any_way_but_completing() {
        for running in [Pending, Running] {
            let u = held(Pausing, update(running));
            assert_eq!((u.status, u.pending_reason), (Pausing, None));
            assert!(u.message.starts_with("pausing: "), "{}", u.message);
        }
        for ended in [Error, Canceled, Paused] {
            let u = held(Pausing, update(ended));
            assert_eq!(u.status, Paused, "{ended}");
            assert!(u.message.starts_with("paused: "), "{}", u.message);
        }
        assert_eq!(held(Pausing, update(Complete)).status, Complete, "it finished before the pause took");
        assert_eq!(held(Resuming, update(Pending)).status, Resuming);
        for s in [Running, Error, Complete, Canceled] {
            assert_eq!(held(Resuming, update(s)).status, s);
        }
        for stored in [Pending, Running, Paused, Error] {
            assert_eq!(held(stored, update(Canceled)).status, Canceled, "{stored}");
        }
    }

    #[test]
    fn resume_reopens_only_a_paused_job_and_says_why_not() {
        assert_eq!(resume_step("j", Paused), Ok(ResumeStep::Reopen));
        for going in [Pending, Running, Resuming] {
            assert_eq!(resume_step("j", going), Ok(ResumeStep::Nothing));
        }
        assert!(resume_step("j", Pausing).unwrap_err().contains("still pausing"));
        assert!(resume_step("j", Complete).unwrap_err().contains("nothing to resume"));
        assert!(resume_step("j", Error).unwrap_err().contains("retry"));
    }

    #[test]
    fn new_specs_replace_the_old_ones_and_are_checked() {
        use crate::plan::tests::{settings, spec};
        let with = crate::spec::JobSpec { specs: Some(serde_json::json!({"train": {"num_epochs": 3}})), ..spec() };
        let plan = crate::plan::resolve_with_id(&with, &settings(), "j").unwrap();
        let spec_json = serde_json::to_string(&with).unwrap();
        let new = serde_json::json!({"train": {"num_epochs": 9}});
        let (p, s) = with_new_specs("j", &plan, &spec_json, &new).unwrap().unwrap();
        assert_eq!(p.specs_json()["train"]["num_epochs"], 9);
        assert_eq!(serde_json::from_str::<serde_json::Value>(&s).unwrap()["specs"], new);
        assert_eq!(with_new_specs("j", &plan, &spec_json, &serde_json::json!({})).unwrap(), None);
        assert_eq!(with_new_specs("j", &plan, &spec_json, &serde_json::json!([1])).unwrap_err().field, "specs");
        let without = crate::plan::resolve_with_id(&spec(), &settings(), "k").unwrap();
        let e = with_new_specs("k", &without, "{}", &new).unwrap_err();
        assert!(e.message.contains("without specs"), "{e}");
    }

    #[test]
    fn the_signal_script_quotes_the_id_and_its_answer_is_read() {
        let s = signal_script("12;rm");
        assert!(s.contains("scancel --signal=USR2 '12;rm'"), "{s}");
        let ok = format!("{SECTION}signal\n{SECTION}rc 0\n");
        assert_eq!(parse_signal_output(&ok), Ok(()));
        let bad = format!("{SECTION}signal\n|scancel: error: Invalid job id\n{SECTION}rc 1\n");
        assert!(parse_signal_output(&bad).unwrap_err().contains("Invalid job id"));
        assert!(parse_signal_output("").is_err());
    }
}
