//! The job-describing flags that `submit` and `render` share (flags override the job file).

use clap::Args;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tao_slurm_engine::error::Error;
use tao_slurm_engine::spec::{parse_pair, CosmosRlSpec, JobSpec, Placement, SweepSpec, VariantSpec};

/// The job-describing flags shared by `submit` and `render`. Flags override the job file.
#[derive(Args, Debug, Clone)]
pub struct JobArgs {
    /// Job file (TOML, the JobSpec fields); flags override it
    #[arg(long = "spec", value_name = "PATH")]
    pub spec_file: Option<PathBuf>,
    /// Container image: registry/image:tag, registry#image:tag, docker://..., or /path/image.sqsh
    #[arg(long)]
    pub image: Option<String>,
    /// GPUs per node (always per node; 0 for a CPU-only job)
    #[arg(long)]
    pub gpus: Option<u32>,
    /// Total GPUs, packed into full nodes (instead of --gpus)
    #[arg(long)]
    pub total_gpus: Option<u32>,
    #[arg(long)]
    pub nodes: Option<u32>,
    /// Whole nodes to this job (default: only when it takes all of a node's GPUs)
    #[arg(long)]
    pub exclusive: bool,
    /// Partition (or comma-separated list); default SLURM_PARTITION
    #[arg(long)]
    pub partition: Option<String>,
    // Slurm's placement: account, qos, constraint, nodes to use or avoid (the fields every door shares).
    #[command(flatten)]
    pub placement: Placement,
    /// Wall time in hours (default 4)
    #[arg(long)]
    pub time_hours: Option<f64>,
    /// Inner timeout in hours, shorter than the wall time (default: the wall time less 0.2 h, SLURM_TIMEOUT_HOURS)
    #[arg(long)]
    pub timeout_hours: Option<f64>,
    /// Timeout requeues before the job ends as timed out (default 3)
    #[arg(long)]
    pub max_timeout_requeues: Option<u32>,
    /// Seconds before the time limit the step is sent USR2 to save a checkpoint; 0: never
    /// (default 300, TAO_SLURM_CHECKPOINT_GRACE)
    #[arg(long, value_name = "SECONDS")]
    pub checkpoint_grace: Option<u64>,
    /// What counts as a checkpoint in the results directory, a glob (`*.pth`; `name-*/` for
    /// directories; repeatable; default TAO's, TAO_SLURM_CHECKPOINT_PATTERNS)
    #[arg(long = "checkpoint-pattern", value_name = "GLOB")]
    pub checkpoint_patterns: Vec<String>,
    /// What a preemption does: resume (a new attempt from the newest checkpoint) or cancel (the job
    /// ends Canceled with the reason) (default resume, TAO_SLURM_ON_PREEMPT)
    #[arg(long, value_name = "resume|cancel", value_parser = parse_on_preempt)]
    pub on_preempt: Option<tao_slurm_engine::attempts::OnPreempt>,
    /// Preemptions survived before the job ends Canceled (default 10, TAO_SLURM_MAX_PREEMPTIONS)
    #[arg(long)]
    pub max_preemptions: Option<u32>,
    /// Seconds between GPU samples on each node (0: none; default TAO_SLURM_GPU_SAMPLE_SECS)
    #[arg(long, value_name = "SECS")]
    pub gpu_sample_secs: Option<u32>,
    /// Every GPU idle this long: the job is idle (0: never; default TAO_SLURM_GPU_IDLE_SECS)
    #[arg(long, value_name = "SECS")]
    pub gpu_idle_secs: Option<u64>,
    /// What an idle job does: notify or cancel (default TAO_SLURM_GPU_IDLE_ACTION)
    #[arg(long, value_name = "notify|cancel", value_parser = |t: &str| tao_slurm_engine::gpu::IdleAction::parse("--gpu-idle-action", t))]
    pub gpu_idle_action: Option<tao_slurm_engine::gpu::IdleAction>,
    /// A node's GPUs idle and no progress this long: the job is hung (0: never; default TAO_SLURM_GPU_HANG_SECS)
    #[arg(long, value_name = "SECS")]
    pub gpu_hang_secs: Option<u64>,
    /// What a hung job does: notify, cancel, or restart from its newest checkpoint without the hung
    /// nodes (default TAO_SLURM_GPU_HANG_ACTION)
    #[arg(long, value_name = "notify|cancel|restart", value_parser = |t: &str| tao_slurm_engine::gpu::HangAction::parse("--gpu-hang-action", t))]
    pub gpu_hang_action: Option<tao_slurm_engine::gpu::HangAction>,
    /// The training's total time in hours: bounds the queue-length runs the job may use (shown as
    /// `attempt 3 of at most 7`), instead of --max-timeout-requeues
    #[arg(long = "total-time", value_name = "HOURS")]
    pub total_time_hours: Option<f64>,
    /// Environment for the container, NAME=VALUE (repeatable)
    #[arg(long = "env", value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// A secret variable NAME whose value is read from the submitting environment or --secret-env-file
    #[arg(long = "secret-env", value_name = "NAME")]
    pub secret_env: Vec<String>,
    /// An env file (NAME=VALUE lines) holding secret values
    #[arg(long, value_name = "PATH")]
    pub secret_env_file: Option<PathBuf>,
    /// Extra container mount SRC[:DST[:ro]] (repeatable), added to /lustre
    #[arg(long = "mount", value_name = "SRC[:DST]")]
    pub mounts: Vec<String>,
    /// Do not add the default /lustre mount
    #[arg(long)]
    pub no_default_mount: bool,
    #[arg(long)]
    pub container_workdir: Option<String>,
    /// Send this local directory with the job (honouring .gitignore and .taoslurmignore); the
    /// command runs in its unpacked copy
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<String>,
    #[arg(long)]
    pub no_container_mount_home: bool,
    /// Extra sbatch option from an allow-list, NAME=VALUE (e.g. mail-type=END; repeatable)
    #[arg(long = "sbatch-option", value_name = "NAME=VALUE")]
    pub sbatch_options: Vec<String>,
    /// Do not requeue the job (neither on its inner timeout nor on node failure)
    #[arg(long)]
    pub no_requeue: bool,
    /// An input by spec key, KEY=URI (lustre:///path, slurm://path, /path; s3:// hf_model:// hf_dataset://
    /// ngc:// for small auxiliary inputs); repeatable
    #[arg(long = "input", value_name = "KEY=URI")]
    pub inputs: Vec<String>,
    /// A dataset root on shared storage; it must hold --dataset-file (default annotations.json)
    #[arg(long, value_name = "URI")]
    pub dataset_root: Option<String>,
    /// A file the dataset root must hold (repeatable)
    #[arg(long = "dataset-file", value_name = "PATH")]
    pub dataset_files: Vec<String>,
    /// Use the registry image directly instead of the squashfs cache (every node pulls it)
    #[arg(long)]
    pub no_sqsh: bool,
    /// If converting the image fails, submit with the registry image anyway
    #[arg(long)]
    pub allow_registry_pull: bool,
    /// A label for the job
    #[arg(long)]
    pub name: Option<String>,
    /// Run the command as one shell string with bash -c
    #[arg(long)]
    pub shell: bool,
    /// A Cosmos-RL job sized by this config (TOML, read here): controller, policy and rollout roles
    #[arg(long, value_name = "FILE")]
    pub cosmos_config: Option<PathBuf>,
    /// The command of one Cosmos-RL role when it differs from the job's, ROLE=COMMAND (controller,
    /// policy or rollout; one shell string run by bash -c); repeatable
    #[arg(long = "cosmos-command", value_name = "ROLE=COMMAND")]
    pub cosmos_commands: Vec<String>,
    /// A sweep over an environment value, NAME=V1,V2,... (repeatable: every combination is a variant;
    /// all variants go to Slurm as one job array)
    #[arg(long = "grid", value_name = "NAME=V1,V2")]
    pub grid: Vec<String>,
    /// A sweep over a command argument, OPTION=V1,V2,... (each variant's command gets `OPTION VALUE`
    /// appended; write `--grid-arg=--lr=0.1,0.01` when OPTION starts with a dash); repeatable
    #[arg(long = "grid-arg", value_name = "OPTION=V1,V2")]
    pub grid_args: Vec<String>,
    /// One explicit sweep variant, NAME=V[,NAME=V...] of environment values (repeatable)
    #[arg(long = "variant", value_name = "NAME=V,...")]
    pub variants: Vec<String>,
    /// At most this many sweep variants run at once (the job array's %N)
    #[arg(long)]
    pub max_concurrent: Option<u32>,
    /// Run after another job: JOB[:ok|:notok|:any] (a job id or prefix, or a sweep or pipeline id for
    /// all its jobs; ok = after success, the default); repeatable. Kept across the other job's retries
    #[arg(long = "after", value_name = "JOB[:ok|:notok|:any]")]
    pub after: Vec<String>,
    /// Tell a webhook of the job's state changes (started, finished, failed, retried, preempted,
    /// stuck pending): an http(s) URL, `slack:URL` for Slack's `{"text"}` form, `json:URL` for the
    /// generic one (a bare URL: Slack's on hooks.slack.com); repeatable
    #[arg(long = "notify", value_name = "URL")]
    pub notify: Vec<String>,
    /// The command run in the container, after `--`
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

impl JobArgs {
    /// The job file (if any) with the flags laid over it.
    pub fn to_spec(&self) -> Result<JobSpec, Error> {
        let base = match &self.spec_file {
            Some(p) => tao_slurm_engine::spec_file::read_job_file(p)?,
            None => JobSpec::default(),
        };
        let pairs = |field: &str, items: &[String]| -> Result<BTreeMap<String, String>, Error> {
            items.iter().map(|e| parse_pair(field, e).map_err(Error::from)).collect()
        };
        let flags = JobSpec {
            image: self.image.clone().unwrap_or_default(),
            command: self.command.clone(),
            shell: self.shell,
            gpus: self.gpus,
            total_gpus: self.total_gpus,
            nodes: self.nodes,
            partition: self.partition.clone(),
            time_hours: self.time_hours,
            timeout_hours: self.timeout_hours,
            requeue: if self.no_requeue { Some(false) } else { None },
            env: pairs("env", &self.env)?,
            secret_env: self.secret_env.clone(),
            mounts: self.mounts.clone(),
            replace_default_mounts: self.no_default_mount,
            container_workdir: self.container_workdir.clone(),
            workdir: self.workdir.clone(),
            workdir_archive: None,
            no_container_mount_home: self.no_container_mount_home,
            sbatch_options: pairs("sbatch_options", &self.sbatch_options)?,
            name: self.name.clone(),
            max_timeout_requeues: self.max_timeout_requeues,
            checkpoint_grace_seconds: self.checkpoint_grace,
            checkpoint_patterns: self.checkpoint_patterns.clone(),
            on_preempt: self.on_preempt,
            max_preemptions: self.max_preemptions,
            total_time_hours: self.total_time_hours,
            inputs: pairs("inputs", &self.inputs)?,
            dataset_root: self.dataset_root.clone(),
            dataset_files: self.dataset_files.clone(),
            no_sqsh: self.no_sqsh,
            allow_registry_pull: self.allow_registry_pull,
            cosmos_rl: self.cosmos_flags()?,
            gpu_watch: self.gpu_watch_flags(),
            specs: None,
            exclusive: self.exclusive.then_some(true),
            sweep: self.sweep_flags()?,
            after: self.after.clone(),
            steps: Vec::new(),
            notify: self.notify.clone(),
            ..self.placement.spec()
        };
        Ok(base.overlay(flags))
    }

