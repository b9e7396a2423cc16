use crate::config::Settings;
use crate::error::Error;
use crate::spec::{parse_env_pair, JobSpec};
use crate::Client;
use clap::Args;

/// The job-describing flags shared by `submit` and `render`.
#[derive(Args, Debug, Clone)]
pub struct JobArgs {
    /// Container image: registry/image:tag, registry#image:tag, docker://..., or /path/image.sqsh
    #[arg(long)]
    pub image: String,
    /// GPUs per node (always per node)
    #[arg(long)]
    pub gpus: Option<u32>,
    /// Total GPUs, packed into full nodes (instead of --gpus)
    #[arg(long)]
    pub total_gpus: Option<u32>,
    #[arg(long)]
    pub nodes: Option<u32>,
    #[arg(long)]
    pub cpus_per_task: Option<u32>,
    /// Partition (or comma-separated list); default SLURM_PARTITION
    #[arg(long)]
    pub partition: Option<String>,
    #[arg(long)]
    pub account: Option<String>,
    /// Wall time in hours (default 4)
    #[arg(long)]
    pub time_hours: Option<f64>,
    /// Inner timeout in hours, shorter than the wall time (default 3.8)
    #[arg(long)]
    pub timeout_hours: Option<f64>,
    /// Environment for the container, NAME=VALUE (repeatable)
    #[arg(long = "env", value_name = "NAME=VALUE")]
    pub env: Vec<String>,
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
    /// Do not requeue the job on its inner timeout
    #[arg(long)]
    pub no_requeue: bool,
    /// A label for the job
    #[arg(long)]
    pub name: Option<String>,
    /// Run the command as one shell string with bash -c
    #[arg(long)]
    pub shell: bool,
    /// The command run in the container, after `--`
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

impl JobArgs {
    pub fn to_spec(&self) -> Result<JobSpec, Error> {
        let env = self.env.iter().map(|e| parse_env_pair(e)).collect::<Result<Vec<_>, _>>()?;
        Ok(JobSpec {
            image: self.image.clone(),
            command: self.command.clone(),
            shell: self.shell,
            gpus: self.gpus,
            total_gpus: self.total_gpus,
            nodes: self.nodes,
            cpus_per_task: self.cpus_per_task,
            partition: self.partition.clone(),
            account: self.account.clone(),
            time_hours: self.time_hours,
            timeout_hours: self.timeout_hours,
            requeue: if self.no_requeue { Some(false) } else { None },
            env,
            mounts: self.mounts.clone(),
            replace_default_mounts: self.no_default_mount,
            container_workdir: self.container_workdir.clone(),
            no_container_mount_home: self.no_container_mount_home,
            name: self.name.clone(),
            max_timeout_requeues: None,
        })
    }
}

#[derive(Args, Debug)]
pub struct SubmitCmd {
    #[command(flatten)]
    pub job: JobArgs,
    /// Print the result as JSON
    #[arg(long)]
    pub json: bool,
}

impl SubmitCmd {
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        let spec = self.job.to_spec()?;
        // Bad settings or a bad spec fail here, before any connection is attempted.
        settings.require_remote()?;
        crate::plan::resolve(&spec, &settings)?;
        let client = Client::new(settings)?;
        let submitted = client.create_job(&spec)?;
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
