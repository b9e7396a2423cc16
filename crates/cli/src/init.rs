//! `init`: ask for (or take as flags) the login host, user and key, find what can be found, write the
//! env file (mode 600) once the user agrees or `--yes`, then run preflight on it.

use super::GlobalFlags;
use clap::Args;
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use tao_slurm_engine::client::init::{self as init, ClusterFound, InitAnswers, InitProblem};
use tao_slurm_engine::error::{exit_code, Error};

#[derive(Args, Debug)]
pub struct InitCmd {
    /// Login host: host, host:port or an ssh_config alias (comma-separated for failover). Each setting
    /// not given is taken from the environment (SLURM_HOSTNAME, SSH_HOST, ...) or the env file
    #[arg(long)]
    pub host: Option<String>,
    /// Your user name on the cluster
    #[arg(long)]
    pub user: Option<String>,
    /// Private key to log in with (mode 600)
    #[arg(long, value_name = "PATH")]
    pub key: Option<PathBuf>,
    /// Slurm partition(s) jobs go to (default: the cluster's default partition)
    #[arg(long)]
    pub partition: Option<String>,
    /// Slurm account (default: none written, Slurm's default account)
    #[arg(long)]
    pub account: Option<String>,
    /// Results directory on shared storage (SLURM_BASE_RESULTS_DIR)
    #[arg(long, value_name = "DIR")]
    pub base_dir: Option<String>,
    /// known_hosts file ssh checks the login host's key against (SSH_KNOWN_HOSTS)
    #[arg(long, value_name = "PATH")]
    pub known_hosts: Option<PathBuf>,
    /// ssh_config file (SSH_CONFIG)
    #[arg(long, value_name = "PATH")]
    pub ssh_config: Option<PathBuf>,
    /// Write without asking (scripts and agents); an existing file also needs --overwrite
    #[arg(long)]
    pub yes: bool,
    /// Replace init's settings in an existing env file (its other lines are kept)
    #[arg(long)]
    pub overwrite: bool,
    /// Print one JSON object (what was found, the file's text, preflight's checks) and ask nothing
    /// (agents); writes only with --yes. Settings already in the environment or the env file are
    /// taken where no flag says, as with --yes
    #[arg(long)]
    pub json: bool,
}