    /// The GPU watch flags as a `[gpu_watch]` section (None without them).
    fn gpu_watch_flags(&self) -> Option<tao_slurm_engine::gpu::GpuWatchSpec> {
        let w = tao_slurm_engine::gpu::GpuWatchSpec {
            sample_secs: self.gpu_sample_secs,
            idle_percent: None,
            idle_secs: self.gpu_idle_secs,
            hang_secs: self.gpu_hang_secs,
            idle_action: self.gpu_idle_action,
            hang_action: self.gpu_hang_action,
        };
        (w != tao_slurm_engine::gpu::GpuWatchSpec::default()).then_some(w)
    }

    /// The sweep flags as a `[sweep]` section (None without them).
    fn sweep_flags(&self) -> Result<Option<SweepSpec>, Error> {
        if self.grid.is_empty()
            && self.grid_args.is_empty()
            && self.variants.is_empty()
            && self.max_concurrent.is_none()
        {
            return Ok(None);
        }
        let axis = |field: &str, text: &str| -> Result<(String, Vec<String>), Error> {
            let (name, values) = parse_pair(field, text)?;
            Ok((name, values.split(',').map(String::from).collect()))
        };
        let mut sweep = SweepSpec { max_concurrent: self.max_concurrent, ..SweepSpec::default() };
        for g in &self.grid {
            let (name, values) = axis("sweep.grid", g)?;
            sweep.grid.insert(name, values);
        }
        for g in &self.grid_args {
            let (name, values) = axis("sweep.arg_grid", g)?;
            sweep.arg_grid.insert(name, values);
        }
        for v in &self.variants {
            let env = v.split(',').map(|pair| parse_pair("sweep.variants", pair)).collect::<Result<_, _>>()?;
            sweep.variants.push(VariantSpec { env, args: Vec::new() });
        }
        Ok(Some(sweep))
    }

