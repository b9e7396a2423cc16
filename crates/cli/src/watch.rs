use clap::Args;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use std::collections::HashMap;
use std::io::IsTerminal;
use std::time::Duration;
use tao_slurm_engine::config::Settings;
use tao_slurm_engine::error::{exit_code, Error};
use tao_slurm_engine::{Client, JobView, PlatformStatus};

#[derive(Args, Debug)]
pub struct WatchCmd {
    /// Job ids (or prefixes), or sweep/pipeline ids (their jobs); none means every active job
    pub job_ids: Vec<String>,
    /// Seconds between refreshes
    #[arg(long, default_value_t = 5.0)]
    pub interval: f64,
    /// Print each change as a JSON line
    #[arg(long)]
    pub json: bool,
}

impl WatchCmd {
    /// Refresh until every watched job is terminal or paused by tao-slurm. Never gives up because
    /// time passed; Ctrl-C only detaches (the jobs keep running).
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        if !(self.interval.is_finite() && self.interval >= 0.2) {
            return Err(Error::Spec(tao_slurm_engine::spec::SpecError::new(
                "interval",
                "must be at least 0.2 seconds",
            )));
        }
        let client = Client::new(settings)?;
        let wait = client.wait_start(&self.job_ids, None, Some(Duration::from_secs_f64(self.interval)))?;
        let ids = wait.ids();
        if ids.is_empty() {
            eprintln!("no active jobs to watch");
            return Ok(0);
        }
        let reattach = format!("tao-slurm watch {}", ids.join(" "));
        let message = format!("\nDetached; the jobs keep running. Re-attach with: {reattach}");
        let _ = ctrlc::set_handler(move || {
            eprintln!("{message}");
            std::process::exit(130);
        });
        let live_table = !self.json && std::io::stdout().is_terminal();
        if !live_table {
            eprintln!(
                "Watching {}; Ctrl-C detaches (the jobs keep running). Re-attach with: {reattach}",
                ids.join(" ")
            );
        }
        let mut last: HashMap<String, (PlatformStatus, Option<String>, String, String)> = HashMap::new();
        let end = client.wait_for(&wait, &mut |tick| {
            if live_table {
                print!("\x1b[H\x1b[2J");
                println!("{}", table(&tick.views));
                println!("refreshing every {} s; Ctrl-C detaches", self.interval);
            } else {
                for v in &tick.views {
                    let key = (v.status, v.slurm_state.clone(), v.message.clone(), super::progress::kpi_line(v));
                    if last.get(&v.job_id) != Some(&key) {
                        self.print_line(v);
                        last.insert(v.job_id.clone(), key);
                    }
                }
            }
            false
        })?;
        for id in &end.paused {
            eprintln!("{id} is paused: it goes on after `tao-slurm resume {id}`");
        }
        let all_complete = end.views.iter().all(|v| v.status == PlatformStatus::Complete);
        Ok(if all_complete { 0 } else { exit_code::JOB_FAILED })
    }

    /// One job's line when it changed (a JSON line with --json).
    fn print_line(&self, v: &JobView) {
        if self.json {
            super::output::emit_line(v);
        } else {
            println!(
                "{}  {:<8} {:<12} {:>8}  {}",
                v.job_id,
                v.status.as_str(),
                super::clean(v.slurm_state.as_deref().unwrap_or("-")),
                elapsed(v.elapsed_secs),
                super::clean(&v.message)
            );
            let kpis = super::progress::kpi_line(v);
            if !kpis.is_empty() {
                println!("{}  {kpis}", " ".repeat(v.job_id.len()));
            }
        }
    }
}

fn elapsed(secs: i64) -> String {
    let s = secs.max(0);
    format!("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60)
}

fn table(views: &[JobView]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(["job id", "status", "slurm state", "elapsed", "reason / message", "progress", "gpu", "KPIs"]);
    let now = tao_slurm_engine::client::now_secs();
    for v in views {
        t.add_row([
            v.job_id.clone(),
            v.status.to_string(),
            super::clean(v.slurm_state.as_deref().unwrap_or_default()),
            elapsed(v.elapsed_secs),
            super::clean(&v.message),
            super::progress::bar(v),
            super::output::gpu_cell(v, now),
            super::progress::kpi_line(v),
        ]);
    }
    t
}
