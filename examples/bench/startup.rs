//! CLI start-up: `status <id>` of a finished job (served from the state file) and `--help`.

use crate::common::*;
use crate::report::at_most;
use serde_json::{json, Value};
use std::time::Instant;
use tao_slurm::PlatformStatus;
use tao_slurm_engine::store::{StatusUpdate, Store};

const RUNS: usize = 50;

fn time_runs(user: &User, args: &[&str]) -> Vec<f64> {
    // One untimed run first (page cache).
    assert!(user.cli(args).output().unwrap().status.success());
    (0..RUNS)
        .map(|_| {
            let t = Instant::now();
            let out = user.cli(args).output().unwrap();
            let took = ms(t.elapsed());
            assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
            took
        })
        .collect()
}

pub fn startup() -> Value {
    let user = User::new(Some(120));
    let settings = user.settings();
    let ids = record_jobs(&settings, &["123456".to_string()]);
    let store = Store::open(&settings.state_path).unwrap();
    store
        .update_status(
            &ids[0],
            &StatusUpdate {
                status: PlatformStatus::Complete,
                message: "finished".into(),
                slurm_state: Some("COMPLETED".into()),
                exit_code: Some(0),
                node_list: Some("node1".into()),
                progress: None,
                pending_reason: None,
            },
            tao_slurm::clock::now(),
        )
        .unwrap();
    drop(store);
    let status = time_runs(&user, &["status", &ids[0]]);
    let help = time_runs(&user, &["--help"]);
    // No remote call: the status command never created the control directory.
    let remote_calls = user.control_dir().exists();
    let min = |v: &[f64]| v.iter().cloned().fold(f64::INFINITY, f64::min);
    let status_ms = median(status.clone());
    json!({
        "runs": RUNS,
        "status_ms_median": status_ms,
        "status_ms_min": min(&status),
        "help_ms_median": median(help.clone()),
        "help_ms_min": min(&help),
        "status_touched_the_network": remote_calls,
        "targets": [at_most("startup", "`status <id>` of a finished job under 20 ms", status_ms, 20.0, "ms")],
    })
}
