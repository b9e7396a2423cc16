//! Sweeps and pipelines for real on the sandbox: a 100-variant sweep in one sbatch and at most two
//! round trips, each task seeing its own index and values, one variant's infrastructure failure
//! retried alone; cancelling a sweep stops only what has not finished; a pipeline keeps its order
//! across its first step's retry, and ends at once when a step fails for good.

use crate::common::wait::wait_for;
use crate::common::{is_terminal, Env};
use serde_json::Value;
use std::time::Duration;

fn all_terminal(jobs: &[Value]) -> bool {
    jobs.iter().all(is_terminal)
}

/// The numeric array ids of the sweep's Slurm jobs (an array task's id is `<array>_<index>`), in
/// sacct and in the controller, once accounting has caught up (a task that ended more than MinJobAge
/// ago is in sacct alone).
fn array_ids_named(env: &Env, name: &str) -> Vec<String> {
    env.wait_for_accounting();
    let text = env.ssh(&format!(
        "sacct -X -P -n -S now-1days -E now -s PD,R,RQ,RS,S,CA,CD,F,TO,NF,PR,OOM,BF,DL --name={name} -o JobID\nsqueue --me -r -t all -h -n {name} -o %i\n"
    ));
    let mut ids: Vec<String> = text.lines().map(|l| l.split('_').next().unwrap().trim().to_string()).collect();
    ids.sort();
    ids.dedup();
    ids.retain(|i| !i.is_empty());
    ids
}

/// Fails with an NCCL error (an infrastructure pattern) on the first run of the variant whose I is
/// 37 only; every run writes what it was told into its results directory.
const SWEEP_COMMAND: &str = "d=\"$TAO_API_RESULTS_DIR/$TAO_JOB_ID\"; \
    printf 'index=%s I=%s values=%s sweep=%s\\n' \"$TAO_SWEEP_INDEX\" \"$I\" \"$TAO_SWEEP_VALUES\" \"$TAO_SWEEP_ID\" > \"$d/seen\"; \
    if [ \"$I\" = 37 ] && [ ! -e \"$d/failed-once\" ]; then touch \"$d/failed-once\"; echo 'ncclSystemError: NCCL error: unhandled system error' >&2; exit 1; fi";

