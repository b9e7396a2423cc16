//! GPU sampling's cost in a refresh (issue 40): the refresh script of 1, 100 and 1,000 running GPU
//! jobs, each with two nodes' sample files of 8 GPUs, run on the sandbox's login node as its user
//! with the samples read and without, in one run: time (median of 5), bytes of output, bytes per
//! job. The script is one round trip either way (the engine sends it as one). Writes its section of
//! bench/report.md and bench/gpu-report.json. `dev/bench-gpu` (as root).

#[path = "bench/common.rs"]
#[allow(dead_code)]
mod common;

use serde_json::{json, Value};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Instant;
use tao_slurm::ops::refresh::{refresh_script, RefreshTarget};

const BEGIN: &str = "<!-- gpu-bench:begin -->";
const END: &str = "<!-- gpu-bench:end -->";
const RUNS: usize = 5;

/// Run `script` as the sandbox's user on the login node: (milliseconds, bytes of output).
fn run_as_user(user: &str, script: &str) -> (f64, usize) {
    let t = Instant::now();
    let mut child = Command::new("runuser")
        .args(["-u", user, "--", "env", &format!("SLURM_CONF={}", common::slurm_conf()), "bash", "-s"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    (common::ms(t.elapsed()), out.stdout.len())
}

fn main() {
    let env = common::sandbox_env();
    let user = env["SLURM_USER"].clone();
    let base = env["SLURM_BASE_RESULTS_DIR"].clone();
    let root = format!("{base}/bench-gpu");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let sample = format!("v1 {now} - {}\n", ["75/4096/250"; 8].join(","));
    let mut rows = Vec::new();
    for n in [1usize, 100, 1000] {
        let targets: Vec<RefreshTarget> = (0..n)
            .map(|i| {
                let dir = format!("{root}/job-{i}/{}", tao_slurm::gpu::SAMPLE_DIR);
                std::fs::create_dir_all(&dir).unwrap();
                for node in ["node1", "node2"] {
                    std::fs::write(format!("{dir}/{node}"), &sample).unwrap();
                }
                RefreshTarget {
                    job_id: format!("bench-gpu-{i}"),
                    slurm_job_id: Some(format!("{}", 900_000_000 + i)),
                    job_name: format!("tao-job-bench-gpu-{i}"),
                    submit_lock: format!("{root}/lock-{i}"),
                    results_root: root.clone(),
                    status_sig: None,
                    array_index: None,
                    look: None,
                    gpu_dir: Some(dir),
                    gpu_seen: Vec::new(),
                }
            })
            .collect();
        let without: Vec<RefreshTarget> =
            targets.iter().map(|t| RefreshTarget { gpu_dir: None, ..t.clone() }).collect();
        let (with_script, without_script) = (refresh_script(&targets), refresh_script(&without));
        let (mut on, mut off) = (Vec::new(), Vec::new());
        let (mut bytes_on, mut bytes_off) = (0, 0);
        for _ in 0..RUNS {
            let (ms, b) = run_as_user(&user, &without_script);
            off.push(ms);
            bytes_off = b;
            let (ms, b) = run_as_user(&user, &with_script);
            on.push(ms);
            bytes_on = b;
        }
        let row = json!({
            "jobs": n,
            "with_ms": common::median(on),
            "without_ms": common::median(off),
            "with_bytes": bytes_on,
            "without_bytes": bytes_off,
            "bytes_per_job": (bytes_on - bytes_off) as f64 / n as f64,
            "script_bytes_per_job": (with_script.len() - without_script.len()) as f64 / n as f64,
        });
        eprintln!("{row}");
        rows.push(row);
    }
    let _ = std::fs::remove_dir_all(&root);
    // The detection figure (gpu_health's benchmark) is kept from the report before.
    let before: Value = std::fs::read_to_string("bench/gpu-report.json")
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    let report = json!({
        "detection": before["detection"],
        "rows": rows,
        "generated": String::from_utf8_lossy(&Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"]).output().unwrap().stdout).trim(),
    });
    std::fs::create_dir_all("bench").unwrap();
    std::fs::write("bench/gpu-report.json", serde_json::to_string_pretty(&report).unwrap()).unwrap();
    let md = section(&report);
    common::splice_report(BEGIN, END, &md);
    println!("{md}");
}

fn section(r: &Value) -> String {
    let mut s = format!(
        "{BEGIN}\n## GPU samples in the refresh (issue 40, examples/gpu_bench.rs)\n\n\
         Generated {}; the refresh script of N running GPU jobs (two nodes of 8 GPUs each), run on the login \
         node as the sandbox's user, with the sample files read and without; medians of {RUNS}. Either way it \
         is one script, so one round trip.\n\n\
         | running jobs | with samples, ms | without, ms | output with / without, bytes | bytes per job | script bytes per job |\n\
         |---|---|---|---|---|---|\n",
        r["generated"].as_str().unwrap_or("")
    );
    for row in r["rows"].as_array().unwrap() {
        s.push_str(&format!(
            "| {} | {:.1} | {:.1} | {} / {} | {:.0} | {:.0} |\n",
            row["jobs"],
            row["with_ms"].as_f64().unwrap(),
            row["without_ms"].as_f64().unwrap(),
            row["with_bytes"],
            row["without_bytes"],
            row["bytes_per_job"].as_f64().unwrap(),
            row["script_bytes_per_job"].as_f64().unwrap(),
        ));
    }
    s.push_str(&format!("\nReproduce: `dev/bench-gpu`.\n{END}\n"));
    s
}
