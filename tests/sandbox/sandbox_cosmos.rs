//! Cosmos-RL jobs on the real cluster (4 nodes × 8 GPUs): three steps in one allocation, each task
//! reporting what it was given; a failing role stopping the others; the role's logs and name. Each
//! role's step runs in a named container of its own on the real Pyxis and Enroot; the command is a
//! shell snippet that prints its environment.

use crate::common::wait::{wait_for, when};
use crate::common::{is_terminal, Env};
use serde_json::Value;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A policy replica of 2 × 8 = 16 GPUs (two whole nodes) and four rollout replicas of 4 GPUs, packed
/// two per node: 2 policy + 2 rollout nodes.
const CONFIG: &str = "\
[train.train_policy]
type = \"grpo\"
[policy.parallelism]
n_init_replicas = 1
tp_size = 2
dp_shard_size = 8
[rollout.parallelism]
n_init_replicas = 4
tp_size = 4
pp_size = 1
";

/// Every task prints what it was given, one `key=value` a line.
const REPORT: &str = r#"
echo "role=$COSMOS_NODE_ROLE"
echo "node=$SLURMD_NODENAME"
echo "task=$SLURM_PROCID"
echo "controller_node=$CONTROLLER_NODE"
echo "controller_host=$COSMOS_CONTROLLER_HOST"
echo "policy_nodes=$POLICY_NODES"
echo "rollout_nodes=$ROLLOUT_NODES"
echo "local_node_list=$LOCAL_NODE_LIST"
echo "counts=$NUM_POLICY_NODES/$NUM_ROLLOUT_NODES/$TOTAL_NODES"
echo "multinode=$COSMOS_RL_MULTINODE"
echo "controller_port=$CONTROLLER_PORT"
echo "meta_policy=$NODE_LAUNCH_METADATA_POLICY"
echo "meta_rollout=$NODE_LAUNCH_METADATA_ROLLOUT"
echo "image=$(. /etc/os-release; echo $TAO_SLURM_SANDBOX_IMAGE)"
echo "config_first_line=$(head -n 1 "$COSMOS_RL_CONFIG")"
echo "secret_length=${#TAO_TEST_SECRET}"
"#;

pub(crate) fn write_config(env: &Env) -> String {
    let path = env.dir.path().join("cosmos-rl.toml");
    std::fs::write(&path, CONFIG).unwrap();
    path.display().to_string()
}

/// The `key=value` lines of a task's output.
fn report(text: &str) -> HashMap<String, String> {
    text.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// `logs --role ROLE --json`: each task's (stdout, stderr).
fn role_logs(env: &Env, job: &str, role: &str) -> Vec<(String, String)> {
    let v = env.json(&["logs", job, "--role", role, "--json"]);
    assert_eq!(v["role"], role, "{v}");
    v["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, t)| {
            assert_eq!(t["task"], i as u64, "{v}");
            assert!(t["stdout_path"].as_str().unwrap().ends_with(&format!("/{role}/{i}.out")), "{v}");
            (t["stdout"].as_str().unwrap().to_string(), t["stderr"].as_str().unwrap().to_string())
        })
        .collect()
}

/// Poll until terminal; returns the final status and how long the job ran (from the first time it
/// was seen Running). A 4-node exclusive job may wait for other tests' jobs first.
pub(crate) fn wait_running_then_terminal(env: &Env, job: &str) -> (Value, Duration) {
    let mut running_since = None;
    let v = wait_for(&format!("job {job} terminal"), Duration::from_secs(900), Duration::from_millis(500), || {
        let v = env.status(job);
        if v["status"] == "Running" && running_since.is_none() {
            running_since = Some(Instant::now());
        }
        when(v, is_terminal)
    });
    (v, running_since.map_or(Duration::ZERO, |t| t.elapsed()))
}