#[test]
fn a_hundred_variant_sweep_is_one_sbatch_in_two_round_trips_and_a_failed_variant_is_retried_alone() {
    let env = Env::isolated();
    let settings = env.settings();
    let client = tao_slurm::Client::new(settings).unwrap();
    let values: Vec<String> = (0..100).map(|i| i.to_string()).collect();
    let spec = tao_slurm::JobSpec {
        image: "ubuntu:22.04".into(),
        command: vec![SWEEP_COMMAND.into()],
        shell: true,
        gpus: Some(0),
        sweep: Some(tao_slurm::spec::SweepSpec { grid: [("I".to_string(), values)].into(), ..Default::default() }),
        ..Default::default()
    };
    let submitted = client.create_sweep(&spec, &Default::default()).unwrap();
    let stats = client.transport_stats();
    assert!(stats.round_trips <= 2, "a sweep is submitted in at most 2 round trips: {stats:?}");
    assert_eq!(submitted.variants.len(), 100);
    let sweep = submitted.sweep_id.clone();
    let array = submitted.slurm_array_id.clone();
    for (i, v) in submitted.variants.iter().enumerate() {
        assert_eq!(v.index as usize, i);
        assert_eq!(v.slurm_job_id, format!("{array}_{i}"));
        assert_eq!(v.values, format!("I={i}"));
    }
    let jobs = env.wait_group(&sweep, "the sweep completes", Duration::from_secs(240), all_terminal);
    assert_eq!(jobs.len(), 100);
    let array_name = format!("tao-sweep-{sweep}");
    assert_eq!(array_ids_named(&env, &array_name), vec![array.clone()], "one sbatch: one job array");
    // Read every variant's record of what its task saw, in one login.
    let mut script = String::new();
    for j in &jobs {
        script.push_str(&format!(
            "echo \"{} $(cat {}/seen)\"\n",
            j["job_id"].as_str().unwrap(),
            j["results_dir"].as_str().unwrap()
        ));
    }
    let seen: std::collections::HashMap<String, String> = env
        .ssh(&script)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(id, rest)| (id.to_string(), rest.to_string()))
        .collect();
    for j in &jobs {
        let id = j["job_id"].as_str().unwrap();
        let index = j["sweep_index"].as_u64().unwrap();
        assert_eq!(j["status"], "Complete", "{j}");
        assert_eq!(j["sweep_id"], sweep.as_str());
        assert_eq!(seen[id], format!("index={index} I={index} values=I={index} sweep={sweep}"), "{j}");
        if index == 37 {
            assert_eq!(j["attempt"], 2, "the failed variant was retried: {j}");
            let attempts = env.status(id)["attempts"].clone();
            assert_eq!(attempts[0]["slurm_job_id"], format!("{array}_37"), "{attempts}");
            assert_eq!(attempts[0]["failure_class"], "infra", "{attempts}");
            let retry_id = attempts[1]["slurm_job_id"].as_str().unwrap();
            assert!(retry_id.bytes().all(|b| b.is_ascii_digit()), "the retry is a job of its own: {attempts}");
            // Its logs are read from the array task's directory and from the retry's.
            let first = env.json(&["logs", id, "--attempt", "1", "--json"]);
            assert!(first["stderr"].as_str().unwrap().contains("NCCL error"), "{first}");
        } else {
            assert_eq!(j["attempt"], 1, "the others are untouched: {j}");
            assert_eq!(j["slurm_job_id"], format!("{array}_{index}"));
        }
    }
}

#[test]
fn cancelling_a_sweep_cancels_only_its_unfinished_variants() {
    let env = Env::new();
    // Variants 0-2 finish at once, 3-5 run for ten minutes.
    let out = env.json(&[
        "submit",
        "--json",
        "--image",
        "ubuntu:22.04",
        "--gpus",
        "0",
        "--grid",
        "I=0,1,2,3,4,5",
        "--shell",
        "--",
        "if [ \"$I\" -ge 3 ]; then sleep 600; fi",
    ]);
    let sweep = out["sweep_id"].as_str().unwrap().to_string();
    let array = out["slurm_array_id"].as_str().unwrap().to_string();
    env.wait_group(&sweep, "three done, three running", Duration::from_secs(300), |jobs| {
        jobs.iter().filter(|j| j["status"] == "Complete").count() == 3
            && jobs.iter().filter(|j| j["status"] == "Running").count() == 3
    });
    let cancelled = env.json(&["cancel", &sweep, "--json"]);
    let list = cancelled.as_array().unwrap();
    assert_eq!(list.len(), 6, "{cancelled}");
    for j in list {
        let want = if j["sweep_index"].as_u64().unwrap() < 3 { "Complete" } else { "Canceled" };
        assert_eq!(j["status"], want, "{j}");
    }
    // Slurm agrees: nothing of the array is left running.
    wait_for("the array gone from the queue", Duration::from_secs(30), Duration::from_millis(500), || {
        let left = env.ssh(&format!("squeue --me -r -h -t PD,R,CG -o %i | grep '^{array}_' || true\n"));
        if left.trim().is_empty() {
            Ok(())
        } else {
            Err(left)
        }
    });
    // `list <sweep>` shows its jobs only.
    let listed = env.json(&["list", &sweep, "--json"]);
    assert_eq!(listed.as_array().unwrap().len(), 6);
}

