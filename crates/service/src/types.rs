//! The API's request and response bodies. Their OpenAPI schemas are derived from these types.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tao_slurm_engine::client::JobView;
use tao_slurm_engine::spec::Placement;
use tao_slurm_engine::PlatformStatus;
use utoipa::{IntoParams, ToSchema};

/// A job's status in the TAO service's names. tao-slurm's own status is `platform_status`:
///
/// | status | platform_status | Slurm |
/// |---|---|---|
/// | Pending | Pending | PENDING, CONFIGURING, REQUEUED; not submitted yet; a retry waiting |
/// | Running | Running | RUNNING, COMPLETING |
/// | Done | Complete | COMPLETED with status.json SUCCESS (or exit 0) |
/// | Error | Error | FAILED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY... after any retries |
/// | Canceled | Canceled | CANCELLED, PREEMPTED, REVOKED |
/// | Paused | Paused | SUSPENDED, STOPPED; paused by `:pause` (its allocation released) |
/// | Pausing | Pausing | a graceful `:pause` waiting for the job to save a checkpoint and end |
/// | Resuming | Resuming | a `:resume`'s new attempt, until Slurm runs it |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum TaoStatus {
    Pending,
    Running,
    Done,
    Error,
    Canceled,
    Paused,
    Pausing,
    Resuming,
}

impl TaoStatus {
    /// The name the API writes (metrics label their series with it too).
    pub fn as_str(self) -> &'static str {
        match self {
            TaoStatus::Pending => "Pending",
            TaoStatus::Running => "Running",
            TaoStatus::Done => "Done",
            TaoStatus::Error => "Error",
            TaoStatus::Canceled => "Canceled",
            TaoStatus::Paused => "Paused",
            TaoStatus::Pausing => "Pausing",
            TaoStatus::Resuming => "Resuming",
        }
    }
}

impl From<PlatformStatus> for TaoStatus {
    fn from(s: PlatformStatus) -> TaoStatus {
        match s {
            PlatformStatus::Pending => TaoStatus::Pending,
            PlatformStatus::Running => TaoStatus::Running,
            PlatformStatus::Complete => TaoStatus::Done,
            PlatformStatus::Error => TaoStatus::Error,
            PlatformStatus::Canceled => TaoStatus::Canceled,
            PlatformStatus::Paused => TaoStatus::Paused,
            PlatformStatus::Pausing => TaoStatus::Pausing,
            PlatformStatus::Resuming => TaoStatus::Resuming,
        }
    }
}

/// The command: argv (a list), or one shell string run by `bash -c` (as the TAO SDK takes it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
#[serde(untagged)]
pub enum CommandIn {
    Argv(Vec<String>),
    Shell(String),
}

/// Where the job runs, as the TAO service writes it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BackendDetailsIn {
    /// Must be "slurm".
    pub backend_type: Option<String>,
    /// The Slurm partition (same as `partition`).
    pub partition: Option<String>,
    /// The workspace (cluster profile) to run on (same as `workspace`).
    pub cluster_name: Option<String>,
}

