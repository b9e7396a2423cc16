pub use super::job_args::JobArgs;
use clap::Args;
use tao_slurm_engine::client::{MonitorChoice, PreviewChecks, Secrets, Submission, SubmitOptions};
use tao_slurm_engine::config::Settings;
use tao_slurm_engine::error::Error;
use tao_slurm_engine::Client;

#[derive(Args, Debug)]
pub struct SubmitCmd {
    #[command(flatten)]
    pub job: JobArgs,
    /// Run the online checks (connection, partition limits) and print what would be submitted
    #[arg(long)]
    pub dry_run: bool,
    /// Start a background monitor (unless one runs) that follows the job and performs its retries
    /// (`--notify` starts one too: the monitor sends the messages)
    #[arg(long)]
    pub monitor: bool,
    /// Print the result as JSON
    #[arg(long)]
    pub json: bool,
}

impl SubmitCmd {
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        let spec = self.job.to_spec()?;
        if self.dry_run {
            return self.dry_run(settings, &spec);
        }
        let client = Client::new(settings)?;
        // A bar on stderr while the workdir's upload goes, when a person watches it.
        let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
        let mut shown = false;
        let mut show = |sent: u64, total: u64| {
            if tty {
                eprint!("\r{}", super::progress::upload_line(sent, total));
                shown = true;
            }
        };
        let opts = SubmitOptions {
            secrets: Secrets::Lookup { file: self.job.secret_env_file.clone() },
            monitor: MonitorChoice::Asked(self.monitor),
            admit: None,
            progress: Some(&mut show),
            recorded: None,
        };
        let outcome = client.submit(&spec, opts);
        if shown {
            eprintln!();
        }
        let outcome = outcome?;
        if let Some(u) = &outcome.workdir {
            eprintln!(
                "workdir {}: {} files, {} bytes packed, {} bytes uploaded",
                &u.hash[..12],
                u.files,
                u.packed_bytes,
                u.uploaded_bytes
            );
        }
        show_warnings(&outcome.warnings);
        if outcome.monitor_started == Some(true) {
            eprintln!("started a background monitor (log: {}.monitor.log)", client.settings().state_path.display());
        }
        let format = super::output::Format::from_json_flag(self.json);
        match &outcome.submission {
            Submission::Job(j) => super::output::emit(format, j),
            Submission::Sweep(s) => super::output::emit(format, s),
            Submission::Pipeline(p) => super::output::emit(format, p),
        }
        Ok(0)
    }

    /// The online checks of a job, a sweep's or a pipeline's first job, and what would be staged:
    /// the client's one preview; nothing is submitted.
    fn dry_run(&self, settings: Settings, spec: &tao_slurm_engine::JobSpec) -> Result<i32, Error> {
        let secrets = Secrets::Lookup { file: self.job.secret_env_file.clone() };
        let preview = Client::new(settings)?.preview(spec, PreviewChecks::Online(secrets))?;
        show_warnings(&preview.warnings);
        super::render::emit_preview(&preview, self.json);
        Ok(0)
    }
}

/// The submission's warnings, on stderr (the result stays alone on stdout).
fn show_warnings(warnings: &[String]) {
    for w in warnings {
        eprintln!("{w}");
    }
}