/// A pipeline job file: `train` runs `train_command`, then `eval` and `export` each check that the
/// step before them has finished (its `done` file) and record when they ran.
fn pipeline_file(env: &Env, train_command: &str) -> String {
    let path = env.dir.path().join("pipeline.toml");
    let step = |name: &str, before: &str| {
        format!(
            "[[steps]]\nname = \"{name}\"\ncommand = ['''d=\"$TAO_API_RESULTS_DIR/$TAO_JOB_ID\"; date +%s.%N > \"$d/start\"; test -e \"${before}/done\" || exit 3; sleep 1; date +%s.%N > \"$d/done\"''']\n"
        )
    };
    let text = format!(
        "image = \"ubuntu:22.04\"\ngpus = 0\nshell = true\nname = \"pipe\"\ncommand = [\"true\"]\n\
         [[steps]]\nname = \"train\"\ncommand = ['''{train_command}''']\n{}{}",
        step("eval", "TAO_AFTER_TRAIN_RESULTS_DIR"),
        step("export", "TAO_AFTER_EVAL_RESULTS_DIR"),
    );
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn read_time(env: &Env, path: &str) -> f64 {
    env.ssh(&format!("cat {path}\n")).trim().parse().unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn a_pipeline_keeps_its_order_across_its_first_steps_retry() {
    let env = Env::new();
    // The first run of train dies with a GPU fault (an infrastructure pattern): it is retried under
    // a new Slurm job, and the steps after it must follow that new job.
    let train = "d=\"$TAO_API_RESULTS_DIR/$TAO_JOB_ID\"; if [ ! -e \"$d/failed-once\" ]; then touch \"$d/failed-once\"; sleep 2; echo 'NVRM: Xid 79: GPU has fallen off the bus' >&2; exit 1; fi; sleep 2; date +%s.%N > \"$d/done\"";
    let file = pipeline_file(&env, train);
    let out = env.json(&["submit", "--json", "--spec", &file]);
    let pipeline = out["pipeline_id"].as_str().unwrap().to_string();
    let steps: Vec<(String, String)> = out["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].as_str().unwrap().to_string(), s["job_id"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(steps.iter().map(|s| s.0.as_str()).collect::<Vec<_>>(), ["train", "eval", "export"]);
    let jobs = env.wait_group(&pipeline, "the pipeline ends", Duration::from_secs(300), |jobs| {
        // Slurm's DependencyNeverSatisfied is never shown as a plain wait.
        for j in jobs {
            assert!(!j["message"].as_str().unwrap_or("").contains("DependencyNeverSatisfied"), "{j}");
        }
        all_terminal(jobs)
    });
    let by_name = |n: &str| jobs.iter().find(|j| j["name"] == format!("pipe/{n}")).unwrap().clone();
    for n in ["train", "eval", "export"] {
        assert_eq!(by_name(n)["status"], "Complete", "{n}: {:#}", by_name(n));
    }
    let train_job = env.status(&steps[0].1);
    let attempts = train_job["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "train was retried: {train_job}");
    assert_ne!(attempts[0]["slurm_job_id"], attempts[1]["slurm_job_id"], "under a new Slurm job id");
    assert_eq!(attempts[0]["failure_class"], "infra");
    // In order: each step started after the one before it finished (its retry, for train).
    let dir = |n: &str| by_name(n)["results_dir"].as_str().unwrap().to_string();
    let train_done = read_time(&env, &format!("{}/done", dir("train")));
    let eval_start = read_time(&env, &format!("{}/start", dir("eval")));
    let eval_done = read_time(&env, &format!("{}/done", dir("eval")));
    let export_start = read_time(&env, &format!("{}/start", dir("export")));
    assert!(
        train_done <= eval_start && eval_done <= export_start,
        "{train_done} {eval_start} {eval_done} {export_start}"
    );
    // eval's Slurm dependency followed train to its new Slurm job.
    let events = env.json(&["events", &steps[1].1, "--json"]);
    let retry_id = attempts[1]["slurm_job_id"].as_str().unwrap();
    assert!(
        events.as_array().unwrap().iter().any(
            |e| e["kind"] == "dependency" && e["detail"].as_str().unwrap().contains(&format!("afterok:{retry_id}"))
        ),
        "{events}"
    );
}

#[test]
fn a_pipeline_whose_first_step_fails_cancels_the_later_steps_at_once() {
    let env = Env::new();
    let file = pipeline_file(&env, "echo 'a bug in the training script' >&2; exit 2");
    let out = env.json(&["submit", "--json", "--spec", &file]);
    let pipeline = out["pipeline_id"].as_str().unwrap().to_string();
    let ids: Vec<String> =
        out["steps"].as_array().unwrap().iter().map(|s| s["job_id"].as_str().unwrap().to_string()).collect();
    let slurm: Vec<String> =
        out["steps"].as_array().unwrap().iter().map(|s| s["slurm_job_id"].as_str().unwrap().to_string()).collect();
    // The refresh that sees train fail ends the others too.
    let jobs = env.wait_group(&pipeline, "train ends", Duration::from_secs(300), |jobs| {
        jobs.iter().any(|j| j["job_id"] == ids[0].as_str() && j["status"] == "Error")
    });
    let get = |id: &str| jobs.iter().find(|j| j["job_id"] == id).unwrap().clone();
    assert_eq!(get(&ids[1])["status"], "Canceled", "{:#}", get(&ids[1]));
    assert_eq!(get(&ids[1])["message"], format!("dependency {} ended Error", ids[0]));
    assert_eq!(get(&ids[2])["status"], "Canceled", "{:#}", get(&ids[2]));
    assert_eq!(get(&ids[2])["message"], format!("dependency {} ended Canceled", ids[1]));
    // And Slurm no longer holds them (the refresh's scancel may still be on its way).
    let script = format!("squeue --me -h -j {},{} -o %i 2>/dev/null || true\n", slurm[1], slurm[2]);
    env.wait_ssh("the pipeline's later steps gone from the queue", &script, Duration::from_secs(300), |left| {
        left.trim().is_empty()
    });
}

#[test]
fn after_flag_waits_for_its_parent_and_notok_runs_only_on_failure() {
    let env = Env::new();
    let (parent, parent_slurm) =
        env.submit(&["--image", "ubuntu:22.04", "--gpus", "0", "--shell", "--", "sleep 3; exit 4"]);
    let prefix = &parent[..13];
    let (on_ok, _) = env.submit(&["--image", "ubuntu:22.04", "--gpus", "0", "--after", prefix, "--", "true"]);
    let (on_fail, on_fail_slurm) =
        env.submit(&["--image", "ubuntu:22.04", "--gpus", "0", "--after", &format!("{prefix}:notok"), "--", "true"]);
    // While the parent runs: the first child waits on the parent's Slurm job, the second is held.
    let v = env.status(&on_fail);
    assert_eq!(v["status"], "Pending", "{v}");
    let dep = env.ssh(&format!("scontrol show job {on_fail_slurm} | grep -o 'Reason=[A-Za-z]*'\n"));
    assert!(dep.contains("JobHeldUser"), "a notok child is held: {dep}");
    let ok_child = env.wait_terminal(&on_ok, Duration::from_secs(300));
    assert_eq!(ok_child["status"], "Canceled", "{ok_child}");
    assert_eq!(ok_child["message"], format!("dependency {parent} ended Error"));
    let fail_child = env.wait_terminal(&on_fail, Duration::from_secs(300));
    assert_eq!(fail_child["status"], "Complete", "{fail_child}");
    let _ = parent_slurm;
    // A bad --after is refused before anything is submitted, naming the field.
    let bad = env.run(&["submit", "--image", "ubuntu:22.04", "--gpus", "0", "--after", "nosuchjob", "--", "true"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("after"), "{}", String::from_utf8_lossy(&bad.stderr));
}

/// Run a sweep submit with a failpoint and SIGKILL it there; returns the sweep's job ids.
fn sweep_submit_killed_at(env: &Env, failpoint: &str) -> Vec<String> {
    use std::io::{BufRead, BufReader};
    let mut cmd = env.command(&[
        "submit",
        "--image",
        "ubuntu:22.04",
        "--gpus",
        "0",
        "--grid",
        "I=0,1,2",
        "--shell",
        "--",
        "echo \"survived $I\"",
    ]);
    cmd.env("TAO_SLURM_FAILPOINT", failpoint).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    for line in stderr.lines() {
        if line.unwrap().contains(&format!("failpoint {failpoint} reached")) {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let ids: Vec<String> = env
        .json(&["list", "--json"])
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["job_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 3, "the variants were recorded before anything was sent");
    ids
}

#[test]
fn a_sweep_submitter_killed_before_or_after_sbatch_leaves_one_array_tracked_to_its_end() {
    let handles: Vec<_> = ["after-record", "after-sbatch"]
        .into_iter()
        .map(|fp| {
            std::thread::spawn(move || {
                let env = Env::isolated();
                let ids = sweep_submit_killed_at(&env, fp);
                let sweep = env.json(&["list", "--sweeps", "--json"])[0]["sweep_id"].as_str().unwrap().to_string();
                // Nothing sent (resumed after 30 s) or submitted but not recorded (found by its lock).
                let jobs = env.wait_group(&sweep, fp, Duration::from_secs(300), all_terminal);
                for j in &jobs {
                    assert_eq!(j["status"], "Complete", "{fp}: {j}");
                    assert_eq!(j["attempt"], 1, "{fp}: {j}");
                }
                for id in &ids {
                    let logs = env.json(&["logs", id, "--json"]);
                    assert!(logs["stdout"].as_str().unwrap().contains("survived"), "{fp}: {logs}");
                }
                assert_eq!(array_ids_named(&env, &format!("tao-sweep-{sweep}")).len(), 1, "{fp}: one array");
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn bad_sweeps_and_pipelines_are_refused_naming_the_field_before_any_connection() {
    let mut env = Env::isolated();
    // No cluster answers here: an error about the connection would mean the checks came too late.
    env.vars.insert("SLURM_HOSTNAME".into(), "127.0.0.1:1".into());
    let base = ["submit", "--image", "ubuntu:22.04", "--gpus", "0"];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--grid", "1A=x,y", "--", "true"], "sweep.grid"),
        (vec!["--grid", "A=x", "--max-concurrent", "0", "--", "true"], "sweep.max_concurrent"),
        (vec!["--grid", "TAO_SWEEP_INDEX=1", "--", "true"], "sweep.grid"),
        (vec!["--grid", "A=x", "--nodes", "2", "--", "true"], "sweep"),
        (vec!["--variant", "A", "--", "true"], "sweep.variants"),
        (vec!["--after", "x;y", "--", "true"], "after"),
    ];
    for (args, field) in cases {
        let mut full: Vec<&str> = base.to_vec();
        full.extend(args.iter());
        let out = env.run(&full);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(err.contains(&format!("invalid {field}:")), "{args:?}: {err}");
    }
    let file = env.dir.path().join("p.toml");
    std::fs::write(
        &file,
        "image = \"x\"\ncommand = [\"true\"]\n[[steps]]\nname = \"a\"\nafter = [\"b\"]\n[[steps]]\nname = \"b\"\n",
    )
    .unwrap();
    let out = env.run(&["submit", "--spec", file.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid steps.after:"), "{out:?}");
    // render shows the array's script offline.
    let text = env.ok(&[
        "render",
        "--image",
        "ubuntu:22.04",
        "--gpus",
        "0",
        "--grid",
        "A=1,2,3",
        "--max-concurrent",
        "2",
        "--",
        "true",
    ]);
    assert!(text.contains("#SBATCH --array=0-2%2") && text.contains("/.%x-%A_%a.out"), "{text}");
}
