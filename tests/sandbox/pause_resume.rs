//! Pause and resume (issue 23), on the real cluster: a graceful pause of a training that writes
//! checkpoints sends it the checkpoint signal, ends Paused once its grace passes (its allocation
//! released), its dependant waits; two concurrent resumes make one Slurm job, which goes on from the
//! newest checkpoint to the end.

use crate::common::wait::{wait_for, when};
use crate::common::Env;
use crate::long_training::TRAINING;
use std::process::Stdio;
use std::time::Duration;

/// The epochs a training's log says it finished.
fn finished_epochs(out: &str) -> Vec<u32> {
    out.lines().filter_map(|l| l.strip_prefix("training: finished epoch ")?.trim().parse().ok()).collect()
}

#[test]
fn a_graceful_pause_saves_a_checkpoint_and_two_resumes_go_on_from_it_as_one_slurm_job() {
    let env = Env::new();
    let (job, first) = env.submit(&[
        "--image",
        "ubuntu:22.04",
        "--gpus",
        "1",
        "--checkpoint-grace",
        "6",
        "--env",
        "EPOCHS=8",
        "--env",
        "EPOCH_SECONDS=4",
        "--shell",
        "--",
        TRAINING,
    ]);
    let (child, _) = env.submit(&["--image", "ubuntu:22.04", "--gpus", "0", "--after", &job, "--", "true"]);
    // Pause once two epochs are saved.
    wait_for("two epochs", Duration::from_secs(180), Duration::from_millis(700), || {
        let logs = env.json(&["logs", &job, "--json"]);
        when(logs["stdout"].as_str().unwrap_or("").to_string(), |o| finished_epochs(o).len() >= 2)
    });
    let v = env.json(&["pause", &job, "--graceful", "--json"]);
    assert_eq!(v[0]["status"], "Pausing", "{v}");
    let v = env.wait_job(&job, "Paused", Duration::from_secs(120), |v| v["status"] == "Paused");
    assert!(v["message"].as_str().unwrap().contains(&format!("Slurm job {first} cancelled")), "{v}");
    let logs = env.json(&["logs", &job, "--json"]);
    let before = logs["stdout"].as_str().unwrap().to_string();
    assert!(before.contains("training: warned after epoch"), "the training got the checkpoint signal: {before}");
    assert!(!before.contains("training: done"), "{before}");
    let saved = *finished_epochs(&before).last().unwrap();
    // Its allocation is released: Slurm ended its job.
    // (sacct has the state once slurmdbd has recorded it: a moment after the controller.)
    let script = format!("sacct -X -n -P -j {first} -o State\n");
    env.wait_ssh(&format!("Slurm job {first} CANCELLED in sacct"), &script, Duration::from_secs(300), |state| {
        state.starts_with("CANCELLED")
    });
    // The dependant waits, and says why.
    let c = env.wait_job(&child, "waiting for its paused parent", Duration::from_secs(300), |c| {
        c["message"].as_str().is_some_and(|m| m.contains("it is paused"))
    });
    assert_eq!(c["status"], "Pending", "{c}");
    // Pausing again is a no-op; resuming twice at once makes one Slurm job.
    assert_eq!(env.json(&["pause", &job, "--json"])[0]["status"], "Paused");
    let callers: Vec<_> = (0..2)
        .map(|_| {
            env.command(&["resume", &job, "--json"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
        })
        .collect();
    for c in callers {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(["Resuming", "Running", "Complete"].contains(&v[0]["status"].as_str().unwrap()), "{v}");
    }
    let v = env.wait_terminal(&job, Duration::from_secs(300));
    assert_eq!(v["status"], "Complete", "{v}");
    assert_eq!(v["attempts"].as_array().map(Vec::len), Some(2), "{v}");
    assert_eq!(v["attempts"][1]["cause"], "resumed", "{v}");
    assert_eq!(env.slurm_jobs_counted(&format!("tao-job-{job}.a2"), 1).len(), 1, "one Slurm job for two resumes");
    let events = env.ok(&["events", &job, "--json"]);
    assert_eq!(events.matches("\"resumed\"").count(), 1, "{events}");
    assert!(events.contains("Resuming"), "{events}");
    // The resumed attempt went on from the checkpoint the pause left, to the end.
    let logs = env.json(&["logs", &job, "--json"]);
    let after = logs["stdout"].as_str().unwrap();
    assert!(after.contains(&format!("training: resuming at epoch {}", saved + 1)), "{after}");
    assert_eq!(finished_epochs(after), ((saved + 1)..=8).collect::<Vec<_>>(), "{after}");
    assert!(after.contains("training: done"), "{after}");
    // Its dependant ran after it; a job that ended has nothing to pause or resume.
    let c = env.wait_terminal(&child, Duration::from_secs(300));
    assert_eq!(c["status"], "Complete", "{c}");
    let again = env.run(&["pause", &job]);
    assert!(!again.status.success() && String::from_utf8_lossy(&again.stderr).contains("nothing to pause"));
    let again = env.run(&["resume", &job]);
    assert!(!again.status.success() && String::from_utf8_lossy(&again.stderr).contains("nothing to resume"));
}

#[test]
fn a_pause_of_a_job_not_running_yet_cancels_it_and_a_resume_with_new_specs_runs_them() {
    let env = Env::new();
    // Held behind a parent that runs a while: the job is Pending when paused.
    let (parent, _) = env.submit(&["--image", "ubuntu:22.04", "--gpus", "0", "--", "sleep", "20"]);
    let specs = serde_json::json!({"train": {"num_epochs": 1}});
    let job_file = env.dir.path().join("job.toml");
    std::fs::write(
        &job_file,
        format!(
            "image = \"ubuntu:22.04\"\ngpus = 0\nshell = true\ncommand = [\"cat {{config_path}}\"]\nafter = [\"{parent}\"]\n[specs]\ntrain = {{ num_epochs = 1 }}\n"
        ),
    )
    .unwrap();
    let (job, first) = env.submit(&["--spec", job_file.to_str().unwrap()]);
    let v = env.json(&["pause", &job, "--graceful", "--json"]);
    assert_eq!(v[0]["status"], "Paused", "not running: cancelled at once, graceful or not: {v}");
    let script = format!("squeue -h -j {first} -o %T 2>/dev/null; sacct -X -n -P -j {first} -o State\n");
    env.wait_ssh(&format!("Slurm job {first} CANCELLED"), &script, Duration::from_secs(300), |state| {
        state.contains("CANCELLED")
    });
    // Watching a paused job ends (it goes on only when resumed), not a success, saying how to go on.
    let watched = env.run_with_deadline(&["watch", &job], Duration::from_secs(60));
    let said = String::from_utf8_lossy(&watched.stderr);
    assert_eq!(watched.status.code(), Some(1), "{said}");
    assert!(said.contains(&format!("{job} is paused: it goes on after `tao-slurm resume {job}`")), "{said}");
    let new_specs = env.dir.path().join("specs.json");
    std::fs::write(&new_specs, serde_json::json!({"train": {"num_epochs": 5}}).to_string()).unwrap();
    let v = env.json(&["resume", &job, "--spec", new_specs.to_str().unwrap(), "--json"]);
    assert!(["Resuming", "Running", "Complete"].contains(&v[0]["status"].as_str().unwrap()), "{v}");
    let v = env.wait_terminal(&job, Duration::from_secs(300));
    assert_eq!(v["status"], "Complete", "{v}");
    let out = env.json(&["logs", &job, "--json"])["stdout"].as_str().unwrap().to_string();
    let staged: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(staged["train"]["num_epochs"], 5, "the new specs: {out}");
    assert_ne!(staged["train"]["num_epochs"], specs["train"]["num_epochs"]);
}
