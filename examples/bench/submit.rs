//! Submit latency (warm and cold connection) and throughput (CLI, library, plain sbatch).

use crate::common::*;
use crate::report::at_most;
use serde_json::{json, Value};
use std::time::Instant;
use tao_slurm::client::{PreviewChecks, Secrets};
use tao_slurm::Client;
use tao_slurm_engine::remote::{self, Idempotency};

const LATENCY_RUNS: usize = 11;
const COLD_RUNS: usize = 5;
const CLI_PAIRS: usize = 15;

/// One CLI submit of a small job held by its begin time (the same job in the latency pairs and the
/// throughput loop).
const CLI_SUBMIT: [&str; 10] =
    ["submit", "--json", "--image", "ubuntu:22.04", "--gpus", "0", "--sbatch-option", "begin=now+2hours", "--", "true"];

/// A warm CLI submit against its floor, in alternating pairs in one run so that the machine's drift
/// touches both: a new process per submit sharing the user's master, against a process start
/// (`tao-slurm --help`) plus `sbatch --hold` and `scancel` in one `ssh` over the same master.
fn cli_against_floor(user: &User) -> Value {
    let mut ids = Vec::new();
    let (mut cli, mut floor) = (Vec::new(), Vec::new());
    let warm = user.cli(&CLI_SUBMIT).output().unwrap();
    assert!(warm.status.success(), "{}", String::from_utf8_lossy(&warm.stderr));
    ids.push(slurm_id_of(&warm.stdout));
    for _ in 0..CLI_PAIRS {
        let t = Instant::now();
        let out = user.cli(&CLI_SUBMIT).output().unwrap();
        cli.push(ms(t.elapsed()));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        ids.push(slurm_id_of(&out.stdout));
        let t = Instant::now();
        let start = user.cli(&["--help"]).output().unwrap();
        let remote = master_ssh(user)
            .arg("scancel \"$(sbatch --parsable --hold -o /dev/null --wrap true | cut -d';' -f1)\"")
            .output()
            .unwrap();
        floor.push(ms(t.elapsed()));
        assert!(start.status.success() && remote.status.success(), "{}", String::from_utf8_lossy(&remote.stderr));
    }
    scancel_remote(&user.settings(), &ids);
    let ratios: Vec<f64> = cli.iter().zip(&floor).map(|(a, b)| a / b).collect();
    json!({"cli_ms_median": median(cli), "floor_ms_median": median(floor), "ratio_median": median(ratios),
           "pairs": CLI_PAIRS})
}

/// A warm library submit against its floor, in alternating pairs in one run (issue 38): `create_job`
/// on the warm client (one round trip), against `sbatch --hold` on the login host through one `ssh`
/// over the same master (one round trip and sbatch, the floor `latency` composes from medians).
fn library_against_floor(user: &User, client: &Client) -> Value {
    let spec = small_spec();
    let (mut ids, mut floor_ids) = (Vec::new(), Vec::new());
    let (mut lib, mut floor) = (Vec::new(), Vec::new());
    for _ in 0..CLI_PAIRS {
        let t = Instant::now();
        ids.push(client.create_job(&spec, &Default::default()).unwrap().job_id);
        lib.push(ms(t.elapsed()));
        let t = Instant::now();
        let out = master_ssh(user).arg("sbatch --parsable --hold -o /dev/null --wrap true").output().unwrap();
        floor.push(ms(t.elapsed()));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        floor_ids.push(String::from_utf8_lossy(&out.stdout).trim().split(';').next().unwrap_or_default().to_string());
    }
    client.cancel_jobs(&ids).unwrap();
    scancel_remote(&user.settings(), &floor_ids);
    let ratios: Vec<f64> = lib.iter().zip(&floor).map(|(a, b)| a / b).collect();
    json!({"library_ms_median": median(lib), "floor_ms_median": median(floor), "ratio_median": median(ratios),
           "pairs": CLI_PAIRS})
}

fn slurm_id_of(stdout: &[u8]) -> String {
    let v: Value = serde_json::from_slice(stdout).unwrap();
    v["slurm_job_id"].as_str().unwrap().to_string()
}

/// Local `sbatch --parsable --hold --wrap true` as root: (ms, Slurm id).
fn local_sbatch() -> (f64, String) {
    let t = Instant::now();
    let out =
        local_slurm("sbatch").args(["--parsable", "--hold", "-o", "/dev/null", "--wrap", "true"]).output().unwrap();
    let took = ms(t.elapsed());
    assert!(out.status.success(), "local sbatch: {}", String::from_utf8_lossy(&out.stderr));
    (took, String::from_utf8_lossy(&out.stdout).trim().split(';').next().unwrap().to_string())
}

