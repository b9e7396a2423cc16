//! A workspace's monitor lease as this replica sees it: its name, its length and renewal, and this
//! process's name among the replicas (the taking and keeping is `replica.rs`).

use std::sync::atomic::{AtomicBool, AtomicI64};
use std::time::Duration;

/// How long a lease lasts without renewal, by default (`serve --lease-secs`).
pub const LEASE_SECS: i64 = 15;

/// How often a holder renews a lease of `lease_secs`: three times in its life.
pub fn renew_every(lease_secs: i64) -> Duration {
    Duration::from_millis((lease_secs.max(1) as u64) * 1000 / 3)
}
/// How often a replica without a workspace's lease reads the workspace's jobs.
pub const OBSERVE_EVERY: Duration = Duration::from_secs(2);

/// This process's name among the replicas: host, process id and a random part (a restarted process
/// is a new replica).
pub fn new_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{}-{}-{}", host.trim(), std::process::id(), &random[..8])
}

/// The lease of a workspace's monitor.
pub fn lease_name(workspace: &str) -> String {
    format!("monitor:{workspace}")
}

/// What this replica knows of a workspace's lease.
#[derive(Debug, Default)]
pub struct LeaseState {
    pub held: AtomicBool,
    /// Its epoch when held (grows each time it changes hands).
    pub epoch: AtomicI64,
}
