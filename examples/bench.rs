//! Benchmarks against the sandbox cluster (not tests: nothing here asserts a time).
//!
//! `cargo run --release --example bench -- [refresh|follow|all]` writes bench/report.md and
//! bench/report.json. Each figure is the median of several runs, next to its floor.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tao_slurm::config::{SettingSources, Settings};
use tao_slurm::engine::logs::Stream;
use tao_slurm::{Client, JobSpec};

const RUNS: usize = 5;

fn sandbox_settings(dir: &std::path::Path) -> Settings {
    let sandbox = std::env::var("SANDBOX_DIR").unwrap_or_else(|_| "/var/lib/tao-slurm-sandbox".into());
    let text =
        std::fs::read_to_string(format!("{sandbox}/settings.env")).expect("start the sandbox: bash dev/sandbox/up.sh");
    let mut env: BTreeMap<String, String> =
        text.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.into(), v.into())).collect();
    env.insert("HOME".into(), dir.display().to_string());
    env.insert("TAO_SLURM_STATE".into(), dir.join("state.db").display().to_string());
    env.insert("TAO_SLURM_CONTROL_DIR".into(), dir.join("cm").display().to_string());
    env.insert("TAO_SLURM_CONTROL_PERSIST".into(), "120".into());
    let sources =
        SettingSources { flags: Default::default(), env: env.into_iter().collect(), file: Default::default() };
    Settings::from_sources(&sources).unwrap()
}

