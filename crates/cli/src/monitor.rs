use clap::Args;
use tao_slurm_engine::client::{now_secs, Monitor, MonitorLock, AFTER_FAILURE};
use tao_slurm_engine::config::Settings;
use tao_slurm_engine::error::Error;
use tao_slurm_engine::Client;

#[derive(Args, Debug)]
pub struct MonitorCmd {
    /// Exit after this many seconds without active jobs (0: never)
    #[arg(long, default_value_t = 0)]
    pub idle_exit: u64,
}

impl MonitorCmd {
    /// Refresh every active job at an adaptive pace and perform retries, until stopped. After a restart
    /// it resumes from the state file alone.
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        let Some(lock) = MonitorLock::take(&settings)? else {
            eprintln!(
                "a monitor is already running for {} (lock {})",
                settings.state_path.display(),
                MonitorLock::path_for(&settings).display()
            );
            return Ok(0);
        };
        let mut monitor = Monitor::new(&settings);
        let client = Client::new(settings)?;
        eprintln!("monitor: following the active jobs of {}", client.settings().state_path.display());
        let mut idle_since: Option<i64> = None;
        loop {
            let step = match monitor.step(&client) {
                Ok(step) => step,
                Err(e) => {
                    // A failed refresh changes nothing; try again at the slow pace.
                    eprintln!("monitor: refresh failed: {e}");
                    std::thread::sleep(AFTER_FAILURE);
                    continue;
                }
            };
            let now = now_secs();
            for v in &step.changed {
                println!("{now} {} {} {}", v.job_id, v.status, v.message);
            }
            if step.active == 0 {
                let since = *idle_since.get_or_insert(now);
                if self.idle_exit > 0 && (now - since) as u64 >= self.idle_exit {
                    eprintln!("monitor: no active jobs for {} s; exiting", self.idle_exit);
                    drop(lock);
                    return Ok(0);
                }
            } else {
                idle_since = None;
            }
            std::thread::sleep(step.interval);
        }
    }
}
