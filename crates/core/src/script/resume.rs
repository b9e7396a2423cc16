//! The parts of the batch script that let a training outlive its time limit: the checkpoint an
//! attempt resumes from (`$TAO_RESUME_CHECKPOINT`, and TAO's resume key in the staged specs), and
//! the warning (USR2) before the time limit, forwarded to the container step, which then has the
//! grace period to save a checkpoint before the inner timeout ends it.
//!
//! Why USR2: NCCL reserves USR1 for its own use; TERM is what the inner timeout and Slurm end a step
//! with. Why `B:` and forwarding: Slurm's warning then reaches the batch shell, which also warns the
//! step before the *inner* timeout (earlier than Slurm's wall limit) and on a graceful pause, always
//! the same way: `scancel --signal=USR2 <job>` signals every step of the job (not the batch shell),
//! through slurmstepd, so it reaches the container's processes under Pyxis as under the stand-in.

use crate::attempts::Cause;
use crate::checkpoint::{newest_shell, RESUME_VAR, TAO_RESUME_KEY};
use crate::exit_codes::TIMED_OUT;
use crate::plan::Plan;
use crate::script::shell::quote;
use std::fmt::Write as _;

/// The most seconds `--signal=...@N` takes.
const MAX_SIGNAL_SECONDS: u64 = 65_535;

/// Stands for the checkpoint in the resume specs template staged inside the script.
const PLACEHOLDER: &str = "@@TAO_RESUME_CHECKPOINT@@";

/// Whether the job is warned before its time limit (a Cosmos-RL job's three steps are not).
pub fn warns(plan: &Plan) -> bool {
    plan.checkpoint_grace_seconds > 0 && plan.cosmos.is_none()
}

/// `#SBATCH --signal=B:USR2@<grace>`: Slurm warns the batch shell before the wall limit.
pub fn signal_directive(plan: &Plan) -> Option<String> {
    warns(plan).then(|| format!("--signal=B:USR2@{}", plan.checkpoint_grace_seconds.min(MAX_SIGNAL_SECONDS)))
}

/// Seconds after the step starts that the batch shell warns it before the inner timeout: the grace
/// before it, or half the timeout when the grace is longer than that.
pub fn warn_after_seconds(plan: &Plan) -> u64 {
    crate::attempts::useful_seconds(plan.timeout_seconds, plan.checkpoint_grace_seconds)
}

/// The newest checkpoint in the results directory (left by an earlier attempt: a requeue after the
/// inner timeout, a retry, a preemption, a resume after a pause) is exported as
/// `$TAO_RESUME_CHECKPOINT` (empty on a first attempt); a job with specs gets it under TAO's resume
/// key too. Each start is appended to `.tao-slurm/attempts` in the results directory, with its cause
/// when Slurm restarted the job (`layout::STARTS_FILE`).
pub fn write_resume(s: &mut String, plan: &Plan) {
    let _ = writeln!(s, "tao_results={}", quote(&plan.layout.results_dir()));
    let _ = writeln!(s, "{}", newest_shell("tao_results", "tao_resume", &plan.checkpoint_patterns));
    let _ = writeln!(s, "export {RESUME_VAR}=\"$tao_resume\"");
    s.push_str("if [ -n \"$tao_resume\" ]; then echo \"tao-slurm: resuming from checkpoint $tao_resume\" >&2; fi\n");
    if let Some(template) = resume_specs_template(plan) {
        // Only a path JSON can hold between quotes as it is (no quote, backslash or control character).
        let _ = writeln!(s, "case \"$tao_resume\" in ''|*[\\\"\\\\]*|*[[:cntrl:]]*) ;; *)");
        let _ = writeln!(s, "  tao_specs={}", quote(&template));
        let _ = writeln!(
            s,
            "  printf '%s\\n' \"${{tao_specs//{PLACEHOLDER}/$tao_resume}}\" > \"$TAO_SPECS_FILE.resume\" && mv -f -- \"$TAO_SPECS_FILE.resume\" \"$TAO_SPECS_FILE\" ;;"
        );
        s.push_str("esac\n");
    }
    let (d, starts, marker) =
        (crate::layout::BOOKKEEPING_DIR, crate::layout::STARTS_FILE, crate::layout::REQUEUE_CAUSE_FILE);
    // A restart is the script's own requeue after the inner timeout (it left the marker) or Slurm's.
    let _ = writeln!(
        s,
        "tao_cause=-; if [ \"${{SLURM_RESTART_COUNT:-0}}\" -gt 0 ]; then tao_cause={}; [ \"$(head -c 16 \"$tao_results/{d}/{marker}\" 2>/dev/null)\" = {} ] && tao_cause={}; fi; rm -f \"$tao_results/{d}/{marker}\"",
        Cause::Preempted.as_str(),
        Cause::Timeout.as_str(),
        Cause::Timeout.as_str()
    );
    let _ = writeln!(
        s,
        "mkdir -p \"$tao_results/{d}\" && printf '%s %s %s %s %s\\n' \"$(date +%s)\" \"$SLURM_JOB_ID\" \"${{SLURM_RESTART_COUNT:-0}}\" \"$tao_cause\" \"${{tao_resume:--}}\" >> \"$tao_results/{d}/{starts}\""
    );
}