#[test]
fn every_role_runs_on_its_nodes_with_the_split_and_addresses() {
    let mut env = Env::new();
    let secret = format!("cosmos-{}-'$(touch /tmp/never)'", std::process::id());
    env.vars.insert("TAO_TEST_SECRET".into(), secret.clone());
    let config = write_config(&env);
    let (job, _) = env.submit(&[
        "--secret-env",
        "TAO_TEST_SECRET",
        "--image",
        "nvcr.io/nvidia/tao/tao-toolkit:6.26.3-pyt",
        "--cosmos-config",
        &config,
        "--time-hours",
        "0.2",
        "--shell",
        "--",
        REPORT,
    ]);
    let (v, _) = wait_running_then_terminal(&env, &job);
    assert_eq!(v["status"], "Complete", "{v}");
    assert_eq!(v["exit_code"], 0, "{v}");
    assert_eq!(v["nodes"], 4, "{v}");

    let controller: Vec<_> = role_logs(&env, &job, "controller").iter().map(|(o, _)| report(o)).collect();
    let policy: Vec<_> = role_logs(&env, &job, "policy").iter().map(|(o, _)| report(o)).collect();
    let rollout: Vec<_> = role_logs(&env, &job, "rollout").iter().map(|(o, _)| report(o)).collect();
    assert_eq!((controller.len(), policy.len(), rollout.len()), (1, 2, 2));

    let c = &controller[0];
    let policy_nodes: Vec<&str> = c["policy_nodes"].split(' ').collect();
    let rollout_nodes: Vec<&str> = c["rollout_nodes"].split(' ').collect();
    assert_eq!((policy_nodes.len(), rollout_nodes.len()), (2, 2), "{c:?}");
    let mut all: Vec<&str> = policy_nodes.iter().chain(&rollout_nodes).copied().collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 4, "four distinct nodes: {c:?}");

    // The controller: on the first node, alongside policy task 0.
    assert_eq!(c["role"], "controller");
    assert_eq!(c["node"], policy_nodes[0]);
    assert_eq!(c["controller_node"], policy_nodes[0]);
    assert_eq!(policy[0]["node"], c["node"], "the controller shares its node with a policy task");

    let split = tao_slurm::cosmos::split_nodes(&tao_slurm::cosmos::parse_config(CONFIG).unwrap(), 8).unwrap();
    let meta_policy: Value =
        serde_json::from_str(&split.launch_metadata_json(tao_slurm::cosmos::Role::Policy)).unwrap();
    let meta_rollout: Value =
        serde_json::from_str(&split.launch_metadata_json(tao_slurm::cosmos::Role::Rollout)).unwrap();
    // What the split must be, written out: one policy replica over both nodes, rendezvous on the
    // first at 29345 with all 8 GPUs; rollout replicas of GPUs 0-3 and 4-7 at 29345 + replica index.
    assert_eq!(meta_policy[1]["colocation"][0]["nnode"], 2);
    assert_eq!(meta_policy[1]["colocation"][0]["rendezvous_node"], 0);
    assert_eq!(meta_policy[1]["colocation"][0]["visible_gpus"], serde_json::json!([0, 1, 2, 3, 4, 5, 6, 7]));
    assert_eq!(meta_rollout[1]["colocation"][1]["rendezvous_port"], 29348);
    assert_eq!(meta_rollout[1]["colocation"][1]["visible_gpus"], serde_json::json!([4, 5, 6, 7]));

    let tasks = [("controller", &controller), ("policy", &policy), ("rollout", &rollout)];
    for (role, reports) in tasks {
        for (i, r) in reports.iter().enumerate() {
            let at = format!("{role} task {i}: {r:?}");
            assert_eq!(r["role"], role, "{at}");
            assert_eq!(r["task"], i.to_string(), "{at}");
            let expected_node = match role {
                "controller" => policy_nodes[0],
                "policy" => policy_nodes[i],
                _ => rollout_nodes[i],
            };
            assert_eq!(r["node"], expected_node, "{at}");
            assert_eq!(r["controller_node"], policy_nodes[0], "{at}");
            assert_eq!(r["controller_host"], format!("{}:8082", policy_nodes[0]), "{at}");
            assert_eq!(r["policy_nodes"], c["policy_nodes"], "{at}");
            assert_eq!(r["rollout_nodes"], c["rollout_nodes"], "{at}");
            let local = if role == "rollout" { &c["rollout_nodes"] } else { &c["policy_nodes"] };
            assert_eq!(&r["local_node_list"], local, "{at}");
            assert_eq!(r["counts"], "2/2/4", "{at}");
            assert_eq!(r["multinode"], "1", "{at}");
            assert_eq!(r["controller_port"], "8082", "{at}");
            assert_eq!(serde_json::from_str::<Value>(&r["meta_policy"]).unwrap(), meta_policy, "{at}");
            assert_eq!(serde_json::from_str::<Value>(&r["meta_rollout"]).unwrap(), meta_rollout, "{at}");
            assert_eq!(r["config_first_line"], "[train.train_policy]", "the config is staged: {at}");
            assert_eq!(r["secret_length"], secret.chars().count().to_string(), "the secret reaches every role: {at}");
            // Every value above was read inside the role's own container of the image.
            assert_eq!(r["image"], "nvidia/tao/tao-toolkit:6.26.3-pyt", "{at}");
        }
    }

    // One task by number, and a task the role does not have.
    let text = env.ok(&["logs", &job, "--role", "rollout", "--task", "1", "--stdout"]);
    assert!(text.contains("role=rollout") && text.contains(&format!("node={}", rollout_nodes[1])), "{text}");
    let out = env.run(&["logs", &job, "--role", "rollout", "--task", "2"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("tasks 0 to 1"), "{out:?}");
    let main = env.json(&["logs", &job, "--json"]);
    assert!(main["stderr"].as_str().unwrap().contains("tao-slurm: Cosmos-RL controller at"), "{main}");
    let base = std::path::Path::new(&env.vars["SLURM_BASE_RESULTS_DIR"]);
    assert!(!base.join("secrets").join(&job).exists(), "the secrets file is gone once the job is terminal");
    let leaked = std::process::Command::new("grep").args(["-rlF", &secret]).arg(base).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&leaked.stdout), "", "the secret is in no file, log or script");
}

