//! Sweeps against single submits on the sandbox (not a test: nothing here asserts a time).
//!
//! `cargo run --release --example sweep_bench` (or `dev/bench-sweeps`): a sweep of N variants
//! (`Client::create_sweep`, one Slurm job array) beside N single submits (`Client::create_job`) and
//! the local floors (an `sbatch --hold` loop, one `sbatch --array`), and the refresh of the N
//! variants. Every job is held by its begin time (a day away) and cancelled at once, so the sandbox
//! is never flooded. Writes bench/sweeps-report.json and its section of bench/report.md.
//! Env: BENCH_SWEEP_VARIANTS (1000), BENCH_SWEEP_RUNS (3).

#[allow(dead_code)]
#[path = "bench/common.rs"]
mod common;

use common::*;
use serde_json::{json, Value};
use std::time::Instant;
use tao_slurm::{Client, JobSpec};

const BEGIN: &str = "<!-- sweeps-bench:begin -->";
const END: &str = "<!-- sweeps-bench:end -->";

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn held_spec() -> JobSpec {
    JobSpec { sbatch_options: [("begin".to_string(), "now+1day".to_string())].into(), ..small_spec() }
}

fn sweep_spec(n: usize) -> JobSpec {
    JobSpec {
        sweep: Some(tao_slurm::spec::SweepSpec {
            grid: [("I".to_string(), (0..n).map(|i| i.to_string()).collect())].into(),
            ..Default::default()
        }),
        ..held_spec()
    }
}

fn rpcs(before: &std::collections::BTreeMap<String, u64>) -> Value {
    json!(rpc_delta(before, &sdiag_counts(), 1.0))
}

fn main() {
    let n = env_usize("BENCH_SWEEP_VARIANTS", 1000);
    let runs = env_usize("BENCH_SWEEP_RUNS", 3);
    let user = User::new(Some(300));
    let settings = user.settings();
    let client = Client::new(settings.clone()).unwrap();
    // Warm the master (and the image check) with one held job, cancelled.
    let warm = client.create_job(&held_spec(), &Default::default()).unwrap();
    scancel_remote(&settings, &[warm.slurm_job_id]);

    // The floors first, then the singles, then the sweeps: the controller keeps recently cancelled
    // jobs for a while (MinJobAge), so what runs later meets a fuller controller; the sweeps, the
    // figure under test, take that disadvantage.
    // Floors on the login node: an sbatch loop, and one sbatch of an array.
    eprintln!("floors...");
    let t = Instant::now();
    let out = local_slurm("bash")
        .arg("-c")
        .arg(format!("for i in $(seq {n}); do sbatch --parsable --hold -o /dev/null --wrap true; done"))
        .output()
        .unwrap();
    let loop_secs = t.elapsed().as_secs_f64();
    let loop_ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().split(';').next().unwrap().to_string())
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(loop_ids.len(), n, "local sbatch loop: {}", String::from_utf8_lossy(&out.stderr));
    scancel_local(&loop_ids);
    let mut array_ms = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let out = local_slurm("sbatch")
            .args(["--parsable", "--hold", "-o", "/dev/null", &format!("--array=0-{}", n - 1), "--wrap", "true"])
            .output()
            .unwrap();
        array_ms.push(ms(t.elapsed()));
        assert!(out.status.success(), "local sbatch --array: {}", String::from_utf8_lossy(&out.stderr));
        scancel_local(&[String::from_utf8_lossy(&out.stdout).trim().split(';').next().unwrap().to_string()]);
    }

    // n single submits through the library, then cancelled.
    eprintln!("{n} single submits...");
    let before = client.transport_stats().round_trips;
    let t = Instant::now();
    let mut ids = Vec::new();
    for _ in 0..n {
        ids.push(client.create_job(&held_spec(), &Default::default()).unwrap().slurm_job_id);
    }
    let singles_secs = t.elapsed().as_secs_f64();
    let singles_rts = (client.transport_stats().round_trips - before) as f64;
    scancel_remote(&settings, &ids);
    // Refresh of n single jobs is the main bench's (bench/report.md, "Refresh of N active jobs").

    // A sweep of n variants: submit, then refresh it, then cancel the array.
    let (mut submit_ms, mut submit_rts, mut refresh_ms, mut refresh_rts) = (vec![], vec![], vec![], vec![]);
    let mut sweep_rpcs = Value::Null;
    for run in 0..runs {
        eprintln!("sweep run {run}...");
        sdiag_reset();
        let rpc0 = sdiag_counts();
        let before = client.transport_stats().round_trips;
        let t = Instant::now();
        let s = client.create_sweep(&sweep_spec(n), &Default::default()).unwrap();
        submit_ms.push(ms(t.elapsed()));
        submit_rts.push((client.transport_stats().round_trips - before) as f64);
        if run == 0 {
            sweep_rpcs = rpcs(&rpc0);
        }
        for _ in 0..5 {
            let before = client.transport_stats().round_trips;
            let t = Instant::now();
            let views = client.refresh(std::slice::from_ref(&s.sweep_id)).unwrap();
            refresh_ms.push(ms(t.elapsed()));
            refresh_rts.push((client.transport_stats().round_trips - before) as f64);
            assert_eq!(views.len(), n);
        }
        scancel_remote(&settings, std::slice::from_ref(&s.slurm_array_id));
    }

    let report = json!({
        "variants": n,
        "runs": runs,
        "sweep_submit_ms": median(submit_ms),
        "sweep_submit_round_trips": median(submit_rts),
        "sweep_slurmctld_rpcs": sweep_rpcs,
        "sweep_refresh_ms": median(refresh_ms),
        "sweep_refresh_round_trips": median(refresh_rts),
        "singles_secs": singles_secs,
        "singles_round_trips": singles_rts,
        "local_sbatch_loop_secs": loop_secs,
        "local_sbatch_array_ms": median(array_ms),
        "generated": String::from_utf8_lossy(&std::process::Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"]).output().unwrap().stdout).trim(),
    });
    std::fs::write("bench/sweeps-report.json", serde_json::to_string_pretty(&report).unwrap()).unwrap();
    let md = section(&report);
    common::splice_report(BEGIN, END, &md);
    println!("{md}");
}

