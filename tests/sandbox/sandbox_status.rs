//! Status at scale and every outcome for real on the sandbox: one round trip for 200 jobs, each
//! Slurm end state mapped right, aged-out jobs, status.json verdicts, `logs -f`.

use crate::common::wait::wait_for;
use crate::common::Env;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A job recorded as if its submission's answer was lost, submitted by hand with raw sbatch options the
/// tool itself would never use (for outcomes such as TIMEOUT).
pub(crate) fn adopt_raw(env: &Env, sbatch_args: &str) -> (String, String) {
    let plan = env.record_unsubmitted();
    let id = env.ssh(&format!("sbatch --parsable -o /dev/null --job-name={} {sbatch_args}\n", plan.layout.job_name));
    (plan.layout.job_id.clone(), id.trim().to_string())
}

#[test]
fn two_hundred_active_jobs_are_refreshed_in_one_round_trip() {
    let env = Env::isolated();
    let settings = env.settings();
    let store = tao_slurm_engine::store::Store::open(&settings.state_path).unwrap();
    let spec = tao_slurm::JobSpec {
        image: "ubuntu:22.04".into(),
        command: vec!["true".into()],
        gpus: Some(0),
        ..Default::default()
    };
    let plans: Vec<_> = (0..200).map(|_| tao_slurm::plan::resolve(&spec, &settings).unwrap()).collect();
    let mut script = String::new();
    for p in &plans {
        script
            .push_str(&format!("sbatch --parsable --hold -o /dev/null --job-name={} --wrap true\n", p.layout.job_name));
    }
    let ids: Vec<String> = env.ssh(&script).lines().map(|l| l.trim().to_string()).collect();
    assert_eq!(ids.len(), 200);
    for (p, id) in plans.iter().zip(&ids) {
        store.insert_job("{}", p, tao_slurm::clock::now()).unwrap();
        store.set_submitted(&p.layout.job_id, id, "sandbox-login1", tao_slurm::clock::now()).unwrap();
    }
    let client = tao_slurm::Client::new(settings.clone()).unwrap();
    let views = client.refresh(&[]).unwrap();
    let stats = client.transport_stats();

    // The client keeps the active jobs between refreshes, yet sees what another process recorded
    // meanwhile (here: another connection to the state file) and its own writes.
    let late = tao_slurm::plan::resolve(&spec, &settings).unwrap();
    let late_slurm =
        env.ssh(&format!("sbatch --parsable --hold -o /dev/null --job-name={} --wrap true\n", late.layout.job_name));
    store.insert_job("{}", &late, tao_slurm::clock::now()).unwrap();
    store.set_submitted(&late.layout.job_id, late_slurm.trim(), "sandbox-login1", tao_slurm::clock::now()).unwrap();
    let seen = client.refresh(&[]).unwrap();
    assert_eq!(seen.len(), 201, "a job recorded by another process is refreshed too");
    assert!(seen.iter().any(|v| v.job_id == late.layout.job_id && v.message.contains("JobHeldUser")));
    assert_eq!(client.refresh(&[]).unwrap().len(), 201, "unchanged state: the same jobs");
    client.cancel_jobs(std::slice::from_ref(&late.layout.job_id)).unwrap();
    let after_cancel = client.refresh(&[]).unwrap();
    assert_eq!(after_cancel.len(), 200, "a job this client cancelled is no longer active");
    assert!(!after_cancel.iter().any(|v| v.job_id == late.layout.job_id));

    env.ssh(&format!("scancel {}\n", ids.join(" ")));
    assert_eq!(views.len(), 200);
    assert_eq!(stats.round_trips, 1, "{stats:?}");
    assert_eq!(stats.logins, 1, "{stats:?}");
    for v in &views {
        assert_eq!(v.status, tao_slurm::PlatformStatus::Pending, "{v:?}");
        assert!(v.message.contains("JobHeldUser") && v.message.contains("held by you"), "{}", v.message);
    }
}

#[test]
fn failing_and_cancelled_jobs_map_right() {
    let env = Env::new();
    let (fail, _) = env.submit(&["--image", "ubuntu:22.04", "--gpus", "0", "--shell", "--", "exit 1"]);
    // Cancelled while pending (its begin time is an hour away), by scancel outside the tool.
    let (pending, pending_id) =
        env.submit(&["--image", "ubuntu:22.04", "--gpus", "0", "--sbatch-option", "begin=now+3600", "--", "true"]);
    // And one found only by its name (its submission's answer was lost), cancelled while held.
    let (held, held_id) = adopt_raw(&env, "--hold --wrap true");
    // Cancelled while running.
    let (running, running_id) = env.submit(&["--image", "ubuntu:22.04", "--gpus", "0", "--", "sleep", "120"]);
    env.wait_job(&running, "running", Duration::from_secs(300), |v| v["status"] == "Running");
    env.ssh(&format!("scancel {pending_id} {running_id} {held_id}\n"));
    let v = env.wait_terminal(&fail, Duration::from_secs(300));
    assert_eq!((v["status"].as_str(), v["exit_code"].as_i64()), (Some("Error"), Some(1)), "{v}");
    for job in [&pending, &running, &held] {
        let v = env.wait_terminal(job, Duration::from_secs(300));
        assert_eq!(v["status"], "Canceled", "{v}");
        assert!(v["slurm_state"].as_str().unwrap().starts_with("CANCELLED"), "{v}");
    }
}

