use crate::config::Settings;
use crate::error::Error;
use crate::{Client, JobView};
use clap::Args;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};

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
        Ok(0)
    }
}

/// Jobs as a table for people.
pub(crate) fn table(views: &[JobView]) -> String {
    if views.is_empty() {
        return "no jobs\n".into();
    }
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    table.set_header(["job id", "status", "slurm id", "slurm state", "exit", "nodes", "retries", "message"]);
    for v in views {
        table.add_row([
            v.job_id.clone(),
            v.status.to_string(),
            v.slurm_job_id.clone().unwrap_or_default(),
            super::clean(v.slurm_state.as_deref().unwrap_or_default()),
            v.exit_code.map(|c| c.to_string()).unwrap_or_default(),
            super::clean(v.node_list.as_deref().unwrap_or_default()),
            v.retries.to_string(),
            super::clean(&v.message),
        ]);
    }
    format!("{table}\n")
}
