//! Training longer than the queue allows (issue 23), on the real cluster: a stand-in training that
//! writes a checkpoint each epoch and resumes from `$TAO_RESUME_CHECKPOINT` survives its inner
//! timeout twice (warned each time before it), resuming from its newest checkpoint, and completes.

use crate::common::wait::{wait_for, when};
use crate::common::{is_terminal, Env};
use std::process::Stdio;
use std::time::Duration;

/// A stand-in for a TAO training: `EPOCHS` epochs of `EPOCH_SECONDS` each (not bash's `SECONDS`, which
/// counts up), a checkpoint `epoch-N.pth` after
/// each, resumed from `$TAO_RESUME_CHECKPOINT` when set; on USR2 (the warning) it says so and saves
/// its last finished epoch again (so it is the newest). The sleeps ignore USR2 (only the training reacts).
pub const TRAINING: &str = r#"set -u
dir="$TAO_API_RESULTS_DIR/$TAO_JOB_ID/train"; mkdir -p "$dir"
start=1
if [ -n "${TAO_RESUME_CHECKPOINT:-}" ]; then
  n="${TAO_RESUME_CHECKPOINT##*/epoch-}"; start=$(( ${n%.pth} + 1 ))
  echo "training: resuming at epoch $start from $TAO_RESUME_CHECKPOINT"
else
  echo "training: starting from scratch"
fi
last=$((start - 1))
trap 'echo "training: warned after epoch $last, saving"; [ "$last" -gt 0 ] && touch "$dir/epoch-$last.pth"' USR2
for e in $(seq "$start" "$EPOCHS"); do
  (trap '' USR2; exec sleep "$EPOCH_SECONDS") & s=$!
  while kill -0 "$s" 2>/dev/null; do wait "$s"; done
  echo "epoch $e" > "$dir/epoch-$e.pth"; last=$e
  echo "training: finished epoch $e"
done
echo "training: done"
"#;

