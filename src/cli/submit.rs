pub use super::job_args::JobArgs;
use crate::config::Settings;
use crate::error::Error;
use crate::Client;
use clap::Args;

#[derive(Args, Debug)]
pub struct SubmitCmd {
    #[command(flatten)]
    pub job: JobArgs,
    /// Run the online checks (connection, partition limits) and print what would be submitted
    #[arg(long)]
    pub dry_run: bool,
    /// Start a background monitor (unless one runs) that follows the job and performs its retries
    #[arg(long)]
    pub monitor: bool,
    /// Print the result as JSON
    #[arg(long)]
    pub json: bool,
}

impl SubmitCmd {
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        let spec = self.job.to_spec()?;
        // Bad settings, a bad spec or a missing secret fail here, before any connection is attempted.
        settings.require_remote()?;
        let secrets = self.job.secrets(&spec)?;
        let plan = crate::plan::resolve(&spec, &settings)?;
        for (key, location) in &plan.inputs {
            if let Some(w) = crate::spec::dataset_warning(key, location) {
                eprintln!("{w}");
            }
        }
        for note in plan.cosmos.iter().flat_map(|c| &c.notes) {
            eprintln!("warning: {note}");
        }
        let client = Client::new(settings)?;
        if self.dry_run {
            let plan = client.check_online(&spec)?;
            super::render::print_plan(&client.staged_files(&spec, &plan), &plan, &secrets, self.json);
            return Ok(0);
        }
        let submitted = client.create_job(&spec, &secrets)?;
        if self.monitor && super::monitor::start_background_monitor(client.settings())? {
            eprintln!("started a background monitor (log: {}.monitor.log)", client.settings().state_path.display());
        }
        if self.json {
            super::print_json(&submitted);
        } else {
            println!(
                "Submitted job {} (Slurm job {} via {})",
                submitted.job_id, submitted.slurm_job_id, submitted.login_host
            );
            println!("Follow it with: tao-slurm watch {}", submitted.job_id);
        }
        Ok(0)
    }
}