#[test]
fn status_json_decides_completed_jobs() {
    let env = Env::new();
    let write = "mkdir -p \"$TAO_API_RESULTS_DIR/$TAO_JOB_ID\"; \
        echo '{\"status\":\"STARTED\",\"message\":\"start\"}' >> \"$TAO_API_RESULTS_DIR/$TAO_JOB_ID/status.json\"; \
        echo '{\"status\":\"RUNNING\",\"message\":\"Epoch 3/10\",\"kpi\":{\"loss\":0.5}}' >> \"$TAO_API_RESULTS_DIR/$TAO_JOB_ID/status.json\"; \
        echo '{\"status\":\"FAILURE\",\"message\":\"diverged\"}' >> \"$TAO_API_RESULTS_DIR/$TAO_JOB_ID/status.json\"";
    let (bad, _) = env.submit(&["--image", "ubuntu:22.04", "--gpus", "0", "--shell", "--", write]);
    let (plain, _) = env.submit(&["--image", "ubuntu:22.04", "--gpus", "0", "--", "true"]);
    let v = env.wait_terminal(&bad, Duration::from_secs(300));
    assert_eq!(v["slurm_state"], "COMPLETED", "{v}");
    assert_eq!(v["status"], "Error", "the last status.json line says FAILURE: {v}");
    assert!(v["message"].as_str().unwrap().contains("diverged"), "{v}");
    assert_eq!(v["progress"]["status"], "FAILURE", "{v}");
    let v = env.wait_terminal(&plain, Duration::from_secs(300));
    assert_eq!((v["status"].as_str(), v["slurm_state"].as_str()), (Some("Complete"), Some("COMPLETED")), "{v}");
    assert!(v["message"].as_str().unwrap().contains("no terminal status in status.json"), "{v}");
}

#[test]
fn a_job_aged_out_of_the_controller_gets_its_verdict_from_sacct() {
    let env = Env::new();
    let (job, slurm_id) = env.submit(&["--image", "ubuntu:22.04", "--gpus", "0", "--shell", "--", "exit 4"]);
    // No status call until the controller has forgotten the job (MinJobAge=10 in the sandbox).
    wait_for(&format!("job {slurm_id} aged out"), Duration::from_secs(200), Duration::from_secs(2), || {
        let out = Command::new("ssh")
            .args(["-F", &env.vars["SSH_CONFIG"], "sandbox-login1", "scontrol", "show", "job", &slurm_id])
            .output()
            .unwrap();
        !out.status.success()
    });
    // Only sacct knows it now; a refresh answers it once slurmdbd has its end (the refresh waits for
    // accounting to catch up before it takes the job's absence as evidence of anything).
    let v = env.wait_terminal(&job, Duration::from_secs(300));
    assert_eq!((v["status"].as_str(), v["exit_code"].as_i64()), (Some("Error"), Some(4)), "{v}");
}

#[test]
fn slurm_timeout_maps_to_error_without_retry() {
    let env = Env::new();
    let (timeout, _) = adopt_raw(&env, "--time=1 --wrap 'sleep 600'");
    let v = env.wait_terminal(&timeout, Duration::from_secs(300));
    assert_eq!((v["status"].as_str(), v["slurm_state"].as_str()), (Some("Error"), Some("TIMEOUT")), "{v}");
    assert_eq!(v["retries"], 0, "a timeout is not retried: {v}");
    assert_eq!(v["attempts"][0]["failure_class"], "timeout", "{v}");
}

#[test]
fn logs_follow_streams_lines_and_stops_at_the_end() {
    let env = Env::new();
    let (job, _) = env.submit(&[
        "--image",
        "ubuntu:22.04",
        "--gpus",
        "0",
        "--shell",
        "--",
        "for i in 1 2 3 4 5 6; do echo line-$i; sleep 1; done",
    ]);
    let start = Instant::now();
    let mut child = env
        .command(&["logs", &job, "-f", "--stdout", "--interval", "0.3"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut arrivals = Vec::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        arrivals.push((start.elapsed(), line.unwrap()));
        assert!(start.elapsed() < Duration::from_secs(120), "logs -f did not stop");
    }
    let status = child.wait().unwrap();
    let ended = start.elapsed();
    assert!(status.success());
    let lines: Vec<&str> = arrivals.iter().map(|(_, l)| l.as_str()).collect();
    assert_eq!(lines, vec!["line-1", "line-2", "line-3", "line-4", "line-5", "line-6"]);
    // Streamed: the first line arrived well before the job (and the follower) ended.
    assert!(ended - arrivals[0].0 >= Duration::from_secs(3), "line-1 at {:?}, end at {ended:?}", arrivals[0].0);
    let v = env.status(&job);
    assert_eq!(v["status"], "Complete");
}

/// Work on one job runs in a span naming it: the debug log of `status` and `cancel` names the job on
/// the lines the refresh and the cancel write (issue 25).
#[test]
fn log_lines_of_work_on_a_job_carry_its_id() {
    let env = Env::new();
    let (job, _) = env.submit(&["--image", "ubuntu:22.04", "--gpus", "0", "--", "sleep", "60"]);
    for verb in ["status", "cancel"] {
        let out = env.command(&[verb, &job]).env("TAO_SLURM_LOG", "debug").output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let log = String::from_utf8_lossy(&out.stderr);
        let inside: Vec<&str> = log.lines().filter(|l| l.contains(&format!("job{{job_id={job}}}"))).collect();
        assert!(!inside.is_empty(), "{verb}: no line in the job's span:\n{log}");
    }
}
