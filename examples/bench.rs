//! Benchmarks against the sandbox cluster (not tests: nothing here asserts a time).
//!
//! `cargo run --release --example bench -- [all|submit|throughput|refresh|monitor|memory|startup|follow]...`
//! (or `dev/bench`) writes bench/report.md and bench/report.json. Sections run on their own replace
//! theirs in an existing report. Each figure is the median of several runs, next to its floor and
//! its target. Counts (round trips, SSH logins, slurmctld RPCs) are the primary figures: other tests
//! may share the cluster, times are medians.

#[path = "bench/common.rs"]
mod common;
#[path = "bench/follow.rs"]
mod follow;
#[path = "bench/monitor.rs"]
mod monitor;
#[path = "bench/refresh.rs"]
mod refresh;
#[path = "bench/report.rs"]
mod report;
#[path = "bench/running.rs"]
mod running;
#[path = "bench/startup.rs"]
mod startup;
#[path = "bench/submit.rs"]
mod submit;

use serde_json::Value;

const SECTIONS: &[&str] = &["startup", "submit", "refresh", "running", "memory", "monitor", "throughput", "follow"];

fn run(section: &str) -> Value {
    match section {
        "startup" => startup::startup(),
        "submit" => submit::latency(),
        "throughput" => submit::throughput(),
        "refresh" => refresh::refresh(),
        "running" => running::running(),
        "monitor" => monitor::monitor_cost(),
        "memory" => monitor::memory(),
        "follow" => follow::follow(100),
        other => panic!("unknown section {other}; one of all, {}", SECTIONS.join(", ")),
    }
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("TAO_SLURM_LOG"))
        .with_writer(std::io::stderr)
        .init();
    let mut wanted: Vec<String> = std::env::args().skip(1).collect();
    let render_only = wanted == ["report"];
    if render_only {
        wanted.clear();
    } else if wanted.is_empty() || wanted.iter().any(|w| w == "all") {
        wanted = SECTIONS.iter().map(|s| s.to_string()).collect();
    }
    for w in &wanted {
        assert!(SECTIONS.contains(&w.as_str()), "unknown section {w}; one of all, {}", SECTIONS.join(", "));
    }
    std::fs::create_dir_all("bench").unwrap();
    // Keep the sections not run now from the last report.
    let mut report: serde_json::Map<String, Value> = std::fs::read_to_string("bench/report.json")
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .and_then(|v: Value| v.as_object().cloned())
        .unwrap_or_default();
    report.retain(|k, _| SECTIONS.contains(&k.as_str()) || k == "machine");
    for section in &wanted {
        let t = std::time::Instant::now();
        eprintln!("bench: {section}...");
        let value = run(section);
        eprintln!("bench: {section} took {:.0} s", t.elapsed().as_secs_f64());
        report.insert(section.clone(), value);
        write(&report, true);
    }
    if render_only {
        write(&report, false);
    }
    println!("{}", report::markdown(&Value::Object(report)));
}

fn write(report: &serde_json::Map<String, Value>, stamp: bool) {
    let mut report = report.clone();
    if !stamp && report.contains_key("machine") {
        return write_ordered(report);
    }
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let generated = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    report.insert("machine".into(), serde_json::json!({"cores": cores, "generated": generated}));
    write_ordered(report);
}

fn write_ordered(report: serde_json::Map<String, Value>) {
    // Sections in a fixed order, the machine first.
    let mut ordered = serde_json::Map::new();
    for k in std::iter::once("machine").chain(SECTIONS.iter().copied()) {
        if let Some(v) = report.get(k) {
            ordered.insert(k.to_string(), v.clone());
        }
    }
    let value = Value::Object(ordered);
    std::fs::write("bench/report.json", serde_json::to_string_pretty(&value).unwrap()).unwrap();
    // The other benches' sections (MCP, Python, service, sweeps) follow ours between their own
    // markers: they are kept as they are.
    let old = std::fs::read_to_string("bench/report.md").unwrap_or_default();
    let others = old.find("<!-- ").map(|i| &old[i..]).unwrap_or("");
    std::fs::write("bench/report.md", report::markdown(&value) + others).unwrap();
}
