use super::output::{PathRow, PathsReport};
use clap::Args;
use tao_slurm_engine::client::PathCheck;
use tao_slurm_engine::config::Settings;
use tao_slurm_engine::error::{exit_code, Error};
use tao_slurm_engine::Client;

#[derive(Args, Debug)]
pub struct CheckPathCmd {
    /// URIs: lustre:///path, slurm://path, /path (s3://, hf_model://, hf_dataset://, ngc:// are not checked)
    #[arg(required = true)]
    pub uris: Vec<String>,
    #[arg(long)]
    pub json: bool,
}

impl CheckPathCmd {
    /// The same check a submit makes, on its own: exit 0 only if every path exists.
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        let results = Client::new(settings)?.check_paths(&self.uris)?;
        let format = super::output::Format::from_json_flag(self.json);
        let mut ok = true;
        let mut paths = Vec::new();
        for (uri, r) in &results {
            let (state, detail) = match r {
                PathCheck::Exists(path) => ("exists", path.clone()),
                PathCheck::Missing(path) => ("missing", path.clone()),
                PathCheck::NotChecked(uri) => ("not checked (fetched inside the job)", uri.clone()),
                PathCheck::Refused(message) => ("refused", message.clone()),
            };
            ok &= matches!(state, "exists" | "not checked (fetched inside the job)");
            paths.push(PathRow { uri: uri.clone(), state: state.to_string(), detail });
        }
        super::output::emit(format, &PathsReport { ok, paths });
        Ok(if ok { 0 } else { exit_code::JOB_FAILED })
    }
}