/// A job to create: every field of a tao-slurm job (as a job file has them), plus the TAO service's
/// `specs`, `num_gpu`, `backend_details`, `workspace` and `action`. Unknown fields are refused.
// No `deny_unknown_fields` (serde cannot with `flatten`): `create_job` refuses a name JobCreate's
// schema lacks (`doors::refused_field`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct JobCreate {
    /// Container image: `nvcr.io/nvidia/tao/tao-toolkit:6.26.3-pyt`, `registry#image:tag`, or a `.sqsh` path.
    pub image: String,
    pub command: Option<CommandIn>,
    /// With an argv command of one string: run it with `bash -c`.
    #[serde(default)]
    pub shell: bool,
    /// A human label (the Slurm job name is always `tao-job-<id>`).
    pub name: Option<String>,
    /// The workspace (cluster profile) to run on; default: the only one, or `default`.
    pub workspace: Option<String>,
    /// A label of what the job does (`train`, `evaluate`...), kept with the job.
    pub action: Option<String>,
    /// The job's specs document, staged as `$TAO_SPECS_FILE` (inputs laid over it).
    #[schema(value_type = Object)]
    pub specs: Option<serde_json::Map<String, serde_json::Value>>,
    /// Total GPUs of the job, packed into full nodes (as `total_gpus`); -1: the default per node.
    pub num_gpu: Option<i64>,
    pub backend_details: Option<BackendDetailsIn>,
    /// GPUs on every node.
    pub gpus: Option<u32>,
    /// Total GPUs, packed into full nodes.
    pub total_gpus: Option<u32>,
    pub nodes: Option<u32>,
    /// Whole nodes to this job (default: only when it takes all of a node's GPUs).
    pub exclusive: Option<bool>,
    pub partition: Option<String>,
    /// Slurm's placement: account, qos, constraint, nodes to use or avoid (the core's fields that
    /// every door shares, written once).
    #[serde(flatten)]
    pub placement: Placement,
    pub time_hours: Option<f64>,
    pub timeout_hours: Option<f64>,
    pub requeue: Option<bool>,
    /// Variables exported to the container.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Names of the org's secrets (stored with PUT /secrets/NAME, or mapped by the operator), never values.
    #[serde(default)]
    pub secret_env: Vec<String>,
    /// Mounts added to `/lustre` (`src[:dst[:ro]]`).
    #[serde(default)]
    pub mounts: Vec<String>,
    #[serde(default)]
    pub replace_default_mounts: bool,
    pub container_workdir: Option<String>,
    #[serde(default)]
    pub no_container_mount_home: bool,
    /// Allow-listed `#SBATCH` options (`mail-type`, `dependency`, `begin`, ...).
    #[serde(default)]
    pub sbatch_options: BTreeMap<String, String>,
    pub max_timeout_requeues: Option<u32>,
    /// Seconds before the time limit the job is warned (USR2) to save a checkpoint; 0: never.
    pub checkpoint_grace_seconds: Option<u64>,
    /// What counts as a checkpoint (globs; `name-*/` for directories); TAO's by default.
    #[serde(default)]
    pub checkpoint_patterns: Vec<String>,
    /// What a preemption does: `resume` (default) or `cancel`.
    pub on_preempt: Option<String>,
    /// Preemptions survived before the job ends Canceled (default 10).
    pub max_preemptions: Option<u32>,
    /// The training's total time in hours: bounds the queue-length runs (timeout requeues).
    pub total_time_hours: Option<f64>,
    /// Inputs by spec key (`custom.train_dataset.annotation_path = lustre:///...`).
    #[serde(default)]
    pub inputs: BTreeMap<String, String>,
    pub dataset_root: Option<String>,
    #[serde(default)]
    pub dataset_files: Vec<String>,
    #[serde(default)]
    pub no_sqsh: bool,
    #[serde(default)]
    pub allow_registry_pull: bool,
    /// A Cosmos-RL job's section (`config_text`, `commands`), as a job file's `[cosmos_rl]`.
    #[schema(value_type = Option<Object>)]
    pub cosmos_rl: Option<serde_json::Value>,
    /// How the job's GPUs are watched (sample_secs, idle_percent, idle_secs, hang_secs, idle_action:
    /// notify|cancel, hang_action: notify|cancel|restart); unset fields: the workspace's settings.
    #[serde(default)]
    pub gpu_watch: Option<tao_slurm_engine::gpu::GpuWatchSpec>,
    /// Jobs this one runs after, `JOB[:ok|:notok|:any]` (job ids or prefixes of the same workspace;
    /// `ok`, the default, waits for success). Kept across their retries; a parent that can no longer
    /// satisfy it cancels this job ("dependency <id> ended <status>").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
}

