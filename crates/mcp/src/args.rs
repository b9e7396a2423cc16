//! What each tool accepts. The structs give the JSON schemas of `tools/list` (their doc comments are
//! the descriptions an agent reads, so they are short) and are parsed by [`parse`], whose errors name
//! the field and say what it takes.

use super::reply::ToolError;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Longest a `wait` may block, and its default: below the 60 s that some clients allow a tool call.
pub const WAIT_MAX_SECS: u64 = 300;
pub const WAIT_DEFAULT_SECS: u64 = 50;
/// `logs`: lines by default and at most; bytes per stream by default and at most.
pub const LOG_LINES_DEFAULT: u32 = 100;
pub const LOG_LINES_MAX: u32 = 2000;
pub const LOG_BYTES_DEFAULT: u64 = 16 * 1024;
pub const LOG_BYTES_MAX: u64 = 64 * 1024;

/// Parse a tool's arguments into `T`. A wrong type, an unknown or a missing field is a tool error that
/// names the field and what it accepts, never a protocol error.
pub fn parse<T: DeserializeOwned + JsonSchema>(
    arguments: serde_json::Map<String, serde_json::Value>,
) -> Result<T, ToolError> {
    if let Some((name, message)) = tao_slurm_engine::spec::doors::refused_field::<T>(&arguments) {
        return Err(ToolError::invalid(&name, plain_expectation(&message)));
    }
    serde_path_to_error::deserialize(serde_json::Value::Object(arguments)).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        let field = if path.is_empty() || path == "." { field_in_message(&inner) } else { Some(path) };
        ToolError::invalid(field.as_deref().unwrap_or("arguments"), plain_expectation(&inner))
    })
}

/// serde names unknown and missing fields only inside its message: "unknown field `gpu`, ...".
fn field_in_message(message: &str) -> Option<String> {
    let start = message.find('`')? + 1;
    let len = message[start..].find('`')?;
    Some(message[start..start + len].to_string())
}

/// serde's type names in words an agent (and its user) reads without knowing Rust.
fn plain_expectation(message: &str) -> String {
    let message = message.split(" at line ").next().unwrap_or(message);
    [
        ("expected u32", "expected a whole number >= 0"),
        ("expected u64", "expected a whole number >= 0"),
        ("expected i64", "expected a whole number"),
        ("expected f64", "expected a number"),
        ("expected a sequence", "expected a list"),
        ("expected a map", "expected an object"),
    ]
    .iter()
    .fold(message.to_string(), |m, (from, to)| m.replace(from, to))
}

