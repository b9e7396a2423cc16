//! The batch script's contracts on the real cluster: the inner-timeout requeue and its cap, secrets
//! that reach the task but no file, log or output, partition limits checked at submit, dry runs.

use crate::common::wait::{wait_for, when};
use crate::common::{is_terminal, Env};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

#[test]
fn inner_timeout_requeues_the_same_job_then_ends_timed_out() {
    let env = Env::new();
    // An inner timeout of 18 s: the container is up before it. At 5 s a loaded node's Pyxis was still
    // starting it, and the interrupted start ("Failed to invoke spank plugin stack") ended the job
    // FAILED despite its requeue.
    let (job, slurm) = env.submit(&[
        "--image",
        "ubuntu:22.04",
        "--gpus",
        "1",
        "--time-hours",
        "0.05",
        "--timeout-hours",
        "0.005",
        "--max-timeout-requeues",
        "1",
        "--",
        "sleep",
        "120",
    ]);
    let mut nudged = 0;
    let v = wait_for(&format!("job {job} terminal"), Duration::from_secs(400), Duration::from_millis(700), || {
        let v = env.status(&job);
        assert_eq!(v["slurm_job_id"].as_str(), Some(slurm.as_str()), "a requeue keeps the Slurm job id");
        // A requeued job waits ~120 s for its BeginTime; the test skips that wait (it tests the requeue,
        // not Slurm's delay). The nudge must not come within a second of the requeue (see the facts).
        if !is_terminal(&v) && v["message"].as_str().is_some_and(|m| m.contains("BeginTime")) {
            env.nudge(&slurm);
            nudged += 1;
        }
        when(v, is_terminal)
    });
    assert!(nudged >= 1, "the job was requeued at least once");
    assert_eq!(v["status"], "Error", "{v}");
    assert_eq!(v["exit_code"], 124, "{v}");
    assert!(v["message"].as_str().unwrap().contains("timed out 2 times"), "{v}");
    let logs = env.json(&["logs", &job, "--json"]);
    let err = logs["stderr"].as_str().unwrap();
    assert_eq!(err.matches("requeueing (timeout requeue 1 of 1)").count(), 1, "{err}");
    assert!(err.contains("tao-slurm: timed out 2 times"), "{err}");
    assert!(err.contains("(restart 1)"), "the second run is the same job restarted: {err}");
}

fn files_containing(root: &Path, needle: &str) -> Vec<String> {
    let out = Command::new("grep").args(["-rlF", needle]).arg(root).output().unwrap();
    String::from_utf8_lossy(&out.stdout).lines().map(String::from).collect()
}

#[test]
fn secrets_reach_the_task_and_nothing_else() {
    let mut env = Env::new();
    let secret = format!("s3cr3t-{}-'$(touch /tmp/never)'", std::process::id());
    env.vars.insert("TAO_TEST_SECRET".into(), secret.clone());
    let expect_len = secret.chars().count();
    let out = env.run(&[
        "submit",
        "--json",
        "--image",
        "ubuntu:22.04",
        "--gpus",
        "1",
        "--secret-env",
        "TAO_TEST_SECRET",
        "--shell",
        "--",
        "echo \"secret-length=${#TAO_TEST_SECRET}\"; sleep 3",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let submitted: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let job = submitted["job_id"].as_str().unwrap().to_string();
    // While the job runs, the value sits in one file of mode 600 in a directory of mode 700.
    let base = Path::new(&env.vars["SLURM_BASE_RESULTS_DIR"]).to_path_buf();
    let secrets_dir = base.join("secrets").join(&job);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&secrets_dir).unwrap().permissions().mode() & 0o777, 0o700);
    assert_eq!(std::fs::metadata(secrets_dir.join("env")).unwrap().permissions().mode() & 0o777, 0o600);
    let v = env.wait_terminal(&job, Duration::from_secs(300));
    assert!(!secrets_dir.exists(), "the secrets file is removed once the job is terminal");
    assert_eq!(v["status"], "Complete", "{v}");
    let logs_out = env.run(&["logs", &job, "--json"]);
    let logs: serde_json::Value = serde_json::from_slice(&logs_out.stdout).unwrap();
    let stdout = logs["stdout"].as_str().unwrap();
    // In the container (--container-env names it: the image's environment does not replace it).
    assert!(stdout.contains(&format!("secret-length={expect_len}")), "the task sees the value: {stdout}");

    // Nowhere else: not in the staged files, script, logs, local state, or our own output.
    assert_eq!(files_containing(&base, &secret), Vec::<String>::new());
    assert_eq!(files_containing(env.dir.path(), &secret), Vec::<String>::new(), "local state and HOME");
    let render = env.run(&["render", "--image", "ubuntu:22.04", "--secret-env", "TAO_TEST_SECRET", "--", "true"]);
    for text in [&out.stdout, &out.stderr, &logs_out.stdout, &render.stdout] {
        assert!(!String::from_utf8_lossy(text).contains(&secret));
    }
    assert!(String::from_utf8_lossy(&render.stdout).contains("TAO_TEST_SECRET=***"));
    assert!(!Path::new("/tmp/never").exists());
}

