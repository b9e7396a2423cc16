//! End-to-end jobs on the sandbox cluster, over SSH: exit status, multi-node and single-node
//! environment contracts, what the real container shows (its image, its mounts), logs.

use crate::common::Env;
use std::collections::HashMap;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(180);
const IMAGE: &str = "nvcr.io/nvidia/tao/tao-toolkit:6.26.3-pyt";

#[test]
fn exit_zero_is_complete_and_exit_three_is_error_with_its_code() {
    let env = Env::new();
    let (ok, _) = env.submit(&["--image", "ubuntu:22.04", "--gpus", "1", "--", "true"]);
    let (bad, _) = env.submit(&["--image", "ubuntu:22.04", "--gpus", "1", "--shell", "--", "echo failing; exit 3"]);
    let v = env.wait_terminal(&ok, LIMIT);
    assert_eq!(v["status"], "Complete", "{v}");
    assert_eq!(v["exit_code"], 0);
    let v = env.wait_terminal(&bad, LIMIT);
    assert_eq!(v["status"], "Error", "{v}");
    assert_eq!(v["exit_code"], 3, "{v}");
    assert_eq!(v["slurm_state"], "FAILED", "{v}");

    // `watch` agrees: exit 0 only for Complete.
    let out = env.run_with_deadline(&["watch", &ok, "--interval", "0.5"], LIMIT);
    assert_eq!(out.status.code(), Some(0));
    let out = env.run_with_deadline(&["watch", &bad, "--interval", "0.5"], LIMIT);
    assert_eq!(out.status.code(), Some(1));

    let logs = env.json(&["logs", &bad, "--json"]);
    assert!(logs["stdout"].as_str().unwrap().contains("failing"), "{logs}");
}

