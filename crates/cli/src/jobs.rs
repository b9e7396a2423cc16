use clap::Args;
use tao_slurm_engine::client::JobFilter;
use tao_slurm_engine::config::Settings;
use tao_slurm_engine::error::Error;
use tao_slurm_engine::filter::{parse_age, parse_status};
use tao_slurm_engine::Client;

#[derive(Args, Debug)]
pub struct ListCmd {
    /// Only the jobs of these sweeps or pipelines (ids or prefixes)
    pub sweep_ids: Vec<String>,
    /// List the sweeps and pipelines (with their jobs' statuses counted) instead of jobs
    #[arg(long)]
    pub sweeps: bool,
    /// Only jobs that are not yet terminal
    #[arg(long)]
    pub active: bool,
    /// Only jobs in this status (Pending, Running, Complete, Error, Canceled, Paused, Pausing, Resuming)
    #[arg(long)]
    pub status: Option<String>,
    /// Only jobs submitted within this long (30m, 2h, 7d)
    #[arg(long)]
    pub since: Option<String>,
    #[arg(long)]
    pub json: bool,
}

impl ListCmd {
    /// Served from the state file: no remote call.
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        // Both words are checked before the state file is opened.
        let filter = JobFilter {
            active_only: self.active,
            statuses: self.status.as_deref().map(|s| parse_status("status", s)).transpose()?.into_iter().collect(),
            since_secs: self.since.as_deref().map(|t| parse_age("since", t)).transpose()?,
            groups: self.sweep_ids,
            limit: None,
        };
        let client = Client::new(settings)?;
        let format = super::output::Format::from_json_flag(self.json);
        if self.sweeps {
            super::output::emit(format, &super::output::GroupsReport(client.groups()?));
            return Ok(0);
        }
        super::output::emit(format, &super::output::JobsReport(client.list(&filter)?.jobs));
        Ok(0)
    }
}

#[derive(Args, Debug)]
pub struct EventsCmd {
    pub job_id: String,
    #[arg(long)]
    pub json: bool,
}

impl EventsCmd {
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        let events = Client::new(settings)?.events(&self.job_id)?;
        let rows = events.into_iter().map(|(at, kind, detail)| super::output::EventRow { at, kind, detail }).collect();
        super::output::emit(super::output::Format::from_json_flag(self.json), &super::output::EventsReport(rows));
        Ok(0)
    }
}
