use crate::config::Settings;
use crate::error::Error;
use crate::Client;
use clap::Args;

#[derive(Args, Debug)]
pub struct ListCmd {
    /// Only jobs that are not yet terminal
    #[arg(long)]
    pub active: bool,
    #[arg(long)]
    pub json: bool,
}

impl ListCmd {
    /// Served from the state file: no remote call.
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        let views = Client::new(settings)?.list(self.active)?;
        if self.json {
            super::print_json(&views);
        } else {
            super::status::print_table(&views);
        }
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
        if self.json {
            let list: Vec<_> = events
                .iter()
                .map(|(at, kind, detail)| serde_json::json!({"at": at, "kind": kind, "detail": detail}))
                .collect();
            super::print_json(&list);
        } else {
            for (at, kind, detail) in events {
                println!("{at}  {kind:<14} {detail}");
            }
        }
        Ok(0)
    }
}
