//! The monitor: one refresh of every active job and the pace to the next, run by the CLI's `monitor`,
//! each workspace of the service and the Python package's monitor thread alike; and the lock that
//! keeps it one per state file and cluster profile.

use super::Client;
use crate::config::Settings;
use crate::error::Result;
use crate::model::JobSummary;
use crate::monitor::{budget_floor, next_interval, Pace};
use crate::spec::SpecError;
use crate::status::PlatformStatus;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::path::PathBuf;
use std::time::Duration;

/// How long to wait after a refresh that failed (it changed nothing) before the next.
pub const AFTER_FAILURE: Duration = Duration::from_secs(10);

/// A monitor's memory between steps: what each job looked like, when anything last changed.
pub struct Monitor {
    budget: u32,
    seen: HashMap<String, (PlatformStatus, u32, String)>,
    last_change: i64,
    /// Delivers the webhook messages each step queues (started at the first step).
    notifier: Option<super::Notifier>,
}

/// What one step saw.
pub struct MonitorStep {
    /// Every active job, and those that ended in this step.
    pub jobs: Vec<JobSummary>,
    /// The jobs whose status, attempt or message changed since the last step (all of them at the first).
    pub changed: Vec<JobSummary>,
    /// How many are still active: neither ended nor paused by tao-slurm.
    pub active: usize,
    /// When to refresh next: soon after a change, rarely for long runs, never above the query budget.
    pub interval: Duration,
    /// The budget's floor between two refreshes (kept even when woken early).
    pub floor: Duration,
}

impl Client {
    /// Take or renew lease `name` (a workspace's monitor, among the service's replicas) for
    /// `holder` for `ttl_secs`: its epoch while `holder` holds it, None while another does. From the
    /// first call on, every write this client makes (its refreshes and retries: statuses, events,
    /// attempts, resubmissions) lands only while `holder` holds the lease at that epoch.
    pub fn hold_lease(&self, name: &str, holder: &str, ttl_secs: i64) -> Result<Option<i64>> {
        Ok(self.store.hold_lease(name, holder, ttl_secs, super::now_secs())?)
    }

    /// Let go of lease `name` if `holder` holds it; whether it did.
    pub fn release_lease(&self, name: &str, holder: &str) -> Result<bool> {
        Ok(self.store.release_lease(name, holder)?)
    }
}

impl Monitor {
    pub fn new(settings: &Settings) -> Monitor {
        Monitor {
            budget: settings.max_queries_per_minute,
            seen: HashMap::new(),
            last_change: super::now_secs(),
            notifier: None,
        }
    }

    /// Refresh every active job (one round trip; due retries and interrupted submissions included)
    /// and pick the pace. A failed refresh changes nothing: try again after [`AFTER_FAILURE`].
    pub fn step(&mut self, client: &Client) -> Result<MonitorStep> {
        let jobs = client.refresh_summaries(&[])?;
        self.notify(client, &jobs);
        let now = super::now_secs();
        let mut changed = Vec::new();
        for j in &jobs {
            let key = (j.status, j.attempt, j.message.clone());
            if self.seen.get(&j.job_id) != Some(&key) {
                self.seen.insert(j.job_id.clone(), key);
                changed.push(j.clone());
                self.last_change = now;
            }
        }
        // A job tao-slurm paused waits for a person's resume: nothing to follow (an idle monitor may end).
        let paused = client.store.paused_by_us_among(jobs.iter().map(|j| (j.job_id.as_str(), j.status)))?;
        let active: Vec<&JobSummary> =
            jobs.iter().filter(|j| !j.status.is_terminal() && !paused.contains(&j.job_id)).collect();
        self.seen.retain(|id, _| active.iter().any(|j| &j.job_id == id));
        let youngest = active.iter().map(|j| now - j.created_at).min().unwrap_or(i64::MAX).min(now - self.last_change);
        let pace = Pace {
            youngest_age_secs: youngest,
            next_retry_in_secs: active.iter().filter_map(|j| j.next_retry_at).map(|t| t - now).min(),
            active_jobs: active.len(),
        };
        let active = active.len();
        Ok(MonitorStep {
            interval: next_interval(pace, self.budget),
            floor: budget_floor(self.budget),
            changed,
            active,
            jobs,
        })
    }
}