#[test]
fn partition_limits_are_checked_before_submitting() {
    let env = Env::new();
    // `long` allows 12 h on the sandbox: 13 h is refused by tao-slurm, naming the field and the limit.
    let out =
        env.run(&["submit", "--image", "ubuntu:22.04", "--partition", "long", "--time-hours", "13", "--", "true"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("time_hours") && stderr.contains("MaxTime 12:00:00 of partition long"), "{stderr}");
    let out = env.run(&["submit", "--image", "ubuntu:22.04", "--partition", "nosuch", "--", "true"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("nosuch does not exist"), "{out:?}");
    // Packaged default partitions are 4-hour queues, refused offline.
    let mut defaults = Env::new();
    defaults.vars.remove("SLURM_PARTITION");
    let out = defaults.run(&["submit", "--image", "ubuntu:22.04", "--time-hours", "5", "--", "true"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("another partition"), "{out:?}");
    assert!(env.json(&["list", "--json"]).as_array().unwrap().is_empty(), "nothing was recorded or submitted");

    // 5 h on `long` is fine; --dry-run checks online and prints the script, but submits nothing.
    let text = env.ok(&[
        "submit",
        "--dry-run",
        "--image",
        "ubuntu:22.04",
        "--partition",
        "long",
        "--time-hours",
        "5",
        "--",
        "true",
    ]);
    assert!(text.contains("#SBATCH --time=05:00:00"), "{text}");
    assert!(env.json(&["list", "--json"]).as_array().unwrap().is_empty(), "dry run submitted nothing");
}

/// A job that asks for no wall time on the sandbox's 30-minute `debug` partition gets the default
/// (4 h) capped at its MaxTime, with a warning naming both, and runs (issue 41); one that asks for
/// an hour there is still refused.
#[test]
fn a_job_without_a_time_fits_a_short_partition() {
    let env = Env::new();
    let out = env.run(&["submit", "--image", "ubuntu:22.04", "--gpus", "0", "--partition", "debug", "--", "true"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("default 04:00:00 is capped at the MaxTime 00:30:00 of partition debug"), "{stderr}");
    let job = String::from_utf8_lossy(&out.stdout).split_whitespace().nth(2).unwrap().to_string();
    let v = env.wait_terminal(&job, std::time::Duration::from_secs(300));
    assert_eq!(v["status"].as_str(), Some("Complete"), "{v}");
    let text = env.ok(&[
        "submit",
        "--dry-run",
        "--image",
        "ubuntu:22.04",
        "--gpus",
        "0",
        "--partition",
        "debug",
        "--",
        "true",
    ]);
    assert!(text.contains("#SBATCH --time=00:30:00"), "{text}");
    let out = env.run(&[
        "submit",
        "--image",
        "ubuntu:22.04",
        "--gpus",
        "0",
        "--partition",
        "debug",
        "--time-hours",
        "1",
        "--",
        "true",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("01:00:00 exceeds the MaxTime 00:30:00 of partition debug"), "{stderr}");
}

#[test]
fn render_needs_no_network() {
    let mut env = Env::isolated();
    env.vars.insert("SLURM_HOSTNAME".into(), "unreachable.invalid".into());
    env.vars.remove("SLURM_USER");
    // The host cannot even be resolved: any connection attempt would fail the command.
    let text = env.ok(&[
        "render",
        "--image",
        "nvcr.io/nvidia/tao/tao-toolkit:6.26.3-pyt",
        "--nodes",
        "2",
        "--gpus",
        "8",
        "--",
        "train",
    ]);
    assert!(
        text.contains("#SBATCH --nodes=2")
            && text.contains("--container-image=nvcr.io#nvidia/tao/tao-toolkit:6.26.3-pyt")
    );
}
