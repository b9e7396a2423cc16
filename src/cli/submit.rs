pub use super::job_args::JobArgs;
use crate::client::{MonitorChoice, Secrets, Submission, SubmitOptions};
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

    /// The online checks of a job, or a sweep's variants and array script, or a pipeline's steps:
    /// what would be submitted; nothing is.
    fn dry_run(&self, settings: Settings, spec: &crate::JobSpec) -> Result<i32, Error> {
        // A missing secret value fails here as it would in a submit.
        self.job.secrets(spec)?;
        if spec.sweep.is_some() {
            return self.run_sweep(settings, spec);
        }
        if !spec.steps.is_empty() {
            return self.run_pipeline(spec);
        }
        let client = Client::new(settings)?;
        let (plan, warnings) = client.check_online(spec)?;
        show_warnings(&warnings);
        super::render::print_plan(&client.staged_files(spec, &plan), &plan, self.json);
        Ok(0)
    }
}

impl SubmitCmd {
    /// A sweep's dry run: its variants and its one array script.
    fn run_sweep(&self, settings: Settings, spec: &crate::JobSpec) -> Result<i32, Error> {
        let variants = spec.sweep.as_ref().map(|s| s.variants()).transpose()?.unwrap_or_default();
        let ids: Vec<String> = variants.iter().map(|v| format!("variant-{}", v.index)).collect();
        let sweep = crate::client::plan_sweep(spec, &settings, "dry-run", &ids)?;
        let (_, warnings) = Client::new(settings)?.check_online(&spec.for_variant(&sweep.variants[0].0))?;
        show_warnings(&warnings);
        if self.json {
            let list: Vec<_> = sweep
                .variants
                .iter()
                .map(|(v, _)| serde_json::json!({"index": v.index, "values": v.describe()}))
                .collect();
            super::output::emit_json(
                &serde_json::json!({"variants": list, "array": sweep.array_range(), "array_script": sweep.array_script()}),
            );
        } else {
            for (v, _) in &sweep.variants {
                println!("variant {}: {}", v.index, v.describe());
            }
            println!("\none Slurm job array --array={}; its script:\n{}", sweep.array_range(), sweep.array_script());
        }
        Ok(0)
    }

    /// A pipeline's dry run: its steps in order.
    fn run_pipeline(&self, spec: &crate::JobSpec) -> Result<i32, Error> {
        for step in spec.pipeline()? {
            println!("step {}: {}", step.name, step.spec.command.join(" "));
        }
        Ok(0)
    }
}

/// The submission's warnings, on stderr (the result stays alone on stdout).
fn show_warnings(warnings: &[String]) {
    for w in warnings {
        eprintln!("{w}");
    }
}
