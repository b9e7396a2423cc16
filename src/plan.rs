//! Resolve a [`JobSpec`] against the settings into a [`Plan`]: every resource decided, every value
//! validated, every remote path known. Pure and offline: `render` prints a plan without a network.

use crate::config::{Settings, DEFAULT_PARTITIONS};
use crate::slurm::hours_to_minutes;
use crate::spec::{check_env_name, check_slurm_word, check_text, ImageRef, JobSpec, SpecError};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub const DEFAULT_GPUS: u32 = 4;
pub const DEFAULT_CPUS_PER_TASK: u32 = 16;
pub const DEFAULT_MOUNT: &str = "/lustre";
pub const DEFAULT_MAX_TIMEOUT_REQUEUES: u32 = 3;
/// Hours allowed on the packaged default partitions.
pub const DEFAULT_PARTITION_MAX_HOURS: f64 = 4.0;
pub const MASTER_PORT: u16 = 29500;

/// Variables the script owns inside the task; users may not set them.
pub const RENDEZVOUS_VARS: &[&str] = &[
    "WORLD_SIZE",
    "NODE_RANK",
    "NUM_GPU_PER_NODE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "NNODES",
    "NPROC_PER_NODE",
    "RANK",
    "LOCAL_RANK",
    "GROUP_RANK",
];

/// Where a job's files live on shared storage (contract §2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    pub job_dir: String,
    pub results_root: String,
    pub job_id: String,
    pub job_name: String,
}

impl Layout {
    pub fn new(base: &str, job_id: &str) -> Layout {
        Layout {
            job_dir: base.to_string(),
            results_root: format!("{base}/results"),
            job_id: job_id.to_string(),
            job_name: slurm_job_name(job_id),
        }
    }
    pub fn spec_file(&self) -> String {
        format!("{}/specs/{}.json", self.job_dir, self.job_id)
    }
    pub fn env_file(&self) -> String {
        format!("{}/env/{}.json", self.job_dir, self.job_id)
    }
    pub fn meta_file(&self) -> String {
        format!("{}/meta/{}.json", self.job_dir, self.job_id)
    }
    pub fn script_file(&self) -> String {
        format!("{}/sbatch/job_{}.sbatch", self.job_dir, self.job_id)
    }
    pub fn logs_root(&self) -> String {
        format!("{}/slurm-logs", self.job_dir)
    }
    /// The log directory of one Slurm job (one attempt).
    pub fn log_dir(&self, slurm_job_id: &str) -> String {
        format!("{}/{}-{}", self.logs_root(), self.job_name, slurm_job_id)
    }
    pub fn results_dir(&self) -> String {
        format!("{}/{}", self.results_root, self.job_id)
    }
    pub fn status_json(&self) -> String {
        format!("{}/status.json", self.results_dir())
    }
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub layout: Layout,
    pub image: ImageRef,
    /// The argv run inside the container.
    pub command: Vec<String>,
    pub resources: Resources,
    pub partition: String,
    pub account: Option<String>,
    pub time_minutes: u64,
    pub timeout_minutes: u64,
    pub requeue: bool,
    pub max_timeout_requeues: u32,
    pub env: Vec<(String, String)>,
    pub mounts: Vec<String>,
    pub container_workdir: Option<String>,
    pub mount_home: bool,
    pub name: Option<String>,
}

