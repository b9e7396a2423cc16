//! Every container feature on the real Pyxis and Enroot (issue 34): what a job's container shows
//! (its image, its mounts, its working directory, its environment), one container per node, `exec`
//! joining the running container, and the runtime's own failures (a missing mount source, a private
//! image without credentials) classified and not retried. Few jobs, each checking several things.

use crate::common::wait::{wait_for, when};
use crate::common::{sandbox, Env};
use std::collections::HashMap;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(180);

/// What each rank prints, one `report: KEY=VALUE ...` line, then its own marker in the container's
/// root filesystem, then it waits to be joined by `exec`.
const RANK: &str = r#"echo "report: rank=$NODE_RANK world=$WORLD_SIZE node=$SLURMD_NODENAME job=$TAO_JOB_ID \
image=$(. /etc/os-release; echo $TAO_SLURM_SANDBOX_IMAGE) pwd=$(pwd) uploaded=$(cat uploaded.txt) \
results=$(touch "$TAO_API_RESULTS_DIR/$TAO_JOB_ID.w" 2>/dev/null && echo rw || echo ro) \
ro=$(touch /ro/probe 2>/dev/null && echo rw || echo ro) foo=$FOO secret=${#TAO_TEST_SECRET} \
input=$(touch "$INPUT_DIR/probe" 2>/dev/null && echo rw || echo ro) input_seen=$(cat "$INPUT_DIR/given") \
specs=$(: >> "$TAO_SPECS_FILE" 2>/dev/null && echo rw || echo ro)"
echo "$SLURMD_NODENAME" > /tmp/marker
sleep 300"#;

fn reports(stdout: &str) -> Vec<HashMap<String, String>> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("report: "))
        .map(|r| r.split_whitespace().filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.into(), v.into())).collect())
        .collect()
}

#[test]
fn a_two_node_job_runs_in_one_container_per_node_that_exec_joins() {
    let mut env = Env::new();
    let secret = format!("s3cr3t-{}", std::process::id());
    env.vars.insert("TAO_TEST_SECRET".into(), secret.clone());
    let base = env.vars["SLURM_BASE_RESULTS_DIR"].clone();
    let ro = format!("{base}/ro-{}", std::process::id());
    std::fs::create_dir_all(&ro).unwrap();
    std::fs::write(format!("{ro}/probe"), "").unwrap();
    // An input inside the base directory (which is mounted read-write): the job gets it read-only.
    let input = format!("{base}/input-{}", std::process::id());
    std::fs::create_dir_all(&input).unwrap();
    std::fs::write(format!("{input}/given"), "yes").unwrap();
    let upload = env.dir.path().join("work");
    std::fs::create_dir_all(&upload).unwrap();
    std::fs::write(upload.join("uploaded.txt"), "from-the-laptop").unwrap();
    let (job, _) = env.submit(&[
        "--image",
        "nvcr.io/nvidia/pytorch:24.01-py3",
        "--nodes",
        "2",
        "--gpus",
        "0",
        "--env",
        "FOO=bar",
        "--secret-env",
        "TAO_TEST_SECRET",
        "--mount",
        &format!("{ro}:/ro:ro"),
        "--input",
        &format!("data.dir=lustre://{input}"),
        "--env",
        &format!("INPUT_DIR={input}"),
        "--workdir",
        &upload.display().to_string(),
        "--shell",
        "--",
        RANK,
    ]);
    // Both ranks report once their containers run (Pyxis imports and creates them after the job starts).
    let got = wait_for("both ranks' reports", LIMIT, Duration::from_millis(500), || {
        let status = env.status(&job);
        assert!(!crate::common::is_terminal(&status), "{status}");
        let logs = env.json(&["logs", &job, "--json"]);
        let stdout = logs["stdout"].as_str().unwrap_or("").to_string();
        when(stdout, |o| reports(o).len() == 2)
    });
    let mut got = reports(&got);
    got.sort_by_key(|r| r["rank"].clone());
    for (i, r) in got.iter().enumerate() {
        assert_eq!((r["rank"].as_str(), r["world"].as_str()), (i.to_string().as_str(), "2"), "{r:?}");
        assert_eq!(r["job"], job, "{r:?}");
        assert_eq!(r["image"], "nvidia/pytorch:24.01-py3", "the image's own root filesystem: {r:?}");
        assert!(
            r["pwd"].ends_with(&format!("{job}/workdir")),
            "the uploaded --workdir is the working directory: {r:?}"
        );
        assert_eq!(r["uploaded"], "from-the-laptop", "{r:?}");
        assert_eq!(
            (r["results"].as_str(), r["ro"].as_str()),
            ("rw", "ro"),
            "results read-write, a :ro mount not: {r:?}"
        );
        assert_eq!((r["foo"].as_str(), r["secret"].as_str()), ("bar", secret.len().to_string().as_str()), "{r:?}");
        assert_eq!(
            (r["input"].as_str(), r["input_seen"].as_str(), r["specs"].as_str()),
            ("ro", "yes", "ro"),
            "an input and the specs file are read-only in the container, inside the read-write base: {r:?}"
        );
    }
    assert_ne!(got[0]["node"], got[1]["node"], "two nodes");

    // exec joins each node's own container: the marker its rank wrote in the container's root
    // filesystem (not on shared storage) names that node.
    for r in &got {
        let node = &r["node"];
        let seen = env.ok(&["exec", &job, "--node", node, "--", "cat", "/tmp/marker"]);
        assert_eq!(seen.trim(), node.as_str(), "the container on {node} is its own");
    }
    let node = &got[0]["node"];
    // A process of the job is visible from exec (Enroot makes no PID namespace).
    let ps = env.ok(&["exec", &job, "--node", node, "--", "ps", "-o", "args"]);
    assert!(ps.lines().any(|l| l.trim() == "sleep 300"), "{ps}");
    // The secret reached the job's step only: an exec step's environment has no trace of it.
    let exec_env = env.ok(&["exec", &job, "--node", node, "--", "env"]);
    assert!(!exec_env.contains(&secret) && exec_env.contains("SLURM_JOB_ID="), "{exec_env}");
    env.ok(&["cancel", &job]);
}

