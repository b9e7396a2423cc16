//! Resolve a [`JobSpec`] against the settings into a [`Plan`]: every resource decided, every value
//! validated, every remote path known. Pure and offline: `render` prints a plan without a network.

use crate::config::{Settings, DEFAULT_PARTITIONS};
use crate::slurm::hours_to_minutes;
use crate::spec::{
    check_slurm_word, check_text, check_user_env_name, check_with, parse_input, ImageRef, InputLocation, JobSpec,
    SpecError,
};
use regex::Regex;
use serde::{Deserialize, Serialize};
use std::sync::LazyLock;

pub use crate::layout::{slurm_job_name, Layout, Resources, DEFAULT_CPUS_PER_TASK, DEFAULT_GPUS, DEFAULT_MOUNT};

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

/// Extra `#SBATCH` options a spec may add. Everything tao-slurm sets itself (nodes, gres, time,
/// output, partition, ...) is deliberately absent, and so is `--export` (it could expose secrets).
pub const ALLOWED_SBATCH_OPTIONS: &[&str] = &[
    "begin",
    "comment",
    "cores-per-socket",
    "deadline",
    "dependency",
    "distribution",
    "gpu-bind",
    "gpu-freq",
    "hint",
    "licenses",
    "mail-type",
    "mail-user",
    "mem-bind",
    "mem-per-cpu",
    "mem-per-gpu",
    "nice",
    "priority",
    "signal",
    "sockets-per-node",
    "switches",
    "threads-per-core",
    "tmp",
    "wckey",
];

// Characters each kind of value may hold. `#` is never allowed: sbatch reads it as the start of a
// comment inside an #SBATCH line.
static MEMORY: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^[0-9]{1,9}[KMGT]?$").unwrap());
static CONSTRAINT: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^[A-Za-z0-9_.,&|\[\]*:()-]{1,256}$").unwrap());
static NODE_LIST: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^[A-Za-z0-9_.,\[\]-]{1,1024}$").unwrap());
static OPTION_VALUE: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^[A-Za-z0-9_.,:=@+/%-]{1,256}$").unwrap());

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub layout: Layout,
    pub image: ImageRef,
    /// The argv run inside the container.
    pub command: Vec<String>,
    pub resources: Resources,
    pub partition: String,
    pub account: Option<String>,
    pub memory: Option<String>,
    pub qos: Option<String>,
    pub constraint: Option<String>,
    pub exclude: Option<String>,
    pub nodelist: Option<String>,
    pub reservation: Option<String>,
    pub sbatch_options: Vec<(String, String)>,
    pub time_minutes: u64,
    /// The inner `timeout`, in seconds (sub-minute values are allowed for short test jobs).
    pub timeout_seconds: u64,
    pub requeue: bool,
    pub max_timeout_requeues: u32,
    pub env: Vec<(String, String)>,
    /// Names of secret variables; their values reach the cluster only on ssh's standard input and live
    /// only in the job's mode-600 secrets file there (removed when the job ends), never in a staged file.
    pub secret_names: Vec<String>,
    pub mounts: Vec<String>,
    /// The inputs and the specs file, read-only at their own paths, after `mounts` (none in plans
    /// stored before).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_only_mounts: Vec<String>,
    pub container_workdir: Option<String>,
    /// The uploaded `--workdir` archive the job unpacks into [`Plan::workdir_dir`] (absent for jobs
    /// without one, and in plans stored before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir_archive: Option<String>,
    pub mount_home: bool,
    pub name: Option<String>,
    /// Inputs by spec key, resolved.
    pub inputs: Vec<(String, InputLocation)>,
    /// Paths on shared storage that must exist before anything is staged.
    pub required_paths: Vec<String>,
    /// Auxiliary inputs fetched inside the job, before the command starts.
    pub fetches: Vec<AuxFetch>,
    /// Largest total size of one auxiliary input, in bytes.
    pub aux_max_bytes: u64,
    pub aux_timeout_minutes: u64,
    /// A Cosmos-RL job's roles and node split (absent for other jobs, and in plans stored before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cosmos: Option<crate::cosmos::CosmosPlan>,
    /// Whether the container step runs under the inner timeout (SLURM_USE_TIMEOUT).
    #[serde(default = "yes")]
    pub use_timeout: bool,
    /// The job's own specs (a JSON object), under the inputs in the staged specs file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub specs: Option<serde_json::Value>,
    /// What counts as a checkpoint in the results directory (`crate::checkpoint`; TAO's by default).
    #[serde(default = "crate::checkpoint::default_patterns")]
    pub checkpoint_patterns: Vec<String>,
    /// Seconds before the inner timeout (and Slurm's wall limit) the step is sent USR2 to save a
    /// checkpoint; 0: no warning (plans stored before this field had none).
    #[serde(default)]
    pub checkpoint_grace_seconds: u64,
    /// What a preemption does (plans stored before this field: resume).
    #[serde(default)]
    pub on_preempt: crate::attempts::OnPreempt,
    /// Preemptions survived before the job ends Canceled.
    #[serde(default = "default_max_preemptions")]
    pub max_preemptions: u32,
    /// The training's total time, when the job stated it: `max_timeout_requeues` then comes from it
    /// (`attempts::queue_runs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_time_seconds: Option<u64>,
    /// How its GPUs are watched (`crate::gpu`); plans stored before this field sample nothing.
    #[serde(default)]
    pub gpu_watch: crate::gpu::GpuWatch,
}

fn default_max_preemptions() -> u32 {
    crate::attempts::DEFAULT_MAX_PREEMPTIONS
}

fn yes() -> bool {
    true
}

/// One auxiliary input (s3, Hugging Face, NGC) and where on shared storage it is cached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuxFetch {
    pub key: String,
    pub scheme: String,
    pub uri: String,
    /// The cache directory for this URI (one per URI, shared by the jobs that use it).
    pub dir: String,
    /// What the job sees as the input's value: the object inside `dir`, or `dir` itself.
    pub path: String,
}

/// Where an auxiliary input is cached and what the job's spec then says.
fn aux_fetch(base: &str, key: &str, scheme: &str, uri: &str) -> AuxFetch {
    use sha2::{Digest, Sha256};
    let hash: String = Sha256::digest(uri.as_bytes()).iter().take(8).map(|b| format!("{b:02x}")).collect();
    let dir = format!("{base}/aux-cache/{scheme}-{hash}");
    let rest = uri.split_once("://").map(|(_, r)| r).unwrap_or(uri);
    let path = match scheme {
        // An s3 object lands as a file of its own name; a prefix (ending in /) as a directory.
        "s3" if !rest.ends_with('/') => format!("{dir}/{}", rest.rsplit('/').next().unwrap_or("object")),
        _ => dir.clone(),
    };
    AuxFetch { key: key.to_string(), scheme: scheme.to_string(), uri: uri.to_string(), dir, path }
}

impl Plan {
    /// A plan as the state file keeps it, including those that earlier builds wrote before a field
    /// existed: each missing field gets the value that build behaved by (no extra sbatch options, no
    /// secrets, no inputs, the inner timeout from its minutes, the default auxiliary-input limits).
    pub fn from_stored_json(text: &str) -> Result<Plan, serde_json::Error> {
        let mut value: serde_json::Value = serde_json::from_str(text)?;
        if let Some(fields) = value.as_object_mut() {
            for name in ["sbatch_options", "secret_names", "inputs", "required_paths", "fetches"] {
                fields.entry(name).or_insert_with(|| serde_json::json!([]));
            }
            if !fields.contains_key("timeout_seconds") {
                let minutes = fields.get("timeout_minutes").and_then(|m| m.as_u64()).unwrap_or(0);
                fields.insert("timeout_seconds".into(), (minutes * 60).into());
            }
            fields.entry("aux_max_bytes").or_insert_with(|| crate::config::DEFAULT_AUX_MAX_BYTES.into());
            fields.entry("aux_timeout_minutes").or_insert_with(|| crate::config::DEFAULT_AUX_TIMEOUT_MINUTES.into());
        }
        serde_json::from_value(value)
    }

