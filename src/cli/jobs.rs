use crate::config::Settings;
use crate::error::Error;
use crate::spec::SpecError;
use crate::{Client, PlatformStatus};
use clap::Args;

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
    /// Only jobs in this status (Pending, Running, Complete, Error, Canceled, Paused)
    #[arg(long)]
    pub status: Option<String>,
    /// Only jobs submitted within this long (30m, 2h, 7d)
    #[arg(long)]
    pub since: Option<String>,
    #[arg(long)]
    pub json: bool,
}

/// `30s`, `30m`, `2h`, `7d` -> seconds.
fn parse_age(text: &str) -> Option<i64> {
    let text = text.trim();
    let (num, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len()));
    let n: i64 = num.parse().ok()?;
    let mult = match unit {
        "s" | "" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        "w" => 7 * 86400,
        _ => return None,
    };
    Some(n * mult)
}

impl ListCmd {
    /// Served from the state file: no remote call.
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        let status = match &self.status {
            Some(s) => Some(PlatformStatus::parse(s).ok_or_else(|| {
                SpecError::new(
                    "status",
                    format!("{s:?} is not one of Pending, Running, Complete, Error, Canceled, Paused"),
                )
            })?),
            None => None,
        };
        let since = match &self.since {
            Some(t) => Some(
                parse_age(t)
                    .ok_or_else(|| SpecError::new("since", format!("{t:?} is not an age like 30m, 2h or 7d")))?,
            ),
            None => None,
        };
        let now = crate::clock::now();
        let client = Client::new(settings)?;
        let format = super::output::Format::from_json_flag(self.json);
        if self.sweeps {
            super::output::emit(format, &super::output::GroupsReport(client.groups()?));
            return Ok(0);
        }
        let only: Option<std::collections::HashSet<String>> = if self.sweep_ids.is_empty() {
            None
        } else {
            Some(client.expand_ids(&self.sweep_ids)?.into_iter().collect())
        };
        let views: Vec<_> = client
            .list(self.active)?
            .into_iter()
            .filter(|v| only.as_ref().is_none_or(|o| o.contains(&v.job_id)))
            .filter(|v| status.is_none_or(|s| v.status == s))
            .filter(|v| since.is_none_or(|age| now - v.created_at <= age))
            .collect();
        super::output::emit(format, &super::output::JobsReport(views));
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
