//! Where a job's files live on shared storage, and the resources it asks Slurm for: the parts of a
//! plan that the Cosmos-RL split builds on too (so it needs no plan to build them).

use serde::{Deserialize, Serialize};

pub const DEFAULT_CPUS_PER_TASK: u32 = 16;
pub const DEFAULT_GPUS: u32 = 4;
/// The most CPUs per task when SLURM_MAX_CPUS_PER_TASK does not say (the TAO SDK's cap).
pub const DEFAULT_MAX_CPUS_PER_TASK: u32 = 128;

/// The container mount every job has unless it replaces it (SLURM_CONTAINER_MOUNTS), when the base
/// directory lies below it (the TAO SDK's default).
pub const DEFAULT_MOUNT: &str = "/lustre";

/// The mounts a job has when SLURM_CONTAINER_MOUNTS is not set: `/lustre` when the base directory is
/// on it, else none of its own (Pyxis ends a step whose mount source does not exist, and a cluster
/// without /lustre would fail every job); the base directory is mounted in any case ([`covered`]).
pub fn default_mounts(base: &str) -> Vec<String> {
    if covered(base, &[DEFAULT_MOUNT.to_string()]) {
        vec![DEFAULT_MOUNT.to_string()]
    } else {
        Vec::new()
    }
}

/// Whether one of `mounts` (`SRC[:DST[:FLAGS]]`) shows `path` inside the container at its own path,
/// as the job's files must be (results, specs and logs are named by their cluster paths).
pub fn covered(path: &str, mounts: &[String]) -> bool {
    mounts.iter().any(|m| {
        let (src, dst) = mount_ends(m);
        let (src, dst) = (src.trim_end_matches('/'), dst.trim_end_matches('/'));
        src == dst && (path == src || path.starts_with(&format!("{src}/")) || src.is_empty())
    })
}

/// A mount's source and where it shows in the container (`SRC[:DST[:FLAGS]]`; DST defaults to SRC).
pub fn mount_ends(mount: &str) -> (&str, &str) {
    let mut parts = mount.split(':');
    let src = parts.next().unwrap_or_default();
    (src, parts.next().unwrap_or(src))
}

/// What tao-slurm's batch script keeps in a job's results directory beside the job's own files (the
/// attempts and the timeout-requeue counter): listings and whole-directory downloads leave them out.
pub const BOOKKEEPING: [&str; 2] = [BOOKKEEPING_DIR, TIMEOUT_REQUEUES_FILE];
/// The directory of the attempts' record (`attempts`).
pub const BOOKKEEPING_DIR: &str = ".tao-slurm";
/// The count of requeues after the inner timeout.
pub const TIMEOUT_REQUEUES_FILE: &str = ".timeout_requeues";
/// In [`BOOKKEEPING_DIR`]: one line per start of the batch script, `<unix time> <Slurm job id>
/// <restart count> <cause> <checkpoint or ->` (cause `-` on a Slurm job's first start).
pub const STARTS_FILE: &str = "attempts";
/// In [`BOOKKEEPING_DIR`]: why the batch script requeued its own job (`timeout`), read and removed
/// by the next start; a restart without it was Slurm's own requeue (a preemption).
pub const REQUEUE_CAUSE_FILE: &str = "requeue-cause";

/// Where a job's files live on shared storage (contract §2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    /// The base directory on shared storage (SLURM_BASE_RESULTS_DIR) that holds every job's files.
    /// Stored plans and the contract's JSON call it `job_dir`.
    #[serde(rename = "job_dir")]
    pub base_dir: String,
    pub results_root: String,
    pub job_id: String,
    pub job_name: String,
}

impl Layout {
    pub fn new(base: &str, job_id: &str) -> Layout {
        Layout {
            base_dir: base.to_string(),
            results_root: format!("{base}/results"),
            job_id: job_id.to_string(),
            job_name: slurm_job_name(job_id),
        }
    }
    pub fn env_file(&self) -> String {
        format!("{}/env/{}.json", self.base_dir, self.job_id)
    }
    pub fn meta_file(&self) -> String {
        format!("{}/meta/{}.json", self.base_dir, self.job_id)
    }
    pub fn script_file(&self) -> String {
        format!("{}/sbatch/job_{}.sbatch", self.base_dir, self.job_id)
    }
    pub fn logs_root(&self) -> String {
        format!("{}/slurm-logs", self.base_dir)
    }
    /// The log directory of one attempt: its Slurm job name and id (`%x-%j`).
    pub fn log_dir(&self, slurm_job_name: &str, slurm_job_id: &str) -> String {
        format!("{}/{}-{}", self.logs_root(), slurm_job_name, slurm_job_id)
    }
    /// Where Slurm itself opens an attempt's output (`ext` "out") or error ("err"): a file of the logs
    /// root (`.%x-%j.out`), a directory there before any job, so that a job never waits for its log
    /// directory (no hold and release: one RPC per submission). The batch script's first step names
    /// the two files `main.out` and `main.err` of [`Layout::log_dir`] (hard links: the same files).
    pub fn slurm_output(&self, slurm_job_name: &str, slurm_job_id: &str, ext: &str) -> String {
        format!("{}/.{slurm_job_name}-{slurm_job_id}.{ext}", self.logs_root())
    }
    /// Secret values for the job, mode 600 in a directory of mode 700; deleted once the job is terminal.
    pub fn secrets_dir(&self) -> String {
        format!("{}/secrets/{}", self.base_dir, self.job_id)
    }
    /// The staged specs file, where `TAO_SPECS_FILE` points: the job's specs with the inputs resolved.
    pub fn specs_file(&self) -> String {
        format!("{}/specs/{}.json", self.base_dir, self.job_id)
    }
    /// A long shell command, staged beside the specs and sourced by the container
    /// (`script::STAGE_COMMAND_BYTES`).
    pub fn command_file(&self) -> String {
        format!("{}/specs/{}.command.sh", self.base_dir, self.job_id)
    }
    pub fn secrets_file(&self) -> String {
        format!("{}/env", self.secrets_dir())
    }
    pub fn results_dir(&self) -> String {
        format!("{}/{}", self.results_root, self.job_id)
    }
    pub fn status_json(&self) -> String {
        format!("{}/status.json", self.results_dir())
    }
}

/// In a job's [`BOOKKEEPING_DIR`]: `up-<Slurm job id>-<node>-<container>`, made by every task of a
/// job step once Pyxis has started the step's container on its node. A step that joins the container
/// by name (`exec`, `shell`, `tensorboard`) waits for it: Pyxis creates the container's filesystem
/// after Slurm says RUNNING, and a join while it does reuses the half-made directory and breaks the
/// job's own step (its `unsquashfs` then fails: "File exists").
pub fn container_up_file(results_dir: &str, slurm_job_id: &str, node: &str, container: &str) -> String {
    format!("{results_dir}/{BOOKKEEPING_DIR}/up-{slurm_job_id}-{node}-{container}")
}

/// `tao-job-<id>`, sanitised to `[A-Za-z0-9_.-]` and at most 120 characters.
pub fn slurm_job_name(job_id: &str) -> String {
    let clean: String = format!("tao-job-{job_id}")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || "_.-".contains(c) { c } else { '_' })
        .collect();
    clean.chars().take(120).collect()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resources {
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub exclusive: bool,
    pub cpus_per_task: u32,
}