/// The body of a job create, for the OpenAPI document: tao-slurm's own or TAO's.
#[derive(Deserialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum JobCreateBody {
    Own(Box<JobCreate>),
    Tao(Box<TaoJobCreate>),
}

/// TAO's job create body (ExperimentJobReq, DatasetJobReq): the fields this service uses; every
/// other field of TAO's is ignored and named in the job's `warnings`.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
pub struct TaoJobCreate {
    /// `experiment` or `dataset`.
    pub kind: String,
    pub action: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub specs: Option<serde_json::Value>,
    pub name: Option<String>,
    pub description: Option<String>,
    pub network_arch: Option<String>,
    pub workspace: Option<String>,
    pub num_gpu: Option<i64>,
    /// `backend_type` "slurm", `partition`, `cluster_name` (the workspace).
    #[schema(value_type = Option<Object>)]
    pub backend_details: Option<serde_json::Map<String, serde_json::Value>>,
    pub parent_job_id: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub docker_env_vars: Option<BTreeMap<String, serde_json::Value>>,
    pub tags: Option<Vec<String>>,
    pub dataset_type: Option<String>,
    pub dataset_format: Option<String>,
    pub train_dataset_uris: Option<Vec<String>>,
    pub eval_dataset_uri: Option<String>,
    pub inference_dataset_uri: Option<String>,
    pub calibration_dataset_uri: Option<String>,
    /// Not TAO's: names of the org's secrets for the job (as tao-slurm's own body takes them), since
    /// `docker_env_vars` are staged in plain text as TAO stages them.
    pub secret_env: Option<Vec<String>>,
    /// Every other field of TAO's bodies.
    #[serde(flatten)]
    #[schema(ignore)]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// The fields of [`JobCreate`] that are the TAO service's, not a job file's.
pub const TAO_ONLY_FIELDS: &[&str] = &["workspace", "action", "num_gpu", "backend_details"];

/// What a job's container last wrote to status.json (the TAO service's `JobResult`).
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct JobProgress {
    #[schema(value_type = Option<Object>)]
    pub epoch: Option<serde_json::Value>,
    #[schema(value_type = Option<Object>)]
    pub max_epoch: Option<serde_json::Value>,
    #[schema(value_type = Option<Object>)]
    pub eta: Option<serde_json::Value>,
    #[schema(value_type = Option<Object>)]
    pub kpi: Option<serde_json::Value>,
    pub last_message: Option<String>,
    pub detailed_status: DetailedStatus,
}

#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct DetailedStatus {
    pub date: Option<String>,
    pub time: Option<String>,
    pub message: Option<String>,
    /// STARTED, RUNNING, SUCCESS, FAILURE, SKIPPED.
    pub status: Option<String>,
}

/// Runtime metadata of the job on Slurm, as the TAO service's handler writes it.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct SlurmMetadata {
    /// The current attempt's Slurm job id (None before it reaches Slurm).
    pub slurm_job_id: Option<String>,
    pub job_dir: String,
    pub results_dir: String,
    /// Resubmissions of infrastructure failures so far.
    pub retry_count: u32,
    /// Slurm job ids of the attempts that failed and were retried, oldest first.
    pub failed_slurm_job_ids: Vec<String>,
    pub slurm_state: Option<String>,
    pub exit_code: Option<i32>,
    pub node_list: Option<String>,
    pub login_host: Option<String>,
    /// When a scheduled retry is due (RFC 3339).
    pub next_retry_at: Option<String>,
    /// The job's newest checkpoint (a path on the cluster), as last seen.
    pub latest_checkpoint: Option<String>,
}

#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct BackendDetailsOut {
    /// Always "slurm".
    pub backend_type: String,
    pub partition: String,
    /// The workspace (cluster profile) the job runs on.
    pub cluster_name: String,
    pub slurm_metadata: SlurmMetadata,
}