#[test]
fn a_role_exiting_2_stops_the_others_and_the_job_names_it() {
    let env = Env::new();
    let config = write_config(&env);
    let (job, _) = env.submit(&[
        "--image",
        "nvcr.io/nvidia/tao/tao-toolkit:6.26.3-pyt",
        "--cosmos-config",
        &config,
        "--time-hours",
        "0.2",
        "--cosmos-command",
        // One rank fails, as in real life: srun then terminates its sibling and reports 143; the
        // job must still end with the failing rank's 2.
        "rollout=if [ \"$SLURM_PROCID\" = 1 ]; then echo \"rollout task 1 giving up\" >&2; sleep 3; exit 2; fi; sleep 300",
        "--",
        "sleep",
        "300",
    ]);
    let (v, ran) = wait_running_then_terminal(&env, &job);
    assert_eq!(v["status"], "Error", "{v}");
    assert_eq!(v["exit_code"], 2, "{v}");
    let message = v["message"].as_str().unwrap();
    assert!(message.contains("Cosmos-RL role rollout failed with exit code 2"), "the role is named: {message}");
    assert!(ran < Duration::from_secs(150), "the controller and policy (sleep 300) were stopped: ran {ran:?}");
    let evidence = v["attempts"][0]["evidence"].to_string();
    assert!(evidence.contains("Cosmos-RL role rollout failed"), "{v}");

    let main = env.json(&["logs", &job, "--json"]);
    let err = main["stderr"].as_str().unwrap();
    assert!(err.contains("Cosmos-RL role rollout ended with exit code 2"), "{err}");
    assert!(err.contains("stopping the other Cosmos-RL roles"), "{err}");
    for role in ["controller", "policy"] {
        let line =
            err.lines().find(|l| l.contains(&format!("Cosmos-RL role {role} ended with exit code"))).unwrap_or("");
        assert!(!line.is_empty() && !line.ends_with("exit code 0"), "{role} was stopped: {err}");
    }
    assert!(err.contains("rollout task 1 giving up"), "the role's error lines are in main.err: {err}");
    assert!(err.contains("task 1: Exited with exit code 2"), "srun's messages are in main.err: {err}");

    // Each role's logs are readable.
    let rollout = role_logs(&env, &job, "rollout");
    assert_eq!(rollout.len(), 2);
    assert!(rollout[1].1.contains("rollout task 1 giving up"), "{rollout:?}");
    assert!(!rollout[0].1.contains("giving up"), "{rollout:?}");
    assert_eq!(role_logs(&env, &job, "policy").len(), 2);
    assert_eq!(role_logs(&env, &job, "controller").len(), 1);
}