fn ssh_script(settings: &Settings, script: &str) -> String {
    let mut child = Command::new("ssh")
        .arg("-F")
        .arg(settings.ssh_config.as_ref().unwrap())
        .args(["sandbox-login1", "bash", "-s"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn sandbox_conf() -> String {
    let sandbox = std::env::var("SANDBOX_DIR").unwrap_or_else(|_| "/var/lib/tao-slurm-sandbox".into());
    format!("{sandbox}/etc/slurm.conf")
}

/// slurmctld RPC counts by type, from `sdiag` (run locally as root).
fn sdiag_counts() -> BTreeMap<String, u64> {
    let out = Command::new("sdiag").env("SLURM_CONF", sandbox_conf()).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut counts = BTreeMap::new();
    let mut in_types = false;
    for line in text.lines() {
        if line.starts_with("Remote Procedure Call statistics by message type") {
            in_types = true;
            continue;
        }
        if line.starts_with("Remote Procedure Call statistics by user") {
            break;
        }
        if in_types {
            // "	REQUEST_JOB_INFO                        ( 2003) count:12     ave_time:..."
            if let (Some(name), Some(count)) = (line.split_whitespace().next(), line.split("count:").nth(1)) {
                if let Ok(c) = count.split_whitespace().next().unwrap_or("").parse() {
                    counts.insert(name.to_string(), c);
                }
            }
        }
    }
    counts
}

fn sdiag_reset() {
    let _ = Command::new("sdiag").arg("--reset").env("SLURM_CONF", sandbox_conf()).output();
}

fn bench_refresh(n: usize) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let settings = sandbox_settings(dir.path());
    let spec =
        JobSpec { image: "ubuntu:22.04".into(), command: vec!["true".into()], gpus: Some(0), ..Default::default() };
    let plans: Vec<_> = (0..n).map(|_| tao_slurm::plan::resolve(&spec, &settings).unwrap()).collect();
    let script: String = plans
        .iter()
        .map(|p| format!("sbatch --parsable --hold -o /dev/null --job-name={} --wrap true\n", p.layout.job_name))
        .collect();
    let ids: Vec<String> = ssh_script(&settings, &script).lines().map(|l| l.trim().to_string()).collect();
    assert_eq!(ids.len(), n);
    let store = tao_slurm::store::Store::open(&settings.state_path).unwrap();
    for (p, id) in plans.iter().zip(&ids) {
        store.insert_job("{}", p).unwrap();
        store.set_submitted(&p.layout.job_id, id, "sandbox-login1").unwrap();
    }
    let client = Client::new(settings.clone()).unwrap();
    client.refresh(&[]).unwrap(); // warm: the master is up
    let mut times = Vec::new();
    let before = client.transport_stats();
    sdiag_reset();
    let rpc_before = sdiag_counts();
    for _ in 0..RUNS {
        let t = Instant::now();
        let views = client.refresh(&[]).unwrap();
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(views.len(), n);
    }
    let rpc_after = sdiag_counts();
    let after = client.transport_stats();
    // Floor: one squeue of all jobs, on the login node itself.
    let mut floor = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        let out =
            Command::new("squeue").env("SLURM_CONF", sandbox_conf()).args(["-h", "-o", "%i|%T|%r"]).output().unwrap();
        assert!(out.status.success());
        floor.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    ssh_script(&settings, &format!("scancel {}\n", ids.join(" ")));
    let rpcs: BTreeMap<String, f64> = rpc_after
        .iter()
        .map(|(k, v)| (k.clone(), (*v as f64 - *rpc_before.get(k).unwrap_or(&0) as f64) / RUNS as f64))
        .filter(|(_, v)| *v > 0.0)
        .collect();
    serde_json::json!({
        "jobs": n,
        "refresh_ms_median": median(times),
        "floor_squeue_ms_median": median(floor),
        "round_trips_per_refresh": (after.round_trips - before.round_trips) as f64 / RUNS as f64,
        "bytes_sent_per_refresh": (after.bytes_sent - before.bytes_sent) / RUNS as u64,
        "bytes_received_per_refresh": (after.bytes_received - before.bytes_received) / RUNS as u64,
        "slurmctld_rpcs_per_refresh": rpcs,
    })
}

fn bench_follow(megabytes: usize) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let settings = sandbox_settings(dir.path());
    let client = Client::new(settings).unwrap();
    // A job that writes `megabytes` MB of log lines quickly, then ends.
    let spec = JobSpec {
        image: "ubuntu:22.04".into(),
        gpus: Some(0),
        shell: true,
        command: vec![format!(
            "yes 'tao-slurm log follow benchmark line of about sixty bytes.' | head -c {}",
            megabytes << 20
        )],
        ..Default::default()
    };
    let submitted = client.create_job(&spec, &Default::default()).unwrap();
    let before = client.transport_stats();
    let t = Instant::now();
    let mut received = 0u64;
    client
        .follow_logs(&submitted.job_id, &[Stream::Stdout], Duration::from_millis(500), &mut |c| received += c.len)
        .unwrap();
    let took = t.elapsed().as_secs_f64();
    let after = client.transport_stats();
    serde_json::json!({
        "log_bytes": (megabytes as u64) << 20,
        "log_bytes_read": received,
        "bytes_received_by_transport": after.bytes_received - before.bytes_received,
        "overhead_ratio": (after.bytes_received - before.bytes_received) as f64 / ((megabytes as u64) << 20) as f64,
        "round_trips": after.round_trips - before.round_trips,
        "seconds": took,
    })
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("TAO_SLURM_LOG"))
        .with_writer(std::io::stderr)
        .init();
    let what = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    let mut report = serde_json::Map::new();
    if what == "refresh" || what == "all" {
        let rows: Vec<_> = [1, 100, 1000].into_iter().map(bench_refresh).collect();
        report.insert("refresh".into(), serde_json::Value::Array(rows));
    }
    if what == "follow" || what == "all" {
        report.insert("follow".into(), bench_follow(100));
    }
    std::fs::create_dir_all("bench").unwrap();
    let json = serde_json::to_string_pretty(&report).unwrap();
    std::fs::write("bench/report.json", &json).unwrap();
    let mut md = String::from(
        "# tao-slurm benchmark report\n\nMachine: 2 cores, sandbox cluster on loopback. Medians of 5 runs.\n\n",
    );
    if let Some(serde_json::Value::Array(rows)) = report.get("refresh") {
        md.push_str("## Refresh of N active jobs (one call of `Client::refresh`)\n\n| jobs | refresh ms | floor: local squeue ms | round trips | bytes sent | bytes received | slurmctld RPCs per refresh |\n|---|---|---|---|---|---|---|\n");
        for r in rows {
            md.push_str(&format!(
                "| {} | {:.1} | {:.1} | {} | {} | {} | {} |\n",
                r["jobs"],
                r["refresh_ms_median"].as_f64().unwrap(),
                r["floor_squeue_ms_median"].as_f64().unwrap(),
                r["round_trips_per_refresh"],
                r["bytes_sent_per_refresh"],
                r["bytes_received_per_refresh"],
                r["slurmctld_rpcs_per_refresh"]
            ));
        }
    }
    if let Some(f) = report.get("follow") {
        md.push_str(&format!(
            "\n## Log follow (`logs -f` of a {} byte log to its end)\n\n| bytes read | bytes received by the transport | ratio | round trips | seconds |\n|---|---|---|---|---|\n| {} | {} | {:.3} | {} | {:.1} |\n",
            f["log_bytes"], f["log_bytes_read"], f["bytes_received_by_transport"], f["overhead_ratio"].as_f64().unwrap(), f["round_trips"], f["seconds"].as_f64().unwrap()
        ));
    }
    md.push_str("\nReproduce: `bash dev/sandbox/up.sh && cargo run --release --example bench`\n");
    std::fs::write("bench/report.md", &md).unwrap();
    println!("{md}");
}
