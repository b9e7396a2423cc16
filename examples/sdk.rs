//! The library API on the sandbox cluster: submit a job, follow it with callbacks, read its logs.
//!
//! `bash dev/sandbox/up.sh && set -a && . /var/lib/tao-slurm-sandbox/settings.env && set +a &&
//!  cargo run --example sdk`

use std::collections::HashMap;
use std::time::Duration;
use tao_slurm::client::JobCallbacks;
use tao_slurm::config::Settings;
use tao_slurm::{Client, JobSpec, JobView};

struct Print;

impl JobCallbacks for Print {
    fn on_running(&mut self, job: &JobView) {
        println!("running: {} attempt {} on {}", job.job_id, job.attempt, job.node_list.as_deref().unwrap_or("?"));
    }
    fn on_retry(&mut self, job: &JobView) {
        println!("retry: {} is now attempt {} ({})", job.job_id, job.attempt, job.message);
    }
    fn on_complete(&mut self, job: &JobView) {
        println!("complete: {}", job.job_id);
    }
    fn on_error(&mut self, job: &JobView) {
        println!("error: {}: {}", job.job_id, job.message);
    }
}

fn main() -> Result<(), tao_slurm::Error> {
    // Settings come from flags > environment > ~/.config/tao/.env > defaults, as for the CLI.
    let settings = Settings::from_sources(&tao_slurm::config::gather(HashMap::new(), None)?)?;
    let client = Client::new(settings)?;
    let spec = JobSpec {
        image: "nvcr.io/nvidia/tao/tao-toolkit:6.26.3-pyt".into(),
        nodes: Some(2),
        gpus: Some(8),
        shell: true,
        command: vec!["echo rank $NODE_RANK of $WORLD_SIZE".into()],
        ..Default::default()
    };
    let submitted = client.create_job(&spec, &Default::default())?;
    println!("submitted {} as Slurm job {}", submitted.job_id, submitted.slurm_job_id);
    let done = client.wait_for_job(&submitted.job_id, Duration::from_secs(2), &mut Print)?;
    let logs = client.job_logs(&done.job_id, None, None)?;
    print!("{}", logs.stdout);
    Ok(())
}