    /// The job's specs as nested JSON objects, from the dotted input keys (`a.b.c = v`).
    pub fn specs_json(&self) -> serde_json::Value {
        let mut root = match &self.specs {
            Some(serde_json::Value::Object(m)) => m.clone(),
            _ => serde_json::Map::new(),
        };
        for (key, location) in &self.inputs {
            let value = match location {
                InputLocation::Shared { path } => path.clone(),
                // The job reads the copy fetched into the cache before the command starts.
                InputLocation::Remote { .. } => {
                    self.fetches.iter().find(|f| &f.key == key).map(|f| f.path.clone()).unwrap_or_default()
                }
            };
            let parts: Vec<&str> = key.split('.').collect();
            let mut node = &mut root;
            for part in &parts[..parts.len() - 1] {
                let entry = node.entry(part.to_string()).or_insert_with(|| serde_json::json!({}));
                if !entry.is_object() {
                    *entry = serde_json::json!({});
                }
                node = entry.as_object_mut().expect("just made an object");
            }
            node.insert(parts[parts.len() - 1].to_string(), serde_json::Value::String(value));
        }
        serde_json::Value::Object(root)
    }
}

static SPEC_KEY: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z_][A-Za-z0-9_-]*)*$").unwrap());

/// Resolve `--input` and `--dataset-root` into spec keys and the paths that must exist.
/// Inputs by spec key, and the shared paths that must exist.
type ResolvedInputs = (Vec<(String, InputLocation)>, Vec<String>);

fn resolve_inputs(spec: &JobSpec) -> Result<ResolvedInputs, SpecError> {
    let mut inputs = Vec::new();
    let mut required = Vec::new();
    for (key, uri) in &spec.inputs {
        check_with("inputs", key, &SPEC_KEY, "a dotted spec key such as custom.train_dataset.annotation_path")?;
        let location = parse_input(&format!("input {key}"), uri)?;
        if let InputLocation::Shared { path } = &location {
            required.push(path.clone());
        }
        inputs.push((key.clone(), location));
    }
    if let Some(root) = &spec.dataset_root {
        let location = parse_input("dataset_root", root)?;
        let InputLocation::Shared { path } = &location else {
            return Err(SpecError::new(
                "dataset_root",
                "a dataset root must be on the shared filesystem (lustre:///path); s3/hf/ngc are for small auxiliary inputs",
            ));
        };
        required.push(path.clone());
        let files = if spec.dataset_files.is_empty() {
            vec!["annotations.json".to_string()]
        } else {
            spec.dataset_files.clone()
        };
        for f in &files {
            if f.is_empty()
                || f.starts_with('/')
                || f.split('/').any(|c| c == "..")
                || f.chars().any(|c| c.is_control())
            {
                return Err(SpecError::new(
                    "dataset_files",
                    format!("{f:?} must be a relative path inside the dataset root"),
                ));
            }
            required.push(format!("{path}/{f}"));
        }
        inputs.push(("dataset_root".to_string(), location));
    }
    required.dedup();
    Ok((inputs, required))
}

/// How many nodes a total of GPUs takes: up to one node's worth goes on one node; more must fill whole
/// nodes. The one packing rule (and its message) of every door: `--total-gpus`, the TAO SDK's
/// `gpu_count` and the TAO service's `num_gpu` (through [`gpus_from_count`]).
pub fn pack_total_gpus(field: &str, total: u32, per_node: u32) -> Result<u32, SpecError> {
    let nodes = total.div_ceil(per_node.max(1));
    if nodes > 1 && !total.is_multiple_of(per_node) {
        let (low, high) = (total - total % per_node, nodes * per_node);
        return Err(SpecError::new(
            field,
            format!(
                "{total} GPUs do not fill nodes of {per_node} evenly; use {high} (a multiple of {per_node}) or at most {per_node} on one node (the nearest totals that work: {low} or {high})"
            ),
        ));
    }
    Ok(nodes)
}

/// What a GPU count in TAO's sense asks for: per node up to a node's GPUs (on `num_nodes` nodes, as the
/// TAO SDK reads `gpu_count`), a total packed into full nodes above it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GpuAsk {
    pub gpus: Option<u32>,
    pub total_gpus: Option<u32>,
    pub nodes: Option<u32>,
}

