use clap::Args;
use tao_slurm_engine::config::Settings;
use tao_slurm_engine::error::Error;
use tao_slurm_engine::Client;

#[derive(Args, Debug)]
pub struct RetryCmd {
    /// Job id (or a unique prefix) of a job that ended Error or Canceled
    pub job_id: String,
    #[arg(long)]
    pub json: bool,
}

impl RetryCmd {
    /// A new attempt, from the job's newest checkpoint; a job already running again is answered as is.
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        let view = Client::new(settings)?.retry_job(&self.job_id)?;
        super::output::emit(super::output::Format::from_json_flag(self.json), &super::output::JobsReport(vec![view]));
        Ok(0)
    }
}