/// The staged specs with TAO's resume key set to the placeholder (None for a job without specs).
fn resume_specs_template(plan: &Plan) -> Option<String> {
    plan.specs.as_ref()?;
    let mut specs = plan.specs_json();
    let mut node = specs.as_object_mut()?;
    let (last, parents) = TAO_RESUME_KEY.split_last()?;
    for key in parents {
        let entry = node.entry(key.to_string()).or_insert_with(|| serde_json::json!({}));
        if !entry.is_object() {
            *entry = serde_json::json!({});
        }
        node = entry.as_object_mut()?;
    }
    node.insert(last.to_string(), PLACEHOLDER.into());
    Some(specs.to_string())
}

/// The warning's trap: on USR2 (Slurm's, or the timer's before the inner timeout) every step of the
/// job is sent USR2. `tao_interrupted` tells the wait loop its `wait` was cut short by the trap;
/// `tao_warned` that the step was warned.
pub fn write_trap(s: &mut String, plan: &Plan) {
    if !warns(plan) {
        return;
    }
    let _ = writeln!(s, "tao_interrupted=0 tao_warned=0");
    let _ = writeln!(
        s,
        "tao_warn() {{ tao_interrupted=1 tao_warned=1; echo \"tao-slurm: the time limit is near: sending USR2 to the job's steps ({}s to save a checkpoint)\" >&2; scancel --signal=USR2 \"$SLURM_JOB_ID\" || echo \"tao-slurm: could not warn the steps\" >&2; }}",
        plan.checkpoint_grace_seconds
    );
    s.push_str("trap tao_warn USR2\n");
}