/// Decide nodes × GPUs per node. `gpus` is always per node; `total_gpus` packs into full nodes and must
/// fill them evenly.
pub fn resolve_resources(spec: &JobSpec, max_per_node: u32) -> Result<Resources, SpecError> {
    if spec.gpus.is_some() && spec.total_gpus.is_some() {
        return Err(SpecError::new("total_gpus", "give either --gpus (per node) or --total-gpus, not both"));
    }
    let (nodes, gpus_per_node) = match spec.total_gpus {
        Some(total) => {
            if total == 0 {
                return Err(SpecError::new("total_gpus", "must be at least 1; use --gpus 0 for a CPU-only job"));
            }
            // Up to one node's worth goes on one node; more must fill whole nodes.
            let nodes = total.div_ceil(max_per_node);
            if nodes > 1 && total % max_per_node != 0 {
                let suggestions: Vec<String> =
                    [total - total % max_per_node, (total / max_per_node + 1) * max_per_node]
                        .into_iter()
                        .filter(|v| *v > 0)
                        .map(|v| v.to_string())
                        .collect();
                return Err(SpecError::new(
                    "total_gpus",
                    format!(
                        "{total} GPUs do not fill nodes of {max_per_node} evenly; use a total up to {max_per_node} or a multiple of {max_per_node} (for example {})",
                        suggestions.join(" or ")
                    ),
                ));
            }
            if let Some(n) = spec.nodes {
                if n != nodes {
                    return Err(SpecError::new(
                        "nodes",
                        format!(
                            "--total-gpus {total} needs {nodes} node(s), but --nodes {n} was given; drop one of them"
                        ),
                    ));
                }
            }
            (nodes, total / nodes)
        }
        None => (spec.nodes.unwrap_or(1), spec.gpus.unwrap_or(DEFAULT_GPUS)),
    };
    if nodes == 0 {
        return Err(SpecError::new("nodes", "must be at least 1"));
    }
    if gpus_per_node > max_per_node {
        return Err(SpecError::new(
            "gpus",
            format!("{gpus_per_node} GPUs per node is more than a node has ({max_per_node}); --gpus is per node, use --nodes or --total-gpus for more"),
        ));
    }
    let cpus_per_task = spec.cpus_per_task.unwrap_or(DEFAULT_CPUS_PER_TASK);
    if cpus_per_task == 0 {
        return Err(SpecError::new("cpus_per_task", "must be at least 1"));
    }
    Ok(Resources { nodes, gpus_per_node, exclusive: gpus_per_node > 0 && gpus_per_node == max_per_node, cpus_per_task })
}

fn check_hours(field: &str, hours: f64) -> Result<(), SpecError> {
    if hours.is_finite() && hours > 0.0 && hours <= 24.0 * 365.0 {
        Ok(())
    } else {
        Err(SpecError::new(field, format!("{hours} is not a positive number of hours")))
    }
}