/// Why a job is pending, in Slurm's word and in plain words.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct PendingReason {
    /// Slurm's reason (`Resources`, `Priority`, `BeginTime`...).
    pub code: String,
    /// What it means, and what to do, when known.
    pub words: Option<String>,
    pub advice: Option<String>,
}

/// A job as the API shows it.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct JobOut {
    pub id: String,
    pub name: Option<String>,
    pub org: String,
    /// The workspace; a person's under a per-person workspace is `WORKSPACE@UNIX_USER`.
    pub workspace: String,
    /// The person whose token created it (null: a machine's token).
    pub user: Option<String>,
    pub action: Option<String>,
    pub status: TaoStatus,
    /// tao-slurm's status: Pending, Running, Complete, Error, Canceled, Paused, Pausing, Resuming.
    pub platform_status: String,
    /// The status in words: Slurm's state, exit code, failure class, progress.
    pub message: String,
    pub pending_reason: Option<PendingReason>,
    /// RFC 3339.
    pub created_on: String,
    pub last_modified: String,
    pub image: String,
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub num_gpu: Option<i64>,
    #[schema(value_type = Object)]
    pub specs: serde_json::Value,
    pub progress: Option<JobProgress>,
    /// Its GPUs as last sampled while it ran: `nodes` (each node's utilisation, memory and power per
    /// GPU, and `source`: `dcgm` or `nvidia-smi`), `util` (the mean; null: no GPU data, not 0%),
    /// `health` (`idle` or `hung`) when so, and `history` (each node's last samples, oldest first).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub gpu: Option<tao_slurm_engine::gpu::GpuView>,
    /// TAO's JobResult of the job, by job id (empty until its container writes status.json).
    pub job_details: BTreeMap<String, JobResultOut>,
    pub backend_details: BackendDetailsOut,
    /// TAO's fields, for a job made from TAO's create body (`kind` is null for tao-slurm's own body).
    #[serde(flatten)]
    pub tao: TaoJobFields,
}

/// TAO's fields of a job made from TAO's ExperimentJobReq or DatasetJobReq, kept with the job.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TaoJobFields {
    /// `experiment` or `dataset`; null for a job made from tao-slurm's own body.
    pub kind: Option<String>,
    /// The job it ran after (TAO's `parent_job_id`).
    pub parent_id: Option<String>,
    pub network_arch: Option<String>,
    pub description: Option<String>,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset_format: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub train_dataset_uris: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_dataset_uri: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inference_dataset_uri: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration_dataset_uri: Option<String>,
    /// The request's fields tao-slurm did not use, each with why (TAO ignores unknown fields too);
    /// in the create reply also what the submission changed (a wall time capped at the MaxTime).
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// TAO's JobResult: what the job's container last wrote to status.json.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct JobResultOut {
    pub detailed_status: DetailedStatus,
    #[schema(value_type = Option<Object>)]
    pub epoch: Option<serde_json::Value>,
    #[schema(value_type = Option<Object>)]
    pub max_epoch: Option<serde_json::Value>,
    #[schema(value_type = Option<Object>)]
    pub eta: Option<serde_json::Value>,
    #[schema(value_type = Option<Object>)]
    pub time_per_epoch: Option<serde_json::Value>,
    #[schema(value_type = Option<Object>)]
    pub cur_iter: Option<serde_json::Value>,
    #[schema(value_type = Option<Object>)]
    pub kpi: Option<serde_json::Value>,
    #[schema(value_type = Option<Object>)]
    pub key_metric: Option<serde_json::Value>,
    pub message: Option<String>,
    /// The job's newest checkpoint (a path on the cluster), as last seen (tao-slurm's addition).
    pub latest_checkpoint: Option<String>,
}

/// Paging of a listing.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PaginationInfo {
    pub total_records: usize,
    pub total_pages: usize,
    pub page_size: usize,
    pub page_index: usize,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct JobList {
    pub jobs: Vec<JobOut>,
    pub pagination_info: PaginationInfo,
}

