use crate::config::Settings;
use crate::engine::preflight::run_preflight;
use crate::error::{exit_code, Error};
use clap::Args;

#[derive(Args, Debug)]
pub struct PreflightCmd {
    #[arg(long)]
    pub json: bool,
}

impl PreflightCmd {
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        let checks = run_preflight(&settings);
        let ok = checks.iter().all(|c| c.ok || !c.required);
        let format = super::output::Format::from_json_flag(self.json);
        let clusters = crate::preflight::cluster_facts(&checks);
        super::output::emit(format, &super::output::PreflightReport { ok, checks, clusters });
        Ok(if ok { 0 } else { exit_code::JOB_FAILED })
    }
}
