//! `checkpoints JOB`: the checkpoints in a job's results directory, newest last (the job's patterns,
//! TAO's by default), listed now.

use super::output::{Format, Report};
use crate::config::Settings;
use crate::error::Error;
use crate::ops::files::CheckpointFile;
use crate::Client;
use clap::Args;
use schemars::JsonSchema;
use serde::Serialize;

#[derive(Args, Debug)]
pub struct CheckpointsCmd {
    /// Job id (or a unique prefix)
    pub job_id: String,
    #[arg(long)]
    pub json: bool,
}

/// `checkpoints`: a job's checkpoints, newest last; the newest is what its next attempt resumes from.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CheckpointsReport {
    pub job_id: String,
    /// Paths relative to the job's results directory, oldest first.
    pub checkpoints: Vec<CheckpointFile>,
}

impl Report for CheckpointsReport {
    fn human(&self) -> String {
        if self.checkpoints.is_empty() {
            return format!("job {} has no checkpoint yet\n", self.job_id);
        }
        self.checkpoints.iter().map(|c| format!("{:>12}  {}\n", c.size, super::clean(&c.path))).collect()
    }
}

impl CheckpointsCmd {
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        let checkpoints = Client::new(settings)?.checkpoint_files(&self.job_id)?;
        let report = CheckpointsReport { job_id: self.job_id, checkpoints };
        super::output::emit(Format::from_json_flag(self.json), &report);
        Ok(0)
    }
}
