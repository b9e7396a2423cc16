use super::submit::JobArgs;
use crate::config::Settings;
use crate::error::Error;
use clap::Args;
use serde_json::json;

#[derive(Args, Debug)]
pub struct RenderCmd {
    #[command(flatten)]
    pub job: JobArgs,
    #[arg(long)]
    pub json: bool,
}

impl RenderCmd {
    /// Offline: no transport is ever opened here.
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        let spec = self.job.to_spec()?;
        let plan = crate::plan::resolve(&spec, &settings)?;
        let hosts: Vec<String> = settings.login_hosts.iter().map(|h| h.label()).collect();
        let spec_json = serde_json::to_value(&spec).expect("spec serialises");
        let files =
            crate::script::staged_files(&plan, &spec_json, settings.slurm_user.as_deref().unwrap_or(""), &hosts);
        if self.json {
            let files: Vec<_> = files.iter().map(|f| json!({"path": f.path, "contents": f.contents})).collect();
            super::print_json(&json!({"job_id": plan.layout.job_id, "plan": plan, "files": files}));
        } else {
            for f in &files {
                println!("==> {} <==\n{}", f.path, f.contents);
                if !f.contents.ends_with('\n') {
                    println!();
                }
            }
        }
        Ok(0)
    }
}
