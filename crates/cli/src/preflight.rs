use clap::Args;
use tao_slurm_engine::config::Settings;
use tao_slurm_engine::error::{exit_code, Error};

#[derive(Args, Debug)]
pub struct PreflightCmd {
    #[arg(long)]
    pub json: bool,
}

impl PreflightCmd {
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        let report = tao_slurm_engine::client::preflight(&settings);
        let ok = report.ok;
        super::output::emit(super::output::Format::from_json_flag(self.json), &report);
        Ok(if ok { 0 } else { exit_code::JOB_FAILED })
    }
}