fn section(r: &Value) -> String {
    let n = r["variants"].as_u64().unwrap();
    let f = |k: &str| r[k].as_f64().unwrap_or(0.0);
    let sweep_s = f("sweep_submit_ms") / 1000.0;
    format!(
        "{BEGIN}\n## Sweeps: {n} variants in one job array (`Client::create_sweep`, examples/sweep_bench.rs)\n\n\
         Generated {}; {} runs, medians. Every job held by its begin time and cancelled at once.\n\n\
         | path | {n} jobs in, s | jobs/s | round trips | sbatch calls |\n|---|---|---|---|---|\n\
         | sweep (`Client::create_sweep`: checks + one staging-and-sbatch round trip) | {:.2} | {:.0} | {} | 1 |\n\
         | {n} single submits (`Client::create_job` loop) | {:.1} | {:.1} | {} | {n} |\n\
         | floor: local `sbatch --hold` loop on the login node | {:.1} | {:.0} | 0 | {n} |\n\
         | floor: one local `sbatch --hold --array=0-{}` | {:.3} | {:.0} | 0 | 1 |\n\n\
         Refresh of the {n}-variant sweep (`Client::refresh([sweep_id])`, every variant pending): {:.1} ms, {} round trip(s).\n\
         slurmctld RPCs of one sweep submit: {}.\n{END}\n",
        r["generated"].as_str().unwrap_or(""),
        r["runs"],
        sweep_s,
        n as f64 / sweep_s,
        f("sweep_submit_round_trips"),
        f("singles_secs"),
        n as f64 / f("singles_secs"),
        f("singles_round_trips"),
        f("local_sbatch_loop_secs"),
        n as f64 / f("local_sbatch_loop_secs"),
        n - 1,
        f("local_sbatch_array_ms") / 1000.0,
        n as f64 / (f("local_sbatch_array_ms") / 1000.0),
        f("sweep_refresh_ms"),
        f("sweep_refresh_round_trips"),
        r["sweep_slurmctld_rpcs"],
    )
}
