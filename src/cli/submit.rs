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
        // Bad settings, a bad spec or a missing secret fail here, before any connection is attempted.
        settings.require_remote()?;
        let secrets = self.job.secrets(&spec)?;
        let spec = if self.dry_run { spec } else { send_workdir(&settings, spec)? };
        if spec.sweep.is_some() {
            return self.run_sweep(settings, &spec, &secrets);
        }
        if !spec.steps.is_empty() {
            return self.run_pipeline(settings, &spec, &secrets);
        }
        let client = Client::new(settings)?;
        // Resolved once: its warnings are shown before anything is sent, then it is submitted as it is.
        let plan = client.plan(&spec)?;
        for (key, location) in &plan.inputs {
            if let Some(w) = crate::spec::dataset_warning(key, location) {
                eprintln!("{w}");
            }
        }
        for note in plan.cosmos.iter().flat_map(|c| &c.notes) {
            eprintln!("warning: {note}");
        }
        if self.dry_run {
            let (plan, warnings) = client.check_online(&spec)?;
            show_warnings(&warnings);
            super::render::print_plan(&client.staged_files(&spec, &plan), &plan, self.json);
            return Ok(0);
        }
        let submitted = client.create_job_planned(&spec, plan, &secrets)?;
        show_warnings(&submitted.warnings);
        self.after_submit(&client, &spec)?;
        super::output::emit(super::output::Format::from_json_flag(self.json), &submitted);
        Ok(0)
    }
}

/// Send the spec's workdir (if any) once, before the job, sweep or pipeline is submitted; say what
/// it cost on stderr.
fn send_workdir(settings: &Settings, spec: crate::JobSpec) -> Result<crate::JobSpec, Error> {
    if spec.workdir.is_none() {
        return Ok(spec);
    }
    // A bar on stderr while the upload goes, when a person watches it.
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut shown = false;
    let mut show = |sent: u64, total: u64| {
        if tty {
            eprint!("\r{}", super::progress::upload_line(sent, total));
            shown = true;
        }
    };
    let sent = Client::new(settings.clone())?.send_workdir_with(&spec, &mut show);
    if shown {
        eprintln!();
    }
    let (spec, upload) = sent?;
    if let Some(u) = upload {
        eprintln!(
            "workdir {}: {} files, {} bytes packed, {} bytes uploaded",
            &u.hash[..12],
            u.files,
            u.packed_bytes,
            u.uploaded_bytes
        );
    }
    Ok(spec)
}

impl SubmitCmd {
    /// A sweep: one Slurm job array, every variant a job of its own.
    fn run_sweep(
        &self,
        settings: Settings,
        spec: &crate::JobSpec,
        secrets: &crate::spec::SecretValues,
    ) -> Result<i32, Error> {
        if self.dry_run {
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
                println!(
                    "\none Slurm job array --array={}; its script:\n{}",
                    sweep.array_range(),
                    sweep.array_script()
                );
            }
            return Ok(0);
        }
        let client = Client::new(settings)?;
        let submitted = client.create_sweep(spec, secrets)?;
        show_warnings(&submitted.warnings);
        self.after_submit(&client, spec)?;
        super::output::emit(super::output::Format::from_json_flag(self.json), &submitted);
        Ok(0)
    }

    /// A pipeline: its steps submitted in order, each after the steps it names.
    fn run_pipeline(
        &self,
        settings: Settings,
        spec: &crate::JobSpec,
        secrets: &crate::spec::SecretValues,
    ) -> Result<i32, Error> {
        if self.dry_run {
            for step in spec.pipeline()? {
                println!("step {}: {}", step.name, step.spec.command.join(" "));
            }
            return Ok(0);
        }
        let client = Client::new(settings)?;
        let submitted = client.create_pipeline(spec, secrets)?;
        show_warnings(&submitted.warnings);
        self.after_submit(&client, spec)?;
        super::output::emit(super::output::Format::from_json_flag(self.json), &submitted);
        Ok(0)
    }

    /// The background monitor, when asked for or when the job has webhooks (only a monitor sends them).
    fn after_submit(&self, client: &Client, spec: &crate::JobSpec) -> Result<(), Error> {
        if (self.monitor || !spec.notify.is_empty()) && crate::client::start_background_monitor(client.settings())? {
            eprintln!("started a background monitor (log: {}.monitor.log)", client.settings().state_path.display());
        }
        Ok(())
    }
}

/// The submission's warnings, on stderr (the result stays alone on stdout).
fn show_warnings(warnings: &[String]) {
    for w in warnings {
        eprintln!("{w}");
    }
}
