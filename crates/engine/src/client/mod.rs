//! The library API: what the CLI does, callable from Rust. A `Client` owns the settings, the local
//! state and (opened on first use) the transport.

mod cluster;
mod files;
pub mod init;
mod login;
mod logs;
mod lookup;
mod monitor;
mod notify;
mod pause;
mod preview;
#[cfg(any(test, feature = "service-records"))]
pub mod records;
mod refresh;
mod results;
mod retry;
mod running;
mod secrets;
mod submission;
mod submit;
mod tensorboard_relay;
mod views;
mod wait;
mod workdir;

#[cfg(test)]
mod tests;

// Everything a front-end names comes from here or from the core: the engine's, the store's and the
// transport's own paths stay theirs (tests/architecture.rs checks it).
pub use crate::engine::image::Prepared;
pub use crate::engine::logs::{JobLogs, RoleLogs};
pub use crate::engine::retry::{RestartGate, RestartVerdict};
pub use crate::engine::submit::Submitted;
pub use crate::engine::sweep::SweepSubmitted;
pub use crate::filter::JobFilter;
pub use crate::model::{AttemptRecord, EventRecord};
pub use crate::ops::files::{CheckpointFile, DirEntry};
pub use crate::ops::inspect::{CredentialsStatus, LogRange, StartEstimate};
pub use crate::ops::logs::{Chunk, FollowCursor, Stream};
pub use crate::ops::sweep::plan_sweep;
pub use crate::preflight::PreflightReport;
pub use crate::remote::{RemoteError, TransportStats};
pub use crate::store::GroupRecord;
pub use cluster::{alias_destination, preflight};
pub use login::LoginOutcome;
pub use monitor::{monitor_running, start_background_monitor, Monitor, MonitorLock, MonitorStep, AFTER_FAILURE};
pub use notify::Notifier;
pub use preview::{preview_offline, Preview, PreviewChecks, PreviewStep, PreviewVariant};
#[cfg(any(test, feature = "service-records"))]
pub use records::{ApiJob, AtCap, AuditEntry, ServiceRecords, TokenRecord};
pub use results::{ArchiveAsk, ArchiveOut};
pub use running::{ExecOutput, Forward, RunningJob, Where};
pub use secrets::secret_values;
pub use submit::{Admit, MonitorChoice, PlanSummary, Recorded, Secrets, SubmitOptions, SubmitOutcome};
pub use views::{
    FollowPoll, GroupView, JobCallbacks, JobList, JobView, PathCheck, PipelineSubmitted, StepSubmitted, Submission,
};
pub use wait::{Change, Wait, WaitTick};
pub use workdir::WorkdirUpload;

pub use crate::clock::rfc3339;

/// The span of work on one job: every log line inside it names the job (`job{job_id=...}`), in the
/// command line's, the MCP server's and the service's logs alike.
pub(crate) fn job_span(id: &str) -> tracing::Span {
    tracing::info_span!("job", job_id = %id)
}

/// Unix seconds now: the one clock the front-ends read (the core is given `now`, never reads it).
pub fn now_secs() -> i64 {
    crate::clock::now()
}

use crate::config::Settings;
use crate::engine::cycle::Cycle;
use crate::error::Result;
use crate::ops::failure::RetryPolicy;
use crate::remote::{self, Remote};
use crate::store::{ChangeToken, JobSummary, Store};
use std::sync::OnceLock;

/// A cluster profile's name in messages.
fn cluster_label(cluster: Option<&str>) -> String {
    match cluster {
        Some(c) => format!("cluster {c}"),
        None => "the cluster of the settings without a profile".to_string(),
    }
}

/// The library API, mirroring the reference SDK: `create_job`, `job_status`, `job_logs`, `cancel_job`,
/// `list_jobs`, and `wait_for_job` with callbacks. See `examples/sdk.rs`.
pub struct Client {
    settings: Settings,
    store: Store,
    remote: OnceLock<Box<dyn Remote>>,
    /// The active jobs as this client last loaded and refreshed them, valid while nobody (this client
    /// included) has changed the state file since: a long-lived client (the monitor, a service)
    /// refreshing thousands of jobs does not read them all again each time.
    active: std::sync::Mutex<Option<(ChangeToken, Vec<JobSummary>)>>,
    /// Refreshes only observe and record statuses (`mcp --read-only`): see [`Cycle::observe_only`].
    observe_only: bool,
    /// The group commit of submits, shared with every client of the same cluster identity.
    queues: std::sync::Arc<crate::engine::group_commit::Queues>,
    /// The door's rule on automatic restarts (see [`Client::with_restart_gate`]).
    restart_gate: Option<RestartGate>,
}

