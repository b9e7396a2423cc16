//! `pause` and `resume`: release a job's allocation and take it up again from its newest checkpoint.

use clap::Args;
use std::path::PathBuf;
use tao_slurm_engine::config::Settings;
use tao_slurm_engine::error::Error;
use tao_slurm_engine::Client;

#[derive(Args, Debug)]
pub struct PauseCmd {
    /// Job id (or a unique prefix)
    pub job_id: String,
    /// Send the checkpoint signal (USR2) first and cancel only when the job ends or its checkpoint
    /// grace passes (the job is Pausing until then); without it the job is cancelled at once
    #[arg(long)]
    pub graceful: bool,
    #[arg(long)]
    pub json: bool,
}

impl PauseCmd {
    /// The job as it is after the pause: Paused, or Pausing while a graceful pause waits.
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        let view = Client::new(settings)?.pause_job(&self.job_id, self.graceful)?;
        super::output::emit(super::output::Format::from_json_flag(self.json), &super::output::JobsReport(vec![view]));
        Ok(0)
    }
}

#[derive(Args, Debug)]
pub struct ResumeCmd {
    /// Job id (or a unique prefix) of a paused job
    pub job_id: String,
    /// A JSON file of specs replacing the job's own (TAO's resume body's `specs`)
    #[arg(long = "spec", value_name = "FILE")]
    pub spec: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
}

impl ResumeCmd {
    /// A new attempt from the newest checkpoint (Resuming until Slurm runs it); a job already
    /// resumed is answered as it is.
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        let specs = self.spec.as_deref().map(tao_slurm_engine::spec_file::read_specs_file).transpose()?;
        let view = Client::new(settings)?.resume_job(&self.job_id, specs.as_ref())?;
        super::output::emit(super::output::Format::from_json_flag(self.json), &super::output::JobsReport(vec![view]));
        Ok(0)
    }
}
