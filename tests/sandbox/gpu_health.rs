//! GPU health on the sandbox (issue 40): each node's stand-in `nvidia-smi` reads what the test sets
//! for that node (`<sandbox>/gpu/<node>`). A 2-node training whose second node's GPUs go to 0% while
//! its progress stops is found hung and restarted from its newest checkpoint without that node, and
//! completes; an idle job's webhook hears it and the job is left alone; a node without `nvidia-smi`
//! shows "no GPU data", not 0%. The tests share the nodes' readings, so they run one at a time.

use crate::common::sandbox;
use crate::common::wait::wait_for;
use crate::common::{is_terminal, Env};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// One test at a time sets the nodes' readings; each is put back when the test ends.
struct Readings {
    set: Vec<std::path::PathBuf>,
    _one_at_a_time: MutexGuard<'static, ()>,
}

impl Readings {
    fn take() -> Readings {
        Readings { set: Vec::new(), _one_at_a_time: crate::common::gpu_readings_lock() }
    }

    /// What `node`'s nvidia-smi prints from now on (`absent`: it behaves as missing).
    fn set(&mut self, node: &str, text: &str) {
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
fn nodes_of(env: &Env, list: &str) -> Vec<String> {
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
