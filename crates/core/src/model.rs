//! The job as the engine keeps it: its summary (what listing, refreshing and deciding need), its whole
//! record, its attempts and events, and what one refresh learned about it. Pure data.

use crate::plan::{Layout, Plan};
use crate::status::PlatformStatus;

/// One entry of a job's history, with the id that orders all events (a cursor for followers).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct EventRecord {
    pub id: i64,
    pub job_id: String,
    /// Unix seconds.
    pub at: i64,
    pub kind: String,
    pub detail: String,
}

/// A time as RFC 3339 text (`2026-12-06T01:02:03Z`), as the service shows times.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(transparent)]
pub struct Rfc3339(pub String);

/// One submission of a job to Slurm, as the engine keeps it (times in Unix seconds).
pub type AttemptRecord = Attempt<i64>;

/// One submission of a job to Slurm (a retry is a new attempt), with the evidence of how it ended.
/// Its times are Unix seconds as the engine keeps them, RFC 3339 text in the service's replies.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Attempt<T> {
    pub number: u32,
    /// The Slurm job name: the attempt's unique token, by which it is found again.
    pub slurm_job_name: String,
    pub slurm_job_id: Option<String>,
    pub login_host: Option<String>,
    pub state: Option<String>,
    pub exit_code: Option<i32>,
    pub node_list: Option<String>,
    /// infra, user, timeout, cancelled, preempted; policy (a door's rule refused the attempt before it was submitted).
    pub failure_class: Option<String>,
    /// The log lines or facts the class was decided on.
    pub evidence: Vec<String>,
    pub excluded_nodes: String,
    /// Why this attempt was made (`attempts::Cause`: timeout, infra, preempted, resumed, retried);
    /// None for a job's first.
    pub cause: Option<String>,
    /// The checkpoint this attempt started from, as known when it was made (None: none, or not known).
    pub resumed_from: Option<String>,
    /// For an attempt that is a restart of the same Slurm job (a timeout requeue, or Slurm's own
    /// requeue after a preemption): Slurm's restart count. None for a Slurm job's first start.
    pub slurm_restart: Option<u32>,
    pub recorded_at: T,
    pub submitted_at: Option<T>,
    pub ended_at: Option<T>,
}

impl<T> Attempt<T> {
    /// The same attempt with its times written by `f`.
    pub fn map_times<U>(self, f: impl Fn(T) -> U) -> Attempt<U> {
        Attempt {
            number: self.number,
            slurm_job_name: self.slurm_job_name,
            slurm_job_id: self.slurm_job_id,
            login_host: self.login_host,
            state: self.state,
            exit_code: self.exit_code,
            node_list: self.node_list,
            failure_class: self.failure_class,
            evidence: self.evidence,
            excluded_nodes: self.excluded_nodes,
            cause: self.cause,
            resumed_from: self.resumed_from,
            slurm_restart: self.slurm_restart,
            recorded_at: f(self.recorded_at),
            submitted_at: self.submitted_at.map(&f),
            ended_at: self.ended_at.map(&f),
        }
    }
}

/// A job as stored: its summary plus the spec and plan documents, which only submissions, retries
/// and staging read. It dereferences to the summary, whose fields it has.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRecord {
    pub summary: JobSummary,
    pub spec_json: String,
    pub plan: Plan,
}

impl std::ops::Deref for JobRecord {
    type Target = JobSummary;
    fn deref(&self) -> &JobSummary {
        &self.summary
    }
}

impl std::ops::DerefMut for JobRecord {
    fn deref_mut(&mut self) -> &mut JobSummary {
        &mut self.summary
    }
}

/// What every door shows of a job as it is kept: one field list for the engine's summary and the
/// doors' view (`client::JobView` flattens it). Field names follow the contract's `slurm_metadata`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct JobFacts {
    pub job_id: String,
    pub name: Option<String>,
    pub status: PlatformStatus,
    pub message: String,
    pub slurm_job_id: Option<String>,
    pub slurm_state: Option<String>,
    pub exit_code: Option<i32>,
    pub node_list: Option<String>,
    pub login_host: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    /// The current attempt (1 + retries so far).
    pub attempt: u32,
    /// When a scheduled retry becomes due (Unix seconds; None when none is scheduled).
    pub next_retry_at: Option<i64>,
    /// Nodes the current attempt was submitted with `--exclude` of.
    pub excluded_nodes: String,
    pub image: String,
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub partition: String,
    /// The cluster profile the job was submitted to (None: the settings without a profile).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// The sweep or pipeline the job belongs to (its group id), and a sweep variant's index.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sweep_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sweep_index: Option<u32>,
    /// Why Slurm keeps the job pending (squeue's reason code, like `Resources`), while it does.
    pub pending_reason: Option<String>,
    /// The job's newest checkpoint (a path on the cluster), as last seen: by a refresh while it
    /// runs, when it failed or was preempted, or as an attempt started from it.
    pub checkpoint: Option<String>,
    /// Its GPUs as last sampled while it ran (`crate::gpu`): each node's utilisation, memory and
    /// power, and whether it is idle or hung.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<crate::gpu::GpuView>,
}

