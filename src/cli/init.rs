//! `init`: ask for (or take as flags) the login host, user and key, find what can be found, write the
//! env file (mode 600) once the user agrees or `--yes`, then run preflight on it.

use super::GlobalFlags;
use crate::client::init::{self as init, ClusterFound, InitAnswers, InitProblem};
use crate::error::{exit_code, Error};
use clap::Args;
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct InitCmd {
    /// Login host: host, host:port or an ssh_config alias (comma-separated for failover)
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

fn stop(p: &InitProblem) -> Result<i32, Error> {
    eprintln!("error: {p}\nnothing was written");
    Ok(exit_code::CONFIG)
}

impl InitCmd {
    pub fn run(self, globals: GlobalFlags) -> Result<i32, Error> {
        let interactive = !self.yes && std::io::stdin().is_terminal();
        let env: std::collections::HashMap<String, String> = std::env::vars().collect();
        let home = crate::config::home_dir(&env);
        let local = init::discover_local(home.as_deref(), self.ssh_config.as_deref());
        if !local.aliases.is_empty() {
            say(&format!("ssh_config aliases: {}\n", local.aliases.join(", ")));
        }
        for k in &local.keys {
            match &k.fix {
                None => say(&format!("key {} (mode 600)\n", k.path)),
                Some(fix) => say(&format!("key {}: {fix}\n", k.path)),
            }
        }
        let good_key = local.keys.iter().find(|k| k.fix.is_none()).map(|k| k.path.clone());
        let mut a = InitAnswers {
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
        if interactive {
            if a.host.is_empty() {
                a.host =
                    ask("Login host (host, host:port or ssh_config alias)", local.aliases.first().map(|s| s.as_str()));
            }
            if a.user.is_empty() {
                a.user = ask("User on the cluster", env.get("USER").map(|s| s.as_str()));
            }
            if a.key.is_none() {
                let k = ask("Private key (empty: ssh's own choice)", good_key.as_deref());
                a.key = (!k.is_empty()).then(|| PathBuf::from(k));
            }
        } else if a.key.is_none() {
            a.key = good_key.map(PathBuf::from);
        }
        let found = match init::probe(&a) {
            Ok(f) => f,
            Err(p) => return stop(&p),
        };
        show_cluster(&found);
        let default_partition = found.partitions.iter().find(|p| p.is_default).map(|p| p.name.clone());
        if interactive {
            if a.partition.is_none() {
                a.partition = Some(ask("Partition", default_partition.as_deref())).filter(|p| !p.is_empty());
            }
            if a.account.is_none() && !found.accounts.is_empty() {
                let acc = ask("Account (empty: Slurm's default)", None);
                a.account = (!acc.is_empty()).then_some(acc);
            }
            if a.base_dir.is_none() {
                let d = ask("Results directory on shared storage (empty: the default)", None);
                a.base_dir = (!d.is_empty()).then_some(d);
            }
        } else if a.partition.is_none() {
            a.partition = default_partition;
        }
        if let Err(p) = init::check_choices(&a, &found) {
            return stop(&p);
        }
        let path = match globals.env_file.clone().or_else(|| home.map(|h| h.join(".config/tao/.env"))) {
            Some(p) => p,
            None => {
                return stop(&init::InitProblem {
                    field: "env_file".into(),
                    message: "HOME is not set".into(),
                    fix: "pass --env-file PATH".into(),
                })
            }
        };
        let (text, exists) = match init::env_file_text(&path, &a) {
            Ok(t) => t,
            Err(p) => return stop(&p),
        };
        say(&format!("\n{} would hold:\n{text}\n", path.display()));
        let agreed = if interactive {
            let q = if exists {
                format!("{} exists: replace init's settings in it (its other lines kept)?", path.display())
            } else {
                format!("Write {} (mode 600)?", path.display())
            };
            agree(&q)
        } else if exists && !self.overwrite {
            eprintln!("error: {} exists; nothing was written\nfix: pass --overwrite to replace init's settings in it (its other lines are kept)", path.display());
            return Ok(exit_code::USAGE);
        } else {
            self.yes
        };
        if !agreed {
            say("nothing was written");
            say(if interactive { "\n" } else { " (pass --yes to write it)\n" });
            return Ok(exit_code::USAGE);
        }
        if let Err(p) = init::write_env_file(&path, &text) {
            return stop(&p);
        }
        say(&format!("wrote {} (mode 600)\n\npreflight with it:\n", path.display()));
        let settings = super::settings_from(&GlobalFlags { env_file: Some(path), ..globals })?;
        let report = crate::client::preflight(&settings);
        super::output::emit(super::output::Format::Human, &report);
        let missing: Vec<_> = report.checks.iter().filter(|c| !c.ok && c.required).collect();
        if missing.is_empty() {
            say("ready: submit a first job with `tao-slurm submit`\n");
            Ok(0)
        } else {
            say("still missing:\n");
            for c in missing {
                say(&format!("- {}: {}\n  fix: {}\n", c.name, c.detail, c.remediation.as_deref().unwrap_or("")));
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
