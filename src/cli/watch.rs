use crate::config::Settings;
use crate::error::{exit_code, Error};
use crate::{Client, PlatformStatus};
use clap::Args;
use std::collections::HashMap;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct WatchCmd {
    #[arg(required = true)]
    pub job_ids: Vec<String>,
    /// Seconds between refreshes
    #[arg(long, default_value_t = 5.0)]
    pub interval: f64,
    /// Print each change as a JSON line
    #[arg(long)]
    pub json: bool,
}

impl WatchCmd {
    /// Poll until every job is terminal. Never gives up because time passed; Ctrl-C only detaches.
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        if !(self.interval.is_finite() && self.interval >= 0.2) {
            return Err(Error::Spec(crate::spec::SpecError::new("interval", "must be at least 0.2 seconds")));
        }
        let client = Client::new(settings)?;
        eprintln!(
            "Watching {}; Ctrl-C detaches (the job keeps running). Re-attach with: tao-slurm watch {}",
            self.job_ids.join(" "),
            self.job_ids.join(" ")
        );
        let mut last: HashMap<String, (PlatformStatus, Option<String>, String)> = HashMap::new();
        loop {
            let views = client.refresh(&self.job_ids)?;
            for v in &views {
                let key = (v.status, v.slurm_state.clone(), v.message.clone());
                if last.get(&v.job_id) != Some(&key) {
                    if self.json {
                        println!("{}", serde_json::to_string(v).expect("serialisable"));
                    } else {
                        println!(
                            "{}  {:<8} {:<12} {}",
                            v.job_id,
                            v.status.as_str(),
                            v.slurm_state.as_deref().unwrap_or("-"),
                            v.message
                        );
                    }
                    last.insert(v.job_id.clone(), key);
                }
            }
            if views.iter().all(|v| v.status.is_terminal()) {
                let all_complete = views.iter().all(|v| v.status == PlatformStatus::Complete);
                return Ok(if all_complete { 0 } else { exit_code::JOB_FAILED });
            }
            std::thread::sleep(Duration::from_secs_f64(self.interval));
        }
    }
}