/// Runs `step` (a command line without its newline) and leaves its status in `rc`. When the job is
/// warned, the step runs in the background so the trap can run while it does, a timer warns it
/// before the inner timeout, and `wait` is repeated when the trap cut it short.
pub fn write_step(s: &mut String, plan: &Plan, step: &str) {
    if !warns(plan) {
        let _ = writeln!(s, "{step}");
        s.push_str("rc=$?\n");
        return;
    }
    let _ = writeln!(s, "{step} &");
    s.push_str("tao_step=$!\n");
    if plan.use_timeout {
        // The timer's sleep holds no pipe of the job's and ends with it (TERM to the timer).
        let _ = writeln!(
            s,
            "( trap 'kill \"$tao_sleep\" 2>/dev/null; exit 0' TERM; sleep {} & tao_sleep=$!; wait \"$tao_sleep\" && kill -USR2 $$ ) </dev/null >/dev/null 2>&1 & tao_timer=$!",
            warn_after_seconds(plan)
        );
    }
    s.push_str("while :; do tao_interrupted=0; wait \"$tao_step\"; rc=$?; [ \"$tao_interrupted\" = 1 ] && [ \"$rc\" -gt 128 ] || break; done\n");
    if plan.use_timeout {
        s.push_str("kill \"$tao_timer\" 2>/dev/null\n");
    }
    // A program that does not handle USR2 ends at the warning (and one that does may end after
    // saving): a warned step that fails ended at the time limit, so it is requeued as after the
    // inner timeout rather than failing the job.
    let _ = writeln!(
        s,
        "if [ \"$tao_warned\" = 1 ] && [ \"$rc\" -ne 0 ] && [ \"$rc\" -ne {TIMED_OUT} ]; then echo \"tao-slurm: the step ended after the warning (status $rc): counted as the time limit\" >&2; rc={TIMED_OUT}; fi"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::resolve_with_id;
    use crate::plan::tests::{settings, spec};
    use crate::script::render_batch_script;
    use crate::spec::JobSpec;
    use std::path::Path;
    use std::process::Command;

    const ID: &str = "00000000-0000-4000-8000-000000000002";

    fn plan(spec: JobSpec) -> Plan {
        resolve_with_id(&spec, &settings(), ID).unwrap()
    }

    /// Runs the batch script with stand-ins: `srun` runs `srun_body` (its pid in `srun.pid`, its
    /// environment's TAO_RESUME_CHECKPOINT in `resume`), `scancel --signal=USR2` signals it.
    /// Returns (exit status, stderr, the stand-in tree).
    fn run(script: &str, srun_body: &str, before: impl FnOnce(&Path)) -> (i32, String, tempfile::TempDir) {
        run_in(tempfile::tempdir().unwrap(), "0", script, srun_body, before)
    }

    /// [`run`] in `dir` (left as an earlier run left it), as Slurm's restart `restart` of the job.
    fn run_in(
        dir: tempfile::TempDir,
        restart: &str,
        script: &str,
        srun_body: &str,
        before: impl FnOnce(&Path),
    ) -> (i32, String, tempfile::TempDir) {
        let d = dir.path();
        let bin = d.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let exe = |name: &str, body: &str| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::write(bin.join(name), format!("#!/bin/bash\n{body}\n")).unwrap();
            std::fs::set_permissions(bin.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
        };
        let root = d.display();
        exe(
            "srun",
            &format!("echo $$ > {root}/srun.pid; printf '%s' \"$TAO_RESUME_CHECKPOINT\" > {root}/resume\n{srun_body}"),
        );
        exe("scancel", &format!("[ \"$1\" = --signal=USR2 ] && kill -USR2 \"$(cat {root}/srun.pid)\""));
        exe("scontrol", "true");
        exe("timeout", "shift 3; \"$@\"");
        let script = script.replace("/lustre/alice", &format!("{root}/lustre"));
        let specs = d.join(format!("lustre/specs/{ID}.json"));
        std::fs::create_dir_all(specs.parent().unwrap()).unwrap();
        std::fs::create_dir_all(d.join(format!("lustre/results/{ID}"))).unwrap();
        std::fs::write(&specs, "{}").unwrap();
        before(d);
        std::fs::write(d.join("job.sbatch"), &script).unwrap();
        let out = Command::new("bash")
            .arg(d.join("job.sbatch"))
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .env("SLURM_JOB_ID", "77")
            .env("SLURM_JOB_NAME", "tao-job-x")
            .env("SLURM_JOB_NODELIST", "nodeA")
            .env("SLURM_RESTART_COUNT", restart)
            .output()
            .unwrap();
        (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned(), dir)
    }

    #[test]
    fn the_signal_line_and_the_trap_are_there_unless_the_job_opts_out() {
        let s = render_batch_script(&plan(spec()));
        assert!(s.lines().any(|l| l == "#SBATCH --signal=B:USR2@300"), "{s}");
        assert!(s.contains("trap tao_warn USR2") && s.contains("scancel --signal=USR2 \"$SLURM_JOB_ID\""));
        let quiet = render_batch_script(&plan(JobSpec { checkpoint_grace_seconds: Some(0), ..spec() }));
        assert!(
            !quiet.contains("--signal=B:") && !quiet.contains("trap tao_warn") && !quiet.contains("tao_step"),
            "{quiet}"
        );
        // The warning before the inner timeout: its grace before it, or half of it when shorter.
        let p = plan(JobSpec { timeout_hours: Some(1.0), checkpoint_grace_seconds: Some(600), ..spec() });
        assert_eq!(warn_after_seconds(&p), 3000);
        let p = plan(JobSpec { timeout_hours: Some(0.01), checkpoint_grace_seconds: Some(600), ..spec() });
        assert_eq!(warn_after_seconds(&p), 18);
    }

    #[test]
    fn the_step_is_warned_before_the_inner_timeout_and_its_status_kept() {
        // A 3-second inner timeout with a 2-second grace: the timer warns the step after ~1.5 s.
        let p = plan(JobSpec { timeout_hours: Some(3.0 / 3600.0), checkpoint_grace_seconds: Some(2), ..spec() });
        let body =
            "trap 'echo warned > \"$(dirname \"$0\")/../warned\"' USR2; for i in $(seq 30); do sleep 0.1; done; exit 7";
        let (rc, err, dir) = run(&render_batch_script(&p), body, |_| {});
        assert!(err.contains("the time limit is near"), "{err}");
        assert!(dir.path().join("warned").exists(), "the step got USR2: {err}");
        // Its own status (7, not the trap's), and a warned step that fails ended at the time limit:
        // requeued as after the inner timeout (the stand-in scontrol requeues; the script exits 0).
        assert!(err.contains("the step ended after the warning (status 7): counted as the time limit"), "{err}");
        assert!(err.contains("inner timeout reached; requeueing (timeout requeue 1 of"), "{err}");
        assert_eq!(rc, 0, "{err}");
    }

    #[test]
    fn a_program_that_does_not_handle_the_warning_is_requeued_not_failed() {
        let p = plan(JobSpec { timeout_hours: Some(3.0 / 3600.0), checkpoint_grace_seconds: Some(2), ..spec() });
        // No USR2 handler: the warning ends it (status 140), as it ends a TAO container that ignores it.
        let (rc, err, _dir) = run(&render_batch_script(&p), "exec sleep 30", |_| {});
        assert!(err.contains("the step ended after the warning (status 140)"), "{err}");
        assert!(err.contains("requeueing (timeout requeue 1 of"), "{err}");
        assert_eq!(rc, 0, "{err}");
        // Unwarned, a failing step keeps its status (no requeue).
        let (rc, err, _dir) = run(&render_batch_script(&plan(spec())), "exit 7", |_| {});
        assert_eq!(rc, 7, "{err}");
        assert!(!err.contains("counted as the time limit"), "{err}");
    }

    #[test]
    fn a_later_attempt_gets_the_newest_checkpoint_in_its_environment_and_specs() {
        let specs = serde_json::json!({"train": {"num_epochs": 3}});
        let p = plan(JobSpec { specs: Some(specs), ..spec() });
        let script = render_batch_script(&p);
        let (rc, err, dir) = run(&script, "exit 0", |_| {});
        assert_eq!(rc, 0, "{err}");
        assert_eq!(std::fs::read_to_string(dir.path().join("resume")).unwrap(), "", "a first attempt has none");
        let results = format!("lustre/results/{ID}");
        let (rc, err, dir) = run(&script, "exit 0", |d| {
            std::fs::create_dir_all(d.join(&results).join("train")).unwrap();
            for (name, age) in [("train/epoch-1.pth", 50), ("train/epoch-2.pth", 10)] {
                let path = d.join(&results).join(name);
                std::fs::write(&path, b"x").unwrap();
                let when = std::time::SystemTime::now() - std::time::Duration::from_secs(age);
                std::fs::File::options().write(true).open(&path).unwrap().set_modified(when).unwrap();
            }
        });
        assert_eq!(rc, 0, "{err}");
        let newest = dir.path().join(&results).join("train/epoch-2.pth").display().to_string();
        assert_eq!(std::fs::read_to_string(dir.path().join("resume")).unwrap(), newest);
        assert!(err.contains(&format!("resuming from checkpoint {newest}")), "{err}");
        let staged = std::fs::read_to_string(dir.path().join(format!("lustre/specs/{ID}.json"))).unwrap();
        let staged: serde_json::Value = serde_json::from_str(&staged).unwrap();
        assert_eq!(staged["train"]["resume_training_checkpoint_path"], newest.as_str());
        assert_eq!(staged["train"]["num_epochs"], 3, "the job's own specs stay");
        let attempts = std::fs::read_to_string(dir.path().join(&results).join(".tao-slurm/attempts")).unwrap();
        assert!(attempts.trim_end().ends_with(&format!(" 77 0 - {newest}")), "{attempts}");
    }

    #[test]
    fn each_start_is_recorded_with_its_cause_timeout_for_our_own_requeue_preempted_for_slurms() {
        let p = plan(JobSpec { timeout_hours: Some(3.0 / 3600.0), checkpoint_grace_seconds: Some(2), ..spec() });
        let script = render_batch_script(&p);
        // The first start times out and requeues itself; the restart finds the marker.
        let (rc, err, dir) = run(&script, "exec sleep 30", |_| {});
        assert_eq!(rc, 0, "{err}");
        let (rc, err, dir) = run_in(dir, "1", &script, "exit 0", |_| {});
        assert_eq!(rc, 0, "{err}");
        // A restart the script did not ask for is Slurm's own (after a preemption).
        let (rc, err, dir) = run_in(dir, "2", &script, "exit 0", |_| {});
        assert_eq!(rc, 0, "{err}");
        let starts =
            std::fs::read_to_string(dir.path().join(format!("lustre/results/{ID}/.tao-slurm/attempts"))).unwrap();
        let causes: Vec<(&str, &str)> = starts
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                (f[2], f[3])
            })
            .collect();
        assert_eq!(causes, vec![("0", "-"), ("1", "timeout"), ("2", "preempted")], "{starts}");
    }
}