/// Values allowed for a number field, as a tool error when it is outside them.
pub fn check_range<T: PartialOrd + std::fmt::Display>(field: &str, value: T, min: T, max: T) -> Result<T, ToolError> {
    if value < min || value > max {
        return Err(ToolError::invalid(field, format!("{value} is out of range: allowed {min} to {max}")));
    }
    Ok(value)
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

/// `init`: the env file's settings. Nothing is written unless `write` is true.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InitArgs {
    /// Login host: host, host:port or an ssh_config alias (comma-separated for failover). Default:
    /// what the environment or the env file already says (SLURM_HOSTNAME, SSH_HOST), as for every
    /// other field.
    #[serde(default)]
    pub host: String,
    /// The user's name on the cluster (default: SLURM_USER or SSH_USER, as set).
    #[serde(default)]
    pub user: String,
    /// Private key path (mode 600).
    pub key: Option<String>,
    /// known_hosts file (SSH_KNOWN_HOSTS).
    pub known_hosts: Option<String>,
    /// ssh_config file (SSH_CONFIG).
    pub ssh_config: Option<String>,
    /// Partition(s); default: the cluster's default partition.
    pub partition: Option<String>,
    /// Slurm account; default: none written (Slurm's default).
    pub account: Option<String>,
    /// Results directory on shared storage.
    pub base_dir: Option<String>,
    /// The env file; default: TAO_ENV_FILE or ~/.config/tao/.env.
    pub env_file: Option<String>,
    /// Trust the login host's key on first sight; only after the user checked its fingerprint.
    #[serde(default)]
    pub accept_new_host_key: bool,
    /// Write the file (only once the user agreed to what a call without it showed).
    #[serde(default)]
    pub write: bool,
    /// Replace init's settings in an existing env file (its other lines are kept).
    #[serde(default)]
    pub overwrite: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckPathsArgs {
    /// Paths on the cluster: lustre:///abs/path, slurm://path or /abs/path (s3://, hf_model://,
    /// hf_dataset://, ngc:// are fetched inside the job and not checked).
    pub uris: Vec<String>,
}

/// A job: the same fields as a job file (`tao-slurm submit --spec job.toml`). Only image and command
/// are required; the rest default from the user's settings. Serialised (without the fields that are
/// not the job's) it is a [`tao_slurm_engine::JobSpec`]: the names are the same.
// No serde `deny_unknown_fields` (serde cannot with `flatten`): [`parse`] refuses a name the schema
// lacks, and the schema says so to agents (`additionalProperties: false`).
#[derive(Debug, Default, Deserialize, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct SubmitArgs {
    /// Container image: registry/image:tag (e.g. nvcr.io/nvidia/tao/tao-toolkit:6.26.3-pyt), or /path/image.sqsh.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Command run in the container, as argv (with shell=true: one string for bash -c).
    #[serde(default)]
    pub command: Vec<String>,
    #[serde(default)]
    pub shell: bool,
    /// GPUs per node (0: CPU only). Default 4.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
    /// Total GPUs, packed into full nodes (instead of gpus).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_gpus: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodes: Option<u32>,
    /// Whole nodes to this job (#SBATCH --exclusive); default only when it takes all of a node's GPUs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exclusive: Option<bool>,
    /// The job's specs (a JSON object), staged as its specs file ($TAO_SPECS_FILE) under the inputs;
    /// {config_path} in the command becomes that file's path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub specs: Option<serde_json::Value>,
    /// Partition or comma-separated list; default the user's SLURM_PARTITION.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// Slurm's placement: account, qos, constraint, nodes to use or avoid (the core's fields that
    /// every door shares, written once).
    #[serde(flatten)]
    pub placement: tao_slurm_engine::spec::Placement,
    /// Wall time in hours (default 4; the default partitions allow at most 4).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_hours: Option<f64>,
    /// Inner timeout in hours, below time_hours (default: time_hours less 0.2, or SLURM_TIMEOUT_HOURS).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_hours: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_timeout_requeues: Option<u32>,
    /// Seconds before the time limit the job is sent USR2 to save a checkpoint (0: never; default 300).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint_grace_seconds: Option<u64>,
    /// What counts as a checkpoint in the results directory (globs; `name-*/` for directories;
    /// default TAO's: *.pth, *.ckpt, *.tlt, *.hdf5, checkpoint-*/ ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checkpoint_patterns: Vec<String>,
    /// What a preemption does: `resume` (a new attempt from the newest checkpoint; default) or
    /// `cancel` (the job ends Canceled with the reason).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_preempt: Option<tao_slurm_engine::attempts::OnPreempt>,
    /// Preemptions survived before the job ends Canceled (default 10).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_preemptions: Option<u32>,
    /// The training's total time in hours: bounds the queue-length runs the job may use (instead of
    /// max_timeout_requeues).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_time_hours: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requeue: Option<bool>,
    /// Container environment NAME: value (never secrets: use secret_env).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// NAMES of secret variables (HF_TOKEN, AWS_SECRET_ACCESS_KEY...). Values are taken from the MCP
    /// server's environment or secret_env_file; never pass a secret value to any tool.
    #[serde(default)]
    pub secret_env: Vec<String>,
    /// Env file (NAME=VALUE lines) on this machine holding the secret values.
    #[serde(skip_serializing)]
    pub secret_env_file: Option<String>,
    /// Extra mounts SRC[:DST[:ro]], added to /lustre.
    #[serde(default)]
    pub mounts: Vec<String>,
    /// Drop the default /lustre mount.
    #[serde(default)]
    pub replace_default_mounts: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_workdir: Option<String>,
    #[serde(default)]
    pub no_container_mount_home: bool,
    /// Extra #SBATCH options from an allow-list (begin, dependency, mail-type, ...): name: value.
    #[serde(default)]
    pub sbatch_options: BTreeMap<String, String>,
    /// A label for the job.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Inputs by spec key: key: URI (lustre:///path; s3:// hf_model:// ngc:// for small auxiliary files).
    #[serde(default)]
    pub inputs: BTreeMap<String, String>,
    /// Dataset root on shared storage; it must hold dataset_files (default annotations.json).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dataset_root: Option<String>,
    #[serde(default)]
    pub dataset_files: Vec<String>,
    /// Use the registry image directly instead of the squashfs cache.
    #[serde(default)]
    pub no_sqsh: bool,
    /// If converting the image fails, submit with the registry image anyway.
    #[serde(default)]
    pub allow_registry_pull: bool,
    /// A sweep: this job once per variant, all variants one Slurm job array (one round trip). Fields:
    /// grid {NAME: [values]} (environment values, every combination), arg_grid {OPTION: [values]}
    /// (appended to the command as OPTION VALUE, or OPTION=VALUE when OPTION ends with =), variants
    /// [{env: {..}, args: [..]}] (explicit), max_concurrent (how many run at once). Each variant is a
    /// job of its own; the result's sweep_id stands for all of them in status, list, wait and cancel.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sweep: Option<serde_json::Value>,
    /// Run after other jobs: ["JOB[:ok|:notok|:any]"] (job ids or prefixes; ok, the default, waits for
    /// success). Kept across the other jobs' retries; a parent that fails cancels this job.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    /// A pipeline: steps [{name, after: ["STEP[:ok|:notok|:any]"], command, image, env, gpus, ...}],
    /// each a job of its own run after the steps it names (default: the previous one), the top-level
    /// fields their defaults. A step sees each earlier step's results directory as
    /// $TAO_AFTER_<STEP>_RESULTS_DIR.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<serde_json::Value>,
    /// A local directory (on the machine this server runs on) sent with the job and unpacked in its
    /// directory, where its command runs; .gitignore and .taoslurmignore rules apply, and the same
    /// content is uploaded once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// A Cosmos-RL job: {config: "rl.toml" (a path on this machine) or config_text: "...",
    /// commands: {controller, policy, rollout} (argv each)}: the three roles in one allocation,
    /// sized by its config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cosmos_rl: Option<serde_json::Value>,
    /// How the job's GPUs are watched: {sample_secs, idle_percent, idle_secs, hang_secs, idle_action:
    /// notify|cancel, hang_action: notify|cancel|restart}; unset fields: the settings'. A hung
    /// training with hang_action restart resumes from its newest checkpoint without the hung nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_watch: Option<tao_slurm_engine::gpu::GpuWatchSpec>,
    /// Webhooks (http or https URLs) told of the job's state changes (started, finished, failed,
    /// retried, ...); a background monitor is started to send them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notify: Vec<String>,
    /// Job file (TOML) on this machine; the fields given here override it.
    #[serde(skip_serializing)]
    pub spec_file: Option<String>,
    /// Check everything with the cluster and return the batch script, without submitting.
    #[serde(default)]
    #[serde(skip_serializing)]
    pub dry_run: bool,
    /// Start a background monitor that performs retries even when nobody calls status or wait.
    #[serde(default)]
    #[serde(skip_serializing)]
    pub monitor: bool,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatusArgs {
    /// Job ids (or unambiguous prefixes). Empty or absent: every active job.
    #[serde(default)]
    pub job_ids: Vec<String>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitArgs {
    /// Jobs to wait for. Empty or absent: every active job.
    #[serde(default)]
    pub job_ids: Vec<String>,
    /// Seconds to block at most (1 to 300, default 50).
    pub timeout_secs: Option<u64>,
    /// The cursor of the previous wait or events result: changes recorded after it return at once.
    pub cursor: Option<i64>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventsArgs {
    /// Return events after this cursor (default 0: from the beginning).
    #[serde(default)]
    pub cursor: i64,
    /// Only these jobs (default: all).
    #[serde(default)]
    pub job_ids: Vec<String>,
    /// At most this many events (1 to 500, default 100).
    pub limit: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StreamChoice {
    Stdout,
    Stderr,
    #[default]
    Both,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LogsArgs {
    pub job_id: String,
    /// stdout (main.out), stderr (main.err) or both (default).
    #[serde(default)]
    pub stream: StreamChoice,
    /// Last N lines of each file (1 to 2000, default 100). Ignored with offset.
    pub tail_lines: Option<u32>,
    /// Read from this byte offset instead (needs stream stdout or stderr); the result gives next_offset.
    pub offset: Option<u64>,
    /// Most bytes returned per stream (1 to 65536, default 16384).
    pub max_bytes: Option<u64>,
    /// Attempt number (1 = the first Slurm job; default the current one).
    pub attempt: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelArgs {
    /// Jobs to cancel (ids or unambiguous prefixes).
    pub job_ids: Vec<String>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    /// Only the jobs of this sweep or pipeline (its id or a prefix).
    pub sweep_id: Option<String>,
    /// Only jobs that are not terminal.
    #[serde(default)]
    pub active_only: bool,
    /// Only jobs in this status: Pending, Running, Complete, Error, Canceled, Paused... (TAO's Done is
    /// Complete).
    pub status: Option<String>,
    /// Only jobs submitted within this long: 30m, 2h, 7d.
    pub since: Option<String>,
    /// At most this many, newest first (1 to 500, default 50).
    pub limit: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExplainArgs {
    pub job_id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImageImportArgs {
    /// Registry image to convert into the cluster's squashfs cache.
    pub image: String,
    /// Convert again even if cached.
    #[serde(default)]
    pub force: bool,
}

/// The input schema of `T`, for a tool definition.
pub fn schema<T: JsonSchema + 'static>() -> std::sync::Arc<serde_json::Map<String, serde_json::Value>> {
    rmcp::handler::server::common::schema_for_input::<T>()
        .unwrap_or_else(|e| panic!("input schema of {}: {e}", std::any::type_name::<T>()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn bad_arguments_name_their_field_and_what_it_takes() {
        let e = parse::<SubmitArgs>(obj(json!({"image": "x", "gpus": "eight"}))).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("gpus"));
        assert!(e.message.contains("expected a whole number >= 0"), "{}", e.message);

        let e = parse::<SubmitArgs>(obj(json!({"image": "x", "gpu": 8}))).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("gpu"));
        assert!(e.message.contains("expected one of") && e.message.contains("`gpus`"), "{}", e.message);

        let e = parse::<LogsArgs>(obj(json!({}))).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("job_id"));

        let e = parse::<LogsArgs>(obj(json!({"job_id": "a", "stream": "out"}))).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("stream"));
        assert!(e.message.contains("`stdout`, `stderr`, `both`"), "{}", e.message);

        let e = parse::<SubmitArgs>(obj(json!({"env": {"A": 1}}))).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("env.A"));

        // The core's placement fields are arguments of their own, and a name beside them that no
        // field has is refused though serde cannot refuse it in a struct that flattens another.
        let args = parse::<SubmitArgs>(obj(json!({"image": "x", "qos": "high", "exclude": "n1"}))).unwrap();
        assert_eq!((args.placement.qos.as_deref(), args.placement.exclude.as_deref()), (Some("high"), Some("n1")));
        let e = parse::<SubmitArgs>(obj(json!({"image": "x", "qoss": "high"}))).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("qoss"));
        assert!(e.message.contains("expected one of") && e.message.contains("`qos`"), "{}", e.message);
        let e = parse::<SubmitArgs>(obj(json!({"image": "x", "qos": 3}))).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("qos"), "{}", e.message);
    }

    #[test]
    fn ranges_name_the_limits() {
        assert_eq!(check_range("timeout_secs", 50u64, 1, WAIT_MAX_SECS).unwrap(), 50);
        let e = check_range("timeout_secs", 900u64, 1, WAIT_MAX_SECS).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("timeout_secs"));
        assert!(e.message.contains("allowed 1 to 300"), "{}", e.message);
    }

    #[test]
    fn schemas_forbid_unknown_fields_and_list_required_ones() {
        let s = schema::<LogsArgs>();
        assert_eq!(s["additionalProperties"], json!(false));
        assert_eq!(s["required"], json!(["job_id"]));
        let submit = schema::<SubmitArgs>();
        assert!(submit["properties"].as_object().unwrap().contains_key("secret_env"));
        assert!(
            submit["properties"].as_object().unwrap().contains_key("qos"),
            "the placement is flattened: {submit:?}"
        );
        assert_eq!(submit["additionalProperties"], json!(false));
    }
}
