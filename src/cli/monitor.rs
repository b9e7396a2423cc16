use crate::clock::now as now_secs;
use crate::config::Settings;
use crate::error::Error;
use crate::monitor::{next_interval, Pace};
use crate::spec::SpecError;
use crate::Client;
use clap::Args;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
pub struct MonitorCmd {
    /// Exit after this many seconds without active jobs (0: never)
    #[arg(long, default_value_t = 0)]
    pub idle_exit: u64,
}

/// The lock that makes the monitor one per state file and cluster profile.
pub fn monitor_lock_path(settings: &Settings) -> PathBuf {
    let mut p = settings.state_path.clone().into_os_string();
    if let Some(cluster) = &settings.cluster {
        p.push(format!(".{cluster}"));
    }
    p.push(".monitor.lock");
    PathBuf::from(p)
}

pub(crate) fn take_lock(path: &Path) -> Result<Option<File>, Error> {
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| SpecError::new("TAO_SLURM_STATE", format!("cannot open {}: {e}", path.display())))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(_) => Ok(None),
    }
}

/// Whether a monitor holds the lock for these settings' state file.
pub fn monitor_running(settings: &Settings) -> bool {
    matches!(take_lock(&monitor_lock_path(settings)), Ok(None))
}

impl MonitorCmd {
    /// Refresh every active job at an adaptive pace and perform retries, until stopped. After a restart
    /// it resumes from the state file alone.
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        let lock_path = monitor_lock_path(&settings);
        let Some(_lock) = take_lock(&lock_path)? else {
            eprintln!(
                "a monitor is already running for {} (lock {})",
                settings.state_path.display(),
                lock_path.display()
            );
            return Ok(0);
        };
        let budget = settings.max_queries_per_minute;
        let client = Client::new(settings)?;
        eprintln!("monitor: following the active jobs of {}", client.settings().state_path.display());
        let mut seen: HashMap<String, (crate::PlatformStatus, String)> = HashMap::new();
        let mut last_change = now_secs();
        let mut idle_since: Option<i64> = None;
        loop {
            let views = match client.refresh_summaries(&[]) {
                Ok(v) => v,
                Err(e) => {
                    // A failed refresh changes nothing; try again at the slow pace.
                    eprintln!("monitor: refresh failed: {e}");
                    std::thread::sleep(std::time::Duration::from_secs(10));
                    continue;
                }
            };
            let now = now_secs();
            for v in &views {
                let key = (v.status, v.message.clone());
                if seen.get(&v.job_id) != Some(&key) {
                    println!("{now} {} {} {}", v.job_id, v.status, v.message);
                    seen.insert(v.job_id.clone(), key);
                    last_change = now;
                }
            }
            let active: Vec<_> = views.iter().filter(|v| !v.status.is_terminal()).collect();
            if active.is_empty() {
                let since = *idle_since.get_or_insert(now);
                if self.idle_exit > 0 && (now - since) as u64 >= self.idle_exit {
                    eprintln!("monitor: no active jobs for {} s; exiting", self.idle_exit);
                    return Ok(0);
                }
            } else {
                idle_since = None;
            }
            let youngest = active.iter().map(|v| now - v.created_at).min().unwrap_or(i64::MAX).min(now - last_change);
            let pace = Pace {
                youngest_age_secs: youngest,
                next_retry_in_secs: active.iter().filter_map(|v| v.next_retry_at).map(|t| t - now).min(),
                active_jobs: active.len(),
            };
            std::thread::sleep(next_interval(pace, budget));
        }
    }
}

/// Start a monitor in the background (its own session, output to a log file next to the state file)
/// unless one is running. Returns whether one was started.
pub fn start_background_monitor(settings: &Settings) -> Result<bool, Error> {
    if monitor_running(settings) {
        return Ok(false);
    }
    let exe = std::env::current_exe()
        .map_err(|e| SpecError::new("monitor", format!("cannot find the tao-slurm executable: {e}")))?;
    let mut log = settings.state_path.clone().into_os_string();
    log.push(".monitor.log");
    crate::private::ensure_private_file(std::path::Path::new(&log)).map_err(|m| SpecError::new("monitor", m))?;
    let out = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(|e| SpecError::new("monitor", format!("cannot open {log:?}: {e}")))?;
    let err = out.try_clone().map_err(|e| SpecError::new("monitor", e.to_string()))?;
    use std::os::unix::process::CommandExt;
    let mut command = std::process::Command::new(exe);
    command.arg("--state").arg(&settings.state_path);
    if let Some(cluster) = &settings.cluster {
        command.args(["--cluster", cluster]);
    }
    command
        .args(["monitor", "--idle-exit", "300"])
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
        .map_err(|e| SpecError::new("monitor", format!("cannot start the monitor: {e}")))?;
    Ok(true)
}
