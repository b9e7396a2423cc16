//! What a user asks for: [`JobSpec`], read from flags and/or a job file (`--spec job.toml`), and the
//! field-by-field validation that runs before any remote call.

mod cosmos;
mod dataset;
pub mod doors;
mod image;
mod placement;
mod secret;
mod sweep;
mod validate;

pub use cosmos::{CosmosRlSpec, RoleCommands, MAX_CONFIG_BYTES};
pub use dataset::{dataset_warning, parse_input, InputLocation, AUX_SCHEMES, LOCAL_PATH_MESSAGE};
pub use image::ImageRef;
pub use placement::{placement_field_error, placement_fields, Placement};
pub use secret::{Secret, SecretValues};
pub use sweep::{
    parse_after, step_results_var, DependKind, PipelineStep, StepSpec, SweepSpec, Variant, VariantSpec,
    MAX_SWEEP_VARIANTS, SWEEP_VARS,
};
pub use validate::{check_env_name, check_slurm_word, check_text, check_user_env_name, check_with, SpecError};

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A job as the user describes it. Every field but `image` and `command` is optional and falls back to
/// the settings, then to the contract's defaults, when the plan is resolved. Secret *values* are never
/// part of a spec: only the names in `secret_env`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JobSpec {
    pub image: String,
    /// The command as argv; with `shell = true` a single string run by `bash -c`.
    pub command: Vec<String>,
    pub shell: bool,
    /// GPUs on every node (always per node).
    pub gpus: Option<u32>,
    /// Total GPUs, packed into full nodes (alternative to `gpus`).
    pub total_gpus: Option<u32>,
    pub nodes: Option<u32>,
    pub cpus_per_task: Option<u32>,
    /// Whole nodes to this job (`#SBATCH --exclusive`); by default only when it takes all of a node's GPUs.
    pub exclusive: Option<bool>,
    /// Memory per node, as Slurm's `--mem` takes it (`64G`, `500M`, `0` for all).
    pub memory: Option<String>,
    pub partition: Option<String>,
    pub account: Option<String>,
    pub qos: Option<String>,
    pub constraint: Option<String>,
    /// Nodes never to run on (`node[1-3],node7`).
    pub exclude: Option<String>,
    /// The only nodes to run on (`node[1-2]`; Slurm's `--nodelist`).
    pub nodelist: Option<String>,
    pub reservation: Option<String>,
    pub time_hours: Option<f64>,
    pub timeout_hours: Option<f64>,
    pub requeue: Option<bool>,
    /// Variables exported to the container.
    pub env: BTreeMap<String, String>,
    /// Names of variables whose values come from the submitting environment or a secrets file.
    pub secret_env: Vec<String>,
    /// Mounts added to the default `/lustre` (`src[:dst[:flags]]`).
    pub mounts: Vec<String>,
    /// Replace the default mount instead of adding to it.
    pub replace_default_mounts: bool,
    pub container_workdir: Option<String>,
    /// A local directory to send with the job (`workdir = "."`): packed, uploaded once per content
    /// and unpacked into the job's directory, where the command then runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// Where the client uploaded `workdir`'s archive on shared storage (set by the client, not by
    /// people: the job unpacks it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workdir_archive: Option<String>,
    pub no_container_mount_home: bool,
    /// Extra `#SBATCH` options, from an allow-list of option names (`mail-type = "END"`).
    pub sbatch_options: BTreeMap<String, String>,
    /// A human label; the Slurm job name is always derived from the platform id.
    pub name: Option<String>,
    /// Timeout requeues allowed before the job ends as timed out (default 3).
    pub max_timeout_requeues: Option<u32>,
    /// Seconds before the time limit the step is sent USR2 to save a checkpoint (0: never; default
    /// TAO_SLURM_CHECKPOINT_GRACE).
    pub checkpoint_grace_seconds: Option<u64>,
    /// What counts as a checkpoint in the results directory (globs; `name/` for directories).
    pub checkpoint_patterns: Vec<String>,
    /// What a preemption does: `resume` (a new attempt from the newest checkpoint; default
    /// TAO_SLURM_ON_PREEMPT) or `cancel` (the job ends Canceled with the reason).
    pub on_preempt: Option<crate::attempts::OnPreempt>,
    /// Preemptions survived before the job ends Canceled (default TAO_SLURM_MAX_PREEMPTIONS).
    pub max_preemptions: Option<u32>,
    /// The training's total time in hours: bounds the queue-length runs (timeout requeues) the job
    /// may use (`attempts::queue_runs`), in place of `max_timeout_requeues`.
    pub total_time_hours: Option<f64>,
    /// Inputs by spec key (direct spec-key mode), e.g. `custom.train_dataset.annotation_path`.
    pub inputs: BTreeMap<String, String>,
    /// A dataset root (root mode): it must hold `dataset_files`.
    pub dataset_root: Option<String>,
    /// Files the dataset root must hold (default `annotations.json`).
    pub dataset_files: Vec<String>,
    /// Use the registry image directly, without the squashfs cache.
    pub no_sqsh: bool,
    /// If the conversion fails, submit with the registry image anyway.
    pub allow_registry_pull: bool,
    /// The job's specs (a JSON object), staged as its specs file (`$TAO_SPECS_FILE`) with the inputs
    /// laid over them; `{config_path}` in the command becomes that file's path (the TAO SDK's config mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub specs: Option<serde_json::Value>,
    /// A Cosmos-RL job: controller, policy and rollout roles in one allocation, sized by its config.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cosmos_rl: Option<CosmosRlSpec>,
    /// A sweep: this job once per variant, submitted as one Slurm job array.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sweep: Option<SweepSpec>,
    /// Jobs this one runs after, `JOB[:ok|:notok|:any]` (platform job ids or prefixes).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    /// A pipeline: named steps, each after earlier ones.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepSpec>,
    /// How the job's GPUs are watched: sampling, idle and hang thresholds, and what each does (each
    /// field unset: TAO_SLURM_GPU_*).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_watch: Option<crate::gpu::GpuWatchSpec>,
    /// Webhooks told of the job's state changes (`--notify URL`; see `notify::Webhook`). Never
    /// serialised: their URLs carry tokens, and the spec is staged on shared storage.
    #[serde(skip_serializing)]
    pub notify: Vec<String>,
}

