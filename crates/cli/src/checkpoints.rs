//! `checkpoints JOB`: the checkpoints in a job's results directory, newest last (the job's patterns,
//! TAO's by default), listed now.

use super::output::{CheckpointsReport, Format};
use clap::Args;
use tao_slurm_engine::config::Settings;
use tao_slurm_engine::error::Error;
use tao_slurm_engine::Client;

#[derive(Args, Debug)]
pub struct CheckpointsCmd {
    /// Job id (or a unique prefix)
    pub job_id: String,
    #[arg(long)]
    pub json: bool,
}

impl CheckpointsCmd {
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        let checkpoints = Client::new(settings)?.checkpoint_files(&self.job_id)?;
        let report = CheckpointsReport { job_id: self.job_id, checkpoints };
        super::output::emit(Format::from_json_flag(self.json), &report);
        Ok(0)
    }
}
