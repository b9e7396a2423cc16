//! The monitor over time (SSH logins and slurmctld RPCs per hour) and its memory with 10,000 jobs.

use crate::common::*;
use crate::report::at_most;
use serde_json::{json, Value};
use std::process::Child;
use std::time::{Duration, Instant};

fn env_secs(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// `log`: the TAO_SLURM_LOG filter (its lines are counted afterwards in monitor.log).
fn start_monitor(user: &User, log_filter: &str) -> Child {
    let log = std::fs::File::create(user.dir.path().join("monitor.log")).unwrap();
    let mut cmd = user.cli(&["monitor"]);
    cmd.env("TAO_SLURM_LOG", log_filter);
    cmd.stdout(log.try_clone().unwrap()).stderr(log).spawn().unwrap()
}

/// The `total_ms` of each refresh the monitor logged (at debug level).
fn logged_refresh_ms(user: &User) -> Vec<f64> {
    let text = std::fs::read_to_string(user.dir.path().join("monitor.log")).unwrap_or_default();
    text.lines()
        .filter(|l| l.contains(" refresh") && l.contains("total_ms="))
        .filter_map(|l| l.split("total_ms=").nth(1)?.split_whitespace().next()?.parse().ok())
        .collect()
}

/// Round trips the monitor logged (with `trace`).
fn logged_round_trips(user: &User) -> usize {
    let text = std::fs::read_to_string(user.dir.path().join("monitor.log")).unwrap_or_default();
    text.lines().filter(|l| l.contains("round trip")).count()
}

fn stop(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// kB values of `VmHWM` and `VmRSS`.
fn vm(pid: u32) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| text.lines().find(|l| l.starts_with(name))?.split_whitespace().nth(1)?.parse::<u64>().ok();
    Some((field("VmHWM:")?, field("VmRSS:")?))
}

pub fn monitor_cost() -> Value {
    let window = env_secs("BENCH_MONITOR_SECS", 180);
    const JOBS: usize = 100;
    // The default ControlPersist (1800 s), as a user would have it.
    let user = User::new(None);
    let settings = user.settings();
    wait_for_empty_queue(&settings, Duration::from_secs(300));
    let slurm_ids = held_jobs(&settings, JOBS);
    record_jobs(&settings, &slurm_ids);
    let mark = SshdMark::now();
    let watch = SshWatch::start(&user.control_dir());
    sdiag_reset();
    let rpc0 = sdiag_counts();
    let t0 = Instant::now();
    let child = start_monitor(&user, "tao_slurm::remote=trace,warn");
    std::thread::sleep(Duration::from_secs(window));
    let rpc1 = sdiag_counts();
    let secs = t0.elapsed().as_secs_f64();
    let seen = watch.finish();
    stop(child);
    let (ours, all) = attributed_logins(&mark, &seen);
    let hosts: std::collections::BTreeSet<u16> = seen.iter().map(|c| c.0).collect();
    let rpcs = rpc_delta(&rpc0, &rpc1, 1.0);
    let total = rpc_total(&rpcs);
    // The monitor's own round trips (each one refresh); sdiag counts every user of the cluster.
    let refreshes = logged_round_trips(&user) as f64;
    // Each refresh of held jobs costs these slurmctld RPCs (squeue --me: JOB_USER_INFO, PARTITION_INFO,
    // FED_INFO), as the refresh benchmark measures.
    let refresh_rpcs = 3.0 * refreshes;
    let per_hour = 3600.0 / secs;
    // The first login of each host is the start-up; any later one would be a reconnect.
    let reconnects = ours.saturating_sub(hosts.len().max(1)) as f64;
    let logins_per_hour_per_host = 1.0 + reconnects * per_hour;
    scancel_remote(&settings, &slurm_ids);
    drop(user);
    json!({
        "jobs": JOBS,
        "window_secs": secs,
        "logins_attributed": ours,
        "logins_sshd_all": all,
        "login_hosts_used": hosts.len(),
        "logins_per_hour_per_host": logins_per_hour_per_host,
        "rpcs": rpcs,
        "rpcs_total": total,
        "rpcs_per_hour": total * per_hour,
        "refresh_rpcs": refresh_rpcs,
        "refresh_rpcs_per_hour": refresh_rpcs * per_hour,
        "refreshes": refreshes,
        "refreshes_per_hour": refreshes * per_hour,
        "note": "Refreshes are the monitor's round trips (from its trace log); their slurmctld RPCs are 3 each \
                 (JOB_USER_INFO, PARTITION_INFO, FED_INFO, as measured by the refresh benchmark); sdiag's total \
                 counts every user of the shared cluster. Jobs submitted just now are refreshed every 2-5 s (the budget of 30 queries/min caps it at one \
                 refresh per 4 s), so the per-hour RPC figure is the first minutes' rate extrapolated, an upper \
                 bound: after 10 min the pace is 15 s, after an hour 60 s. Logins per hour = the start-up login \
                 plus any reconnect seen in the window, extrapolated.",
        "targets": [at_most("monitor", "at most one SSH login per login host per hour", logins_per_hour_per_host, 1.0, "logins/h")],
    })
}

pub fn memory() -> Value {
    const JOBS: usize = 10_000;
    let secs = env_secs("BENCH_MEMORY_SECS", 40);
    let user = User::new(Some(120));
    let settings = user.settings();
    // Ids Slurm never issued: the jobs stay Pending (lost only after 5 minutes), sacct is asked for all.
    let fake: Vec<String> = (0..JOBS).map(|i| (900_000_000 + i).to_string()).collect();
    let t = Instant::now();
    record_jobs(&settings, &fake);
    let record_secs = t.elapsed().as_secs_f64();
    // What one load of the summaries costs this process (the monitor holds about two at once).
    let rss0 = vm(std::process::id()).map(|v| v.1).unwrap_or(0);
    let loaded = tao_slurm_engine::store::Store::open(&settings.state_path).unwrap().list_summaries(true).unwrap();
    let rss1 = vm(std::process::id()).map(|v| v.1).unwrap_or(0);
    assert_eq!(loaded.len(), JOBS);
    drop(loaded);
    let load_mb = rss1.saturating_sub(rss0) as f64 / 1024.0;
    let state_mb = std::fs::metadata(&settings.state_path).map(|m| m.len()).unwrap_or(0) as f64 / 1e6;
    sdiag_reset();
    let rpc0 = sdiag_counts();
    let child = start_monitor(&user, "tao_slurm_engine::engine::refresh=debug,warn");
    let pid = child.id();
    let t0 = Instant::now();
    let (mut hwm, mut rss) = (0u64, 0u64);
    while t0.elapsed() < Duration::from_secs(secs) {
        if let Some((h, r)) = vm(pid) {
            hwm = hwm.max(h);
            rss = r;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let rpc1 = sdiag_counts();
    let elapsed = t0.elapsed().as_secs_f64();
    stop(child);
    let refresh_ms = logged_refresh_ms(&user);
    let refreshes = refresh_ms.len();
    let rpcs = rpc_delta(&rpc0, &rpc1, 1.0);
    let hwm_mb = hwm as f64 / 1024.0;
    drop(user);
    json!({
        "jobs": JOBS,
        "seconds": elapsed,
        "record_secs": record_secs,
        "state_file_mb": state_mb,
        "vmhwm_mb": hwm_mb,
        "one_load_of_all_records_mb": load_mb,
        "vmrss_end_mb": rss as f64 / 1024.0,
        "refreshes": refreshes,
        "refresh_ms_median": if refresh_ms.is_empty() { 0.0 } else { median(refresh_ms) },
        "rpcs_all_users": rpcs,
        "targets": [at_most("memory", "monitor peak RSS with 10,000 jobs under 50 MB", hwm_mb, 50.0, "MB")],
    })
}
