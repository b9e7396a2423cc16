//! What the client hands back: job views, groups, submissions, path checks, follow polls.

use crate::model::JobFacts;
use crate::store::JobSummary;
use serde::Serialize;

/// A job as `status --json` shows it: the facts every door shows (the core's, one field list with
/// the engine's summary) and what is worked out from the rest of the record. It dereferences to the
/// facts.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct JobView {
    #[serde(flatten)]
    pub facts: JobFacts,
    pub job_dir: String,
    pub results_dir: String,
    /// Seconds since submission (to the last refresh, for finished jobs).
    pub elapsed_secs: i64,
    /// The container's last status.json line (message, epoch, KPIs), when it wrote one.
    pub progress: Option<serde_json::Value>,
    pub progress_message: Option<String>,
    /// Resubmissions so far.
    pub retries: u32,
    /// Every attempt, first to last, each with its cause and the checkpoint it started from (filled
    /// by `job_status`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts: Option<Vec<crate::store::AttemptRecord>>,
    /// `attempt 3 of at most 7 (timeout)`: the queue-length run the job is on, the most it may use,
    /// and why its current attempt was made (`attempts::attempt_summary`; filled by `job_status`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt_summary: Option<String>,
}

impl std::ops::Deref for JobView {
    type Target = JobFacts;
    fn deref(&self) -> &JobFacts {
        &self.facts
    }
}

impl JobView {
    /// The view with its attempts and their summary.
    pub fn with_attempts(mut self, attempts: Vec<crate::store::AttemptRecord>, timeout_runs: u32) -> JobView {
        let causes: Vec<Option<&str>> = attempts.iter().map(|a| a.cause.as_deref()).collect();
        self.attempt_summary = Some(crate::attempts::attempt_summary(&causes, timeout_runs));
        self.attempts = Some(attempts);
        self
    }

    /// The view of a job's summary at `now` (Unix seconds: the elapsed time of an active job).
    pub fn at(j: &JobSummary, now: i64) -> JobView {
        JobView {
            facts: j.facts.clone(),
            job_dir: j.layout.base_dir.clone(),
            results_dir: j.layout.results_dir(),
            elapsed_secs: if j.status.is_terminal() { j.updated_at - j.created_at } else { now - j.created_at },
            progress: j.progress.as_deref().and_then(|p| serde_json::from_str(p).ok()),
            progress_message: j
                .progress
                .as_deref()
                .and_then(|p| serde_json::from_str::<crate::status::StatusLine>(p).ok())
                .and_then(|l| l.message),
            retries: j.attempt.saturating_sub(1),
            attempts: None,
            attempt_summary: None,
        }
    }
}

/// A listing: the jobs that passed a filter (newest first, at most its limit) and how many passed.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct JobList {
    pub jobs: Vec<JobView>,
    pub total: usize,
}

/// What [`Client::submit`] submitted.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Submission {
    Job(crate::engine::submit::Submitted),
    Sweep(crate::engine::sweep::SweepSubmitted),
    Pipeline(PipelineSubmitted),
}

/// A submitted pipeline: its id and each step's job.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct PipelineSubmitted {
    pub pipeline_id: String,
    pub steps: Vec<StepSubmitted>,
    /// What the submission changed or fell back to, each named by its step, for the caller to show.
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct StepSubmitted {
    pub name: String,
    pub job_id: String,
    pub slurm_job_id: String,
}

/// A sweep or pipeline with its members' statuses counted.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct GroupView {
    #[serde(flatten)]
    pub group: crate::store::GroupRecord,
    pub jobs: usize,
    pub statuses: std::collections::BTreeMap<String, usize>,
}

/// What `check-path` found for one URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathCheck {
    Exists(String),
    Missing(String),
    /// An auxiliary input (s3, hf, ngc): fetched inside the job, not checked here.
    NotChecked(String),
    /// Not an acceptable URI; the reason.
    Refused(String),
}

/// What one [`Client::follow_logs_poll`] found.
#[derive(Debug, Clone)]
pub struct FollowPoll {
    /// The job after the poll's refresh.
    pub job: JobView,
    pub chunks: Vec<crate::ops::logs::Chunk>,
    /// The job had ended before this poll and every byte of its logs has been read.
    pub finished: bool,
    /// Nothing more is waiting to be read now.
    pub caught_up: bool,
}

/// Callbacks for [`Client::wait_for_job`]; each has an empty default.
pub trait JobCallbacks {
    /// The job (attempt) started running.
    fn on_running(&mut self, _job: &JobView) {}
    /// The job ended Complete.
    fn on_complete(&mut self, _job: &JobView) {}
    /// The job ended Error (after any retries).
    fn on_error(&mut self, _job: &JobView) {}
    /// An infrastructure failure was retried: `job.attempt` is the new attempt.
    fn on_retry(&mut self, _job: &JobView) {}
}