/// Listing parameters.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Jobs to skip (default 0).
    pub skip: Option<usize>,
    /// Page size, 1 to 1000 (default 100).
    pub size: Option<usize>,
    /// `created_on`, `last_modified`, `name` or `status`, a leading `-` sorting descending, or TAO's
    /// `date-descending` (the default), `date-ascending`, `name-ascending`, `name-descending`,
    /// `status-ascending`, `status-descending`.
    pub sort: Option<String>,
    /// Comma-separated statuses, TAO's or tao-slurm's names (`Running,Done`); `!Done`: all but one.
    pub status: Option<String>,
    /// Only this workspace's jobs.
    pub workspace: Option<String>,
    /// TAO's filters: the exact name (`!name`: all but), network, kind, a tag (`tags`; `tag` too).
    pub name: Option<String>,
    pub network_arch: Option<String>,
    pub kind: Option<String>,
    pub tags: Option<String>,
    pub tag: Option<String>,
    /// Jobs whose name or description holds this text (any case), or whose id holds it.
    pub search: Option<String>,
    /// TAO's flag for the caller's own jobs (`true`): those the token's person created.
    pub user_only: Option<String>,
    /// The same as `user_only`.
    pub mine: Option<String>,
}

/// Log parameters: the whole of both files (default, capped), the last `tail` lines, or a byte range of one file from `offset`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct LogsQuery {
    /// The last N lines (at most 10000).
    pub tail: Option<u32>,
    /// Read from this byte offset instead (the reply's `X-Next-Offset` header continues it).
    pub offset: Option<u64>,
    /// Bytes to read from `offset` (default 65536, at most 1048576); with `tail`, the most bytes of the
    /// reply (default and at most 1048576; the ends of the files are kept, `X-Log-Truncated: true` says
    /// something was cut).
    pub limit: Option<u64>,
    /// `stdout` (main.out), `stderr` (main.err) or `both` (default; `offset` needs one file).
    pub stream: Option<String>,
    /// An earlier attempt (1-based); default: the current one.
    pub attempt: Option<u32>,
    /// TAO's AutoML experiment index: refused (jobs here have one log).
    pub automl_experiment_index: Option<i64>,
}

/// Event parameters.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Only events after this event id (a cursor).
    pub after: Option<i64>,
}

/// One entry of a job's history.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EventOut {
    pub id: i64,
    /// RFC 3339.
    pub at: String,
    /// created, submitted, status, retry, cancel, secrets_removed...
    pub kind: String,
    pub detail: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EventList {
    pub events: Vec<EventOut>,
}

/// One submission of a job to Slurm (the core's `Attempt`), its times in RFC 3339.
pub type AttemptOut = tao_slurm_engine::model::Attempt<tao_slurm_engine::model::Rfc3339>;

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AttemptList {
    pub attempts: Vec<AttemptOut>,
}

/// A Slurm workspace: a cluster profile.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WorkspaceOut {
    /// The profile's name (`default`: the settings without a profile), or the id of an org's own.
    pub id: String,
    pub name: String,
    /// The operator's, shared by the orgs it is granted to (they share its Unix identity); false for
    /// an org's own.
    pub shared: bool,
    /// When an org made it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_on: Option<String>,
    /// Its last preflight passed (jobs run a preflight first while it is false).
    pub ready: bool,
    /// Always "slurm".
    pub cloud_type: String,
    pub cloud_specific_details: CloudSpecificDetails,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CloudSpecificDetails {
    pub slurm_user: Option<String>,
    pub slurm_hostname: Vec<String>,
    pub base_results_dir: String,
    pub partition: String,
    pub account: Option<String>,
    pub max_gpus_per_node: u32,
    pub time_hours: f64,
    pub use_requeue: bool,
    pub max_job_retries: u32,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WorkspaceList {
    pub workspaces: Vec<WorkspaceOut>,
    pub pagination_info: PaginationInfo,
}

/// One preflight check: the core's, with the operator's details hidden from orgs.
pub type CheckOut = tao_slurm_engine::preflight::Check;

/// One partition: limits and what is free now (the core's).
pub type PartitionOut = tao_slurm_engine::slurm::PartitionUsage;

/// The cluster view of a workspace: preflight checks and partitions (cached for a minute).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ClusterOut {
    pub workspace: String,
    /// RFC 3339: when this was read from the cluster.
    pub checked_at: String,
    pub ok: bool,
    pub checks: Vec<CheckOut>,
    pub partitions: Vec<PartitionOut>,
    /// Why the partitions could not be read, if they could not.
    pub partitions_error: Option<String>,
}