#[test]
fn a_split_larger_than_the_partition_is_refused_before_submitting() {
    let env = Env::new();
    // Three policy replicas of two whole nodes: 6 nodes, and the sandbox's partition has 4.
    let path = env.dir.path().join("big.toml");
    std::fs::write(
        &path,
        "[policy.parallelism]\nn_init_replicas = 3\ntp_size = 8\ncp_size = 2\n[rollout.parallelism]\ntp_size = 8\n",
    )
    .unwrap();
    let out =
        env.run(&["submit", "--image", "ubuntu:22.04", "--cosmos-config", &path.display().to_string(), "--", "true"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("needs 7 nodes (6 policy + 1 rollout of 8 GPUs)") && stderr.contains("polar has 4"),
        "{stderr}"
    );
    assert!(env.json(&["list", "--json"]).as_array().unwrap().is_empty(), "nothing was recorded or submitted");

    // --role is for Cosmos-RL jobs only; said without a round trip to the job's logs.
    let (job, _) = env.submit(&["--image", "ubuntu:22.04", "--gpus", "0", "--", "true"]);
    let out = env.run(&["logs", &job, "--role", "policy"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a Cosmos-RL job"), "{out:?}");
    env.ok(&["cancel", &job]);
}

#[test]
fn render_shows_the_split_and_the_script_offline() {
    let mut env = Env::isolated();
    env.vars.insert("SLURM_HOSTNAME".into(), "unreachable.invalid".into());
    std::fs::write(env.dir.path().join("rl.toml"), CONFIG).unwrap();
    let job = env.dir.path().join("job.toml");
    std::fs::write(
        &job,
        "image = \"nvcr.io/nvidia/tao/tao-toolkit:6.26.3-pyt\"\ncommand = [\"python\", \"launch.py\"]\n[cosmos_rl]\nconfig = \"rl.toml\"\n",
    )
    .unwrap();
    let spec = job.display().to_string();
    let text = env.ok(&["render", "--spec", &spec]);
    assert!(text.starts_with("Cosmos-RL node split, 8 GPUs per node: 2 policy + 2 rollout = 4 nodes"), "{text}");
    assert!(text.contains("rollout  1     3        1      node 1      29348  4-7"), "{text}");
    assert!(text.contains("#SBATCH --nodes=4") && text.contains("COSMOS_NODE_ROLE=rollout"), "{text}");
    assert!(text.contains(".cosmos-rl.toml <==\n[train.train_policy]"), "the config is a staged file: {text}");
    let v = env.json(&["render", "--spec", &spec, "--json"]);
    assert_eq!(v["cosmos_rl"]["total_nodes"], 4, "{v}");
    assert_eq!(v["cosmos_rl"]["rollout"]["nodes"][0]["colocation"][1]["visible_gpus"], serde_json::json!([4, 5, 6, 7]));
    // Flags win over the job file: with 4 GPUs per node the policy replica spans 4 nodes and each
    // rollout replica fills one.
    let v = env.json(&["render", "--spec", &spec, "--gpus", "4", "--json"]);
    assert_eq!((v["cosmos_rl"]["policy_nodes"].as_u64(), v["cosmos_rl"]["rollout_nodes"].as_u64()), (Some(4), Some(4)));
    // Invalid sizes are refused with the key named, before anything else.
    std::fs::write(env.dir.path().join("rl.toml"), "[rollout.parallelism]\ntp_size = 0\n").unwrap();
    let out = env.run(&["render", "--spec", &spec]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid rollout.parallelism.tp_size"), "{out:?}");
}

/// `exec --role` reaches the role's nodes and the container its step named; `--node` the role that
/// runs there; a Cosmos-RL job without either is refused with the roles named (issue 26).
#[test]
fn exec_by_role_reaches_the_roles_nodes_and_container() {
    let env = Env::new();
    let config = write_config(&env);
    let (job, _) = env.submit(&[
        "--image",
        "nvcr.io/nvidia/tao/tao-toolkit:6.26.3-pyt",
        "--cosmos-config",
        &config,
        "--time-hours",
        "0.2",
        "--shell",
        "--",
        "echo \"tao-$TAO_JOB_ID-$COSMOS_NODE_ROLE\" > /tmp/container; echo \"policy_nodes=$POLICY_NODES\"; echo \"rollout_nodes=$ROLLOUT_NODES\"; sleep 600",
    ]);
    // The controller's log names each role's nodes once the job runs.
    let c = wait_for("the controller's report", Duration::from_secs(900), Duration::from_millis(500), || {
        let status = env.status(&job);
        assert!(!is_terminal(&status), "{status}");
        let logs = if status["status"] == "Running" { role_logs(&env, &job, "controller") } else { vec![] };
        let r = logs.first().map(|(o, _)| report(o)).unwrap_or_default();
        if r.contains_key("rollout_nodes") {
            Ok(r)
        } else {
            Err(status)
        }
    });
    let ran = |args: &[&str]| {
        let mut all = vec!["exec", &job];
        all.extend_from_slice(args);
        // Each role's container holds the /tmp/container its task wrote there (its own root filesystem).
        all.extend(["--", "sh", "-c", "echo \"$SLURMD_NODENAME $(cat /tmp/container)\""]);
        let out = env.run(&all);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(String::from).collect();
        lines.sort();
        lines
    };
    let on = |nodes: &str, role: &str| {
        let mut want: Vec<String> = nodes.split(' ').map(|n| format!("{n} tao-{job}-{role}")).collect();
        want.sort();
        want
    };
    assert_eq!(ran(&["--role", "rollout"]), on(&c["rollout_nodes"], "rollout"));
    assert_eq!(ran(&["--role", "policy"]), on(&c["policy_nodes"], "policy"));
    let first = c["policy_nodes"].split(' ').next().unwrap().to_string();
    assert_eq!(ran(&["--role", "controller"]), on(&first, "controller"));
    let last_rollout = c["rollout_nodes"].split(' ').next_back().unwrap().to_string();
    assert_eq!(ran(&["--node", &last_rollout]), on(&last_rollout, "rollout"));
    // `shell --role` opens a terminal in that role's container, on its first node.
    let mut shell = crate::common::pty::PtyChild::spawn(env.command(&["shell", &job, "--role", "policy", "--", "sh"]));
    shell.type_in("echo \"in=$(cat /tmp/container) on=$SLURMD_NODENAME\"\r");
    let want = format!("in=tao-{job}-policy on={first}");
    wait_for("the policy's terminal", Duration::from_secs(180), Duration::from_millis(200), || {
        when(shell.seen(), |s| s.contains(&want))
    });
    shell.type_in("exit 4\r");
    let code = wait_for("the terminal to end", Duration::from_secs(60), Duration::from_millis(200), || {
        shell.child.try_wait().unwrap()
    });
    assert_eq!(code.code(), Some(4), "{}", shell.seen());
    let bare = env.run(&["exec", &job, "--", "true"]);
    assert_ne!(bare.status.code(), Some(0));
    let err = String::from_utf8_lossy(&bare.stderr);
    assert!(err.contains("give a role (controller, policy, rollout)"), "{err}");
    let wrong = env.run(&["exec", &job, "--role", "critic", "--", "true"]);
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("\"critic\" is not a role of this job"));
    env.ok(&["cancel", &job]);
}
