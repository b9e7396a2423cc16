//! The end-to-end group, on both sandbox clusters: Slurm 22.05 (Debian 12's) and Slurm 24.11 (what GPU
//! clusters run; Debian 13's, in a root of its own). `on_both!` generates each test twice, as
//! `versions::slurm_22_05::<name>` and `versions::slurm_24_11::<name>`, so the release is in every
//! test's name. Nothing here stops a daemon of either cluster.

use crate::common::cluster::Cluster;
use crate::common::Env;
use serde_json::Value;
use std::time::{Duration, Instant};

macro_rules! on_both {
    ($($(#[doc = $doc:literal])* fn $name:ident($cluster:ident) $body:block)*) => {
        $($(#[doc = $doc])* fn $name($cluster: Cluster) $body)*
        pub mod slurm_22_05 {
            $(#[test] fn $name() { super::$name(super::Cluster::Slurm22_05) })*
        }
        pub mod slurm_24_11 {
            $(#[test] fn $name() { super::$name(super::Cluster::Slurm24_11) })*
        }
    };
}

const LIMIT: Duration = Duration::from_secs(180);
const IMAGE: &str = "ubuntu:22.04";

/// Poll `status --json` of a job until `pred` holds.
fn wait_until(env: &Env, job: &str, limit: Duration, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let v = env.status(job);
        if pred(&v) {
            return v;
        }
        assert!(start.elapsed() < limit, "{what}: not reached after {limit:?}: {v}");
        std::thread::sleep(Duration::from_millis(400));
    }
}

/// Poll a script run on the login host until its output satisfies `pred`; returns that output.
fn wait_ssh(env: &Env, script: &str, limit: Duration, pred: impl Fn(&str) -> bool) -> String {
    let start = Instant::now();
    loop {
        let out = env.ssh(script);
        if pred(&out) {
            return out;
        }
        assert!(start.elapsed() < limit, "{script}: not reached after {limit:?}: {out}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// A group's jobs (`status <sweep> --json`) once `done` holds.
fn wait_group(env: &Env, id: &str, what: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let start = Instant::now();
    loop {
        let v = env.json(&["status", id, "--json"]);
        let jobs = v.as_array().unwrap_or_else(|| panic!("a group's status is a list: {v}")).clone();
        if done(&jobs) {
            return jobs;
        }
        assert!(start.elapsed() < LIMIT, "{what}: not reached: {v:#}");
        std::thread::sleep(Duration::from_millis(600));
    }
}

fn terminal(v: &Value) -> bool {
    matches!(v["status"].as_str(), Some("Complete" | "Error" | "Canceled"))
}

on_both! {
    /// The headline of issue 27: exit 3 is reported as exit code 3 whether the refresh that ends the
    /// job sees it still listed by squeue (22.05 prints `768` there, 24.11 `3:0`) or only in sacct.
    fn exit_code_3_is_reported_from_squeue_and_from_sacct(cluster) {
        let env = cluster.env();
        let (ok, _) = env.submit(&["--image", IMAGE, "--gpus", "1", "--", "true"]);
        let (in_squeue, squeue_id) = env.submit(&["--image", IMAGE, "--gpus", "0", "--shell", "--", "exit 3"]);
        let (in_sacct, sacct_id) = env.submit(&["--image", IMAGE, "--gpus", "0", "--shell", "--", "exit 3"]);
        // The first is refreshed while the controller still lists it finished (MinJobAge=10 s)...
        wait_ssh(&env, &format!("squeue -h -t all -j {squeue_id} -o %T\n"), LIMIT, |s| s.trim() == "FAILED");
        let v = env.status(&in_squeue);
        assert_eq!((v["status"].as_str(), v["exit_code"].as_i64()), (Some("Error"), Some(3)), "{v}");
        assert!(v["message"].as_str().unwrap().contains("exit code 3"), "{v}");
        // ...the second only once the controller has forgotten it.
        wait_ssh(&env, &format!("squeue -h -t all -j {sacct_id} -o %T 2>/dev/null || true\n"), LIMIT, |s| s.trim().is_empty());
        // (sacct alone knows it now; the refresh answers once slurmdbd has its end, a moment later)
        let v = wait_until(&env, &in_sacct, LIMIT, "terminal from sacct", terminal);
        assert_eq!((v["status"].as_str(), v["exit_code"].as_i64(), v["slurm_state"].as_str()), (Some("Error"), Some(3), Some("FAILED")), "{v}");
        let v = env.wait_terminal(&ok, LIMIT);
        assert_eq!((v["status"].as_str(), v["exit_code"].as_i64()), (Some("Complete"), Some(0)), "{v}");
    }

    /// Every terminal state this cluster can produce maps to its platform status: COMPLETED,
    /// FAILED, CANCELLED, and Slurm's TIMEOUT (about 90 s: the 1-minute limit plus the controller's
    /// 30-s check).
    fn terminal_states_map_to_platform_statuses(cluster) {
        let env = cluster.env();
        let (timeout, _) = crate::sandbox_status::adopt_raw(&env, "--time=1 --wrap 'sleep 600'");
        let (cancelled, _) = env.submit(&["--image", IMAGE, "--gpus", "0", "--", "sleep", "600"]);
        wait_until(&env, &cancelled, LIMIT, "running", |v| v["status"] == "Running");
        let out = env.json(&["cancel", &cancelled, "--json"]);
        assert_eq!(out[0]["status"], "Canceled", "{out}");
        let v = env.wait_terminal(&cancelled, LIMIT);
        assert_eq!(v["status"], "Canceled", "{v}");
        let v = env.wait_terminal(&timeout, Duration::from_secs(300));
        assert_eq!((v["status"].as_str(), v["slurm_state"].as_str()), (Some("Error"), Some("TIMEOUT")), "{v}");
        assert_eq!(v["retries"], 0, "a time limit is not retried: {v}");
    }

    /// Two nodes: each task gets its own rank, one master, and runs in the image's container.
    fn two_nodes_get_their_ranks(cluster) {
        let env = cluster.env();
        let (job, _) = env.submit(&[
            "--image", "nvcr.io/nvidia/tao/tao-toolkit:6.26.3-pyt", "--nodes", "2", "--gpus", "8", "--shell", "--",
            "echo \"rank: node=$SLURMD_NODENAME NODE_RANK=$NODE_RANK WORLD_SIZE=$WORLD_SIZE MASTER_ADDR=$MASTER_ADDR IMAGE=$(. /etc/os-release; echo $TAO_SLURM_SANDBOX_IMAGE)\"",
        ]);
        let v = env.wait_terminal(&job, LIMIT);
        assert_eq!(v["status"], "Complete", "{v}");
        let logs = env.json(&["logs", &job, "--json"]);
        let mut ranks: Vec<&str> = logs["stdout"].as_str().unwrap().lines().filter(|l| l.starts_with("rank: ")).collect();
        ranks.sort_by_key(|l| l.split("NODE_RANK=").nth(1).unwrap_or("").to_string());
        assert_eq!(ranks.len(), 2, "{logs}");
        for (i, line) in ranks.iter().enumerate() {
            assert!(line.contains(&format!("NODE_RANK={i} WORLD_SIZE=2")), "{line}");
            assert!(line.ends_with("IMAGE=nvidia/tao/tao-toolkit:6.26.3-pyt"), "each rank in the image's container: {line}");
        }
        let master = |l: &str| l.split("MASTER_ADDR=").nth(1).unwrap().split(' ').next().unwrap().to_string();
        assert_eq!(master(ranks[0]), master(ranks[1]), "one master: {ranks:?}");
        assert_ne!(ranks[0].split(' ').nth(1), ranks[1].split(' ').nth(1), "two nodes: {ranks:?}");
    }

    /// An infrastructure failure (an NCCL error) is retried; a user error is not.
    fn an_infrastructure_failure_is_retried_and_a_user_error_is_not(cluster) {
        let env = cluster.env();
        let (nccl, _) = env.submit(&["--image", IMAGE, "--gpus", "0", "--shell", "--",
            "m=\"$TAO_API_RESULTS_DIR/$TAO_JOB_ID/failed-once\"; if [ ! -e \"$m\" ]; then touch \"$m\"; echo 'ncclSystemError: NCCL error: unhandled system error' >&2; exit 1; fi; echo recovered"]);
        let (user, _) = env.submit(&["--image", IMAGE, "--gpus", "0", "--shell", "--",
            "echo 'ValueError: learning rate must be positive' >&2; exit 1"]);
        let v = env.wait_terminal(&nccl, LIMIT);
        assert_eq!((v["status"].as_str(), v["retries"].as_u64()), (Some("Complete"), Some(1)), "{v}");
        assert_eq!(v["attempts"][0]["failure_class"], "infra", "{v}");
        let v = env.wait_terminal(&user, LIMIT);
        assert_eq!((v["status"].as_str(), v["retries"].as_u64(), v["exit_code"].as_i64()), (Some("Error"), Some(0), Some(1)), "{v}");
        assert_eq!(v["attempts"][0]["failure_class"], "user", "{v}");
    }

    /// A sweep is one job array: each task sees its own value, a failing variant keeps its exit code,
    /// and cancelling the sweep stops only its unfinished variants.
    fn a_sweep_is_one_array_and_cancels_only_its_unfinished_variants(cluster) {
        let env = cluster.env();
        let out = env.json(&["submit", "--json", "--image", IMAGE, "--gpus", "0", "--grid", "I=0,1,2,3", "--shell", "--",
            "echo \"I=$I index=$TAO_SWEEP_INDEX\"; if [ \"$I\" = 1 ]; then exit 5; fi; if [ \"$I\" -ge 2 ]; then sleep 600; fi"]);
        let sweep = out["sweep_id"].as_str().unwrap().to_string();
        let array = out["slurm_array_id"].as_str().unwrap().to_string();
        let jobs = wait_group(&env, &sweep, "two ended, two running", |jobs| {
            jobs.iter().filter(|j| terminal(j)).count() == 2 && jobs.iter().filter(|j| j["status"] == "Running").count() == 2
        });
        for j in &jobs {
            match j["sweep_index"].as_u64().unwrap() {
                0 => assert_eq!((j["status"].as_str(), j["exit_code"].as_i64()), (Some("Complete"), Some(0)), "{j}"),
                1 => assert_eq!((j["status"].as_str(), j["exit_code"].as_i64()), (Some("Error"), Some(5)), "{j}"),
                _ => assert!(j["slurm_job_id"].as_str().unwrap().starts_with(&format!("{array}_")), "an array task: {j}"),
            }
        }
        let cancelled = env.json(&["cancel", &sweep, "--json"]);
        let mut statuses: Vec<(u64, &str)> = cancelled.as_array().unwrap().iter()
            .map(|j| (j["sweep_index"].as_u64().unwrap(), j["status"].as_str().unwrap())).collect();
        statuses.sort();
        assert_eq!(statuses, [(0, "Complete"), (1, "Error"), (2, "Canceled"), (3, "Canceled")], "{cancelled}");
        wait_ssh(&env, &format!("squeue --me -r -h -t PD,R,CG -o %i | grep '^{array}_' || true\n"), LIMIT, |s| s.trim().is_empty());
    }

    /// `--after`: a child runs after its parent succeeded; `:notok` runs only on failure (else both
    /// are cancelled with the reason).
    fn dependencies_follow_their_parent(cluster) {
        let env = cluster.env();
        let (parent, _) = env.submit(&["--image", IMAGE, "--gpus", "0", "--shell", "--", "sleep 2; exit 4"]);
        let (on_ok, _) = env.submit(&["--image", IMAGE, "--gpus", "0", "--after", &parent, "--", "true"]);
        let (on_fail, _) = env.submit(&["--image", IMAGE, "--gpus", "0", "--after", &format!("{parent}:notok"), "--", "true"]);
        let v = env.wait_terminal(&on_ok, LIMIT);
        assert_eq!(v["status"], "Canceled", "{v}");
        assert_eq!(v["message"], format!("dependency {parent} ended Error"), "{v}");
        let v = env.wait_terminal(&on_fail, LIMIT);
        assert_eq!(v["status"], "Complete", "{v}");
        let v = env.status(&parent);
        assert_eq!(v["exit_code"], 4, "{v}");
    }

    /// Cosmos-RL: a role exiting 2 stops the others; the job and its evidence name the role and its
    /// exit status.
    fn a_cosmos_role_exit_status_is_reported(cluster) {
        let env = cluster.env();
        let config = crate::sandbox_cosmos::write_config(&env);
        let (job, _) = env.submit(&[
            "--image", "nvcr.io/nvidia/tao/tao-toolkit:6.26.3-pyt", "--cosmos-config", &config, "--time-hours", "0.2",
            "--cosmos-command", "rollout=if [ \"$SLURM_PROCID\" = 1 ]; then sleep 2; exit 2; fi; sleep 300",
            "--", "sleep", "300",
        ]);
        let (v, _) = crate::sandbox_cosmos::wait_running_then_terminal(&env, &job);
        assert_eq!((v["status"].as_str(), v["exit_code"].as_i64()), (Some("Error"), Some(2)), "{v}");
        assert!(v["message"].as_str().unwrap().contains("Cosmos-RL role rollout failed with exit code 2"), "{v}");
        assert!(v["attempts"][0]["evidence"].to_string().contains("Cosmos-RL role rollout failed with exit code 2"), "{v}");
    }

    /// The lost-job rule's evidence, read for real by the refresh script: squeue and sacct both
    /// answer, sdiag says accounting is up to date, a job that never existed is absent from both (so
    /// its absence is evidence), and a finished job is found by sacct with its exit code.
    fn the_lost_job_rule_reads_sdiag_and_both_commands(cluster) {
        let env = cluster.env();
        let (_, finished) = env.submit(&["--image", IMAGE, "--gpus", "0", "--shell", "--", "exit 7"]);
        // Finished: the refresh asks sacct of it whether or not squeue still lists it.
        wait_ssh(&env, &format!("squeue -h -t all -j {finished} -o %T 2>/dev/null || true\n"), LIMIT, |s| {
            matches!(s.trim(), "" | "FAILED")
        });
        let base = env.vars["SLURM_BASE_RESULTS_DIR"].clone();
        let target = |id: &str| tao_slurm::ops::refresh::RefreshTarget {
            job_id: format!("never-{id}"),
            slurm_job_id: Some(id.to_string()),
            job_name: "tao-job-none".into(),
            submit_lock: format!("{base}/nonexistent"),
            results_root: format!("{base}/nonexistent"),
            status_sig: None,
            array_index: None,
            look: None,
            gpu_dir: None,
            gpu_seen: Vec::new(),
        };
        let script = tao_slurm::ops::refresh::refresh_script(&[target("987654321"), target(&finished)]);
        let obs = wait_until_accounted(&env, &script, &finished);
        assert_eq!(obs.dbd_queue, Some(0), "sdiag's DBD Agent queue size is read: {obs:?}");
        assert!(obs.absence_is_evidence(), "{obs:?}");
        let sacct = obs.sacct.as_ref().unwrap();
        assert!(sacct.iter().all(|r| r.job_id != "987654321"), "{sacct:?}");
        let rec = sacct.iter().find(|r| r.job_id == finished).unwrap();
        assert_eq!((rec.exit_code, rec.unread.as_deref()), (Some(7), None), "{rec:?}");
    }

    /// Preflight names the release and finds Pyxis; the partition view reads this release's
    /// `scontrol show partition` and `sinfo`.
    fn preflight_and_the_partition_view(cluster) {
        let env = cluster.env();
        let v = env.json(&["preflight", "--json"]);
        let facts = &v["clusters"][0];
        let (major, minor) = cluster.release().split_once('.').unwrap();
        assert_eq!(facts["slurm_version"]["major"].as_u64(), major.parse().ok(), "{v:#}");
        assert_eq!(facts["slurm_version"]["minor"].as_u64(), minor.parse().ok(), "{v:#}");
        assert_eq!((facts["slurm_version_tested"].as_bool(), facts["pyxis"].as_bool()), (Some(true), Some(true)), "{v:#}");
        let failed: Vec<&Value> = v["checks"].as_array().unwrap().iter().filter(|c| c["ok"] == false && c["required"] == true).collect();
        assert!(failed.is_empty(), "{failed:#?}");
        let human = env.ok(&["preflight"]);
        assert!(human.contains(&format!("Slurm {}.", cluster.release())) && human.contains("Pyxis present"), "{human}");
        let client = tao_slurm::Client::new(env.settings()).unwrap();
        let (parts, _) = client.partition_usage().unwrap();
        let names: Vec<(&str, bool, Option<u64>, u32, u32)> =
            parts.iter().map(|p| (p.name.as_str(), p.is_default, p.max_time_minutes, p.nodes, p.gpus_total)).collect();
        assert_eq!(names, [
            ("polar", true, Some(240), 4, 32),
            ("long", false, Some(720), 4, 32),
            ("debug", false, Some(30), 4, 32),
            ("urgent", false, Some(240), 4, 32),
            ("cpu", false, Some(60), 1, 0),
        ]);
    }
}

/// Run the refresh script until sacct knows the finished job (it lags the controller a little) and,
/// in the same run, sdiag says accounting has caught up (other tests' jobs keep slurmdbd busy at times).
fn wait_until_accounted(env: &Env, script: &str, finished: &str) -> tao_slurm::ops::refresh::Observations {
    let start = Instant::now();
    loop {
        let obs = tao_slurm::ops::refresh::parse_refresh_output(&env.ssh(script));
        let known = obs.sacct.as_ref().is_some_and(|s| s.iter().any(|r| r.job_id == finished && r.state.is_finished()));
        if known && obs.dbd_queue == Some(0) {
            return obs;
        }
        assert!(start.elapsed() < LIMIT, "sacct never listed {finished} with accounting caught up (sdiag): {obs:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
}
