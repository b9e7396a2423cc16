use clap::Args;
use tao_slurm_engine::config::Settings;
use tao_slurm_engine::error::Error;
use tao_slurm_engine::Client;

#[derive(Args, Debug)]
pub struct CancelCmd {
    /// Job ids (or prefixes), or sweep/pipeline ids (their jobs that have not finished)
    #[arg(required = true)]
    pub job_ids: Vec<String>,
    #[arg(long)]
    pub json: bool,
}

impl CancelCmd {
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        let views = Client::new(settings)?.cancel_jobs(&self.job_ids)?;
        super::output::emit(super::output::Format::from_json_flag(self.json), &super::output::JobsReport(views));
        Ok(0)
    }
}