#[test]
#[ignore = "removes the sandbox user's Enroot credentials, which other tests' private images need: dev/test runs it alone (cargo test --test sandbox -- --ignored)"]
fn runtime_failures_are_classified_not_retried_and_credentials_fix_a_private_image() {
    let mut env = Env::new();
    // Pyxis pulls the registry image itself at job start: the failures under test are the runtime's
    // (with the squashfs cache, the conversion before the submit refuses a private image instead).
    env.vars.insert("TAO_SLURM_USE_SQSH".into(), "false".into());
    let creds = sandbox::dir().join("home").join(sandbox::setting("SLURM_USER")).join(".config/enroot/.credentials");
    let private = sandbox::setting("SANDBOX_PRIVATE_IMAGE");
    let _ = std::fs::remove_file(&creds);
    let missing = format!("/no/such/dir-{}", std::process::id());
    let (mount_job, _) =
        env.submit(&["--image", "ubuntu:22.04", "--gpus", "0", "--mount", &format!("{missing}:/data"), "--", "true"]);
    let (private_job, _) = env.submit(&["--image", private, "--gpus", "0", "--", "true"]);

    let v = env.wait_terminal(&mount_job, LIMIT);
    assert_eq!((v["status"].as_str(), v["retries"].as_u64()), (Some("Error"), Some(0)), "a user error: {v}");
    let message = v["message"].as_str().unwrap_or("");
    assert!(message.contains(&format!("source path does not exist: {missing}")), "Pyxis' own line: {v}");
    assert!(message.contains("create it on the cluster's shared storage"), "{v}");

    let v = env.wait_terminal(&private_job, LIMIT);
    assert_eq!((v["status"].as_str(), v["retries"].as_u64()), (Some("Error"), Some(0)), "{v}");
    assert!(v["message"].as_str().unwrap_or("").contains("tao-slurm credentials enroot"), "{v}");

    // The user installs the NGC key: the same image runs.
    let key = std::fs::read_to_string(sandbox::dir().join("registry/ngc-key")).unwrap();
    let mut ngc = Env::new();
    ngc.vars.insert("NGC_KEY".into(), key.trim().to_string());
    ngc.ok(&["credentials", "enroot"]);
    let (again, _) =
        env.submit(&["--image", private, "--gpus", "0", "--shell", "--", "grep PRETTY_NAME /etc/os-release"]);
    let v = env.wait_terminal(&again, LIMIT);
    assert_eq!(v["status"], "Complete", "{v}");
    let logs = env.json(&["logs", &again, "--json"]);
    assert!(logs["stdout"].as_str().unwrap().contains("tao-private/tao-toolkit:6.26.3-pyt"), "{logs}");
}

/// A damaged squashfs image (a copy cut short) fails on the real Enroot with unsquashfs' own line:
/// every node would fail on it the same way, so it is surfaced at once, not retried, with what to do.
#[test]
fn a_damaged_squashfs_image_is_surfaced_at_once_with_its_line() {
    let env = Env::new();
    env.ok(&["image", "import", "ubuntu:22.04"]);
    let base = env.vars["SLURM_BASE_RESULTS_DIR"].trim_end_matches('/').to_string();
    let cut = format!("{base}/damaged-{}.sqsh", std::process::id());
    // The job's user cuts the cached image to its first MiB (the squashfs header is still there).
    env.ssh(&format!("head -c 1048576 \"$(ls {base}/sqsh-cache/ubuntu+22.04-*.sqsh | head -n 1)\" > {cut}"));
    assert_eq!(std::fs::metadata(&cut).unwrap().len(), 1 << 20);
    let (job, _) = env.submit(&["--image", &cut, "--gpus", "0", "--", "true"]);
    let v = env.wait_terminal(&job, LIMIT);
    let _ = std::fs::remove_file(&cut);
    assert_eq!((v["status"].as_str(), v["retries"].as_u64()), (Some("Error"), Some(0)), "not retried: {v}");
    let message = v["message"].as_str().unwrap_or("");
    assert!(message.contains("FATAL ERROR: File system corruption detected"), "unsquashfs' own line: {v}");
    assert!(message.contains("tao-slurm image import IMAGE --force"), "{v}");
}