impl Monitor {
    /// Queue the webhook messages of what changed and wake the notifier; never fails a step.
    fn notify(&mut self, client: &Client, jobs: &[JobSummary]) {
        if let Err(e) = client.queue_notifications(jobs) {
            tracing::warn!("webhook messages not queued this time: {e}");
        }
        let settings = client.settings();
        self.notifier.get_or_insert_with(|| super::Notifier::start(settings.clone())).wake();
    }
}

/// The lock that makes the monitor one per state file and cluster profile, held while it lives.
pub struct MonitorLock {
    _file: File,
    pub path: PathBuf,
}

impl MonitorLock {
    /// The lock's file for these settings.
    pub fn path_for(settings: &Settings) -> PathBuf {
        let mut p = settings.state_path.clone().into_os_string();
        if let Some(cluster) = &settings.cluster {
            p.push(format!(".{cluster}"));
        }
        p.push(".monitor.lock");
        PathBuf::from(p)
    }

    /// Take the lock; None when another monitor holds it.
    pub fn take(settings: &Settings) -> Result<Option<MonitorLock>> {
        let path = MonitorLock::path_for(settings);
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| SpecError::new("TAO_SLURM_STATE", format!("cannot open {}: {e}", path.display())))?;
        match file.try_lock() {
            Ok(()) => Ok(Some(MonitorLock { _file: file, path })),
            Err(_) => Ok(None),
        }
    }
}

impl Client {
    /// What `status` says when jobs have webhooks and no monitor runs to send their messages (only a
    /// monitor sends them); None when a monitor runs or no active job has a webhook.
    pub fn unsent_notifications(&self) -> Result<Option<String>> {
        if monitor_running(&self.settings) {
            return Ok(None);
        }
        let mut waiting = 0;
        for job in self.list_jobs()?.iter().filter(|j| !j.status.is_terminal()) {
            if !self.settings.notify.is_empty() || !self.store.job_webhooks(&job.job_id)?.is_empty() {
                waiting += 1;
            }
        }
        Ok((waiting > 0).then(|| {
            format!(
                "note: {waiting} active job(s) have webhooks and no monitor runs to send their messages: start one with `tao-slurm monitor` (submit --notify starts one)"
            )
        }))
    }
}

/// Whether a monitor holds the lock for these settings' state file.
pub fn monitor_running(settings: &Settings) -> bool {
    matches!(MonitorLock::take(settings), Ok(None))
}

/// Start `tao-slurm monitor` in the background (its own session, output to a log file next to the
/// state file) unless one is running. Returns whether one was started. For callers that are the
/// `tao-slurm` executable (the CLI, its MCP server and service).
pub fn start_background_monitor(settings: &Settings) -> Result<bool> {
    if monitor_running(settings) {
        return Ok(false);
    }
    let exe = std::env::current_exe()
        .map_err(|e| SpecError::new("monitor", format!("cannot find the tao-slurm executable: {e}")))?;
    let mut log = settings.state_path.clone().into_os_string();
    log.push(".monitor.log");
    crate::private::ensure_private_file(std::path::Path::new(&log)).map_err(|m| SpecError::new("monitor", m))?;
    let out = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(|e| SpecError::new("monitor", format!("cannot open {log:?}: {e}")))?;
    let err = out.try_clone().map_err(|e| SpecError::new("monitor", e.to_string()))?;
    use std::os::unix::process::CommandExt;
    let mut command = std::process::Command::new(exe);
    command.arg("--state").arg(&settings.state_path);
    if let Some(cluster) = &settings.cluster {
        command.args(["--cluster", cluster]);
    }
    command
        .args(["monitor", "--idle-exit", "300"])
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
        .map_err(|e| SpecError::new("monitor", format!("cannot start the monitor: {e}")))?;
    Ok(true)
}