/// Lines `KEY=VALUE KEY=VALUE ...` printed by the job, one per node.
fn parse_report(stdout: &str, marker: &str) -> Vec<HashMap<String, String>> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix(marker))
        .map(|rest| {
            rest.split_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

const REPORT: &str = "echo \"report: node=$SLURMD_NODENAME SLURM_NODEID=$SLURM_NODEID \
NODE_RANK=${NODE_RANK-unset} WORLD_SIZE=${WORLD_SIZE-unset} MASTER_ADDR=${MASTER_ADDR-unset} \
MASTER_PORT=${MASTER_PORT-unset} NUM_GPU_PER_NODE=${NUM_GPU_PER_NODE-unset} \
IMAGE=$(. /etc/os-release; echo $TAO_SLURM_SANDBOX_IMAGE) \
RESULTS=$(test -w \"$TAO_API_RESULTS_DIR\" && echo rw || echo ro) \
DATA=$(test -f /data/probe && { touch /data/probe 2>/dev/null && echo rw || echo ro; } || echo missing)\"; \
echo \"foo-value<${FOO-unset}>\"";

#[test]
fn two_nodes_each_get_their_own_rank_and_one_master() {
    let env = Env::new();
    let data = format!("{}/data-{}", env.vars["SLURM_BASE_RESULTS_DIR"], std::process::id());
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(format!("{data}/probe"), "").unwrap();
    let mount = format!("{data}:/data:ro");
    let (job, _) = env.submit(&[
        "--image",
        IMAGE,
        "--nodes",
        "2",
        "--gpus",
        "8",
        "--env",
        "FOO=bar baz",
        "--mount",
        &mount,
        "--shell",
        "--",
        REPORT,
    ]);
    let v = env.wait_terminal(&job, LIMIT);
    assert_eq!(v["status"], "Complete", "{v}");
    let logs = env.json(&["logs", &job, "--json"]);
    let stdout = logs["stdout"].as_str().unwrap();
    let mut reports = parse_report(stdout, "report: ");
    assert_eq!(reports.len(), 2, "one report per node:\n{stdout}\n{}", logs["stderr"]);
    reports.sort_by_key(|r| r["SLURM_NODEID"].clone());
    let master = &reports[0]["node"];
    for (i, r) in reports.iter().enumerate() {
        assert_eq!(r["SLURM_NODEID"], i.to_string());
        assert_eq!(r["NODE_RANK"], r["SLURM_NODEID"], "NODE_RANK is the task's own node id: {r:?}");
        assert_eq!(r["WORLD_SIZE"], "2");
        assert_eq!(&r["MASTER_ADDR"], master, "MASTER_ADDR is the first host of the node list");
        assert_eq!(r["MASTER_PORT"], "29500");
        assert_eq!(r["NUM_GPU_PER_NODE"], "8");
        // Each node's own container of the image (its /etc/os-release names it), the results root
        // mounted read-write, the --mount read-only.
        assert_eq!(r["IMAGE"], "nvidia/tao/tao-toolkit:6.26.3-pyt", "{r:?}");
        assert_eq!((r["RESULTS"].as_str(), r["DATA"].as_str()), ("rw", "ro"), "{r:?}");
    }
    assert_ne!(reports[0]["node"], reports[1]["node"], "two different nodes");
    let first_of_list = v["node_list"].as_str().unwrap().to_string();
    assert!(first_of_list.starts_with(master.trim_end_matches(char::is_numeric)), "{first_of_list} vs {master}");
    assert_eq!(stdout.matches("foo-value<bar baz>").count(), 2, "FOO arrives intact on both nodes: {stdout}");
}

#[test]
fn single_node_tasks_see_no_rendezvous_variables() {
    let env = Env::new();
    let (job, _) = env.submit(&["--image", "ubuntu:22.04", "--gpus", "2", "--shell", "--", REPORT]);
    let v = env.wait_terminal(&job, LIMIT);
    assert_eq!(v["status"], "Complete", "{v}");
    let logs = env.json(&["logs", &job, "--json"]);
    let reports = parse_report(logs["stdout"].as_str().unwrap(), "report: ");
    assert_eq!(reports.len(), 1, "{logs}");
    for var in ["WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "NUM_GPU_PER_NODE"] {
        assert_eq!(reports[0][var], "unset", "{var} must not reach a single-node task: {:?}", reports[0]);
    }
    assert_eq!(reports[0]["IMAGE"], "library/ubuntu:22.04");
}

#[test]
fn staged_files_follow_the_contract_layout() {
    let env = Env::new();
    let (job, slurm) = env.submit(&["--image", "ubuntu:22.04", "--gpus", "0", "--", "true"]);
    env.wait_terminal(&job, LIMIT);
    let base = env.vars["SLURM_BASE_RESULTS_DIR"].clone();
    for path in [
        format!("{base}/specs/{job}.json"),
        format!("{base}/env/{job}.json"),
        format!("{base}/meta/{job}.json"),
        format!("{base}/sbatch/job_{job}.sbatch"),
        format!("{base}/slurm-logs/tao-job-{job}-{slurm}/main.out"),
    ] {
        assert!(std::path::Path::new(&path).exists(), "{path} missing");
    }
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{base}/meta/{job}.json")).unwrap()).unwrap();
    assert_eq!(meta["job_spec"]["image"], "ubuntu:22.04");
    assert_eq!(meta["backend_details"]["backend_type"], "slurm");
}

#[test]
fn input_paths_are_checked_before_anything_is_staged() {
    let env = Env::new();
    let base = env.vars["SLURM_BASE_RESULTS_DIR"].clone();
    let data = format!("{base}/datasets/coco-{}", std::process::id());
    std::fs::create_dir_all(&data).unwrap();
    // The root exists but lacks annotations.json; the direct input does not exist at all.
    let out = env.run(&[
        "submit",
        "--image",
        "ubuntu:22.04",
        "--gpus",
        "0",
        "--dataset-root",
        &format!("lustre://{data}"),
        "--input",
        &format!("custom.val.path=slurm://{data}/val-missing"),
        "--",
        "true",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("{data}/annotations.json")) && stderr.contains(&format!("{data}/val-missing")),
        "{stderr}"
    );
    assert!(stderr.contains("nothing was staged"), "{stderr}");
    assert!(env.json(&["list", "--json"]).as_array().unwrap().is_empty(), "nothing recorded");
    // No staged file mentions this dataset (other tests stage their own jobs meanwhile).
    let staged = std::process::Command::new("grep")
        .args(["-rlF", &data, &format!("{base}/specs"), &format!("{base}/meta")])
        .output()
        .unwrap();
    assert!(staged.stdout.is_empty(), "nothing staged: {}", String::from_utf8_lossy(&staged.stdout));
    // check-path agrees, path by path.
    let out = env.run(&[
        "check-path",
        &format!("lustre://{data}"),
        &format!("{data}/annotations.json"),
        "s3://bucket/ckpt",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let states: Vec<&str> = v["paths"].as_array().unwrap().iter().map(|p| p["state"].as_str().unwrap()).collect();
    assert_eq!(states, vec!["exists", "missing", "not checked (fetched inside the job)"]);
    // Local paths are refused with the contract's message, before any connection.
    for local in ["file:///home/me/coco", "data/coco"] {
        let out = env.run(&["submit", "--image", "ubuntu:22.04", "--dataset-root", local, "--", "true"]);
        assert!(String::from_utf8_lossy(&out.stderr).contains(tao_slurm::spec::LOCAL_PATH_MESSAGE), "{out:?}");
    }
    // With the file in place, the job runs and sees its resolved specs.
    std::fs::write(format!("{data}/annotations.json"), "{}").unwrap();
    std::fs::create_dir_all(format!("{data}/val-missing")).unwrap();
    let (job, _) = env.submit(&[
        "--image",
        "ubuntu:22.04",
        "--gpus",
        "0",
        "--dataset-root",
        &format!("lustre://{data}"),
        "--input",
        &format!("custom.val.path=slurm://{data}/val-missing"),
        "--shell",
        "--",
        "cat \"$TAO_SPECS_FILE\"",
    ]);
    let v = env.wait_terminal(&job, LIMIT);
    assert_eq!(v["status"], "Complete", "{v}");
    let logs = env.json(&["logs", &job, "--json"]);
    let text = logs["stdout"].as_str().unwrap();
    let specs: serde_json::Value =
        serde_json::from_str(text.lines().next().unwrap_or("")).unwrap_or_else(|e| panic!("{e}: {text:?}"));
    assert_eq!(specs["dataset_root"], data.as_str());
    assert_eq!(specs["custom"]["val"]["path"], format!("{data}/val-missing"));
}

#[test]
fn a_multi_node_job_ends_with_its_failing_ranks_exit_code() {
    let env = Env::new();
    // Rank 1 fails with 2 while rank 0 is still working: srun stops rank 0 (SIGTERM, 143), and the
    // job must report rank 1's own status. (Rank 1 waits a second after its message: Slurm's I/O
    // forwarding may drop what a task wrote just before a kill-on-bad-exit tears the step down.)
    let (job, _) = env.submit(&[
        "--image",
        "ubuntu:22.04",
        "--nodes",
        "2",
        "--gpus",
        "8",
        "--shell",
        "--",
        "if [ \"$NODE_RANK\" = 1 ]; then sleep 2; echo 'rank 1 fails' >&2; sleep 1; exit 2; fi; echo rank-0-working; sleep 120",
    ]);
    let v = env.wait_terminal(&job, Duration::from_secs(300));
    assert_eq!((v["status"].as_str(), v["exit_code"].as_i64()), (Some("Error"), Some(2)), "{v}");
    let logs = env.json(&["logs", &job, "--json"]);
    assert!(logs["stdout"].as_str().unwrap().contains("rank-0-working"), "{logs}");
    assert!(logs["stderr"].as_str().unwrap().contains("rank 1 fails"), "the tasks' own output is in main.err: {logs}");
    assert!(logs["stderr"].as_str().unwrap().contains("Exited with exit code 2"), "srun's message too: {logs}");
}

/// Issue 35: a variable named like Slurm's SPANK option variables (through which Pyxis takes its
/// `--container-*` options) is refused at validation, naming the field and the variable, before
/// anything reaches the cluster.
#[test]
fn a_variable_named_like_a_spank_option_is_refused_before_anything_is_sent() {
    let env = Env::new();
    for name in ["_SLURM_SPANK_OPTION_pyxis_container_mounts", "SLURM_SPANK__SLURM_SPANK_OPTION_pyxis_container_mounts"]
    {
        let assignment = format!("{name}=/etc:/host-etc");
        let out = env.run(&["submit", "--image", "ubuntu:22.04", "--gpus", "0", "--env", &assignment, "--", "true"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("env") && stderr.contains(name) && stderr.contains("SPANK"), "{stderr}");
    }
    assert!(env.json(&["list", "--json"]).as_array().unwrap().is_empty(), "nothing recorded");
}