/// TAO's GPU count (`field` is the caller's name for it: `gpu_count`, `num_gpu`) and node count as a
/// job's `gpus`/`total_gpus`/`nodes`.
pub fn gpus_from_count(field: &str, count: i64, num_nodes: Option<u32>, per_node: u32) -> Result<GpuAsk, SpecError> {
    let count = u32::try_from(count)
        .map_err(|_| SpecError::new(field, format!("{count} is not a number of GPUs (0 or more)")))?;
    if count <= per_node {
        return Ok(GpuAsk { gpus: Some(count), total_gpus: None, nodes: num_nodes });
    }
    let nodes = pack_total_gpus(field, count, per_node)?;
    match num_nodes {
        Some(n) if n != 1 && n != nodes => Err(SpecError::new(
            "num_nodes",
            format!(
                "{field}={count} (a total above a node's {per_node} GPUs) needs {nodes} nodes, but num_nodes={n}; leave num_nodes out, or give {field}={per_node} per node"
            ),
        )),
        _ => Ok(GpuAsk { gpus: None, total_gpus: Some(count), nodes: None }),
    }
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
            let nodes = pack_total_gpus("total_gpus", total, max_per_node)?;
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

/// Validate a spec and resolve it into the plan of the job `job_id` (drawn by the caller: the core
/// draws no random ids).
pub fn resolve_with_id(spec: &JobSpec, settings: &Settings, job_id: &str) -> Result<Plan, SpecError> {
    if spec.image.trim().is_empty() {
        return Err(SpecError::new("image", "is required (--image IMG)"));
    }
    let image = ImageRef::parse(spec.image.trim()).map_err(|m| SpecError::new("image", m))?;
    let layout = Layout::new(&settings.base_dir(), job_id);
    let unpacked_workdir = workdir_dir(&layout);
    let command = resolve_command(spec, &layout)?;
    let (resources, cosmos) = resolve_job_resources(spec, settings, &command)?;
    let (partition, account) = resolve_placement(spec, settings)?;
    let (time_minutes, timeout_seconds) = resolve_times(spec, settings, &partition, None)?;
    let (env, secret_names) = resolve_environment(spec, settings)?;
    check_slurm_fields(spec)?;
    let sbatch_options = resolve_sbatch_options(spec, settings)?;
    let mounts = resolve_mounts(spec, settings)?;
    check_container_fields(spec)?;
    let base = checked_base_dir(settings)?;
    let (inputs, required_paths) = resolve_inputs(spec)?;
    let read_only_mounts = read_only_mounts(&mounts, &inputs, &layout)?;
    let requeue = spec.requeue.unwrap_or(settings.use_requeue);
    let checkpoint_grace_seconds = spec.checkpoint_grace_seconds.unwrap_or(settings.checkpoint_grace_seconds);
    let (max_timeout_requeues, total_time_seconds) =
        resolve_queue_budget(spec, requeue, timeout_seconds, checkpoint_grace_seconds)?;
    let fetches: Vec<AuxFetch> = inputs
        .iter()
        .filter_map(|(key, loc)| match loc {
            InputLocation::Remote { scheme, uri } => Some(aux_fetch(&base, key, scheme, uri)),
            InputLocation::Shared { .. } => None,
        })
        .collect();
    Ok(Plan {
        inputs,
        required_paths,
        fetches,
        aux_max_bytes: settings.aux_max_bytes,
        aux_timeout_minutes: settings.aux_timeout_minutes,
        layout,
        image,
        command,
        resources,
        partition,
        account,
        // Cosmos-RL workers hold model weights and KV caches: all of a node's memory, as NVIDIA's service asks.
        memory: spec.memory.clone().or_else(|| cosmos.as_ref().map(|_| "0".to_string())),
        qos: spec.qos.clone(),
        constraint: spec.constraint.clone(),
        exclude: spec.exclude.clone(),
        nodelist: spec.nodelist.clone(),
        reservation: spec.reservation.clone(),
        sbatch_options,
        time_minutes,
        timeout_seconds,
        requeue,
        max_timeout_requeues,
        env,
        secret_names,
        mounts,
        read_only_mounts,
        container_workdir: match (&spec.container_workdir, &spec.workdir_archive) {
            (None, Some(_)) => Some(unpacked_workdir),
            (w, _) => w.clone(),
        },
        workdir_archive: spec.workdir_archive.clone(),
        mount_home: !spec.no_container_mount_home,
        name: spec.name.clone(),
        cosmos,
        use_timeout: settings.use_timeout,
        specs: spec.specs.clone(),
        checkpoint_patterns: resolve_checkpoint_patterns(spec, settings)?,
        checkpoint_grace_seconds,
        on_preempt: spec.on_preempt.unwrap_or(settings.on_preempt),
        max_preemptions: spec.max_preemptions.unwrap_or(settings.max_preemptions),
        total_time_seconds,
        gpu_watch: spec
            .gpu_watch
            .clone()
            .unwrap_or_default()
            .over(&settings.gpu_watch)
            .map_err(|(field, message)| SpecError::new(field, message))?,
    })
}

/// The timeout requeues a job may use, and its total training time: from the total time when the
/// job states one (`attempts::queue_runs` runs, so one fewer requeue), else as it says (default 3).
fn resolve_queue_budget(
    spec: &JobSpec,
    requeue: bool,
    timeout_seconds: u64,
    grace_seconds: u64,
) -> Result<(u32, Option<u64>), SpecError> {
    let Some(hours) = spec.total_time_hours else {
        return Ok((spec.max_timeout_requeues.unwrap_or(DEFAULT_MAX_TIMEOUT_REQUEUES), None));
    };
    let field = "total_time_hours";
    if spec.max_timeout_requeues.is_some() {
        return Err(SpecError::new(field, "give either the total training time or max_timeout_requeues, not both"));
    }
    if !requeue {
        return Err(SpecError::new(
            field,
            "a total training time needs requeue (the job runs again after each timeout)",
        ));
    }
    let total = crate::attempts::total_seconds(hours).map_err(|m| SpecError::new(field, m))?;
    Ok((crate::attempts::queue_runs(total, timeout_seconds, grace_seconds) - 1, Some(total)))
}

/// The job's checkpoint patterns, else the setting's (TAO's by default).
fn resolve_checkpoint_patterns(spec: &JobSpec, settings: &Settings) -> Result<Vec<String>, SpecError> {
    if spec.checkpoint_patterns.is_empty() {
        return Ok(settings.checkpoint_patterns.clone());
    }
    for p in &spec.checkpoint_patterns {
        crate::checkpoint::check_pattern("checkpoint_patterns", p)?;
    }
    Ok(spec.checkpoint_patterns.clone())
}

/// The command as it runs (`bash -c` for a shell string), with `{config_path}` naming the staged specs
/// file when the job has specs.
fn resolve_command(spec: &JobSpec, layout: &Layout) -> Result<Vec<String>, SpecError> {
    // A Cosmos-RL job whose roles all have their own commands needs no job command.
    let roles_have_commands = spec.cosmos_rl.as_ref().is_some_and(|c| c.commands.every_role_has_one());
    if spec.command.is_empty() && !roles_have_commands {
        return Err(SpecError::new("command", "is required: give it after `--` (for example `-- python train.py`)"));
    }
    if spec.command.iter().any(|word| word.contains('\0')) {
        return Err(SpecError::new("command", "contains a NUL byte"));
    }
    if spec.shell && spec.command.len() != 1 {
        return Err(SpecError::new("command", "with --shell, give the command as one string"));
    }
    let mut command = if spec.shell {
        vec!["bash".to_string(), "-c".to_string(), spec.command[0].clone()]
    } else {
        spec.command.clone()
    };
    if let Some(specs) = &spec.specs {
        if !specs.is_object() {
            return Err(SpecError::new("specs", "must be a JSON object (a mapping of spec keys)"));
        }
        let bytes = specs.to_string().len();
        if bytes > crate::spec::MAX_SPECS_BYTES {
            return Err(SpecError::new(
                "specs",
                format!("is {bytes} bytes as JSON; at most {} are staged", crate::spec::MAX_SPECS_BYTES),
            ));
        }
        // The TAO SDK's config mode: `{config_path}` in the command is the staged specs file.
        for word in &mut command {
            *word = word.replace("{config_path}", &layout.specs_file());
        }
    }
    Ok(command)
}

/// Nodes, GPUs, CPUs and exclusivity (a Cosmos-RL job's from its roles), within the settings' limits.
fn resolve_job_resources(
    spec: &JobSpec,
    settings: &Settings,
    command: &[String],
) -> Result<(Resources, Option<crate::cosmos::CosmosPlan>), SpecError> {
    let (mut resources, cosmos) = match &spec.cosmos_rl {
        Some(section) => {
            let (resources, cosmos) = crate::cosmos::resolve(spec, section, command, settings.max_gpus_per_node)?;
            (resources, Some(cosmos))
        }
        None => (resolve_resources(spec, settings.max_gpus_per_node)?, None),
    };
    if spec.gpus.is_none() && spec.total_gpus.is_none() && cosmos.is_none() {
        if let Some(g) = settings.default_gpus {
            resources.gpus_per_node = g;
            resources.exclusive = g > 0 && g == settings.max_gpus_per_node;
            if g > settings.max_gpus_per_node {
                return Err(SpecError::new(
                    "gpus",
                    format!(
                        "SLURM_NUM_GPUS={g} is more than a node has (SLURM_MAX_GPUS_PER_NODE={})",
                        settings.max_gpus_per_node
                    ),
                ));
            }
        }
    }
    let max = settings.max_cpus_per_task;
    match spec.cpus_per_task {
        Some(asked) if asked > max => {
            return Err(SpecError::new(
                "cpus_per_task",
                format!("{asked} CPUs per task is more than SLURM_MAX_CPUS_PER_TASK ({max})"),
            ))
        }
        Some(_) => {}
        None => resources.cpus_per_task = default_cpus_per_task(&resources, cosmos.is_some(), settings),
    }
    if let Some(exclusive) = spec.exclusive {
        resources.exclusive = exclusive;
    }
    Ok((resources, cosmos))
}

/// CPUs per task of a job that does not say, the TAO SDK's rule: SLURM_CPUS_PER_TASK (16), times the
/// GPUs of a single-node job (its one task feeds every GPU's data loaders), capped by
/// SLURM_MAX_CPUS_PER_TASK (128). A multi-node or Cosmos-RL job keeps the base.
pub fn default_cpus_per_task(resources: &Resources, cosmos: bool, settings: &Settings) -> u32 {
    let base = settings.cpus_per_task;
    let per_gpu = resources.nodes == 1 && resources.gpus_per_node > 1 && !cosmos;
    let cpus = if per_gpu { base.saturating_mul(resources.gpus_per_node) } else { base };
    cpus.min(settings.max_cpus_per_task)
}

/// The inner timeout of a job whose wall time is `wall_hours` when neither it nor
/// SLURM_TIMEOUT_HOURS says: 0.2 h less, as the TAO SDK's, but at least half the wall time (a wall
/// time of 0.4 h or less keeps half of it for the requeue).
pub fn default_timeout_hours(wall_hours: f64) -> f64 {
    (wall_hours - 0.2).max(wall_hours / 2.0)
}

/// The partition list and the account, the job's or the settings'.
fn resolve_placement(spec: &JobSpec, settings: &Settings) -> Result<(String, Option<String>), SpecError> {
    let partition = spec.partition.clone().unwrap_or_else(|| settings.partition.clone());
    for p in partition.split(',') {
        check_slurm_word("partition", p)?;
    }
    let account = spec.account.clone().or_else(|| settings.account.clone());
    if let Some(a) = &account {
        check_slurm_word("account", a)?;
    }
    Ok((partition, account))
}

/// The wall time in minutes and the inner timeout in seconds, the timeout shorter than the wall time
/// (so the job can requeue itself) and the wall time within the default partitions' limit.
/// `cap_minutes`: the wall time a job that asks for none is capped at (its partitions' MaxTime).
fn resolve_times(
    spec: &JobSpec,
    settings: &Settings,
    partition: &str,
    cap_minutes: Option<u64>,
) -> Result<(u64, u64), SpecError> {
    let mut time_hours = spec.time_hours.unwrap_or(settings.time_hours);
    check_hours("time_hours", time_hours)?;
    let mut time_minutes = hours_to_minutes(time_hours);
    let cap = cap_minutes.filter(|&cap| spec.time_hours.is_none() && time_minutes > cap);
    if let Some(cap) = cap {
        time_minutes = cap.max(1);
        time_hours = time_minutes as f64 / 60.0;
    }
    let timeout_hours = match (spec.timeout_hours, settings.timeout_hours) {
        (Some(t), _) => t,
        // A job's own shorter wall time is not refused for the setting's longer timeout, nor is a
        // capped default wall time.
        (None, Some(t)) if t < time_hours || (spec.time_hours.is_none() && cap.is_none()) => t,
        (None, _) => default_timeout_hours(time_hours),
    };
    check_hours("timeout_hours", timeout_hours)?;
    let timeout_seconds = ((timeout_hours * 3600.0).ceil() as u64).max(1);
    if timeout_hours >= time_hours || timeout_seconds >= time_minutes * 60 {
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
    Ok((time_minutes, timeout_seconds))
}

/// Variables as (name, value), in order.
type EnvPairs = Vec<(String, String)>;

/// The container's plain variables and the names of its secret ones (the job's, then the credentials
/// the TAO SDK forwards unless the job sets them itself). Names tao-slurm or Slurm set are refused.
fn resolve_environment(spec: &JobSpec, settings: &Settings) -> Result<(EnvPairs, Vec<String>), SpecError> {
    let owned = |name: &str| {
        RENDEZVOUS_VARS.contains(&name)
            || name.starts_with("SLURM_")
            || name.starts_with("TAO_AFTER_")
            || crate::spec::SWEEP_VARS.contains(&name)
            || ["TAO_API_RESULTS_DIR", "TAO_JOB_ID", "TAO_SPECS_FILE", "TAO_RESULTS_ROOT", "TAO_API_JOB_ID"]
                .contains(&name)
    };
    let mut env = Vec::new();
    for (name, value) in &spec.env {
        check_user_env_name("env", name, &owned)?;
        check_text("env", value)?;
        env.push((name.clone(), value.clone()));
    }
    let mut secret_names = Vec::new();
    for name in &spec.secret_env {
        check_user_env_name("secret_env", name, &owned)?;
        if spec.env.contains_key(name) {
            return Err(SpecError::new(
                "secret_env",
                format!("{name} is also set as a plain variable or by tao-slurm"),
            ));
        }
        if !secret_names.contains(name) {
            secret_names.push(name.clone());
        }
    }
    for (name, _) in &settings.forwarded_secrets {
        if !spec.env.contains_key(name) && !secret_names.contains(name) {
            secret_names.push(name.clone());
        }
    }
    // The TAO SDK's script exports these for every job; the job's own values win.
    for (name, value) in [("NCCL_DEBUG", &settings.nccl_debug), ("LOGLEVEL", &settings.log_level)] {
        if !spec.env.contains_key(name) && !secret_names.iter().any(|n| n == name) {
            check_text(name, value)?;
            env.push((name.to_string(), value.clone()));
        }
    }
    Ok((env, secret_names))
}

/// The values that reach `#SBATCH` lines as they are: each in the form Slurm reads.
fn check_slurm_fields(spec: &JobSpec) -> Result<(), SpecError> {
    if let Some(m) = &spec.memory {
        check_with("memory", m, &MEMORY, "a size such as 64G, 512M or 0 (all of a node's memory)")?;
    }
    if let Some(q) = &spec.qos {
        check_slurm_word("qos", q)?;
    }
    if let Some(r) = &spec.reservation {
        check_slurm_word("reservation", r)?;
    }
    if let Some(c) = &spec.constraint {
        check_with("constraint", c, &CONSTRAINT, "feature names joined by & | , with [ ] ( ) * :")?;
    }
    if let Some(x) = &spec.exclude {
        check_with("exclude", x, &NODE_LIST, "a Slurm node list such as node[1-3],node7")?;
    }
    if let Some(x) = &spec.nodelist {
        check_with("nodelist", x, &NODE_LIST, "a Slurm node list such as node[1-2],node7")?;
    }
    Ok(())
}

/// The extra sbatch options (from the allow-list only), plus the mail settings unless the job sets them.
fn resolve_sbatch_options(spec: &JobSpec, settings: &Settings) -> Result<Vec<(String, String)>, SpecError> {
    let mut sbatch_options = Vec::new();
    for (name, value) in &spec.sbatch_options {
        let name = name.trim_start_matches("--");
        if !ALLOWED_SBATCH_OPTIONS.contains(&name) {
            return Err(SpecError::new(
                "sbatch_options",
                format!(
                    "--{name} is not an allowed extra sbatch option; allowed: {}",
                    ALLOWED_SBATCH_OPTIONS.join(", ")
                ),
            ));
        }
        check_with("sbatch_options", value, &OPTION_VALUE, "letters, digits and _ . , : = @ + / % - (no spaces or #)")?;
        sbatch_options.push((name.to_string(), value.clone()));
    }
    if let Some(mail) = &settings.mail_user {
        check_with("SLURM_MAIL_USER", mail, &OPTION_VALUE, "an address such as me@example.org")?;
        for (name, value) in [("mail-user", mail.as_str()), ("mail-type", "ALL")] {
            if !sbatch_options.iter().any(|(n, _)| n == name) {
                sbatch_options.push((name.to_string(), value.to_string()));
            }
        }
    }
    Ok(sbatch_options)
}

/// The settings' default mounts (unless replaced), then the job's, each once; then the base
/// directory, unless one of them shows it at its own path (else the job's results would be written
/// into the container's own filesystem and lost with it).
fn resolve_mounts(spec: &JobSpec, settings: &Settings) -> Result<Vec<String>, SpecError> {
    let mut mounts = Vec::new();
    if !spec.replace_default_mounts {
        for m in &settings.container_mounts {
            check_mount(m).map_err(|e| SpecError::new("SLURM_CONTAINER_MOUNTS", e.message))?;
            mounts.push(m.clone());
        }
    }
    for m in &spec.mounts {
        check_mount(m)?;
        if !mounts.contains(m) {
            mounts.push(m.clone());
        }
    }
    let base = settings.base_dir();
    if !crate::layout::covered(&base, &mounts) {
        mounts.push(base);
    }
    Ok(mounts)
}

/// The job's inputs on shared storage and its staged specs file, each mounted read-only at its own
/// path after `mounts` (so over the read-write mount that shows it, where one does): a job reads what
/// it was given and cannot change it for the next. An input that holds the base directory stays as
/// `mounts` show it (read-only, it would take the job's results with it). Pyxis separates mounts with
/// `,` and `:`, so an input path holding either cannot be mounted and is refused.
fn read_only_mounts(
    mounts: &[String],
    inputs: &[(String, InputLocation)],
    layout: &Layout,
) -> Result<Vec<String>, SpecError> {
    let holds_base = |p: &str| layout.base_dir == p || layout.base_dir.starts_with(&format!("{p}/"));
    let mut paths = vec![layout.specs_file()];
    for (key, location) in inputs {
        let InputLocation::Shared { path } = location else { continue };
        if path.contains([',', ':']) {
            let field = if key == "dataset_root" { "dataset_root".to_string() } else { format!("input {key}") };
            return Err(SpecError::new(
                field,
                format!("{path} holds ',' or ':', which Pyxis reads as mount separators: the job could not be given it read-only; rename it"),
            ));
        }
        if !holds_base(path) && !paths.contains(path) {
            paths.push(path.clone());
        }
    }
    Ok(paths.into_iter().map(|p| format!("{p}:{p}:ro")).filter(|m| !mounts.contains(m)).collect())
}

fn check_container_fields(spec: &JobSpec) -> Result<(), SpecError> {
    if let Some(a) = &spec.workdir_archive {
        check_text("workdir_archive", a)?;
        if !a.starts_with('/') {
            return Err(SpecError::new("workdir_archive", "must be an absolute path on shared storage"));
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
    Ok(())
}

/// The base directory, which appears in #SBATCH lines (read by sbatch without a shell): an absolute
/// path of plain characters only.
fn checked_base_dir(settings: &Settings) -> Result<String, SpecError> {
    let base = settings.base_dir();
    let plain = |c: char| c.is_ascii_alphanumeric() || "_./+-".contains(c);
    if !base.starts_with('/') || !base.chars().all(plain) || base.contains("/../") {
        return Err(SpecError::new(
            "SLURM_BASE_RESULTS_DIR",
            format!("{base:?} must be an absolute path on shared storage made of letters, digits and _ . / + -"),
        ));
    }
    Ok(base)
}

/// Fit a plan to the cluster's partitions: a job that asked for no wall time gets the default capped
/// at the shortest MaxTime of its partitions (the inner timeout and the requeue budget follow from
/// the capped time), with a warning naming both; then [`check_partition_limits`]. Returns the warning.
/// Pure: the partitions come from `scontrol show partition`.
pub fn fit_partition_limits(
    spec: &JobSpec,
    settings: &Settings,
    plan: &mut Plan,
    partitions: &[crate::slurm::PartitionInfo],
) -> Result<Option<String>, SpecError> {
    let shortest = plan
        .partition
        .split(',')
        .filter_map(|w| partitions.iter().find(|p| p.name == w))
        .filter_map(|p| p.max_time_minutes.map(|m| (m, p.name.as_str())))
        .min_by_key(|(m, _)| *m);
    let mut warning = None;
    if let Some((cap, name)) = shortest.filter(|(cap, _)| spec.time_hours.is_none() && plan.time_minutes > *cap) {
        let (time_minutes, timeout_seconds) = resolve_times(spec, settings, &plan.partition, Some(cap))?;
        let (requeues, total) =
            resolve_queue_budget(spec, plan.requeue, timeout_seconds, plan.checkpoint_grace_seconds)?;
        warning = Some(format!(
            "warning: no wall time asked for: the default {} is capped at the MaxTime {} of partition {name} (ask for one with --time-hours / time_hours)",
            crate::slurm::format_duration_minutes(plan.time_minutes),
            crate::slurm::format_duration_minutes(time_minutes),
        ));
        (plan.time_minutes, plan.timeout_seconds) = (time_minutes, timeout_seconds);
        (plan.max_timeout_requeues, plan.total_time_seconds) = (requeues, total);
    }
    check_partition_limits(plan, partitions)?;
    Ok(warning)
}

/// Check a plan against the cluster's partitions: each must exist, and the wall time must fit its
/// MaxTime. Pure: the partitions come from `scontrol show partition`.
pub fn check_partition_limits(plan: &Plan, partitions: &[crate::slurm::PartitionInfo]) -> Result<(), SpecError> {
    let names: Vec<&str> = partitions.iter().map(|p| p.name.as_str()).collect();
    for wanted in plan.partition.split(',') {
        let Some(p) = partitions.iter().find(|p| p.name == wanted) else {
            return Err(SpecError::new(
                "partition",
                format!("{wanted} does not exist on this cluster; partitions: {}", names.join(", ")),
            ));
        };
        if let Some(max) = p.max_time_minutes {
            if plan.time_minutes > max {
                let longer: Vec<&str> = partitions
                    .iter()
                    .filter(|q| q.max_time_minutes.is_none_or(|m| m >= plan.time_minutes))
                    .map(|q| q.name.as_str())
                    .collect();
                return Err(SpecError::new(
                    "time_hours",
                    format!(
                        "{} exceeds the MaxTime {} of partition {wanted}; ask for at most that, or a partition that allows it{}",
                        crate::slurm::format_duration_minutes(plan.time_minutes),
                        crate::slurm::format_duration_minutes(max),
                        if longer.is_empty() { String::new() } else { format!(" ({})", longer.join(", ")) }
                    ),
                ));
            }
        }
    }
    if let Some(cosmos) = &plan.cosmos {
        crate::cosmos::check_partition_nodes(plan.resources.nodes, &plan.partition, &cosmos.split, partitions)?;
    }
    Ok(())
}

/// Where a job's `--workdir` is unpacked, and its command runs: `workdir` in its results directory.
pub fn workdir_dir(layout: &Layout) -> String {
    format!("{}/workdir", layout.results_dir())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::config::SettingSources;
    use std::collections::HashMap;

    /// A plan for a job with a fixed id (the engine draws real ids).
    pub fn resolve(spec: &JobSpec, settings: &Settings) -> Result<Plan, SpecError> {
        resolve_with_id(spec, settings, "11111111-2222-4333-8444-555555555555")
    }

    pub use crate::fixtures::{settings, spec};

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
        assert_eq!((p.time_minutes, p.timeout_seconds), (240, 228 * 60));
        let p = resolve(&JobSpec { time_hours: Some(0.5), ..spec() }, &s).unwrap();
        assert_eq!(p.time_minutes, 30);
        assert!(p.timeout_seconds < 30 * 60);
        let err = resolve(&JobSpec { time_hours: Some(5.0), ..spec() }, &s).unwrap_err();
        assert_eq!(err.field, "time_hours");
        assert!(err.message.contains("another partition"));
        let p = resolve(&JobSpec { time_hours: Some(5.0), partition: Some("long".into()), ..spec() }, &s).unwrap();
        assert_eq!(p.time_minutes, 300);
        let err = resolve(&JobSpec { time_hours: Some(2.0), timeout_hours: Some(2.0), ..spec() }, &s).unwrap_err();
        assert_eq!(err.field, "timeout_hours");
    }

    #[test]
    fn the_inner_timeout_defaults_to_the_wall_time_less_a_fifth_of_an_hour() {
        // SLURM_TIME_HOURS=2 alone: --time 2 h, the inner timeout 1.8 h (a fixed 3.8 refused every job).
        let s = tao_settings(&[("SLURM_TIME_HOURS", "2")]);
        let p = resolve(&spec(), &s).unwrap();
        assert_eq!((p.time_minutes, p.timeout_seconds), (120, 108 * 60));
        // A job's own wall time takes the same rule; short ones keep half for the requeue.
        let p = resolve(&JobSpec { time_hours: Some(1.0), ..spec() }, &settings()).unwrap();
        assert_eq!(p.timeout_seconds, 48 * 60);
        let p = resolve(&JobSpec { time_hours: Some(0.2), ..spec() }, &settings()).unwrap();
        assert_eq!((p.time_minutes, p.timeout_seconds), (12, 6 * 60));
        // SLURM_TIMEOUT_HOURS set: it is the timeout, unless a job's own wall time is shorter.
        let s = tao_settings(&[("SLURM_TIMEOUT_HOURS", "3")]);
        assert_eq!(resolve(&spec(), &s).unwrap().timeout_seconds, 3 * 3600);
        assert_eq!(resolve(&JobSpec { time_hours: Some(1.0), ..spec() }, &s).unwrap().timeout_seconds, 48 * 60);
        let s = tao_settings(&[("SLURM_TIME_HOURS", "2"), ("SLURM_TIMEOUT_HOURS", "2")]);
        assert_eq!(resolve(&spec(), &s).unwrap_err().field, "timeout_hours", "the settings' own contradiction");
    }

    #[test]
    fn cpus_per_task_is_sixteen_per_gpu_of_a_single_node_job_capped() {
        let s = settings();
        let cpus = |spec: JobSpec, s: &Settings| resolve(&spec, s).unwrap().resources.cpus_per_task;
        assert_eq!(cpus(JobSpec { gpus: Some(4), ..spec() }, &s), 64);
        assert_eq!(cpus(JobSpec { gpus: Some(8), ..spec() }, &s), 128);
        assert_eq!(cpus(JobSpec { gpus: Some(1), ..spec() }, &s), 16);
        assert_eq!(cpus(JobSpec { gpus: Some(0), ..spec() }, &s), 16);
        assert_eq!(cpus(JobSpec { gpus: Some(8), nodes: Some(2), ..spec() }, &s), 16, "multi-node: per task as set");
        assert_eq!(cpus(JobSpec { gpus: Some(4), cpus_per_task: Some(8), ..spec() }, &s), 8, "the job's own word");
        let capped = tao_settings(&[("SLURM_MAX_CPUS_PER_TASK", "48")]);
        assert_eq!(cpus(JobSpec { gpus: Some(4), ..spec() }, &capped), 48);
        let err = resolve(&JobSpec { cpus_per_task: Some(200), ..spec() }, &s).unwrap_err();
        assert!(err.field == "cpus_per_task" && err.message.contains("128"), "{err}");
        // SLURM_NUM_GPUS is the GPUs of a job that does not say.
        let two = tao_settings(&[("SLURM_NUM_GPUS", "2")]);
        let p = resolve(&spec(), &two).unwrap();
        assert_eq!((p.resources.gpus_per_node, p.resources.cpus_per_task), (2, 32));
        assert_eq!(resolve(&JobSpec { gpus: Some(1), ..spec() }, &two).unwrap().resources.gpus_per_node, 1);
    }

    #[test]
    fn partition_limits_from_the_cluster() {
        let parts = crate::slurm::parse_partitions(
            "PartitionName=polar MaxTime=04:00:00\nPartitionName=long MaxTime=12:00:00\nPartitionName=debug MaxTime=00:30:00\n",
        );
        let s = settings();
        let p = resolve(&JobSpec { partition: Some("long".into()), time_hours: Some(13.0), ..spec() }, &s).unwrap();
        let err = check_partition_limits(&p, &parts).unwrap_err();
        assert_eq!(err.field, "time_hours");
        assert!(err.message.contains("13:00:00 exceeds the MaxTime 12:00:00 of partition long"), "{err}");
        let p = resolve(&JobSpec { partition: Some("long".into()), time_hours: Some(5.0), ..spec() }, &s).unwrap();
        assert!(check_partition_limits(&p, &parts).is_ok());
        let p = resolve(&JobSpec { partition: Some("debug".into()), time_hours: Some(1.0), ..spec() }, &s).unwrap();
        let err = check_partition_limits(&p, &parts).unwrap_err();
        assert!(err.message.contains("(polar, long)"), "{err}");
        let p = resolve(&JobSpec { partition: Some("nope".into()), ..spec() }, &s).unwrap();
        assert_eq!(check_partition_limits(&p, &parts).unwrap_err().field, "partition");
    }

    #[test]
    fn a_job_without_a_time_is_capped_at_its_partition() {
        let parts = crate::slurm::parse_partitions(
            "PartitionName=polar MaxTime=04:00:00\nPartitionName=debug MaxTime=00:30:00\n",
        );
        let s = settings();
        let spec = JobSpec { partition: Some("debug".into()), ..spec() };
        let mut p = resolve(&spec, &s).unwrap();
        assert_eq!(p.time_minutes, 240);
        let w = fit_partition_limits(&spec, &s, &mut p, &parts).unwrap().unwrap();
        assert!(w.contains("default 04:00:00 is capped at the MaxTime 00:30:00 of partition debug"), "{w}");
        // The inner timeout's default follows from the capped wall time (0.2 h less).
        assert_eq!((p.time_minutes, p.timeout_seconds), (30, 18 * 60));
        // Both partitions: the shorter one's MaxTime.
        let both = JobSpec { partition: Some("polar,debug".into()), ..spec.clone() };
        let mut p = resolve(&both, &s).unwrap();
        assert!(fit_partition_limits(&both, &s, &mut p, &parts).unwrap().is_some());
        assert_eq!(p.time_minutes, 30);
        // A time asked for is still refused when too long, and one that fits gets no warning.
        let asked = JobSpec { time_hours: Some(1.0), ..spec.clone() };
        let mut p = resolve(&asked, &s).unwrap();
        let err = fit_partition_limits(&asked, &s, &mut p, &parts).unwrap_err();
        assert!(err.field == "time_hours" && err.message.contains("01:00:00 exceeds the MaxTime 00:30:00"), "{err}");
        let polar = JobSpec { partition: Some("polar".into()), ..spec.clone() };
        let mut p = resolve(&polar, &s).unwrap();
        assert_eq!(fit_partition_limits(&polar, &s, &mut p, &parts).unwrap(), None);
        // A setting's inner timeout longer than the capped time falls back to the default rule.
        let t = tao_settings(&[("SLURM_TIMEOUT_HOURS", "3")]);
        let mut p = resolve(&spec, &t).unwrap();
        fit_partition_limits(&spec, &t, &mut p, &parts).unwrap();
        assert_eq!(p.timeout_seconds, 18 * 60);
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
            (JobSpec { env: [("1A".to_string(), "x".to_string())].into(), ..spec() }, "env"),
            (JobSpec { env: [("A".to_string(), "x\ny".to_string())].into(), ..spec() }, "env"),
            (JobSpec { env: [("NODE_RANK".to_string(), "3".to_string())].into(), ..spec() }, "env"),
            (JobSpec { mounts: vec!["relative:/x".into()], ..spec() }, "mounts"),
            (JobSpec { mounts: vec!["/a,/b".into()], ..spec() }, "mounts"),
            (JobSpec { container_workdir: Some("rel".into()), ..spec() }, "container_workdir"),
            (JobSpec { memory: Some("64 G".into()), ..spec() }, "memory"),
            (JobSpec { qos: Some("high;x".into()), ..spec() }, "qos"),
            (JobSpec { constraint: Some("a100 #x".into()), ..spec() }, "constraint"),
            (JobSpec { exclude: Some("node1\n".into()), ..spec() }, "exclude"),
            (JobSpec { nodelist: Some("node1 --x".into()), ..spec() }, "nodelist"),
            (JobSpec { reservation: Some("$(r)".into()), ..spec() }, "reservation"),
            (
                JobSpec { sbatch_options: [("export".to_string(), "ALL".to_string())].into(), ..spec() },
                "sbatch_options",
            ),
            (
                JobSpec { sbatch_options: [("mail-type".to_string(), "END #x".to_string())].into(), ..spec() },
                "sbatch_options",
            ),
            (JobSpec { secret_env: vec!["1BAD".into()], ..spec() }, "secret_env"),
            (
                JobSpec { secret_env: vec!["A".into()], env: [("A".to_string(), "x".to_string())].into(), ..spec() },
                "secret_env",
            ),
            (JobSpec { time_hours: Some(f64::NAN), ..spec() }, "time_hours"),
        ];
        for (spec, field) in cases {
            let err = resolve(&spec, &s).unwrap_err();
            assert_eq!(err.field, field, "{err}");
        }
    }

    #[test]
    fn inputs_and_specs_are_mounted_read_only_after_the_others() {
        let s = settings();
        let job = JobSpec {
            inputs: [
                ("a.b".to_string(), "lustre:///data/set".to_string()),
                ("c".to_string(), "lustre:///lustre".to_string()),
                ("d".to_string(), "hf_model://org/model".to_string()),
            ]
            .into(),
            ..spec()
        };
        let p = resolve(&job, &s).unwrap();
        let specs = p.layout.specs_file();
        assert_eq!(p.mounts, vec!["/lustre"]);
        // /lustre holds the base directory: it stays read-write; a fetched input is no path here.
        assert_eq!(p.read_only_mounts, vec![format!("{specs}:{specs}:ro"), "/data/set:/data/set:ro".into()]);
        let args = crate::script::render_batch_script(&p);
        assert!(
            args.contains(&format!(" --container-mounts=/lustre,{specs}:{specs}:ro,/data/set:/data/set:ro ")),
            "{args}"
        );
        for (key, uri, field) in [("k", "lustre:///data/a,b", "input k"), ("k", "lustre:///data/a:b", "input k")] {
            let job = JobSpec { inputs: [(key.to_string(), uri.to_string())].into(), ..spec() };
            assert_eq!(resolve(&job, &s).unwrap_err().field, field);
        }
        let job = JobSpec { dataset_root: Some("lustre:///data/x:y".into()), ..spec() };
        assert_eq!(resolve(&job, &s).unwrap_err().field, "dataset_root");
    }

    #[test]
    fn mounts_add_to_the_default_unless_replaced() {
        let s = settings();
        let p = resolve(&JobSpec { mounts: vec!["/data:/data:ro".into()], ..spec() }, &s).unwrap();
        assert_eq!(p.mounts, vec!["/lustre", "/data:/data:ro"]);
        let p = resolve(&JobSpec { mounts: vec!["/data".into()], replace_default_mounts: true, ..spec() }, &s).unwrap();
        assert_eq!(p.mounts, vec!["/data", "/lustre/alice"], "the base directory stays in view");
    }

    /// A base directory off /lustre: no /lustre mount by default (it may not exist, and Pyxis ends
    /// the step), and the base directory itself is mounted; one shown elsewhere does not count.
    #[test]
    fn the_base_directory_is_always_mounted_at_its_own_path_and_lustre_only_when_it_holds_it() {
        let settings = |vars: &[(&str, &str)]| {
            let mut env: std::collections::HashMap<String, String> =
                [("SLURM_USER", "alice"), ("SLURM_HOSTNAME", "login"), ("HOME", "/home/alice")]
                    .iter()
                    .chain(vars)
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
            env.retain(|_, v| !v.is_empty());
            let none = std::collections::HashMap::new();
            Settings::from_sources(&crate::config::SettingSources {
                flags: none.clone(),
                env,
                file: none,
                uid: Some(1000),
            })
            .unwrap()
        };
        let mounts = |s: &Settings, extra: &[&str]| {
            resolve(&JobSpec { mounts: extra.iter().map(|m| m.to_string()).collect(), ..spec() }, s).unwrap().mounts
        };
        assert_eq!(mounts(&settings(&[]), &[]), vec!["/lustre"], "the TAO SDK's default, holding the base");
        let scratch = settings(&[("SLURM_BASE_RESULTS_DIR", "/scratch/alice/tao")]);
        assert_eq!(mounts(&scratch, &[]), vec!["/scratch/alice/tao"]);
        assert_eq!(mounts(&scratch, &["/scratch"]), vec!["/scratch"], "a parent shown at its own path covers it");
        assert_eq!(mounts(&scratch, &["/scratch:/s"]), vec!["/scratch:/s", "/scratch/alice/tao"]);
        let set =
            settings(&[("SLURM_BASE_RESULTS_DIR", "/scratch/alice/tao"), ("SLURM_CONTAINER_MOUNTS", "/data:/data:ro")]);
        assert_eq!(mounts(&set, &[]), vec!["/data:/data:ro", "/scratch/alice/tao"]);
        let off_lustre = settings(&[("SLURM_CONTAINER_MOUNTS", "/data")]);
        assert_eq!(mounts(&off_lustre, &[]), vec!["/data", "/lustre/users/alice/tao-slurm"]);
    }

    #[test]
    fn inputs_become_nested_specs_and_required_paths() {
        let s = settings();
        let with_inputs = JobSpec {
            inputs: [
                ("custom.train_dataset.annotation_path".to_string(), "lustre:///lustre/coco/ann.json".to_string()),
                ("model.pretrained".to_string(), "s3://bucket/ckpt.pth".to_string()),
                ("results".to_string(), "slurm://lustre/out".to_string()),
            ]
            .into(),
            dataset_root: Some("slurm:///lustre/coco".into()),
            ..spec()
        };
        let p = resolve(&with_inputs, &s).unwrap();
        assert_eq!(
            p.required_paths,
            vec!["/lustre/coco/ann.json", "/lustre/out", "/lustre/coco", "/lustre/coco/annotations.json"]
        );
        let j = p.specs_json();
        assert_eq!(j["custom"]["train_dataset"]["annotation_path"], "/lustre/coco/ann.json");
        assert_eq!(j["model"]["pretrained"], p.fetches[0].path.as_str());
        assert!(
            p.fetches[0].path.starts_with("/lustre/alice/aux-cache/s3-") && p.fetches[0].path.ends_with("/ckpt.pth")
        );
        assert_eq!(j["dataset_root"], "/lustre/coco");
        for (key, uri, field) in
            [("bad key", "/x", "inputs"), ("a.b", "file:///x", "input a.b"), ("a.b", "relative/x", "input a.b")]
        {
            let err =
                resolve(&JobSpec { inputs: [(key.to_string(), uri.to_string())].into(), ..spec() }, &s).unwrap_err();
            assert_eq!(err.field, field, "{err}");
        }
        let err = resolve(&JobSpec { dataset_root: Some("s3://b/coco".into()), ..spec() }, &s).unwrap_err();
        assert_eq!(err.field, "dataset_root");
    }

    /// Settings under the TAO SDK's names only (no tao-slurm name set), as a TAO user's env file has them.
    fn tao_settings(extra: &[(&str, &str)]) -> Settings {
        let mut env: HashMap<String, String> = [
            ("SSH_USER", "alice"),
            ("SSH_HOST", "login"),
            ("HOME", "/home/alice"),
            ("SLURM_BASE_RESULTS_DIR", "/lustre/alice"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        Settings::from_sources(&SettingSources { flags: HashMap::new(), env, file: HashMap::new(), uid: Some(1000) })
            .unwrap()
    }

    #[test]
    fn tao_sdk_settings_take_effect() {
        let s = tao_settings(&[
            ("SLURM_CPUS_PER_TASK", "24"),
            ("SLURM_MAX_CPUS_PER_TASK", "32"),
            ("SLURM_CONTAINER_MOUNTS", "/lustre,/scratch:/scratch"),
            ("SLURM_USE_TIMEOUT", "false"),
            ("SLURM_MAIL_USER", "alice@example.org"),
            ("SLURM_USE_SQSH", "false"),
            ("SLURM_REQUIRE_SQSH", "false"),
            ("SLURM_CONVERSION_PARTITION", "cpu2"),
            ("SLURM_CONVERSION_MEMORY_GB", "64"),
            ("HF_TOKEN", "hf-secret"),
            ("ACCESS_KEY", "ak"),
        ]);
        assert_eq!(s.slurm_user.as_deref(), Some("alice"));
        assert_eq!(s.login_hosts[0].host, "login");
        assert!(!s.use_sqsh && s.allow_registry_pull);
        assert_eq!((s.sqsh.partition.as_str(), s.sqsh.memory.as_str()), ("cpu2", "64G"));
        let p = resolve(&spec(), &s).unwrap();
        assert_eq!(p.resources.cpus_per_task, 32, "24 per GPU of the 4, capped by SLURM_MAX_CPUS_PER_TASK");
        let p = resolve(&JobSpec { gpus: Some(1), ..spec() }, &s).unwrap();
        assert_eq!(p.resources.cpus_per_task, 24);
        assert_eq!(p.mounts, vec!["/lustre", "/scratch:/scratch"]);
        assert!(!p.use_timeout);
        assert!(crate::script::render_batch_script(&p).contains("\ncommand srun "), "no inner timeout");
        assert!(p.sbatch_options.contains(&("mail-user".into(), "alice@example.org".into())));
        assert!(p.sbatch_options.contains(&("mail-type".into(), "ALL".into())));
        assert_eq!(p.secret_names, vec!["HF_TOKEN", "AWS_ACCESS_KEY_ID", "CLOUD_METADATA"], "forwarded as secrets");
        let script = crate::script::render_batch_script(&p);
        assert!(!script.contains("hf-secret") && !script.contains("=ak"), "{script}");
        // A job that sets the variable itself keeps its own; one asking more CPUs than the cap is refused.
        let own = JobSpec { env: [("HF_TOKEN".to_string(), "public".to_string())].into(), ..spec() };
        assert_eq!(resolve(&own, &s).unwrap().secret_names, vec!["AWS_ACCESS_KEY_ID", "CLOUD_METADATA"]);
        let err = resolve(&JobSpec { cpus_per_task: Some(64), ..spec() }, &s).unwrap_err();
        assert_eq!(err.field, "cpus_per_task");
        let off = tao_settings(&[("HF_TOKEN", "x"), ("TAO_SLURM_FORWARD_CREDENTIALS", "false")]);
        assert!(resolve(&spec(), &off).unwrap().secret_names.is_empty());
        let bad = tao_settings(&[("SLURM_CONTAINER_MOUNTS", "relative")]);
        assert_eq!(resolve(&spec(), &bad).unwrap_err().field, "SLURM_CONTAINER_MOUNTS");
    }

    #[test]
    fn specs_are_staged_and_config_path_names_their_file() {
        let s = settings();
        let with_specs = JobSpec {
            command: vec!["train -e {config_path}".into()],
            shell: true,
            specs: Some(serde_json::json!({"train": {"num_epochs": 3}, "dataset": {"root": "old"}})),
            inputs: [("dataset.root".to_string(), "lustre:///lustre/coco".to_string())].into(),
            ..spec()
        };
        let p = resolve_with_id(&with_specs, &s, "j1").unwrap();
        assert_eq!(p.command[2], "train -e /lustre/alice/specs/j1.json");
        let j = p.specs_json();
        assert_eq!(j["train"]["num_epochs"], 3);
        assert_eq!(j["dataset"]["root"], "/lustre/coco", "inputs are laid over the specs");
        let bad = JobSpec { specs: Some(serde_json::json!([1])), ..spec() };
        assert_eq!(resolve(&bad, &s).unwrap_err().field, "specs");
        let huge =
            JobSpec { specs: Some(serde_json::json!({"x": "y".repeat(crate::spec::MAX_SPECS_BYTES)})), ..spec() };
        assert!(resolve(&huge, &s).unwrap_err().message.contains("at most"), "a huge specs document is refused");
        // Without specs the command is left as it is.
        let plain = JobSpec { command: vec!["echo {config_path}".into()], ..spec() };
        assert_eq!(resolve(&plain, &s).unwrap().command, vec!["echo {config_path}"]);
        let whole = JobSpec { gpus: Some(2), exclusive: Some(true), ..spec() };
        assert!(resolve(&whole, &s).unwrap().resources.exclusive);
    }

    #[test]
    fn job_names_are_sanitised_and_bounded() {
        assert_eq!(slurm_job_name("abc-1"), "tao-job-abc-1");
        assert_eq!(slurm_job_name("a b/c"), "tao-job-a_b_c");
        assert_eq!(slurm_job_name(&"x".repeat(300)).len(), 120);
    }
}

#[cfg(test)]
mod gpu_count_tests {
    use super::{gpus_from_count, pack_total_gpus, GpuAsk};

    #[test]
    fn tao_counts_are_per_node_up_to_a_node_and_a_total_above() {
        type Ask = (Option<u32>, Option<u32>, Option<u32>);
        // (count, num_nodes) -> (gpus, total_gpus, nodes), nodes of 8 GPUs
        let ok: &[((i64, Option<u32>), Ask)] = &[
            ((0, None), (Some(0), None, None)),
            ((2, Some(2)), (Some(2), None, Some(2))),
            ((8, None), (Some(8), None, None)),
            ((16, None), (None, Some(16), None)),
            ((16, Some(1)), (None, Some(16), None)),
            ((16, Some(2)), (None, Some(16), None)),
        ];
        for ((count, nodes), (gpus, total, n)) in ok {
            let want = GpuAsk { gpus: *gpus, total_gpus: *total, nodes: *n };
            assert_eq!(gpus_from_count("gpu_count", *count, *nodes, 8).unwrap(), want, "{count} on {nodes:?}");
        }
        let e = gpus_from_count("gpu_count", 12, None, 8).unwrap_err();
        assert_eq!(e.field, "gpu_count");
        assert!(e.message.contains("use 16") && e.message.contains("8 or 16"), "{e}");
        assert_eq!(gpus_from_count("num_gpu", 16, Some(4), 8).unwrap_err().field, "num_nodes");
        assert_eq!(gpus_from_count("num_gpu", -2, None, 8).unwrap_err().field, "num_gpu");
    }

    #[test]
    fn the_packing_message_is_the_same_for_every_field() {
        let a = pack_total_gpus("total_gpus", 20, 8).unwrap_err();
        let b = gpus_from_count("gpu_count", 20, None, 8).unwrap_err();
        assert_eq!(a.message, b.message);
        assert!(a.message.contains("use 24") && a.message.contains("16 or 24"), "{a}");
        assert_eq!(pack_total_gpus("total_gpus", 24, 8).unwrap(), 3);
        assert_eq!(pack_total_gpus("total_gpus", 5, 8).unwrap(), 1);
    }
}
