//! Following a large log to its end: bytes over the transport against the log's size.

use crate::common::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tao_slurm::client::Stream;
use tao_slurm::{Client, JobSpec};

pub fn follow(megabytes: usize) -> Value {
    let user = User::new(Some(120));
    let client = Client::new(user.settings()).unwrap();
    // A job that writes `megabytes` MiB of log lines quickly, then ends.
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
    let log_bytes = (megabytes as u64) << 20;
    json!({
        "log_bytes": log_bytes,
        "log_bytes_read": received,
        "bytes_received_by_transport": after.bytes_received - before.bytes_received,
        "overhead_ratio": (after.bytes_received - before.bytes_received) as f64 / log_bytes as f64,
        "round_trips": after.round_trips - before.round_trips,
        "seconds": took,
    })
}