#[test]
fn a_training_longer_than_its_time_limit_resumes_from_its_newest_checkpoint_each_time() {
    let env = Env::new();
    // 18 epochs of 4 s (72 s of training) under a 30 s inner timeout warned 10 s before it (the
    // training goes on after the warning until the timeout: 7 epochs a run): three runs.
    let (job, slurm) = env.submit(&[
        "--image",
        "ubuntu:22.04",
        "--gpus",
        "1",
        "--time-hours",
        "0.05",
        "--timeout-hours",
        &format!("{}", 30.0 / 3600.0),
        "--max-timeout-requeues",
        "4",
        "--checkpoint-grace",
        "10",
        "--env",
        "EPOCHS=18",
        "--env",
        "EPOCH_SECONDS=4",
        "--shell",
        "--",
        TRAINING,
    ]);
    let v = wait_for(&format!("job {job} terminal"), Duration::from_secs(600), Duration::from_millis(700), || {
        let v = env.status(&job);
        if !is_terminal(&v) && v["message"].as_str().is_some_and(|m| m.contains("BeginTime")) {
            env.nudge(&slurm);
        }
        when(v, is_terminal)
    });
    let logs = env.json(&["logs", &job, "--json"]);
    let (out, err) = (logs["stdout"].as_str().unwrap(), logs["stderr"].as_str().unwrap());
    assert_eq!(v["status"], "Complete", "{v}\n{out}\n{err}");
    // Warned before each inner timeout, and the training saw the warning.
    assert!(err.matches("the time limit is near").count() >= 2, "{err}");
    assert!(out.matches("training: warned after epoch").count() >= 2, "{out}");
    // Every epoch finished exactly once: each run went on from the newest checkpoint, none restarted.
    for e in 1..=18 {
        assert_eq!(out.matches(&format!("training: finished epoch {e}\n")).count(), 1, "epoch {e}:\n{out}");
    }
    assert_eq!(out.matches("starting from scratch").count(), 1, "{out}");
    let resumes: Vec<&str> = out.lines().filter(|l| l.starts_with("training: resuming at epoch")).collect();
    assert!(resumes.len() >= 2, "at least three runs: {out}");
    assert!(err.matches("tao-slurm: resuming from checkpoint ").count() >= 2, "{err}");
    assert!(out.contains("training: done"), "{out}");
    // The listing knows the checkpoints, newest last.
    let cks = env.json(&["checkpoints", &job, "--json"]);
    let paths: Vec<&str> = cks["checkpoints"].as_array().unwrap().iter().map(|c| c["path"].as_str().unwrap()).collect();
    assert_eq!(paths.last(), Some(&"train/epoch-18.pth"), "{cks}");
    // Each run after the first is an attempt of its own, made for the timeout, from the checkpoint
    // the run resumed from (the same Slurm job, restarted).
    let attempts = v["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), resumes.len() + 1, "{v:#}\n{out}");
    for (a, resumed) in attempts[1..].iter().zip(&resumes) {
        assert_eq!((a["cause"].as_str(), a["slurm_job_id"].as_str()), (Some("timeout"), Some(slurm.as_str())), "{v:#}");
        let from = a["resumed_from"].as_str().unwrap_or_else(|| panic!("no checkpoint: {v:#}"));
        assert!(resumed.ends_with(from), "attempt {} from {from}, the training said {resumed}", a["number"]);
    }
    let n = attempts.len();
    assert_eq!(v["attempt_summary"].as_str(), Some(format!("attempt {n} of at most 5 (timeout)").as_str()), "{v:#}");
}

#[test]
fn a_training_whose_total_time_is_spent_ends_error_with_that_reason() {
    let env = Env::new();
    // It says 20 s of training in all; it needs 72 s. Runs of a 30 s timeout warned 10 s before give
    // 20 s each: one run, plus one spare, so two queue-length attempts at most.
    let (job, slurm) = env.submit(&[
        "--image",
        "ubuntu:22.04",
        "--gpus",
        "1",
        "--time-hours",
        "0.05",
        "--timeout-hours",
        &format!("{}", 30.0 / 3600.0),
        "--total-time",
        &format!("{}", 20.0 / 3600.0),
        "--checkpoint-grace",
        "10",
        "--env",
        "EPOCHS=18",
        "--env",
        "EPOCH_SECONDS=4",
        "--shell",
        "--",
        TRAINING,
    ]);
    let v = wait_for(&format!("job {job} terminal"), Duration::from_secs(400), Duration::from_millis(700), || {
        let v = env.status(&job);
        if !is_terminal(&v) && v["message"].as_str().is_some_and(|m| m.contains("BeginTime")) {
            env.nudge(&slurm);
        }
        when(v, is_terminal)
    });
    assert_eq!(v["status"], "Error", "{v:#}");
    assert_eq!(
        v["message"].as_str(),
        Some("training budget spent: attempt 2 of at most 2 (timeout) (its total training time of 0.01 h was not enough)"),
        "{v:#}"
    );
    let causes: Vec<Option<&str>> = v["attempts"].as_array().unwrap().iter().map(|a| a["cause"].as_str()).collect();
    assert_eq!(causes, [None, Some("timeout")], "{v:#}");
}

#[test]
fn retry_of_an_error_job_starts_from_its_checkpoint_and_two_retries_make_one_slurm_job() {
    let env = Env::new();
    let script = r#"dir="$TAO_API_RESULTS_DIR/$TAO_JOB_ID/train"; mkdir -p "$dir"
if [ -z "${TAO_RESUME_CHECKPOINT:-}" ]; then echo x > "$dir/epoch-1.pth"; echo "failing after epoch 1"; exit 3; fi
echo "resumed from $TAO_RESUME_CHECKPOINT""#;
    let (job, first) = env.submit(&["--image", "ubuntu:22.04", "--gpus", "1", "--shell", "--", script]);
    let v = env.wait_terminal(&job, Duration::from_secs(300));
    assert_eq!(v["status"], "Error", "{v}");
    // Two callers at once: the store reopens the job once, so one new Slurm job.
    let callers: Vec<_> = (0..2)
        .map(|_| env.command(&["retry", &job, "--json"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap())
        .collect();
    for c in callers {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let v = env.wait_terminal(&job, Duration::from_secs(300));
    assert_eq!(v["status"], "Complete", "{v}");
    assert_eq!(v["attempts"].as_array().map(Vec::len), Some(2), "{v}");
    assert_ne!(v["slurm_job_id"].as_str(), Some(first.as_str()), "{v}");
    let events = env.ok(&["events", &job, "--json"]);
    assert_eq!(events.matches("\"retried\"").count(), 1, "{events}");
    assert_eq!(env.slurm_jobs_counted(&format!("tao-job-{job}.a2"), 1).len(), 1, "one Slurm job for the retry");
    let logs = env.json(&["logs", &job, "--json"]);
    let out = logs["stdout"].as_str().unwrap();
    assert!(out.contains("/train/epoch-1.pth"), "the retry resumed from the checkpoint: {out}");
    // A completed job has nothing to retry.
    let again = env.run(&["retry", &job]);
    assert!(!again.status.success() && String::from_utf8_lossy(&again.stderr).contains("nothing to retry"));
}

/// Submits the stand-in training pinned to `node` (all its GPUs, so no other job shares it) and
/// waits until it has saved `epochs_done` checkpoints; returns (job id, Slurm job id).
fn training_on(env: &Env, node: &str, epochs_done: u32, extra: &[&str]) -> (String, String) {
    let others: Vec<String> = (1..=4).map(|i| format!("node{i}")).filter(|n| n != node).collect();
    let exclude = others.join(",");
    let mut args = vec![
        "--image",
        "ubuntu:22.04",
        "--gpus",
        "8",
        "--exclude",
        &exclude,
        // Six minutes: room for a slow start on a busy machine (at three, a CI run beside a build saw
        // the resumed attempt reach its time limit); the preemption comes long before.
        "--time-hours",
        "0.1",
        "--env",
        "EPOCHS=8",
        "--env",
        "EPOCH_SECONDS=3",
    ];
    args.extend_from_slice(extra);
    args.extend(["--shell", "--", TRAINING]);
    let (job, slurm) = env.submit(&args);
    let done = format!("training: finished epoch {epochs_done}\n");
    wait_for(
        &format!("job {job} saves {epochs_done} checkpoints"),
        Duration::from_secs(180),
        Duration::from_millis(700),
        || {
            let out = env.json(&["logs", &job, "--json"])["stdout"].as_str().unwrap_or_default().to_string();
            when(out, |o| o.contains(&done))
        },
    );
    (job, slurm)
}

/// A job of the sandbox's `urgent` partition (PriorityTier 10) that needs all of `node`: Slurm
/// preempts what runs there. Returns its Slurm job id.
fn preempt(env: &Env, node: &str) -> String {
    env.ssh(&format!(
        "sbatch --parsable -p urgent -w {node} --exclusive --gres=gpu:8 -J tao-test-urgent --wrap 'sleep 4'"
    ))
    .trim()
    .to_string()
}

#[test]
fn a_preempted_training_resumes_from_its_checkpoint_and_completes() {
    let env = Env::new();
    let (job, first) = training_on(&env, "node4", 2, &[]);
    let urgent = preempt(&env, "node4");
    let v = env.wait_terminal(&job, Duration::from_secs(300));
    let logs = env.json(&["logs", &job, "--json"]);
    let (out, err) = (logs["stdout"].as_str().unwrap(), logs["stderr"].as_str().unwrap());
    assert_eq!(v["status"], "Complete", "{v}\n{out}\n{err}");
    // Slurm ended the first attempt as PREEMPTED for the urgent job, which ran.
    // (as sacct shows once slurmdbd has recorded both ends: a moment after the controller)
    let script = format!("sacct -X -P -n -j {first},{urgent} -o JobID,State\n");
    env.wait_ssh(
        "the first attempt PREEMPTED and the urgent job COMPLETED in sacct",
        &script,
        Duration::from_secs(60),
        |s| s.contains(&format!("{first}|PREEMPTED")) && s.contains(&format!("{urgent}|COMPLETED")),
    );
    // The second attempt was made for the preemption, from the newest checkpoint, which the
    // training went on from.
    let attempts = v["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{v:#}");
    assert_eq!(
        (attempts[0]["failure_class"].as_str(), attempts[1]["cause"].as_str()),
        (Some("preempted"), Some("preempted")),
        "{v:#}"
    );
    let from = attempts[1]["resumed_from"].as_str().unwrap_or_else(|| panic!("no checkpoint recorded: {v:#}"));
    assert!(from.contains("/train/epoch-"), "{v:#}");
    assert!(out.contains("training: resuming at epoch") && out.contains(from), "{out}");
    assert!(!out.contains("starting from scratch"), "the second attempt resumed: {out}");
    assert!(out.contains("training: done"), "{out}");
    let first_out = env.json(&["logs", &job, "--attempt", "1", "--json"]);
    assert!(first_out["stdout"].as_str().unwrap().contains("starting from scratch"), "{first_out}");
    // The status said what happened, and the checkpoint is known.
    let events = env.ok(&["events", &job, "--json"]);
    assert!(
        events.contains("preempted at ") && events.contains("on node4, resuming from ") && events.contains(from),
        "{events}"
    );
    assert!(v["checkpoint"].as_str().is_some_and(|c| c.contains("/train/epoch-")), "{v:#}");
    assert_eq!(v["attempt_summary"], "attempt 1 of at most 4 (preempted)", "{v:#}");
}

#[test]
fn with_on_preempt_cancel_a_preempted_job_ends_canceled_with_the_reason() {
    let env = Env::new();
    let (job, first) = training_on(&env, "node3", 1, &["--on-preempt", "cancel"]);
    preempt(&env, "node3");
    let v = env.wait_terminal(&job, Duration::from_secs(300));
    assert_eq!(v["status"], "Canceled", "{v:#}");
    let message = v["message"].as_str().unwrap();
    assert!(
        message.starts_with("preempted at ") && message.ends_with("on node3; canceled (on-preempt cancel)"),
        "{v:#}"
    );
    assert_eq!(v["attempts"].as_array().map(Vec::len), Some(1), "no new attempt: {v:#}");
    assert_eq!(v["slurm_job_id"].as_str(), Some(first.as_str()), "{v:#}");
}
