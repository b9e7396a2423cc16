//! GPU health on the sandbox (issue 40): each node's stand-in `nvidia-smi` reads what the test sets
//! for that node (`<sandbox>/gpu/<node>`). A 2-node training whose second node's GPUs go to 0% while
//! its progress stops is found hung and restarted from its newest checkpoint without that node, and
//! completes; an idle job's webhook hears it and the job is left alone; a node without `nvidia-smi`
//! shows "no GPU data", not 0%; an idle job whose watch says cancel ends Canceled, saying why; a
//! job's history of samples is kept and shown, each sample naming its tool (DCGM where the stand-in
//! dcgmi answers, nvidia-smi elsewhere), and preflight names the tool. The tests share the nodes'
//! readings, so they run one at a time.

use crate::common::sandbox;
use crate::common::wait::wait_for;
use crate::common::{is_terminal, Env};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// One test at a time sets the nodes' readings; each is put back when the test ends.
pub(crate) struct Readings {
    set: Vec<std::path::PathBuf>,
    _one_at_a_time: MutexGuard<'static, ()>,
}

impl Readings {
    pub(crate) fn take() -> Readings {
        Readings { set: Vec::new(), _one_at_a_time: crate::common::gpu_readings_lock() }
    }

    /// What `node`'s nvidia-smi prints from now on (`absent`: it behaves as missing); `<node>.dcgm`:
    /// DCGM answers on the node (the stand-in dcgmi), with these readings (empty: nvidia-smi's).
    pub(crate) fn set(&mut self, node: &str, text: &str) {
        let path = sandbox::dir().join("gpu").join(node);
        std::fs::write(&path, text).unwrap();
        self.set.push(path);
    }
}