    /// The Cosmos-RL flags as a `[cosmos_rl]` section (None without them); the config is read here.
    fn cosmos_flags(&self) -> Result<Option<CosmosRlSpec>, Error> {
        if self.cosmos_config.is_none() && self.cosmos_commands.is_empty() {
            return Ok(None);
        }
        let mut section = CosmosRlSpec {
            config: self.cosmos_config.as_ref().map(|p| p.display().to_string()),
            ..CosmosRlSpec::default()
        };
        tao_slurm_engine::spec_file::read_cosmos_config(&mut section, Path::new("."))?;
        for c in &self.cosmos_commands {
            section.commands.set_from_flag(c)?;
        }
        Ok(Some(section))
    }
}

fn parse_on_preempt(text: &str) -> Result<tao_slurm_engine::attempts::OnPreempt, String> {
    tao_slurm_engine::attempts::OnPreempt::parse(text)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;
    use tao_slurm_engine::spec::doors::{missing_at, Door};

    /// Every field of a job is a flag of `submit` and of `render` (by the name `spec::doors` gives it
    /// at the command line), but those that list says it leaves out.
    #[test]
    fn every_job_field_is_a_flag_of_submit_and_render() {
        let cli = crate::Cli::command();
        for sub in ["submit", "render"] {
            let command = cli.find_subcommand(sub).unwrap_or_else(|| panic!("no {sub} subcommand"));
            let ids: Vec<String> = command.get_arguments().map(|a| a.get_id().to_string()).collect();
            assert!(ids.len() > 30, "{sub}: {ids:?}");
            let missing = missing_at(Door::Cli, |name| ids.iter().any(|id| id == name));
            assert!(missing.is_empty(), "job fields missing from `{sub}`'s flags: {missing:?}");
        }
    }
}
