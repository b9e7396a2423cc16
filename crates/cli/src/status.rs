use clap::Args;
use tao_slurm_engine::config::Settings;
use tao_slurm_engine::error::Error;
use tao_slurm_engine::Client;

#[derive(Args, Debug)]
pub struct StatusCmd {
    /// Job ids (or unambiguous prefixes), or sweep/pipeline ids (their jobs); none means every active job
    pub job_ids: Vec<String>,
    #[arg(long)]
    pub json: bool,
}

impl StatusCmd {
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        let client = Client::new(settings)?;
        // One job: its status with its attempts. A sweep or pipeline id: its jobs.
        let one_job = self.job_ids.len() == 1 && !client.is_group(&self.job_ids[0])?;
        let views = if one_job { vec![client.job_status(&self.job_ids[0])?] } else { client.refresh(&self.job_ids)? };
        // Always a list, even of one job: a script reads every answer the same way.
        super::output::emit(super::output::Format::from_json_flag(self.json), &super::output::JobsReport(views));
        if let Some(note) = client.unsent_notifications()? {
            eprintln!("{note}");
        }
        Ok(0)
    }
}