pub fn latency() -> Value {
    let spec = small_spec();
    // Warm: the master is up (the first submit logs in).
    let user = User::new(Some(120));
    let client = Client::new(user.settings()).unwrap();
    let mut ids = vec![client.create_job(&spec, &Default::default()).unwrap().job_id];
    let (mut times, mut rts, mut logins) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..LATENCY_RUNS {
        let before = client.transport_stats();
        let t = Instant::now();
        ids.push(client.create_job(&spec, &Default::default()).unwrap().job_id);
        times.push(ms(t.elapsed()));
        let after = client.transport_stats();
        rts.push((after.round_trips - before.round_trips) as f64);
        logins.push((after.logins - before.logins) as f64);
    }
    client.cancel_jobs(&ids).unwrap();
    // The first of the two round trips: the online checks (partitions and their limits), as a dry run
    // makes them.
    let checks: Vec<f64> = (0..LATENCY_RUNS)
        .map(|_| {
            let t = Instant::now();
            client.preview(&spec, PreviewChecks::Online(Secrets::Values(Default::default()))).unwrap();
            ms(t.elapsed())
        })
        .collect();
    let warm = json!({
        "check_online_ms_median": median(checks),
        "ms_median": median(times.clone()), "ms_all": times, "round_trips": median(rts), "logins_transport": median(logins),
        "logins_sshd_attributed": 0, "runs": LATENCY_RUNS,
    });

    // Floor 1, as the issue defines it: one round trip on the warm master, i.e. one `ssh` command
    // multiplexed over the ControlMaster the submits used.
    let rt: Vec<f64> = (0..LATENCY_RUNS)
        .map(|_| {
            let t = Instant::now();
            let out = master_ssh(&user).arg("true").output().unwrap();
            assert!(out.status.success(), "ssh over the master: {}", String::from_utf8_lossy(&out.stderr));
            ms(t.elapsed())
        })
        .collect();
    // For comparison: one round trip of the transport's persistent shell (what each of our round
    // trips costs once the shell runs).
    let transport = remote::connect(&user.settings()).unwrap();
    transport.run_script("true", Idempotency::Idempotent).unwrap();
    let session_rt: Vec<f64> = (0..LATENCY_RUNS)
        .map(|_| {
            let t = Instant::now();
            transport.run_script("true", Idempotency::Idempotent).unwrap();
            ms(t.elapsed())
        })
        .collect();
    // Floor 2: sbatch on the login node itself.
    let local: Vec<(f64, String)> = (0..LATENCY_RUNS).map(|_| local_sbatch()).collect();
    scancel_local(&local.iter().map(|l| l.1.clone()).collect::<Vec<_>>());
    let sbatch_ms = median(local.iter().map(|l| l.0).collect());
    let rt_ms = median(rt);
    let session_rt_ms = median(session_rt);
    let cli = cli_against_floor(&user);
    let library = library_against_floor(&user, &client);
    drop(transport);
    drop(client);
    drop(user);

    // Cold: a fresh control directory each time, so the submit opens the login itself.
    let (mut ctimes, mut crts, mut clogins, mut csshd) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..COLD_RUNS {
        let user = User::new(Some(120));
        let client = Client::new(user.settings()).unwrap();
        let mark = SshdMark::now();
        let watch = SshWatch::start(&user.control_dir());
        let t = Instant::now();
        let job = client.create_job(&spec, &Default::default()).unwrap();
        ctimes.push(ms(t.elapsed()));
        std::thread::sleep(std::time::Duration::from_millis(400));
        let seen = watch.finish();
        let st = client.transport_stats();
        crts.push(st.round_trips as f64);
        clogins.push(st.logins as f64);
        csshd.push(attributed_logins(&mark, &seen).0 as f64);
        client.cancel_job(&job.job_id).unwrap();
    }
    let cold = json!({
        "ms_median": median(ctimes.clone()), "ms_all": ctimes, "round_trips": median(crts), "logins_transport": median(clogins),
        "logins_sshd_attributed": median(csshd), "runs": COLD_RUNS,
    });
    let floor = sbatch_ms + rt_ms;
    let warm_ms = warm["ms_median"].as_f64().unwrap();
    json!({
        "warm": warm,
        "cold": cold,
        "cli": cli,
        "library_pairs": library,
        "floor": {"sbatch_local_ms_median": sbatch_ms, "round_trip_ms_median": rt_ms, "total_ms": floor,
                  "session_round_trip_ms_median": session_rt_ms},
        "targets": [
            at_most("submit", "warm submit within 3x the floor (local sbatch + one round trip on the warm master)", warm_ms, 3.0 * floor, "ms"),
            at_most("submit", "warm CLI submit within 1.5x its floor (process start + sbatch and scancel in one ssh over the warm master), pair by pair (issue 38)", cli["ratio_median"].as_f64().unwrap(), 1.5, "x"),
            at_most("submit", "warm library create_job within 1.5x its floor (sbatch through one ssh over the warm master), pair by pair (issue 38)", library["ratio_median"].as_f64().unwrap(), 1.5, "x"),
        ],
    })
}