fn check_mount(mount: &str) -> Result<(), SpecError> {
    check_text("mounts", mount)?;
    let parts: Vec<&str> = mount.split(':').collect();
    let ok_path = |p: &str| p.starts_with('/') && !p.contains(',') && !p.chars().any(char::is_whitespace);
    let ok = match parts.as_slice() {
        [src] => ok_path(src),
        [src, dst] => ok_path(src) && ok_path(dst),
        [src, dst, flags] => {
            ok_path(src)
                && ok_path(dst)
                && flags.split('+').all(|f| matches!(f, "ro" | "rw" | "x-create=dir" | "x-create=file"))
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(SpecError::new(
            "mounts",
            format!("{mount:?} is not SRC[:DST[:ro|rw]] with absolute paths (no commas or spaces)"),
        ))
    }
}

/// Resolve a spec into a plan with a fresh platform job id.
pub fn resolve(spec: &JobSpec, settings: &Settings) -> Result<Plan, SpecError> {
    resolve_with_id(spec, settings, &Uuid::new_v4().to_string())
}

pub fn resolve_with_id(spec: &JobSpec, settings: &Settings, job_id: &str) -> Result<Plan, SpecError> {
    if spec.image.trim().is_empty() {
        return Err(SpecError::new("image", "is required (--image IMG)"));
    }
    let image = ImageRef::parse(spec.image.trim()).map_err(|m| SpecError::new("image", m))?;
    if spec.command.is_empty() {
        return Err(SpecError::new("command", "is required: give it after `--` (for example `-- python train.py`)"));
    }
    for word in &spec.command {
        if word.contains('\0') {
            return Err(SpecError::new("command", "contains a NUL byte"));
        }
    }
    if spec.shell && spec.command.len() != 1 {
        return Err(SpecError::new("command", "with --shell, give the command as one string"));
    }
    let command = if spec.shell {
        vec!["bash".to_string(), "-c".to_string(), spec.command[0].clone()]
    } else {
        spec.command.clone()
    };
    let resources = resolve_resources(spec, settings.max_gpus_per_node)?;

    let partition = spec.partition.clone().unwrap_or_else(|| settings.partition.clone());
    for p in partition.split(',') {
        check_slurm_word("partition", p)?;
    }
    let account = spec.account.clone().or_else(|| settings.account.clone());
    if let Some(a) = &account {
        check_slurm_word("account", a)?;
    }

    let time_hours = spec.time_hours.unwrap_or(settings.time_hours);
    check_hours("time_hours", time_hours)?;
    let timeout_hours = match (spec.timeout_hours, spec.time_hours) {
        (Some(t), _) => t,
        // A shorter wall time given alone keeps the inner timeout just under it.
        (None, Some(wall)) if settings.timeout_hours >= wall => wall * 0.95,
        (None, _) => settings.timeout_hours,
    };
    check_hours("timeout_hours", timeout_hours)?;
    let time_minutes = hours_to_minutes(time_hours);
    let timeout_minutes = hours_to_minutes(timeout_hours).min(time_minutes.saturating_sub(1)).max(1);
    if timeout_hours >= time_hours || time_minutes < 2 {
        return Err(SpecError::new(
            "timeout_hours",
            format!("the inner timeout ({timeout_hours} h) must be shorter than the wall time ({time_hours} h) so the job can requeue itself before Slurm kills it"),
        ));
    }
    let on_default_partitions = partition.split(',').all(|p| DEFAULT_PARTITIONS.split(',').any(|d| d == p));
    if on_default_partitions && time_hours > DEFAULT_PARTITION_MAX_HOURS {
        return Err(SpecError::new(
            "time_hours",
            format!("{time_hours} h is more than the {DEFAULT_PARTITION_MAX_HOURS} h that the partitions {partition} allow; ask for another partition (--partition) with a longer MaxTime, or at most {DEFAULT_PARTITION_MAX_HOURS} h"),
        ));
    }

    let mut env = Vec::new();
    for (name, value) in &spec.env {
        check_env_name("env", name)?;
        check_text("env", value)?;
        if RENDEZVOUS_VARS.contains(&name.as_str()) || name.starts_with("SLURM_") || name == "TAO_API_RESULTS_DIR" {
            return Err(SpecError::new("env", format!("{name} is set by tao-slurm itself and cannot be overridden")));
        }
        env.retain(|(n, _): &(String, String)| n != name);
        env.push((name.clone(), value.clone()));
    }

    let mut mounts = if spec.replace_default_mounts { Vec::new() } else { vec![DEFAULT_MOUNT.to_string()] };
    for m in &spec.mounts {
        check_mount(m)?;
        if !mounts.contains(m) {
            mounts.push(m.clone());
        }
    }
    if let Some(w) = &spec.container_workdir {
        check_text("container_workdir", w)?;
        if !w.starts_with('/') || w.contains(',') {
            return Err(SpecError::new("container_workdir", "must be an absolute path without commas"));
        }
    }
    if let Some(n) = &spec.name {
        check_text("name", n)?;
    }
    let base = settings.base_dir();
    // The base directory appears in #SBATCH lines, which sbatch reads without a shell: plain characters only.
    let plain = |c: char| c.is_ascii_alphanumeric() || "_./+-".contains(c);
    if !base.starts_with('/') || !base.chars().all(plain) || base.contains("/../") {
        return Err(SpecError::new(
            "SLURM_BASE_RESULTS_DIR",
            format!("{base:?} must be an absolute path on shared storage made of letters, digits and _ . / + -"),
        ));
    }

    Ok(Plan {
        layout: Layout::new(&base, job_id),
        image,
        command,
        resources,
        partition,
        account,
        time_minutes,
        timeout_minutes,
        requeue: spec.requeue.unwrap_or(settings.use_requeue),
        max_timeout_requeues: spec.max_timeout_requeues.unwrap_or(DEFAULT_MAX_TIMEOUT_REQUEUES),
        env,
        mounts,
        container_workdir: spec.container_workdir.clone(),
        mount_home: !spec.no_container_mount_home,
        name: spec.name.clone(),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::config::SettingSources;
    use std::collections::HashMap;

    pub fn settings() -> Settings {
        let env = [
            ("SLURM_USER", "alice"),
            ("SLURM_HOSTNAME", "login"),
            ("HOME", "/home/alice"),
            ("SLURM_BASE_RESULTS_DIR", "/lustre/alice"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        Settings::from_sources(&SettingSources { flags: HashMap::new(), env, file: HashMap::new() }).unwrap()
    }

    pub fn spec() -> JobSpec {
        JobSpec { image: "ubuntu:22.04".into(), command: vec!["true".into()], ..JobSpec::default() }
    }

    /// (--gpus, --total-gpus, --nodes)
    type GpuFlags = (Option<u32>, Option<u32>, Option<u32>);

    #[test]
    fn resources_table() {
        // (gpus, total, nodes) -> (nodes, per node, exclusive)
        let cases: &[(GpuFlags, (u32, u32, bool))] = &[
            ((None, None, None), (1, 4, false)),
            ((Some(1), None, None), (1, 1, false)),
            ((Some(8), None, None), (1, 8, true)),
            ((Some(8), None, Some(2)), (2, 8, true)),
            ((Some(12 - 4), None, Some(3)), (3, 8, true)),
            ((Some(0), None, None), (1, 0, false)),
            ((None, Some(16), None), (2, 8, true)),
            ((None, Some(4), None), (1, 4, false)),
            ((None, Some(8), None), (1, 8, true)),
            ((None, Some(32), Some(4)), (4, 8, true)),
        ];
        for ((gpus, total, nodes), want) in cases {
            let spec = JobSpec { gpus: *gpus, total_gpus: *total, nodes: *nodes, ..spec() };
            let r = resolve_resources(&spec, 8).unwrap();
            assert_eq!((r.nodes, r.gpus_per_node, r.exclusive), *want, "{gpus:?} {total:?} {nodes:?}");
        }
    }

    #[test]
    fn resources_rejected() {
        let cases: &[(GpuFlags, &str)] = &[
            ((None, Some(12), None), "total_gpus"),
            ((None, Some(0), None), "total_gpus"),
            ((Some(9), None, None), "gpus"),
            ((Some(4), Some(8), None), "total_gpus"),
            ((None, Some(16), Some(3)), "nodes"),
            ((Some(1), None, Some(0)), "nodes"),
        ];
        for ((gpus, total, nodes), field) in cases {
            let spec = JobSpec { gpus: *gpus, total_gpus: *total, nodes: *nodes, ..spec() };
            let err = resolve_resources(&spec, 8).unwrap_err();
            assert_eq!(err.field, *field, "{gpus:?} {total:?} {nodes:?}: {err}");
        }
        let err = resolve_resources(&JobSpec { total_gpus: Some(12), ..spec() }, 8).unwrap_err();
        assert!(err.message.contains("8 or 16"), "{err}");
    }

    #[test]
    fn wall_time_rules() {
        let s = settings();
        let p = resolve(&spec(), &s).unwrap();
        assert_eq!((p.time_minutes, p.timeout_minutes), (240, 228));
        let p = resolve(&JobSpec { time_hours: Some(0.5), ..spec() }, &s).unwrap();
        assert_eq!(p.time_minutes, 30);
        assert!(p.timeout_minutes < 30);
        let err = resolve(&JobSpec { time_hours: Some(5.0), ..spec() }, &s).unwrap_err();
        assert_eq!(err.field, "time_hours");
        assert!(err.message.contains("another partition"));
        let p = resolve(&JobSpec { time_hours: Some(5.0), partition: Some("long".into()), ..spec() }, &s).unwrap();
        assert_eq!(p.time_minutes, 300);
        let err = resolve(&JobSpec { time_hours: Some(2.0), timeout_hours: Some(2.0), ..spec() }, &s).unwrap_err();
        assert_eq!(err.field, "timeout_hours");
    }

    #[test]
    fn field_errors_name_the_field() {
        let s = settings();
        let cases: Vec<(JobSpec, &str)> = vec![
            (JobSpec { image: "".into(), ..spec() }, "image"),
            (JobSpec { image: "Bad Image".into(), ..spec() }, "image"),
            (JobSpec { command: vec![], ..spec() }, "command"),
            (JobSpec { partition: Some("polar\n#SBATCH --x".into()), ..spec() }, "partition"),
            (JobSpec { account: Some("$(id)".into()), ..spec() }, "account"),
            (JobSpec { env: vec![("1A".into(), "x".into())], ..spec() }, "env"),
            (JobSpec { env: vec![("A".into(), "x\ny".into())], ..spec() }, "env"),
            (JobSpec { env: vec![("NODE_RANK".into(), "3".into())], ..spec() }, "env"),
            (JobSpec { mounts: vec!["relative:/x".into()], ..spec() }, "mounts"),
            (JobSpec { mounts: vec!["/a,/b".into()], ..spec() }, "mounts"),
            (JobSpec { container_workdir: Some("rel".into()), ..spec() }, "container_workdir"),
        ];
        for (spec, field) in cases {
            let err = resolve(&spec, &s).unwrap_err();
            assert_eq!(err.field, field, "{err}");
        }
    }

    #[test]
    fn mounts_add_to_the_default_unless_replaced() {
        let s = settings();
        let p = resolve(&JobSpec { mounts: vec!["/data:/data:ro".into()], ..spec() }, &s).unwrap();
        assert_eq!(p.mounts, vec!["/lustre", "/data:/data:ro"]);
        let p = resolve(&JobSpec { mounts: vec!["/data".into()], replace_default_mounts: true, ..spec() }, &s).unwrap();
        assert_eq!(p.mounts, vec!["/data"]);
    }

    #[test]
    fn job_names_are_sanitised_and_bounded() {
        assert_eq!(slurm_job_name("abc-1"), "tao-job-abc-1");
        assert_eq!(slurm_job_name("a b/c"), "tao-job-a_b_c");
        assert_eq!(slurm_job_name(&"x".repeat(300)).len(), 120);
    }
}