#[derive(Debug, Clone, Deserialize, IntoParams, Default)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ClusterQuery {
    /// Read again from the cluster now instead of the cached view.
    pub refresh: Option<bool>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Deleted {
    pub id: String,
    pub deleted: bool,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Health {
    pub status: String,
}

/// Counters of the service as one org sees them: what the org's tokens asked, its jobs and
/// followers, and the workspaces it may use.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Stats {
    pub uptime_secs: u64,
    /// Requests of the org's tokens.
    pub http_requests: u64,
    /// The org's open event streams.
    pub open_streams: i64,
    /// Jobs of the org whose logs are followed now.
    pub log_followers: usize,
    pub snapshot_version: u64,
    /// The org's jobs in the cache.
    pub jobs_cached: usize,
    pub workspaces: Vec<WorkspaceStatsOut>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WorkspaceStatsOut {
    pub workspace: String,
    /// Refresh cycles of the monitor (each one round trip for all active jobs, or none without any).
    pub refreshes: u64,
    pub refresh_errors: u64,
    /// Remote round trips of every kind (refreshes, submits, cancels, logs, cluster view).
    pub round_trips: u64,
    /// Round trips of the monitor's refreshes alone.
    pub refresh_round_trips: u64,
    pub ssh_logins: u64,
    pub active_jobs: usize,
    /// The monitor's current interval between refreshes.
    pub monitor_interval_secs: f64,
    /// Reads of log followers (event streams with logs), paced by the workspace's query budget.
    pub follower_reads: u64,
    /// Cluster operations requests are running now, and the most the workspace runs at once.
    pub remote_in_use: usize,
    pub remote_pool_size: usize,
    pub last_refresh_at: Option<String>,
    pub last_error: Option<String>,
}

pub use tao_slurm_engine::client::rfc3339;

/// Slurm's pending reason of a job, with what it means and what to do when known.
pub fn pending_reason(view: &JobView) -> Option<PendingReason> {
    if view.status != PlatformStatus::Pending {
        return None;
    }
    let code = view.pending_reason.clone().filter(|c| !c.is_empty())?;
    let (words, advice) = match tao_slurm_engine::slurm::explain_pending(&code) {
        Some((w, a)) => (Some(w.to_string()), Some(a.to_string())),
        None => (None, None),
    };
    Some(PendingReason { code, words, advice })
}

/// The progress of a job from its last status.json line.
pub fn progress(view: &JobView) -> Option<JobProgress> {
    let p = view.progress.as_ref()?.as_object()?;
    let text = |k: &str| p.get(k).and_then(|v| v.as_str()).map(String::from);
    let value = |k: &str| p.get(k).filter(|v| !v.is_null()).cloned();
    Some(JobProgress {
        epoch: value("epoch"),
        max_epoch: value("max_epoch"),
        eta: value("eta"),
        kpi: value("kpi"),
        last_message: text("message"),
        detailed_status: DetailedStatus {
            date: text("date"),
            time: text("time"),
            message: text("message"),
            status: text("status"),
        },
    })
}

/// TAO's `job_details` of a job: its JobResult under its id, from its last status.json line, with
/// its newest checkpoint (empty while it has neither).
pub fn job_details(view: &JobView) -> BTreeMap<String, JobResultOut> {
    let empty = serde_json::Map::new();
    let p = match view.progress.as_ref().and_then(|p| p.as_object()) {
        Some(p) => p,
        None if view.checkpoint.is_some() => &empty,
        None => return BTreeMap::new(),
    };
    let text = |k: &str| p.get(k).and_then(|v| v.as_str()).map(String::from);
    let value = |k: &str| p.get(k).filter(|v| !v.is_null()).cloned();
    let result = JobResultOut {
        detailed_status: DetailedStatus {
            date: text("date"),
            time: text("time"),
            message: text("message"),
            status: text("status"),
        },
        epoch: value("epoch"),
        max_epoch: value("max_epoch"),
        eta: value("eta"),
        time_per_epoch: value("time_per_epoch"),
        cur_iter: value("cur_iter"),
        kpi: value("kpi"),
        key_metric: value("key_metric"),
        message: text("message"),
        latest_checkpoint: view.checkpoint.clone(),
    };
    [(view.job_id.clone(), result)].into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body's properties as the document describes them: its own and, through `allOf`, those of
    /// the groups it flattens (the core's `Placement`).
    fn body_fields(doc: &serde_json::Value, name: &str) -> serde_json::Map<String, serde_json::Value> {
        let schema = &doc["components"]["schemas"][name];
        let mut fields = schema["properties"].as_object().cloned().unwrap_or_default();
        for part in schema["allOf"].as_array().into_iter().flatten() {
            match part["$ref"].as_str() {
                Some(r) => fields.extend(body_fields(doc, r.trim_start_matches("#/components/schemas/"))),
                None => fields.extend(part["properties"].as_object().cloned().unwrap_or_default()),
            }
        }
        fields
    }

    /// Every field of a job is a field of the service's create body, but those `spec::doors` says
    /// the service leaves out.
    #[test]
    fn every_job_field_is_a_field_of_the_create_body() {
        let doc: serde_json::Value = serde_json::from_str(&super::super::openapi::document_json()).unwrap();
        let body = body_fields(&doc, "JobCreate");
        assert!(body.len() > 30 && body.contains_key("qos"), "{body:?}");
        let missing = tao_slurm_engine::spec::doors::missing_at(tao_slurm_engine::spec::doors::Door::Service, |name| {
            body.contains_key(name)
        });
        assert!(missing.is_empty(), "JobSpec fields missing from the service's JobCreate: {missing:?}");
    }

    /// The service's attempts and preflight checks are the core's types: the document lists every
    /// field of each, attempts' times as text.
    #[test]
    fn attempts_and_checks_are_the_cores_types() {
        let doc: serde_json::Value = serde_json::from_str(&super::super::openapi::document_json()).unwrap();
        let schemas = &doc["components"]["schemas"];
        let item_of = |list: &str, field: &str| {
            let items = &schemas[list]["properties"][field]["items"];
            let name = items["$ref"].as_str().unwrap_or_else(|| panic!("{list}.{field}: {items}"));
            schemas[name.trim_start_matches("#/components/schemas/")]["properties"].clone()
        };
        let attempt = item_of("AttemptList", "attempts");
        for field in ["number", "slurm_job_name", "failure_class", "evidence", "cause", "resumed_from", "slurm_restart"]
        {
            assert!(attempt.get(field).is_some(), "attempt lacks {field}: {attempt}");
        }
        let time = attempt["submitted_at"].to_string();
        assert!(time.contains("#/components/schemas/Rfc3339"), "{time}");
        assert_eq!(schemas["Rfc3339"]["type"], "string", "{}", schemas["Rfc3339"]);
        let text = doc.to_string();
        for r in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
            let name = &r[..r.find('"').unwrap()];
            assert!(schemas.get(name).is_some(), "the document refers to a schema it lacks: {name}");
        }
        let check = item_of("ClusterOut", "checks");
        for field in ["name", "host", "ok", "required", "detail", "remediation", "found"] {
            assert!(check.get(field).is_some(), "check lacks {field}: {check}");
        }
    }

    #[test]
    fn dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn every_create_field_is_a_job_field_or_taos() {
        let job = tao_slurm_engine::spec::doors::job_fields();
        let create = tao_slurm_engine::spec::doors::schema_fields::<JobCreate>();
        assert!(create.iter().any(|f| f == "qos"), "the flattened placement is in the body: {create:?}");
        for key in &create {
            assert!(
                job.contains(&key.as_str()) || TAO_ONLY_FIELDS.contains(&key.as_str()) || key == "specs",
                "JobCreate field {key} is not a job field"
            );
        }
    }

    /// The create body takes the core's placement fields as its own, and refuses a name beside them
    /// that no field has (serde cannot refuse it in a struct that flattens another; `create_job` asks
    /// `doors::unknown_field` first).
    #[test]
    fn the_create_body_takes_the_placement_and_refuses_unknown_names() {
        let body = serde_json::json!({"image": "x/y:1", "qos": "high", "nodelist_typo": "n1"});
        let (name, message) =
            tao_slurm_engine::spec::doors::unknown_field::<JobCreate>(body.as_object().unwrap()).unwrap();
        assert_eq!(name, "nodelist_typo");
        assert!(message.contains("`qos`") && message.contains("`image`"), "{message}");
        let ok = serde_json::json!({"image": "x/y:1", "qos": "high", "exclude": "n1"});
        assert!(tao_slurm_engine::spec::doors::unknown_field::<JobCreate>(ok.as_object().unwrap()).is_none());
        let create: JobCreate = serde_json::from_value(ok).unwrap();
        assert_eq!((create.placement.qos.as_deref(), create.placement.exclude.as_deref()), (Some("high"), Some("n1")));
    }

    #[test]
    fn tao_names_our_complete_done() {
        assert_eq!(TaoStatus::from(PlatformStatus::Complete), TaoStatus::Done);
        for s in [TaoStatus::Pending, TaoStatus::Done, TaoStatus::Canceled, TaoStatus::Resuming] {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str(), "as_str is the name the API writes");
        }
    }
}