fn submits() -> usize {
    std::env::var("BENCH_SUBMITS").ok().and_then(|v| v.parse().ok()).unwrap_or(1000)
}

fn rate(n: usize, secs: f64) -> f64 {
    n as f64 / secs
}

pub fn throughput() -> Value {
    let n = submits();
    let spec = small_spec();
    let args = CLI_SUBMIT;

    // CLI: one process per submit, sharing the user's master.
    let user = User::new(Some(120));
    let settings = user.settings();
    // Round trips per CLI submit, from the transport's trace (not timed).
    let mut slurm_ids = Vec::new();
    let mut traced = 0usize;
    const TRACED: usize = 3;
    for _ in 0..TRACED {
        let out = user.cli(&args).env("TAO_SLURM_LOG", "tao_slurm=trace,warn").output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        traced += String::from_utf8_lossy(&out.stderr).lines().filter(|l| l.contains("round trip")).count();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        slurm_ids.push(v["slurm_job_id"].as_str().unwrap().to_string());
    }
    let mark = SshdMark::now();
    let watch = SshWatch::start(&user.control_dir());
    sdiag_reset();
    let rpc0 = sdiag_counts();
    let mut per = Vec::new();
    let t0 = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        let out = user.cli(&args).output().unwrap();
        per.push(ms(t.elapsed()));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        slurm_ids.push(v["slurm_job_id"].as_str().unwrap().to_string());
    }
    let cli_secs = t0.elapsed().as_secs_f64();
    let rpc1 = sdiag_counts();
    let seen = watch.finish();
    let (cli_logins, _) = attributed_logins(&mark, &seen);
    scancel_remote(&settings, &slurm_ids);
    let cli = json!({
        "label": "CLI (`tao-slurm submit`, one process each)",
        "seconds": cli_secs, "jobs_per_sec": rate(n, cli_secs), "ms_per_submit_median": median(per),
        "round_trips_per_submit": traced as f64 / TRACED as f64, "logins": cli_logins,
        "slurmctld_rpcs_per_submit": rpc_delta(&rpc0, &rpc1, n as f64),
    });
    drop(user);

    // Library: Client::create_job in a loop.
    let user = User::new(Some(120));
    let client = Client::new(user.settings()).unwrap();
    let mut ids = vec![client.create_job(&spec, &Default::default()).unwrap().job_id];
    let before = client.transport_stats();
    sdiag_reset();
    let rpc0 = sdiag_counts();
    let mut per = Vec::new();
    let t0 = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        ids.push(client.create_job(&spec, &Default::default()).unwrap().job_id);
        per.push(ms(t.elapsed()));
    }
    let lib_secs = t0.elapsed().as_secs_f64();
    let rpc1 = sdiag_counts();
    let after = client.transport_stats();
    client.cancel_jobs(&ids).unwrap();
    let library = json!({
        "label": "library (`Client::create_job` loop)",
        "seconds": lib_secs, "jobs_per_sec": rate(n, lib_secs), "ms_per_submit_median": median(per),
        "round_trips_per_submit": (after.round_trips - before.round_trips) as f64 / n as f64,
        "logins": after.logins - before.logins,
        "slurmctld_rpcs_per_submit": rpc_delta(&rpc0, &rpc1, n as f64),
    });
    drop(client);
    drop(user);

    // Floor: a plain sbatch --hold loop on the login node.
    sdiag_reset();
    let rpc0 = sdiag_counts();
    let t0 = Instant::now();
    let out = local_slurm("bash")
        .arg("-c")
        .arg(format!("for i in $(seq {n}); do sbatch --parsable --hold -o /dev/null --wrap true; done"))
        .output()
        .unwrap();
    let local_secs = t0.elapsed().as_secs_f64();
    let rpc1 = sdiag_counts();
    let local_ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().split(';').next().unwrap().to_string())
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(local_ids.len(), n, "local sbatch loop: {}", String::from_utf8_lossy(&out.stderr));
    scancel_local(&local_ids);
    let local = json!({
        "label": "floor: local `sbatch --hold` loop",
        "seconds": local_secs, "jobs_per_sec": rate(n, local_secs), "ms_per_submit_median": 1000.0 * local_secs / n as f64,
        "round_trips_per_submit": 0, "logins": 0,
        "slurmctld_rpcs_per_submit": rpc_delta(&rpc0, &rpc1, n as f64),
    });
    json!({"submits": n, "cli": cli, "library": library, "local_sbatch": local})
}
