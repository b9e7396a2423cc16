//! Nothing lost, nothing twice, on the sandbox with real processes: the submitter killed at each step,
//! infrastructure failures retried on other nodes, user failures surfaced at once, the retry budget,
//! and concurrent refreshers that must resubmit exactly once.

use crate::common::sandbox;
use crate::common::wait::{wait_for, when};
use crate::common::{is_terminal, Env};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

fn job_ids_in_state(env: &Env) -> Vec<String> {
    env.json(&["list", "--json"])
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["job_id"].as_str().unwrap().to_string())
        .collect()
}

/// Run `submit` with a failpoint, SIGKILL it when the failpoint is reached; returns the job id.
fn submit_killed_at(env: &Env, failpoint: &str) -> String {
    let mut cmd = env.command(&["submit", "--image", "ubuntu:22.04", "--gpus", "0", "--shell", "--", "echo survived"]);
    cmd.env("TAO_SLURM_FAILPOINT", failpoint).stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    for line in stderr.lines() {
        if line.unwrap().contains(&format!("failpoint {failpoint} reached")) {
            break;
        }
    }
    // The remote failpoint is printed by the remote script: give it a moment to be mid-flight.
    std::thread::sleep(Duration::from_millis(300));
    child.kill().unwrap();
    child.wait().unwrap();
    let ids = job_ids_in_state(env);
    assert_eq!(ids.len(), 1, "the job was recorded before anything was sent");
    ids[0].clone()
}