/// Parameters of a create.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CreateQuery {
    /// Check the job as a create would (every field, the policy, the org's secrets, the cluster's
    /// partition and paths) and answer with what would be submitted, submitting and recording
    /// nothing: the plan and the staged files, the batch script last (as `tao-slurm submit
    /// --dry-run --json` shows them).
    pub dry_run: Option<bool>,
}

/// What a create with `dry_run=true` would submit.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DryRunOut {
    pub dry_run: bool,
    /// The id the job would have (each dry run draws a new one).
    pub job_id: String,
    /// The resolved plan, fitted to its partition as the submit would fit it.
    #[schema(value_type = Object)]
    pub plan: serde_json::Value,
    /// The files the submit would stage on shared storage, the batch script last.
    pub files: Vec<tao_slurm_engine::script::StagedFile>,
    pub warnings: Vec<String>,
}

/// Parameters of a job's event stream.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct JobStreamQuery {
    /// Send the log lines too (default true).
    pub logs: Option<bool>,
}

/// A piece of a job's log in its event stream (`event: log`).
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct LogChunkOut {
    /// `stdout` (main.out) or `stderr` (main.err).
    pub stream: String,
    pub attempt: u32,
    /// Byte offset of `text` in the file.
    pub offset: u64,
    pub text: String,
}

/// A change of the job list in its event stream (`event: jobs`; the first event, `snapshot`, holds
/// every job of the org).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct JobListChange {
    pub version: u64,
    pub jobs: Vec<JobOut>,
    /// Ids of jobs that were deleted.
    pub removed: Vec<String>,
}