impl JobSpec {
    pub fn from_toml(text: &str) -> Result<JobSpec, SpecError> {
        toml::from_str(text).map_err(|e| SpecError::new("spec", e.message().to_string()))
    }

    /// Lay `over` on top of `self`: every field `over` sets wins (flags override the job file).
    pub fn overlay(mut self, over: JobSpec) -> JobSpec {
        macro_rules! take {
            ($($f:ident),*) => { $( if over.$f.is_some() { self.$f = over.$f; } )* };
        }
        take!(gpus, total_gpus, nodes, cpus_per_task, memory, partition, account, qos, constraint, exclude, nodelist);
        take!(
            reservation,
            time_hours,
            timeout_hours,
            requeue,
            container_workdir,
            workdir,
            name,
            max_timeout_requeues,
            exclusive,
            checkpoint_grace_seconds,
            on_preempt,
            max_preemptions,
            total_time_hours,
            gpu_watch
        );
        if !over.checkpoint_patterns.is_empty() {
            self.checkpoint_patterns = over.checkpoint_patterns;
        }
        if !over.image.is_empty() {
            self.image = over.image;
        }
        if !over.command.is_empty() {
            self.command = over.command;
            self.shell = over.shell;
        }
        self.shell |= over.shell;
        self.env.extend(over.env);
        for s in over.secret_env {
            if !self.secret_env.contains(&s) {
                self.secret_env.push(s);
            }
        }
        self.mounts.extend(over.mounts);
        self.replace_default_mounts |= over.replace_default_mounts;
        self.no_container_mount_home |= over.no_container_mount_home;
        self.sbatch_options.extend(over.sbatch_options);
        self.inputs.extend(over.inputs);
        self.notify.extend(over.notify);
        if over.specs.is_some() {
            self.specs = over.specs;
        }
        self.no_sqsh |= over.no_sqsh;
        self.allow_registry_pull |= over.allow_registry_pull;
        if over.dataset_root.is_some() {
            self.dataset_root = over.dataset_root;
        }
        if !over.dataset_files.is_empty() {
            self.dataset_files = over.dataset_files;
        }
        self.cosmos_rl = match (self.cosmos_rl, over.cosmos_rl) {
            (Some(file), Some(flags)) => Some(file.overlay(flags)),
            (file, flags) => flags.or(file),
        };
        self.sweep = match (self.sweep, over.sweep) {
            (Some(file), Some(flags)) => Some(file.overlay(flags)),
            (file, flags) => flags.or(file),
        };
        for a in over.after {
            if !self.after.contains(&a) {
                self.after.push(a);
            }
        }
        if !over.steps.is_empty() {
            self.steps = over.steps;
        }
        self
    }
}

/// The largest specs document a job may carry, as compact JSON (it is staged on shared storage).
pub const MAX_SPECS_BYTES: usize = 256 * 1024;

/// Parse `NAME=VALUE` for the field `field`.
pub fn parse_pair(field: &str, text: &str) -> Result<(String, String), SpecError> {
    let (name, value) =
        text.split_once('=').ok_or_else(|| SpecError::new(field, format!("{text:?} is not NAME=VALUE")))?;
    Ok((name.to_string(), value.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_file_then_flags() {
        let file = JobSpec::from_toml(
            r#"
image = "nvcr.io/nvidia/tao/tao-toolkit:6.26.3-pyt"
command = ["python", "train.py"]
nodes = 2
gpus = 8
partition = "long"
time_hours = 10
secret_env = ["NGC_KEY"]
[env]
EXPERIMENT = "a"
[sbatch_options]
mail-type = "END"
"#,
        )
        .unwrap();
        assert_eq!(file.nodes, Some(2));
        assert_eq!(file.env["EXPERIMENT"], "a");
        let flags =
            JobSpec { nodes: Some(1), env: [("EXPERIMENT".to_string(), "b".to_string())].into(), ..JobSpec::default() };
        let merged = file.overlay(flags);
        assert_eq!(merged.nodes, Some(1), "flags win");
        assert_eq!(merged.gpus, Some(8), "the file fills what flags leave out");
        assert_eq!(merged.env["EXPERIMENT"], "b");
        assert_eq!(merged.command, vec!["python", "train.py"]);
        assert_eq!(merged.secret_env, vec!["NGC_KEY"]);
    }

    #[test]
    fn a_job_file_carries_specs_and_exclusive() {
        let spec = JobSpec::from_toml("image = \"x\"\nexclusive = true\n[specs.train]\nnum_epochs = 10\n").unwrap();
        assert_eq!(spec.specs, Some(serde_json::json!({"train": {"num_epochs": 10}})));
        assert_eq!(spec.exclusive, Some(true));
        let flags = JobSpec { specs: Some(serde_json::json!({"a": 1})), ..JobSpec::default() };
        assert_eq!(spec.overlay(flags).specs, Some(serde_json::json!({"a": 1})), "given specs replace the file's");
    }

    #[test]
    fn unknown_fields_in_a_job_file_are_rejected() {
        let err = JobSpec::from_toml("image = \"x\"\ngpu = 3\n").unwrap_err();
        assert_eq!(err.field, "spec");
        assert!(err.message.contains("gpu"), "{err}");
    }
}