#[test]
fn a_submitter_killed_at_any_step_leaves_exactly_one_slurm_job_tracked_to_its_end() {
    let handles: Vec<_> = ["after-record", "remote-before-sbatch", "after-sbatch"]
        .into_iter()
        .map(|fp| {
            std::thread::spawn(move || {
                let env = Env::isolated();
                let job = submit_killed_at(&env, fp);
                let v = env.wait_terminal(&job, Duration::from_secs(300));
                assert_eq!(v["status"], "Complete", "{fp}: {v}");
                let logs = env.json(&["logs", &job, "--json"]);
                assert!(logs["stdout"].as_str().unwrap().contains("survived"), "{fp}: {logs}");
                let jobs = env.slurm_jobs_counted(&format!("tao-job-{job}"), 1);
                assert_eq!(jobs.len(), 1, "{fp}: exactly one Slurm job for the attempt: {jobs:?}");
                assert_eq!(v["retries"], 0, "{fp}: {v}");
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

/// A command that fails with an NCCL error on its first run only.
const NCCL_ONCE: &str = "m=\"$TAO_API_RESULTS_DIR/$TAO_JOB_ID/failed-once\"; \
    if [ ! -e \"$m\" ]; then touch \"$m\"; echo 'ncclSystemError: NCCL error: unhandled system error' >&2; exit 1; fi; echo recovered";

#[test]
// It sets a node DOWN: Slurm requeues every other test's job on that node (a pause test's resumed job
// was seen restarted this way), so it runs with the others that stop a part of the cluster.
#[ignore = "stops a part of the shared cluster: dev/test runs it alone (cargo test --test sandbox -- --ignored)"]
fn a_node_failure_is_retried_elsewhere_and_both_attempts_keep_their_logs() {
    let env = Env::new();
    // --no-requeue: with --requeue (the default) Slurm itself requeues a NODE_FAIL job under the
    // same id, which tao-slurm follows as the same attempt.
    let (job, _) = env.submit(&[
        "--image",
        "ubuntu:22.04",
        "--gpus",
        "0",
        "--no-requeue",
        "--shell",
        "--",
        "echo \"attempt on $SLURMD_NODENAME\"; sleep 600",
    ]);
    let running = env.wait_job(&job, "running on a node", Duration::from_secs(300), |v| {
        v["status"] == "Running" && v["node_list"].is_string()
    });
    let node = running["node_list"].as_str().unwrap().to_string();
    // Running in Slurm's eyes comes before the container's first line: wait for it, so that the
    // first attempt's log has something to keep.
    wait_for("the command's first line", Duration::from_secs(60), Duration::from_millis(300), || {
        when(env.json(&["logs", &job, "--json"]), |logs| {
            logs["stdout"].as_str().unwrap_or("").contains("attempt on node")
        })
    });
    let conf = sandbox::dir().join("etc/slurm.conf");
    let out = Command::new("scontrol")
        .env("SLURM_CONF", &conf)
        .args(["update", &format!("nodename={node}"), "state=down", "reason=tao-slurm-test"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The retry runs the same command again (sleep 600): wait for attempt 2 to run, then end it.
    let v = env.wait_job(&job, "running its second attempt", Duration::from_secs(120), |v| {
        v["attempt"] == 2 && v["status"] == "Running"
    });
    let _ = Command::new("scontrol")
        .env("SLURM_CONF", &conf)
        .args(["update", &format!("nodename={node}"), "state=resume"])
        .output();
    let attempts = v["attempts"].as_array().unwrap();
    assert_eq!(attempts[0]["state"], "NODE_FAIL", "{v}");
    assert_eq!(attempts[0]["failure_class"], "infra", "{v}");
    assert_eq!(attempts[1]["excluded_nodes"], node.as_str(), "the failed node is excluded: {v}");
    assert_ne!(v["node_list"].as_str(), Some(node.as_str()), "{v}");
    assert_eq!(v["retries"], 1);
    assert_eq!(v["job_id"].as_str(), Some(job.as_str()), "one platform id");
    for k in ["1", "2"] {
        // Attempt 2 may not have written its first line yet.
        wait_for(&format!("attempt {k}'s first line"), Duration::from_secs(60), Duration::from_millis(300), || {
            when(env.json(&["logs", &job, "--attempt", k, "--json"]), |logs| {
                logs["stdout"].as_str().unwrap().contains("attempt on node")
            })
        });
    }
    env.ok(&["cancel", &job]);
    let events = env.json(&["events", &job, "--json"]);
    assert!(events.as_array().unwrap().iter().any(|e| e["kind"] == "retry"), "{events}");
}

#[test]
fn nccl_errors_are_retried_and_user_errors_are_not() {
    let env = Env::new();
    let (nccl, _) = env.submit(&["--image", "ubuntu:22.04", "--gpus", "0", "--shell", "--", NCCL_ONCE]);
    let (traceback, _) = env.submit(&[
        "--image", "ubuntu:22.04", "--gpus", "0", "--shell", "--",
        "echo 'Traceback (most recent call last):' >&2; echo '  File \"train.py\", line 9' >&2; echo 'ValueError: learning rate must be positive' >&2; exit 1",
    ]);
    let (oom, _) = env.submit(&[
        "--image", "ubuntu:22.04", "--gpus", "0", "--shell", "--",
        "echo 'RuntimeError: CUDA error: out of memory' >&2; echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB' >&2; exit 1",
    ]);
    let v = env.wait_terminal(&nccl, Duration::from_secs(300));
    assert_eq!(v["status"], "Complete", "{v}");
    assert_eq!(v["retries"], 1, "{v}");
    assert!(v["attempts"][0]["evidence"][0].as_str().unwrap().contains("NCCL error"), "{v}");
    for (job, words) in [(&traceback, "ValueError"), (&oom, "CUDA out of memory")] {
        let v = env.wait_terminal(job, Duration::from_secs(300));
        assert_eq!(v["status"], "Error", "{v}");
        assert_eq!(v["retries"], 0, "user errors are not retried: {v}");
        assert_eq!(v["attempts"][0]["failure_class"], "user", "{v}");
        assert!(v["message"].as_str().unwrap().contains(words), "the evidence is shown: {v}");
    }
}

#[test]
fn the_eleventh_infra_failure_exhausts_the_retry_budget() {
    let mut env = Env::new();
    env.vars.insert("TAO_SLURM_RETRY_BACKOFF_SECS".into(), "0".into());
    let (job, _) = env.submit(&[
        "--image",
        "ubuntu:22.04",
        "--gpus",
        "0",
        "--shell",
        "--",
        "echo 'NCCL error: unhandled system error' >&2; exit 1",
    ]);
    let v: Value = env.wait_terminal(&job, Duration::from_secs(400));
    assert_eq!(v["status"], "Error", "{v}");
    assert!(v["message"].as_str().unwrap().starts_with("retry budget exhausted: 11 attempts failed"), "{v}");
    assert_eq!(v["retries"], 10);
    let attempts = v["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 11);
    for (i, a) in attempts.iter().enumerate() {
        assert_eq!(a["failure_class"], "infra", "{a}");
        assert!(v["message"].as_str().unwrap().contains(&format!(
            "#{} Slurm job {}",
            i + 1,
            a["slurm_job_id"].as_str().unwrap()
        )));
    }
    assert_eq!(env.slurm_jobs_counted(&format!("tao-job-{job}"), 11).len(), 11, "one Slurm job per attempt");
}

#[test]
fn concurrent_refreshers_resubmit_a_failed_job_exactly_once() {
    let env = Env::isolated();
    let (job, _) = env.submit(&["--image", "ubuntu:22.04", "--gpus", "0", "--shell", "--", NCCL_ONCE]);
    let mut monitor = env.command(&["monitor"]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let refreshers: Vec<_> = (0..2)
        .map(|_| {
            let vars = env.vars.clone();
            let job = job.clone();
            // Back to back, no pause: the two refreshers race each other (and the monitor).
            std::thread::spawn(move || {
                wait_for(&format!("job {job} terminal"), Duration::from_secs(180), Duration::ZERO, || {
                    let out = Command::new(env!("CARGO_BIN_EXE_tao-slurm"))
                        .args(["status", &job, "--json"])
                        .env_clear()
                        .envs(&vars)
                        .env("PATH", std::env::var("PATH").unwrap())
                        .output()
                        .unwrap();
                    serde_json::from_slice::<Value>(&out.stdout).ok().map(|list| list[0].clone()).filter(is_terminal)
                })
            })
        })
        .collect();
    let results: Vec<Value> = refreshers.into_iter().map(|h| h.join().unwrap()).collect();
    monitor.kill().unwrap();
    monitor.wait().unwrap();
    for v in &results {
        assert_eq!(v["status"], "Complete", "{v}");
        assert_eq!(v["retries"], 1, "exactly one resubmission: {v}");
    }
    assert_eq!(env.slurm_jobs_counted(&format!("tao-job-{job}"), 2).len(), 2, "two Slurm jobs in all");
}