impl Client {
    pub fn new(settings: Settings) -> Result<Client> {
        let mut store = Store::open_for(&settings)?;
        store.set_cluster(settings.cluster.clone());
        Ok(Client {
            queues: crate::engine::group_commit::queues_for(&settings),
            settings,
            store,
            remote: OnceLock::new(),
            active: std::sync::Mutex::new(None),
            observe_only: false,
            restart_gate: None,
        })
    }

    /// This client's refreshes put each automatic restart (a retry after an infrastructure failure,
    /// a restart after a GPU hang) to `gate` before submitting it, with the job as stored: the
    /// service checks its policy there. A refused one ends the job Error with the gate's word.
    pub fn with_restart_gate(mut self, gate: RestartGate) -> Client {
        self.restart_gate = Some(gate);
        self
    }

    /// This client's refreshes observe and record statuses only: no scancel, release, resubmission,
    /// dependency action or secret removal (what `mcp --read-only` runs with).
    pub fn observing_only(mut self) -> Client {
        self.observe_only = true;
        self
    }

    /// A client over a transport the caller made (tests drive the client over a fake remote).
    pub fn with_remote(settings: Settings, remote: Box<dyn Remote>) -> Result<Client> {
        let client = Client::new(settings)?;
        let _ = client.remote.set(remote);
        Ok(client)
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Let go of the transport's connections (see `Remote::retire_connections`), this process's and
    /// any other's that share its login (the connection is one per login): the next call logs in
    /// again.
    pub fn retire_connections(&self) {
        if let Ok(r) = self.remote() {
            r.retire_connections();
        }
    }

    /// End the transport's connections at once, sessions in use with them (`Remote::end_connections`):
    /// the service's close of a person whose access ended.
    pub fn end_connections(&self) {
        if let Ok(r) = self.remote() {
            r.end_connections();
        }
    }

    /// What the transport has cost so far (zero if no remote command ran).
    pub fn transport_stats(&self) -> crate::remote::TransportStats {
        self.remote.get().map(|r| r.stats()).unwrap_or_default()
    }

    fn policy(&self) -> RetryPolicy {
        RetryPolicy { max_retries: self.settings.max_retries, backoff_base_secs: self.settings.retry_backoff_secs }
    }

    /// The refresh cycle over this client's transport, state and settings.
    fn cycle(&self) -> Result<Cycle<'_>> {
        Ok(Cycle {
            remote: self.remote()?,
            store: &self.store,
            policy: self.policy(),
            settings: &self.settings,
            observe_only: self.observe_only,
            restart_gate: self.restart_gate.as_ref(),
        })
    }

    /// One refresh cycle over `jobs` (see [`Cycle`]); returns the ids of the jobs whose records changed.
    fn refresh_and_advance(&self, jobs: &[JobSummary]) -> Result<Vec<String>> {
        if jobs.is_empty() && self.store.secrets_to_remove()?.is_empty() {
            return Ok(Vec::new());
        }
        self.on_this_cluster(jobs)?;
        self.cycle()?.run(jobs)
    }

    /// Refuse remote work on jobs of another cluster profile: its login hosts are not this client's.
    fn on_this_cluster<'a>(&self, jobs: impl IntoIterator<Item = &'a JobSummary>) -> Result<()> {
        match jobs.into_iter().find(|j| j.cluster != self.settings.cluster) {
            None => Ok(()),
            Some(j) => Err(crate::spec::SpecError::new(
                "cluster",
                format!(
                    "job {} was submitted to {}, not to {}: use --cluster {}",
                    j.job_id,
                    cluster_label(j.cluster.as_deref()),
                    cluster_label(self.settings.cluster.as_deref()),
                    j.cluster.as_deref().unwrap_or("\"\" (none)")
                ),
            )
            .into()),
        }
    }

    fn remote(&self) -> Result<&dyn Remote> {
        if let Some(r) = self.remote.get() {
            return Ok(r.as_ref());
        }
        let r = remote::connect(&self.settings)?;
        Ok(self.remote.get_or_init(|| r).as_ref())
    }
}
