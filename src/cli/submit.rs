use crate::config::Settings;
use crate::error::Error;
use crate::spec::{parse_pair, CosmosRlSpec, JobSpec, SecretValues, SpecError};
use crate::Client;
use clap::Args;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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
    #[arg(long)]
    pub cpus_per_task: Option<u32>,
    /// Memory per node (Slurm --mem: 64G, 512M, 0 for all)
    #[arg(long)]
    pub memory: Option<String>,
    /// Partition (or comma-separated list); default SLURM_PARTITION
    #[arg(long)]
    pub partition: Option<String>,
    #[arg(long)]
    pub account: Option<String>,
    #[arg(long)]
    pub qos: Option<String>,
    #[arg(long)]
    pub constraint: Option<String>,
    /// Nodes to avoid (node[1-3],node7)
    #[arg(long)]
    pub exclude: Option<String>,
    #[arg(long)]
    pub reservation: Option<String>,
    /// Wall time in hours (default 4)
    #[arg(long)]
    pub time_hours: Option<f64>,
    /// Inner timeout in hours, shorter than the wall time (default 3.8)
    #[arg(long)]
    pub timeout_hours: Option<f64>,
    /// Timeout requeues before the job ends as timed out (default 3)
    #[arg(long)]
    pub max_timeout_requeues: Option<u32>,
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
    /// The command run in the container, after `--`
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

impl JobArgs {
    /// The job file (if any) with the flags laid over it.
    pub fn to_spec(&self) -> Result<JobSpec, Error> {
        let base = match &self.spec_file {
            Some(p) => JobSpec::from_toml_file(p)?,
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
            cpus_per_task: self.cpus_per_task,
            memory: self.memory.clone(),
            partition: self.partition.clone(),
            account: self.account.clone(),
            qos: self.qos.clone(),
            constraint: self.constraint.clone(),
            exclude: self.exclude.clone(),
            reservation: self.reservation.clone(),
            time_hours: self.time_hours,
            timeout_hours: self.timeout_hours,
            requeue: if self.no_requeue { Some(false) } else { None },
            env: pairs("env", &self.env)?,
            secret_env: self.secret_env.clone(),
            mounts: self.mounts.clone(),
            replace_default_mounts: self.no_default_mount,
            container_workdir: self.container_workdir.clone(),
            no_container_mount_home: self.no_container_mount_home,
            sbatch_options: pairs("sbatch_options", &self.sbatch_options)?,
            name: self.name.clone(),
            max_timeout_requeues: self.max_timeout_requeues,
            inputs: pairs("inputs", &self.inputs)?,
            // A job file's [specs] table (no flag sets a document).
            specs: Default::default(),
            dataset_root: self.dataset_root.clone(),
            dataset_files: self.dataset_files.clone(),
            no_sqsh: self.no_sqsh,
            allow_registry_pull: self.allow_registry_pull,
            cosmos_rl: self.cosmos_flags()?,
        };
        Ok(base.overlay(flags))
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
        section.read_config(Path::new("."))?;
        for c in &self.cosmos_commands {
            section.commands.set_from_flag(c)?;
        }
        Ok(Some(section))
    }

    /// Values for the spec's secret names, from --secret-env-file and the submitting environment.
    pub fn secrets(&self, spec: &JobSpec) -> Result<SecretValues, Error> {
        let file: BTreeMap<String, String> = match &self.secret_env_file {
            Some(p) => dotenvy::from_path_iter(p)
                .and_then(|it| it.collect::<Result<BTreeMap<_, _>, _>>())
                .map_err(|e| SpecError::new("secret_env_file", format!("cannot read {}: {e}", p.display())))?,
            None => BTreeMap::new(),
        };
        Ok(SecretValues::resolve(&spec.secret_env, &file, &|n| std::env::var(n).ok())?)
    }
}

#[derive(Args, Debug)]
pub struct SubmitCmd {
    #[command(flatten)]
    pub job: JobArgs,
    /// Run the online checks (connection, partition limits) and print what would be submitted
    #[arg(long)]
    pub dry_run: bool,
    /// Start a background monitor (unless one runs) that follows the job and performs its retries
    #[arg(long)]
    pub monitor: bool,
    /// Print the result as JSON
    #[arg(long)]
    pub json: bool,
}

impl SubmitCmd {
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        let spec = self.job.to_spec()?;
        // Bad settings, a bad spec or a missing secret fail here, before any connection is attempted.
        settings.require_remote()?;
        let secrets = self.job.secrets(&spec)?;
        let plan = crate::plan::resolve(&spec, &settings)?;
        for (key, location) in &plan.inputs {
            if let Some(w) = crate::spec::dataset_warning(key, location) {
                eprintln!("{w}");
            }
        }
        for note in plan.cosmos.iter().flat_map(|c| &c.notes) {
            eprintln!("warning: {note}");
        }
        let client = Client::new(settings)?;
        if self.dry_run {
            let plan = client.check_online(&spec)?;
            super::render::print_plan(&client.staged_files(&spec, &plan), &plan, &secrets, self.json);
            return Ok(0);
        }
        let submitted = client.create_job(&spec, &secrets)?;
        if self.monitor && super::monitor::start_background_monitor(client.settings())? {
            eprintln!("started a background monitor (log: {}.monitor.log)", client.settings().state_path.display());
        }
        if self.json {
            super::print_json(&submitted);
        } else {
            println!(
                "Submitted job {} (Slurm job {} via {})",
                submitted.job_id, submitted.slurm_job_id, submitted.login_host
            );
            println!("Follow it with: tao-slurm watch {}", submitted.job_id);
        }
        Ok(0)
    }
}