impl Drop for Readings {
    fn drop(&mut self) {
        for p in &self.set {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The nodes of a Slurm node list (`node[1-2]`), as Slurm expands it.
pub(crate) fn nodes_of(env: &Env, list: &str) -> Vec<String> {
    env.ssh(&format!("scontrol show hostnames '{list}'\n")).split_whitespace().map(String::from).collect()
}

/// A stand-in training on every node of the job: rank 0 writes a progress line and a checkpoint each
/// second; once `hang` exists in its results directory a first run stops making progress (its rank
/// 1's GPUs are set idle by the test) and waits for ever; a resumed run goes on from its checkpoint
/// for three epochs and completes. The other ranks wait for rank 0 to finish.
const TRAINING: &str = r#"set -u
d="$TAO_API_RESULTS_DIR/$TAO_JOB_ID"; mkdir -p "$d/train"
if [ "${NODE_RANK:-0}" != 0 ]; then
  while [ ! -e "$d/train/done-$SLURM_JOB_ID" ]; do sleep 1; done; exit 0
fi
start=1
if [ -n "${TAO_RESUME_CHECKPOINT:-}" ]; then
  n="${TAO_RESUME_CHECKPOINT##*/epoch-}"; start=$(( ${n%.pth} + 1 )); echo "training: resuming at epoch $start"
fi
for e in $(seq "$start" 120); do
  if [ -e "$d/hang" ] && [ -z "${TAO_RESUME_CHECKPOINT:-}" ]; then echo "training: hung"; sleep 3600; fi
  sleep 1
  echo "epoch $e" > "$d/train/epoch-$e.pth"
  printf '{"epoch": %d, "max_epoch": 120}\n' "$e" >> "$d/status.json"
  if [ -n "${TAO_RESUME_CHECKPOINT:-}" ] && [ "$e" -ge $((start + 2)) ]; then break; fi
done
touch "$d/train/done-$SLURM_JOB_ID"; echo "training: done"
"#;

/// A 2-node [`TRAINING`] (samples every 2 s, hang time 12 s, with `extra` flags) run until it makes
/// progress and both nodes are sampled (at the stand-in's 75%); then its second node's GPUs go to 0%
/// and its progress stops. Returns the job, the hung node, and when the hang began.
fn start_a_hang(env: &Env, readings: &mut Readings, extra: &[&str]) -> (String, String, Instant) {
    let mut args = vec!["--image", "ubuntu:22.04", "--nodes", "2", "--gpus", "1", "--gpu-sample-secs", "2"];
    args.extend(["--gpu-hang-secs", "12"]);
    args.extend_from_slice(extra);
    args.extend(["--shell", "--", TRAINING]);
    let (job, _) = env.submit(&args);
    let running = env.wait_job(&job, "running with progress and GPU samples", Duration::from_secs(300), |v| {
        v["status"] == "Running"
            && v["progress"]["epoch"].as_u64().is_some_and(|e| e >= 2)
            && v["gpu"]["nodes"].as_array().is_some_and(|n| n.len() == 2)
    });
    assert_eq!(running["gpu"]["util"], 75, "both nodes at the stand-in's 75%: {running}");
    let nodes = nodes_of(env, running["node_list"].as_str().unwrap());
    assert_eq!(nodes.len(), 2, "{running}");
    readings.set(&nodes[1], "0, 100, 30\n");
    std::fs::write(format!("{}/hang", running["results_dir"].as_str().unwrap()), "").unwrap();
    (job, nodes[1].clone(), Instant::now())
}

/// The webhook message of `event` about `job`, once it arrives (the background monitor refreshes; a
/// status here refreshes too).
fn heard(env: &Env, got: &Mutex<Vec<Value>>, job: &str, event: &str) -> Value {
    wait_for(&format!("the job's {event} webhook"), Duration::from_secs(120), Duration::from_millis(500), || {
        let _ = env.status(job);
        let m = got.lock().unwrap().clone();
        m.into_iter().find(|m| m["job_id"] == job && m["event"] == event).ok_or("none yet")
    })
}

#[test]
fn a_hung_rank_is_restarted_from_its_checkpoint_without_its_node_and_completes() {
    let mut readings = Readings::take();
    let env = Env::isolated();
    let (job, hung, at) = start_a_hang(&env, &mut readings, &["--gpu-hang-action", "restart"]);
    let restarted = env.wait_job(&job, "restarted after its hang", Duration::from_secs(180), |v| {
        v["attempt"].as_u64().is_some_and(|a| a >= 2)
    });
    println!(
        "hang of {hung} found and the job restarted {:.1} s after it began (hang time 12 s, samples every 2 s)",
        at.elapsed().as_secs_f64()
    );
    assert!(restarted["excluded_nodes"].as_str().unwrap().split(',').any(|n| n == hung), "{restarted}");
    let done = env.wait_terminal(&job, Duration::from_secs(300));
    let logs = env.json(&["logs", &job, "--json"]);
    let out = logs["stdout"].as_str().unwrap();
    assert_eq!(done["status"], "Complete", "{done}\n{out}");
    assert_eq!(done["retries"], 1, "{done}");
    assert!(!nodes_of(&env, done["node_list"].as_str().unwrap()).contains(&hung), "{done}");
    assert!(out.contains("training: resuming at epoch"), "the second attempt resumed: {out}");
    let first = env.json(&["logs", &job, "--attempt", "1", "--json"]);
    assert!(first["stdout"].as_str().unwrap().contains("training: hung"), "the first hung: {first}");
    let events = env.json(&["events", &job, "--json"]);
    let hung_events: Vec<&Value> = events.as_array().unwrap().iter().filter(|e| e["kind"] == "gpu_hung").collect();
    assert_eq!(hung_events.len(), 1, "one event for the spell: {events}");
    assert!(hung_events[0]["detail"].as_str().unwrap().contains(&hung), "{events}");
    let second = &done["attempts"][1];
    assert_eq!(second["cause"], "infra", "a hang's restart is an infrastructure retry: {done}");
}

/// A receiver of webhook POSTs that keeps every body.
fn receiver() -> (u16, Arc<Mutex<Vec<Value>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim_end().is_empty() {
                    break;
                }
                if let Some((k, v)) = line.trim_end().split_once(':') {
                    if k.eq_ignore_ascii_case("content-length") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                }
            }
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_ok() {
                g.lock().unwrap().push(serde_json::from_slice(&body).unwrap_or(Value::Null));
            }
            let _ = write!(stream, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
    });
    (port, got)
}

#[test]
fn an_idle_job_is_heard_by_its_webhook_and_left_running() {
    let mut readings = Readings::take();
    let env = Env::isolated();
    let (port, got) = receiver();
    let hook = format!("json:http://127.0.0.1:{port}/hooks");
    let (job, _) = env.submit(&[
        "--image",
        "ubuntu:22.04",
        "--gpus",
        "1",
        "--gpu-sample-secs",
        "2",
        "--gpu-idle-secs",
        "8",
        "--notify",
        &hook,
        "--shell",
        "--",
        "sleep 600",
    ]);
    let running = env.wait_job(&job, "running with GPU samples", Duration::from_secs(300), |v| {
        v["status"] == "Running" && v["gpu"]["nodes"].as_array().is_some_and(|n| !n.is_empty())
    });
    readings.set(running["node_list"].as_str().unwrap(), "0, 100, 30\n");
    let at = Instant::now();
    let message = heard(&env, &got, &job, "gpu_idle");
    println!(
        "idle job heard {:.1} s after its GPUs went idle (idle time 8 s, samples every 2 s)",
        at.elapsed().as_secs_f64()
    );
    assert!(message["text"].as_str().unwrap().contains("idle GPUs"), "{message}");
    let v = env.status(&job);
    assert_eq!(v["status"], "Running", "notify leaves the job alone: {v}");
    assert_eq!(v["gpu"]["health"]["state"], "idle", "{v}");
    let table = env.ok(&["status", &job]);
    assert!(table.contains("0% (idle"), "{table}");
    env.ok(&["cancel", &job]);
}

#[test]
fn a_node_without_nvidia_smi_shows_no_gpu_data_and_the_job_runs_on() {
    let mut readings = Readings::take();
    let env = Env::isolated();
    let (job, _) = env.submit(&[
        "--image",
        "ubuntu:22.04",
        "--gpus",
        "1",
        "--gpu-sample-secs",
        "2",
        "--shell",
        "--",
        "for i in $(seq 30); do [ -e \"$TAO_API_RESULTS_DIR/$TAO_JOB_ID/stop\" ] && break; sleep 1; done; echo ran",
    ]);
    let running = env.wait_job(&job, "running", Duration::from_secs(300), |v| v["status"] == "Running");
    readings.set(running["node_list"].as_str().unwrap(), "absent\n");
    let seen = env.wait_job(&job, "showing no GPU data", Duration::from_secs(300), |v| {
        v["gpu"]["nodes"][0]["no_data"].as_str().is_some_and(|r| r.contains("not found"))
    });
    assert!(seen["gpu"]["util"].is_null(), "no data, not 0%: {seen}");
    let table = env.ok(&["status", &job]);
    assert!(table.contains("no GPU data"), "{table}");
    std::fs::write(format!("{}/stop", seen["results_dir"].as_str().unwrap()), "").unwrap();
    let done = env.wait_terminal(&job, Duration::from_secs(300));
    assert!(is_terminal(&done) && done["status"] == "Complete", "{done}");
}

#[test]
fn a_hung_training_with_notify_is_heard_by_its_webhook_and_left_running() {
    let mut readings = Readings::take();
    let env = Env::isolated();
    let (port, got) = receiver();
    let hook = format!("json:http://127.0.0.1:{port}/hooks");
    let (job, hung, at) = start_a_hang(&env, &mut readings, &["--notify", &hook]);
    let message = heard(&env, &got, &job, "gpu_hung");
    println!("hang of {hung} heard by the webhook {:.1} s after it began (hang time 12 s)", at.elapsed().as_secs_f64());
    assert!(message["detail"].as_str().unwrap().contains(&hung), "{message}");
    let v = env.status(&job);
    assert_eq!(
        (v["status"].as_str(), v["attempt"].as_u64()),
        (Some("Running"), Some(1)),
        "notify leaves it alone: {v}"
    );
    assert_eq!(v["gpu"]["health"]["state"], "hung", "{v}");
    env.ok(&["cancel", &job]);
}

/// A node's history: its name and its points as (at, util).
type NodePoints = (String, Vec<(i64, Option<u64>)>);

/// The job's GPU history as `status --json` shows it.
fn history(v: &Value) -> Vec<NodePoints> {
    v["gpu"]["history"]
        .as_array()
        .map(|h| {
            h.iter()
                .map(|n| {
                    let points = n["points"].as_array().unwrap().iter();
                    (
                        n["node"].as_str().unwrap().to_string(),
                        points.map(|p| (p["at"].as_i64().unwrap(), p["util"].as_u64())).collect(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn an_idle_job_whose_watch_says_cancel_ends_canceled_saying_why() {
    let mut readings = Readings::take();
    let env = Env::isolated();
    let (job, slurm_id) = env.submit(&[
        "--image",
        "ubuntu:22.04",
        "--gpus",
        "1",
        "--gpu-sample-secs",
        "2",
        "--gpu-idle-secs",
        "8",
        "--gpu-idle-action",
        "cancel",
        "--shell",
        "--",
        "sleep 600",
    ]);
    let running = env.wait_job(&job, "running with GPU samples", Duration::from_secs(300), |v| {
        v["status"] == "Running" && v["gpu"]["util"] == 75
    });
    readings.set(running["node_list"].as_str().unwrap(), "0, 100, 30\n");
    let at = Instant::now();
    let done = env.wait_terminal(&job, Duration::from_secs(180));
    println!(
        "idle job cancelled {:.1} s after its GPUs went idle (idle time 8 s, samples every 2 s)",
        at.elapsed().as_secs_f64()
    );
    assert_eq!(done["status"], "Canceled", "{done}");
    let message = done["message"].as_str().unwrap();
    assert!(
        message.contains("idle GPUs") && message.contains("under 5%") && message.contains("idle_action = cancel"),
        "the reason is recorded, not 'cancelled by the user': {done}"
    );
    let events = env.json(&["events", &job, "--json"]);
    let idle: Vec<&Value> = events.as_array().unwrap().iter().filter(|e| e["kind"] == "gpu_idle").collect();
    assert_eq!(idle.len(), 1, "one event for the spell: {events}");
    // Slurm ended it too (the controller forgets an ended job after MinJobAge: then sacct has it).
    env.wait_ssh(
        "the Slurm job ended",
        &format!("squeue -h -j {slurm_id} -o %T 2>/dev/null; sacct -n -X -P -j {slurm_id} -o State 2>/dev/null\n"),
        Duration::from_secs(300),
        |o| o.contains("CANCELLED") && !o.lines().any(|l| l.trim() == "RUNNING"),
    );
}

#[test]
fn a_jobs_gpu_history_is_kept_and_shown_with_each_samples_tool() {
    let mut readings = Readings::take();
    let env = Env::isolated();
    let (job, _) =
        env.submit(&["--image", "ubuntu:22.04", "--gpus", "1", "--gpu-sample-secs", "2", "--shell", "--", "sleep 600"]);
    let running = env.wait_job(&job, "running with GPU samples", Duration::from_secs(300), |v| {
        v["status"] == "Running" && v["gpu"]["util"] == 75
    });
    let node = running["node_list"].as_str().unwrap().to_string();
    assert_eq!(running["gpu"]["nodes"][0]["source"], "nvidia-smi", "no DCGM on the node yet: {running}");
    readings.set(&node, "40, 1000, 100\n");
    env.wait_job(&job, "sampled at 40% by nvidia-smi", Duration::from_secs(300), |v| v["gpu"]["util"] == 40);
    // DCGM's host engine answers on the node from now on, with readings of its own.
    readings.set(&format!("{node}.dcgm"), "90, 2000, 300\n90, 2000, 300\n");
    let v = env.wait_job(&job, "sampled at 90% by DCGM", Duration::from_secs(300), |v| v["gpu"]["util"] == 90);
    let newest = &v["gpu"]["nodes"][0];
    assert_eq!(newest["source"], "dcgm", "{v}");
    assert_eq!(newest["gpus"].as_array().map(Vec::len), Some(2), "DCGM's two GPUs: {v}");
    assert_eq!((newest["gpus"][0]["mem_mib"].as_u64(), newest["gpus"][0]["power_w"].as_u64()), (Some(2000), Some(300)));
    // The history holds all three spells, oldest first, one point per sample, within the ring.
    let h = history(&v);
    assert_eq!(h.len(), 1, "{v}");
    let (hnode, points) = &h[0];
    assert_eq!(hnode, &node);
    assert!(points.windows(2).all(|w| w[0].0 < w[1].0), "by time, each once: {points:?}");
    assert!(points.len() <= tao_slurm::gpu::HISTORY_SAMPLES, "{points:?}");
    let utils: Vec<u64> = points.iter().filter_map(|p| p.1).collect();
    let first = |u: u64| utils.iter().position(|x| *x == u);
    assert!(
        matches!((first(75), first(40), first(90)), (Some(a), Some(b), Some(c)) if a < b && b < c),
        "75% then 40% then 90%: {utils:?}"
    );
    env.ok(&["cancel", &job]);
}

#[test]
fn preflight_names_the_gpu_samplers_tool_from_the_login_host() {
    let mut readings = Readings::take();
    let env = Env::isolated();
    let sampler = |env: &Env| -> Vec<Value> {
        let report = env.json(&["preflight", "--json"]);
        let checks = report["checks"].as_array().unwrap().iter().filter(|c| c["name"] == "gpu sampler").cloned();
        let checks: Vec<Value> = checks.collect();
        assert!(!checks.is_empty(), "{report}");
        checks
    };
    for c in sampler(&env) {
        let detail = c["detail"].as_str().unwrap();
        assert_eq!(c["ok"], true, "{c}");
        assert!(
            detail
                .starts_with("GPU samples from nvidia-smi: dcgmi is installed but DCGM's host engine does not answer"),
            "{c}"
        );
        assert!(detail.contains("login host only"), "it says where it looked: {c}");
    }
    let login = env.ssh("hostname -s\n").trim().to_string();
    readings.set(&format!("{login}.dcgm"), "");
    for c in sampler(&env) {
        assert!(c["detail"].as_str().unwrap().starts_with("GPU samples from DCGM"), "{c}");
    }
}

/// Detection with the default watch (`dev/bench-gpu` runs it): a 2-node [`TRAINING`] with the
/// default sampling (every 30 s) and idle threshold (5%), `hang_action = cancel`, followed by the
/// background monitor alone (`submit --monitor`; the test reads the state file with `list`, which
/// makes no remote call), hangs; the time from the hang to the job's Canceled is measured. The hang
/// time is `TAO_SLURM_GPU_BENCH_HANG_SECS` (120 s unless set: the default 1,800 s makes a run of
/// more than 30 minutes). With `TAO_SLURM_GPU_BENCH_OUT`, the figure is written there as JSON.
#[test]
#[ignore = "a benchmark of minutes at the default sampling: dev/bench-gpu runs it"]
fn bench_a_hang_at_the_default_sampling_is_cancelled_its_threshold_after() {
    let mut readings = Readings::take();
    let env = Env::isolated();
    assert!(!env.vars.keys().any(|k| k.starts_with("TAO_SLURM_GPU_")), "the defaults: {:?}", env.vars);
    let defaults = env.settings().gpu_watch;
    let hang: u64 = std::env::var("TAO_SLURM_GPU_BENCH_HANG_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(120);
    let hang_arg = hang.to_string();
    let (job, _) = env.submit(&[
        "--monitor",
        "--image",
        "ubuntu:22.04",
        "--nodes",
        "2",
        "--gpus",
        "1",
        "--gpu-hang-secs",
        &hang_arg,
        "--gpu-hang-action",
        "cancel",
        "--shell",
        "--",
        TRAINING,
    ]);
    let listed = |env: &Env| -> Value {
        let all = env.json(&["list", "--json"]);
        all.as_array().unwrap().iter().find(|v| v["job_id"] == job.as_str()).cloned().unwrap_or(Value::Null)
    };
    let running = wait_for(
        "running with progress and both nodes sampled",
        Duration::from_secs(300),
        Duration::from_secs(1),
        || {
            let v = listed(&env);
            let ready = v["status"] == "Running"
                && v["progress"]["epoch"].as_u64().is_some_and(|e| e >= 2)
                && v["gpu"]["nodes"].as_array().is_some_and(|n| n.len() == 2);
            if ready {
                Ok(v)
            } else {
                Err(v.to_string())
            }
        },
    );
    let nodes = nodes_of(&env, running["node_list"].as_str().unwrap());
    readings.set(&nodes[1], "0, 100, 30\n");
    std::fs::write(format!("{}/hang", running["results_dir"].as_str().unwrap()), "").unwrap();
    let at = Instant::now();
    let limit = Duration::from_secs(hang + 300);
    let done = wait_for("cancelled as hung by the monitor", limit, Duration::from_secs(1), || {
        let v = listed(&env);
        if is_terminal(&v) {
            Ok(v)
        } else {
            Err(v.to_string())
        }
    });
    let secs = at.elapsed().as_secs_f64();
    assert_eq!(done["status"], "Canceled", "{done}");
    assert!(done["message"].as_str().unwrap().contains("cancelled as hung"), "{done}");
    let sample = f64::from(defaults.sample_secs);
    assert!(secs >= hang as f64, "never before the hang time: {secs:.1} s");
    // The hang shows at the next sample (up to one interval), then at a monitor's refresh.
    assert!(secs <= hang as f64 + sample + 60.0, "{secs:.1} s after a hang of {hang} s");
    println!(
        "hang of {} cancelled {secs:.1} s after it began (hang time {hang} s, samples every {} s, idle under {}%)",
        nodes[1], defaults.sample_secs, defaults.idle_percent
    );
    if std::env::var("TAO_SLURM_GPU_BENCH_OUT").as_deref() == Ok("1") {
        let figure = serde_json::json!({
            "generated": String::from_utf8_lossy(&std::process::Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"]).output().unwrap().stdout).trim(),
            "hang_secs": hang,
            "default_hang_secs": defaults.hang_secs,
            "sample_secs": defaults.sample_secs,
            "idle_percent": defaults.idle_percent,
            "seconds_to_action": (secs * 10.0).round() / 10.0,
            "beyond_the_hang_time": ((secs - hang as f64) * 10.0).round() / 10.0,
            "action": "cancel",
        });
        record_detection(&figure);
    }
}

/// Put the detection figure in bench/gpu-report.json (`detection`) and its section of bench/report.md.
fn record_detection(figure: &Value) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let json_path = root.join("bench/gpu-report.json");
    let mut report: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    report["detection"] = figure.clone();
    std::fs::write(&json_path, serde_json::to_string_pretty(&report).unwrap() + "\n").unwrap();
    let (begin, end) = ("<!-- gpu-detection:begin -->", "<!-- gpu-detection:end -->");
    let section = format!(
        "{begin}\n## GPU hang detection with the default watch (issue 55, gpu_health::bench_a_hang_at_the_default_sampling_is_cancelled_its_threshold_after)\n\n\
         Generated {}; a 2-node training on the sandbox hangs (one node's GPUs at 0%, no progress) with the default \
         sampling (every {} s) and idle threshold ({}%), `hang_action = cancel`, followed by the background monitor alone. \
         The hang time was {} s: the default, {} s, would make one run last more than 30 minutes. From the hang to the \
         job Canceled: **{} s**, {} s beyond the hang time (the hang shows at the node's next sample, up to {} s, then \
         at the monitor's next refresh). With the default hang time the same lag follows the 30 minutes, a little longer: the monitor then refreshes a job every 15 s rather than every 5 s (up to about 45 s beyond).\n\n\
         Reproduce: `dev/bench-gpu` (set `TAO_SLURM_GPU_BENCH_HANG_SECS=1800` for the default hang time).\n{end}\n",
        figure["generated"].as_str().unwrap_or(""),
        figure["sample_secs"],
        figure["idle_percent"],
        figure["hang_secs"],
        figure["default_hang_secs"],
        figure["seconds_to_action"],
        figure["beyond_the_hang_time"],
        figure["sample_secs"],
    );
    let md_path = root.join("bench/report.md");
    let md = std::fs::read_to_string(&md_path).unwrap();
    let md = match (md.find(begin), md.find(end)) {
        (Some(a), Some(b)) => format!("{}{section}{}", &md[..a], md[b + end.len()..].trim_start_matches('\n')),
        _ => {
            let at =
                md.find("<!-- gpu-bench:end -->").map(|i| i + "<!-- gpu-bench:end -->\n".len()).unwrap_or(md.len());
            format!("{}\n{section}{}", &md[..at], &md[at..])
        }
    };
    std::fs::write(&md_path, md).unwrap();
}