/// What listing, refreshing and showing a job need: everything but its spec and whole plan, which
/// only submissions and retries read. A refresh of thousands of jobs loads only these. It
/// dereferences to the facts every door shows, whose fields it has.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSummary {
    pub facts: JobFacts,
    /// The last line of the container's status.json (JSON), when there is one.
    pub progress: Option<String>,
    /// The current attempt's Slurm job name.
    pub attempt_name: String,
    pub layout: Layout,
    /// The inner timeout, and how many runs it may end before the job is an error (1 + requeues).
    pub timeout_seconds: u64,
    pub timeout_runs: u32,
    /// Whether the job has a secrets file on the cluster (deleted once it is terminal).
    pub has_secrets: bool,
    /// `size:mtime` of status.json when it was last read (None: never read).
    pub status_sig: Option<String>,
    /// When the current attempt reached Slurm (None: not yet, or its outcome is unknown).
    pub submitted_at: Option<i64>,
    /// Since when neither squeue nor sacct has known the current attempt (None: known).
    pub unseen_since: Option<i64>,
    /// For a job that runs after others: the dependency it was submitted or last re-pointed with
    /// (`afterok:<ids>`, `hold`, `free`; see `ops::depend::Gate::stored`).
    pub gate: Option<String>,
    /// What counts as a checkpoint for this job, when it asked to be warned before its time limit
    /// (and so resumes); empty: its checkpoints are not looked for by refreshes.
    pub checkpoint_patterns: Vec<String>,
}

impl std::ops::Deref for JobSummary {
    type Target = JobFacts;
    fn deref(&self) -> &JobFacts {
        &self.facts
    }
}

impl std::ops::DerefMut for JobSummary {
    fn deref_mut(&mut self) -> &mut JobFacts {
        &mut self.facts
    }
}

impl JobSummary {
    /// A sweep variant's index while its current attempt is its array's task (the first attempt;
    /// retries are jobs of their own).
    pub fn array_index(&self) -> Option<u32> {
        if self.attempt == 1 {
            self.sweep_index
        } else {
            None
        }
    }
}

/// How many runs the inner timeout may end before the job is an error (1 + timeout requeues).
pub fn timeout_runs(plan: &Plan) -> u32 {
    if plan.requeue {
        plan.max_timeout_requeues + 1
    } else {
        1
    }
}

/// What a refresh learned about a job.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusUpdate {
    pub status: PlatformStatus,
    pub message: String,
    pub slurm_state: Option<String>,
    pub exit_code: Option<i32>,
    pub node_list: Option<String>,
    /// The last status.json line; None keeps what was stored.
    pub progress: Option<String>,
    /// Why Slurm keeps the job pending (squeue's reason code, like `Resources`); None when it does
    /// not, or gives no reason. Its explanation (`slurm::explain_pending`) is in the message too, for
    /// people; programs read this field.
    pub pending_reason: Option<String>,
}

impl StatusUpdate {
    /// A status and its message, with nothing learned from Slurm (a submission that failed, a
    /// dependency that can never be met, an outcome not known yet).
    pub fn bare(status: PlatformStatus, message: impl Into<String>) -> StatusUpdate {
        StatusUpdate {
            status,
            message: message.into(),
            slurm_state: None,
            exit_code: None,
            node_list: None,
            progress: None,
            pending_reason: None,
        }
    }

    /// A new status and message for `job`, keeping what Slurm last said of it (state, exit code).
    pub fn keeping_slurm_of(job: &JobSummary, status: PlatformStatus, message: impl Into<String>) -> StatusUpdate {
        StatusUpdate {
            slurm_state: job.slurm_state.clone(),
            exit_code: job.exit_code,
            pending_reason: if status == PlatformStatus::Pending { job.pending_reason.clone() } else { None },
            ..StatusUpdate::bare(status, message)
        }
    }
}
