//! Refresh of running jobs that write status.json: what reading their files costs, and that files
//! which did not change since the last refresh are not read again.

use crate::common::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tao_slurm::Client;

const JOBS: usize = 50;
const RUNS: usize = 5;

pub fn running() -> Value {
    let user = User::new(Some(300));
    let settings = user.settings();
    wait_for_empty_queue(&settings, Duration::from_secs(300));
    // Record the plans first: each job writes the status.json of its own platform id.
    let spec = small_spec();
    let store = tao_slurm_engine::store::Store::open(&settings.state_path).unwrap();
    let plans: Vec<_> = (0..JOBS).map(|_| tao_slurm::plan::resolve(&spec, &settings).unwrap()).collect();
    let mut script = String::new();
    for p in &plans {
        let dir = p.layout.results_dir();
        script.push_str(&format!(
            "sbatch --parsable -c 1 -o /dev/null -J {} --wrap \"mkdir -p {dir} && echo '{{\\\"status\\\":\\\"RUNNING\\\",\\\"message\\\":\\\"epoch 1\\\"}}' >> {dir}/status.json && sleep 600\"\n",
            p.layout.job_name
        ));
    }
    let ids: Vec<String> = ssh_script(&settings, &script).lines().map(|l| l.trim().to_string()).collect();
    assert_eq!(ids.len(), JOBS, "{ids:?}");
    for (p, id) in plans.iter().zip(&ids) {
        store.insert_job("{}", p, tao_slurm::clock::now()).unwrap();
        store.set_submitted(&p.layout.job_id, id, "sandbox-login1", tao_slurm::clock::now()).unwrap();
    }
    let client = Client::new(settings.clone()).unwrap();
    // Until every job runs and has written its first line.
    let start = Instant::now();
    loop {
        let views = client.refresh(&[]).unwrap();
        if views.iter().all(|v| v.progress_message.as_deref() == Some("epoch 1")) {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(180), "jobs never ran: {:?}", views.first());
        std::thread::sleep(Duration::from_secs(1));
    }
    wait_for_idle_controller(Duration::from_secs(60));
    let timed = |client: &Client| {
        let before = client.transport_stats();
        let t = Instant::now();
        let views = client.refresh(&[]).unwrap();
        let took = ms(t.elapsed());
        let after = client.transport_stats();
        assert_eq!(views.len(), JOBS);
        (took, after.bytes_received - before.bytes_received, after.round_trips - before.round_trips)
    };
    // Unchanged files: nothing read.
    let unchanged: Vec<(f64, u64, u64)> = (0..RUNS).map(|_| timed(&client)).collect();
    // Every file grows by a line before each refresh: all read.
    let mut changed = Vec::new();
    for i in 0..RUNS {
        let mut append = String::new();
        for p in &plans {
            append.push_str(&format!(
                "echo '{{\"status\":\"RUNNING\",\"message\":\"epoch {}\"}}' >> {}/status.json\n",
                i + 2,
                p.layout.results_dir()
            ));
        }
        ssh_script(&settings, &append);
        changed.push(timed(&client));
    }
    let last = client.refresh(&[]).unwrap();
    assert!(last.iter().all(|v| v.progress_message.as_deref() == Some(&format!("epoch {}", RUNS + 1))), "read all");
    scancel_remote(&settings, &ids);
    let med = |v: &[(f64, u64, u64)]| median(v.iter().map(|x| x.0).collect());
    let bytes = |v: &[(f64, u64, u64)]| median(v.iter().map(|x| x.1 as f64).collect());
    json!({
        "jobs": JOBS,
        "unchanged_ms_median": med(&unchanged),
        "unchanged_bytes_received": bytes(&unchanged),
        "all_changed_ms_median": med(&changed),
        "all_changed_bytes_received": bytes(&changed),
        "round_trips_per_refresh": unchanged.iter().chain(&changed).map(|x| x.2).max().unwrap_or(0),
    })
}