fn say(text: &str) {
    let mut out = std::io::stdout();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// One answer from the terminal; `default` when the line is empty.
fn ask(question: &str, default: Option<&str>) -> String {
    match default {
        Some(d) if !d.is_empty() => say(&format!("{question} [{d}]: ")),
        _ => say(&format!("{question}: ")),
    }
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    let line = line.trim();
    if line.is_empty() {
        default.unwrap_or("").to_string()
    } else {
        line.to_string()
    }
}

fn agree(question: &str) -> bool {
    matches!(ask(&format!("{question} [y/N]"), None).to_ascii_lowercase().as_str(), "y" | "yes")
}

impl InitCmd {
    pub fn run(self, globals: GlobalFlags) -> Result<i32, Error> {
        let json = self.json;
        let mut report = init::InitReport::default();
        let code = self.init(globals, &mut report)?;
        if json {
            super::output::emit_json(&report);
        }
        Ok(code)
    }

    /// Init, telling the person (unless `--json`) and filling `report` as it goes; the exit code.
    fn init(self, globals: GlobalFlags, report: &mut init::InitReport) -> Result<i32, Error> {
        let json = self.json;
        let tell = |text: &str| {
            if !json {
                say(text)
            }
        };
        let stop = |report: &mut init::InitReport, p: InitProblem| -> Result<i32, Error> {
            if !json {
                eprintln!("error: {p}\nnothing was written");
            }
            report.problem = Some(p);
            Ok(exit_code::CONFIG)
        };
        // JSON is for agents and scripts: never a question.
        let interactive = !self.yes && !json && std::io::stdin().is_terminal();
        let env: std::collections::HashMap<String, String> = std::env::vars().collect();
        let home = tao_slurm_engine::config::home_dir(&env);
        let path = globals
            .env_file
            .clone()
            .or_else(|| env.get("TAO_ENV_FILE").map(PathBuf::from))
            .or_else(|| home.as_ref().map(|h| h.join(".config/tao/.env")));
        report.env_file = path.as_ref().map(|p| p.display().to_string());
        // What the environment and the env file already say: the answers where no flag says.
        let defaults = match init::defaults(globals.env_file.as_deref()) {
            Ok(d) => d,
            Err(p) => return stop(report, p),
        };
        let ssh_config = self.ssh_config.clone().or(defaults.ssh_config.clone());
        let local = init::discover_local(home.as_deref(), ssh_config.as_deref());
        if !local.aliases.is_empty() {
            tell(&format!("ssh_config aliases: {}\n", local.aliases.join(", ")));
        }
        for k in &local.keys {
            match &k.fix {
                None => tell(&format!("key {} (mode 600)\n", k.path)),
                Some(fix) => tell(&format!("key {}: {fix}\n", k.path)),
            }
        }
        let good_key = local.keys.iter().find(|k| k.fix.is_none()).map(|k| k.path.clone());
        let flags = InitAnswers {
            host: self.host.clone().unwrap_or_default(),
            user: self.user.clone().unwrap_or_default(),
            key: self.key.clone(),
            ssh_config: self.ssh_config.clone(),
            known_hosts: self.known_hosts.clone(),
            partition: self.partition.clone(),
            account: self.account.clone(),
            base_dir: self.base_dir.clone(),
            accept_new_host_key: globals.accept_new_host_key,
        };
        let mut a = if interactive {
            // Each question offers what is already set (else what was found); flags are not asked.
            let mut a = flags;
            if a.host.is_empty() {
                let offer = Some(defaults.host.as_str())
                    .filter(|h| !h.is_empty())
                    .or(local.aliases.first().map(|s| s.as_str()));
                a.host = ask("Login host (host, host:port or ssh_config alias)", offer);
            }
            if a.user.is_empty() {
                let offer =
                    Some(defaults.user.as_str()).filter(|u| !u.is_empty()).or(env.get("USER").map(|s| s.as_str()));
                a.user = ask("User on the cluster", offer);
            }
            if a.key.is_none() {
                let offer = defaults.key.as_ref().map(|k| k.display().to_string()).or(good_key);
                let k = ask("Private key (empty: ssh's own choice)", offer.as_deref());
                a.key = (!k.is_empty()).then(|| PathBuf::from(k));
            }
            a.ssh_config = a.ssh_config.or(defaults.ssh_config.clone());
            a.known_hosts = a.known_hosts.or(defaults.known_hosts.clone());
            a
        } else {
            let mut a = flags.or(defaults.clone());
            if a.key.is_none() {
                a.key = good_key.map(PathBuf::from);
            }
            a
        };
        let found = match init::probe(&a) {
            Ok(f) => f,
            Err(p) => return stop(report, p),
        };
        if !json {
            show_cluster(&found);
        }
        report.found = Some(found.clone());
        let default_partition = found.partitions.iter().find(|p| p.is_default).map(|p| p.name.clone());
        if interactive {
            if a.partition.is_none() {
                let offer = defaults.partition.clone().or(default_partition);
                a.partition = Some(ask("Partition", offer.as_deref())).filter(|p| !p.is_empty());
            }
            if a.account.is_none() && (!found.accounts.is_empty() || defaults.account.is_some()) {
                let acc = ask("Account (empty: Slurm's default)", defaults.account.as_deref());
                a.account = (!acc.is_empty()).then_some(acc);
            }
            if a.base_dir.is_none() {
                let d = ask("Results directory on shared storage (empty: the default)", defaults.base_dir.as_deref());
                a.base_dir = (!d.is_empty()).then_some(d);
            }
        } else if a.partition.is_none() {
            a.partition = default_partition;
        }
        report.already_set = init::taken_from(&a, &defaults);
        if let Err(p) = init::check_choices(&a, &found) {
            return stop(report, p);
        }
        let Some(path) = path else {
            return stop(
                report,
                init::InitProblem {
                    field: "env_file".into(),
                    message: "HOME is not set".into(),
                    fix: "pass --env-file PATH".into(),
                },
            );
        };
        let (text, exists) = match init::env_file_text(&path, &a) {
            Ok(t) => t,
            Err(p) => return stop(report, p),
        };
        report.text = Some(text.clone());
        tell(&format!("\n{} would hold:\n{text}\n", path.display()));
        let agreed = if interactive {
            let q = if exists {
                format!("{} exists: replace init's settings in it (its other lines kept)?", path.display())
            } else {
                format!("Write {} (mode 600)?", path.display())
            };
            agree(&q)
        } else if exists && !self.overwrite {
            let p = init::InitProblem {
                field: "env_file".into(),
                message: format!("{} exists; nothing was written", path.display()),
                fix: "pass --overwrite to replace init's settings in it (its other lines are kept)".into(),
            };
            if !json {
                eprintln!("error: {}\nfix: {}", p.message, p.fix);
            }
            report.problem = Some(p);
            return Ok(exit_code::USAGE);
        } else {
            self.yes
        };
        if !agreed {
            tell("nothing was written");
            tell(if interactive { "\n" } else { " (pass --yes to write it)\n" });
            return Ok(exit_code::USAGE);
        }
        if let Err(p) = init::write_env_file(&path, &text) {
            return stop(report, p);
        }
        report.written = true;
        tell(&format!("wrote {} (mode 600)\n\npreflight with it:\n", path.display()));
        let settings = super::settings_from(&GlobalFlags { env_file: Some(path), ..globals })?;
        let preflight = tao_slurm_engine::client::preflight(&settings);
        if !json {
            super::output::emit(super::output::Format::Human, &preflight);
        }
        let missing: Vec<_> = preflight.checks.iter().filter(|c| !c.ok && c.required).cloned().collect();
        report.preflight = Some(preflight);
        if missing.is_empty() {
            tell("ready: submit a first job with `tao-slurm submit`\n");
            Ok(0)
        } else {
            tell("still missing:\n");
            for c in missing {
                tell(&format!("- {}: {}\n  fix: {}\n", c.name, c.detail, c.remediation.as_deref().unwrap_or("")));
            }
            Ok(exit_code::JOB_FAILED)
        }
    }
}

fn show_cluster(found: &ClusterFound) {
    say(&format!("logged in to {}\npartitions:\n", found.login_host));
    for p in &found.partitions {
        let mark = if p.is_default { " (default)" } else { "" };
        say(&format!("  {}{mark}: MaxTime {}, {}\n", p.name, p.max_time, p.state));
    }
    say(&format!(
        "accounts: {}\npyxis: {}\n",
        if found.accounts.is_empty() { "none listed".to_string() } else { found.accounts.join(", ") },
        match found.pyxis {
            Some(true) => "present",
            Some(false) => "absent (containers need it: ask the admins for Pyxis and Enroot)",
            None => "unknown",
        }
    ));
}
