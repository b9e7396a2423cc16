use crate::config::Settings;
use crate::error::Error;
use crate::Client;
use clap::Args;

#[derive(Args, Debug)]
pub struct LogsCmd {
    pub job_id: String,
    /// Only the last N lines of each file
    #[arg(long)]
    pub tail: Option<u32>,
    #[arg(long)]
    pub json: bool,
}

impl LogsCmd {
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        let logs = Client::new(settings)?.job_logs(&self.job_id, self.tail)?;
        if self.json {
            super::print_json(&logs);
        } else {
            println!("==> {} <==", logs.stdout_path);
            print!("{}", logs.stdout);
            println!("==> {} <==", logs.stderr_path);
            print!("{}", logs.stderr);
        }
        Ok(0)
    }
}
