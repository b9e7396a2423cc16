//! `init`: what can be found before asking (ssh_config aliases, private keys and their modes), what
//! the cluster says once a login works (partitions and their MaxTime, accounts, Pyxis), and the env
//! file written mode 600. The doors (CLI, MCP) ask and show; nothing here prompts.

use crate::config::{LoginHost, SettingSources, Settings};
use crate::ops::init::{already_set, key_mode_fix, probe_script, read_probe, render_env_file, ssh_config_aliases};
use crate::remote::{Idempotency, OpenSsh, Remote};
use serde::Serialize;
use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// What init was told (flags, prompts or an MCP call).
#[derive(Debug, Clone, Default)]
pub struct InitAnswers {
    pub host: String,
    pub user: String,
    pub key: Option<PathBuf>,
    pub ssh_config: Option<PathBuf>,
    pub known_hosts: Option<PathBuf>,
    pub partition: Option<String>,
    pub account: Option<String>,
    pub base_dir: Option<String>,
    pub accept_new_host_key: bool,
}

impl InitAnswers {
    /// These answers, each one not given taken from `defaults`.
    pub fn or(self, defaults: InitAnswers) -> InitAnswers {
        let text = |a: String, d: String| if a.trim().is_empty() { d } else { a };
        InitAnswers {
            host: text(self.host, defaults.host),
            user: text(self.user, defaults.user),
            key: self.key.or(defaults.key),
            ssh_config: self.ssh_config.or(defaults.ssh_config),
            known_hosts: self.known_hosts.or(defaults.known_hosts),
            partition: self.partition.or(defaults.partition),
            account: self.account.or(defaults.account),
            base_dir: self.base_dir.or(defaults.base_dir),
            accept_new_host_key: self.accept_new_host_key || defaults.accept_new_host_key,
        }
    }
}

/// What the settings already say, as init's answers: the environment (the TAO SDK's names and ours)
/// over the env file (`env_file`, else `TAO_ENV_FILE` or `~/.config/tao/.env` when present). They
/// are the defaults of init's questions and what `--yes` and the MCP tool use when not told.
pub fn defaults(env_file: Option<&Path>) -> Result<InitAnswers, InitProblem> {
    // An env file named that does not exist yet (the one init is to write) holds nothing.
    let new_file = env_file.is_some_and(|p| !p.exists());
    let mut sources = crate::config::gather(HashMap::new(), env_file.filter(|_| !new_file))
        .map_err(|e| problem("env_file", e.to_string(), "fix or move the env file named"))?;
    if new_file {
        sources.file.clear();
    }
    let mut a = InitAnswers::default();
    for (name, value) in already_set(&sources) {
        match name {
            "SLURM_HOSTNAME" => a.host = value,
            "SLURM_USER" => a.user = value,
            "SSH_KEY_PATH" => a.key = Some(PathBuf::from(value)),
            "SSH_CONFIG" => a.ssh_config = Some(PathBuf::from(value)),
            "SSH_KNOWN_HOSTS" => a.known_hosts = Some(PathBuf::from(value)),
            "SLURM_PARTITION" => a.partition = Some(value),
            "SLURM_ACCOUNT" => a.account = Some(value),
            "SLURM_BASE_RESULTS_DIR" => a.base_dir = Some(value),
            _ => {}
        }
    }
    Ok(a)
}

/// A private key found in `~/.ssh`, with the fix when others can read it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct KeyFound {
    pub path: String,
    pub fix: Option<String>,
}

/// What is found on this machine before anything is asked.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct LocalFound {
    /// Host aliases of `~/.ssh/config` (and of SSH_CONFIG when set).
    pub aliases: Vec<String>,
    pub keys: Vec<KeyFound>,
}

/// A partition and its MaxTime, as the cluster answered.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct PartitionFound {
    pub name: String,
    pub is_default: bool,
    /// `D-HH:MM:SS` or `UNLIMITED`.
    pub max_time: String,
    pub state: String,
}

/// What the cluster said once the login worked.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ClusterFound {
    pub login_host: String,
    pub partitions: Vec<PartitionFound>,
    pub accounts: Vec<String>,
    pub pyxis: Option<bool>,
}

/// `init --json`: what init found and did, for agents and scripts (one object, whatever the outcome).
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct InitReport {
    /// Whether the env file was written.
    pub written: bool,
    /// The env file init writes (or would write).
    pub env_file: Option<String>,
    /// The settings that were already set (in the environment, under tao-slurm's or the TAO SDK's
    /// names, or in the env file) and that init took where no flag said otherwise.
    pub already_set: Vec<String>,
    /// The file's text (init writes no secret); absent when init stopped before it.
    pub text: Option<String>,
    /// What the cluster said once the login worked.
    pub found: Option<ClusterFound>,
    /// Why init stopped, with the fix; nothing was written then.
    pub problem: Option<InitProblem>,
    /// Preflight with the file written.
    pub preflight: Option<crate::preflight::PreflightReport>,
}

/// The names of the settings `answers` holds that `defaults` gave (no flag or answer said them).
pub fn taken_from(answers: &InitAnswers, defaults: &InitAnswers) -> Vec<String> {
    let given: Vec<(&str, String)> = env_values(defaults);
    env_values(answers).into_iter().filter(|pair| given.contains(pair)).map(|(name, _)| name.to_string()).collect()
}

/// Why init stops before writing anything: the field, what is wrong, and the fix.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct InitProblem {
    pub field: String,
    pub message: String,
    pub fix: String,
}

impl std::fmt::Display for InitProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}\nfix: {}", self.field, self.message, self.fix)
    }
}

fn problem(field: &str, message: impl Into<String>, fix: impl Into<String>) -> InitProblem {
    InitProblem { field: field.into(), message: message.into(), fix: fix.into() }
}

/// Aliases from the ssh_config files and the private keys of `~/.ssh` (files with a `.pub` beside them).
pub fn discover_local(home: Option<&Path>, ssh_config: Option<&Path>) -> LocalFound {
    let mut found = LocalFound::default();
    let configs = home.map(|h| h.join(".ssh/config")).into_iter().chain(ssh_config.map(Path::to_path_buf));
    for path in configs {
        if let Ok(text) = std::fs::read_to_string(&path) {
            for a in ssh_config_aliases(&text) {
                if !found.aliases.contains(&a) {
                    found.aliases.push(a);
                }
            }
        }
    }
    let Some(dir) = home.map(|h| h.join(".ssh")) else { return found };
    let mut entries: Vec<PathBuf> =
        std::fs::read_dir(&dir).map(|r| r.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
    entries.sort();
    for path in entries {
        let is_key = path.extension().is_none() && path.with_extension("pub").is_file() && path.is_file();
        if let (true, Ok(meta)) = (is_key, std::fs::metadata(&path)) {
            let shown = path.display().to_string();
            found.keys.push(KeyFound { fix: key_mode_fix(&shown, meta.permissions().mode()), path: shown });
        }
    }
    found
}

/// The settings the answers make (the process environment under them, for the control directory
/// and timeouts; no env file).
pub fn answer_settings(answers: &InitAnswers) -> Result<Settings, InitProblem> {
    let mut flags = HashMap::new();
    for (name, value) in env_values(answers) {
        flags.insert(name.to_string(), value);
    }
    if answers.accept_new_host_key {
        flags.insert("SSH_ACCEPT_NEW_HOST_KEYS".into(), "true".into());
    }
    let env: HashMap<String, String> = std::env::vars().collect();
    Settings::from_sources(&SettingSources {
        flags,
        env,
        file: HashMap::new(),
        uid: Some(crate::private::current_uid()),
    })
    .map_err(|e| problem("settings", e.to_string(), "correct the value named above"))
}

/// The settings init writes, by name, from the answers.
pub fn env_values(a: &InitAnswers) -> Vec<(&'static str, String)> {
    let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
    [
        ("SLURM_HOSTNAME", Some(a.host.clone())),
        ("SLURM_USER", Some(a.user.clone())),
        ("SSH_KEY_PATH", path(&a.key)),
        ("SSH_CONFIG", path(&a.ssh_config)),
        ("SSH_KNOWN_HOSTS", path(&a.known_hosts)),
        ("SLURM_PARTITION", a.partition.clone()),
        ("SLURM_ACCOUNT", a.account.clone()),
        ("SLURM_BASE_RESULTS_DIR", a.base_dir.clone()),
    ]
    .into_iter()
    .filter_map(|(n, v)| v.filter(|v| !v.is_empty()).map(|v| (n, v)))
    .collect()
}

/// Check the key, log in to the first login host and ask the cluster for its partitions, the user's
/// accounts and Pyxis. A key others can read, an unknown host key or a failed login is a problem
/// with its fix.
pub fn probe(answers: &InitAnswers) -> Result<ClusterFound, InitProblem> {
    if answers.host.trim().is_empty() {
        return Err(problem(
            "host",
            "no login host given",
            "pass --host HOST (host, host:port or an ssh_config alias)",
        ));
    }
    if answers.user.trim().is_empty() {
        return Err(problem("user", "no user given", "pass --user NAME (your user name on the cluster)"));
    }
    if let Some(key) = &answers.key {
        let meta = std::fs::metadata(key).map_err(|e| {
            problem("key", format!("{}: {e}", key.display()), "pass --key with the path of your private key")
        })?;
        if let Some(fix) = key_mode_fix(&key.display().to_string(), meta.permissions().mode()) {
            return Err(problem("key", fix, format!("chmod 600 {}", key.display())));
        }
    }
    let settings = answer_settings(answers)?;
    let first: Vec<LoginHost> = settings.login_hosts.iter().take(1).cloned().collect();
    let ssh =
        OpenSsh::new(&settings, &answers.user, &first).map_err(|e| problem("key", e.to_string(), "see the message"))?;
    if let Err(e) = ssh.ensure_master(&first[0]) {
        let text = e.to_string();
        let fix = if text.contains("is unknown or does not match") {
            "check the host key's fingerprint with the site, then run init again with --accept-new-host-key (or add the key to known_hosts as the message says)".to_string()
        } else {
            crate::remote::openssh::login_remediation(&answers.user, &first[0].host, &text)
        };
        return Err(problem("host", text, fix));
    }
    let (usage, login_host) = crate::engine::cluster::partition_usage(&ssh)
        .map_err(|e| problem("host", e.to_string(), "check Slurm on the login host"))?;
    let out = ssh
        .run_script(&probe_script(), Idempotency::Idempotent)
        .map_err(|e| problem("host", e.to_string(), "retry; the connection dropped"))?;
    let (accounts, pyxis) = read_probe(&out.stdout);
    let partitions = usage
        .into_iter()
        .map(|p| PartitionFound {
            max_time: p.max_time_minutes.map(crate::slurm::format_duration_minutes).unwrap_or("UNLIMITED".into()),
            name: p.name,
            is_default: p.is_default,
            state: p.state,
        })
        .collect();
    Ok(ClusterFound { login_host, partitions, accounts, pyxis })
}

/// The partitions and account asked for exist on the cluster found (a wrong one is named with those
/// that do).
pub fn check_choices(answers: &InitAnswers, found: &ClusterFound) -> Result<(), InitProblem> {
    let names: Vec<&str> = found.partitions.iter().map(|p| p.name.as_str()).collect();
    for wanted in answers.partition.iter().flat_map(|p| p.split(',')) {
        if !names.contains(&wanted) {
            return Err(problem(
                "partition",
                format!("partition {wanted:?} does not exist on this cluster (partitions: {})", names.join(", ")),
                format!("pass --partition with one of: {}", names.join(", ")),
            ));
        }
    }
    if let Some(account) = &answers.account {
        if !found.accounts.is_empty() && !found.accounts.contains(account) {
            return Err(problem(
                "account",
                format!("you have no association with account {account:?} (yours: {})", found.accounts.join(", ")),
                format!("pass --account with one of: {}", found.accounts.join(", ")),
            ));
        }
    }
    Ok(())
}

/// The text the env file at `path` would have: its other lines kept, init's settings replaced.
pub fn env_file_text(path: &Path, answers: &InitAnswers) -> Result<(String, bool), InitProblem> {
    let existing = match std::fs::read_to_string(path) {
        Ok(t) => Some(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(problem("env_file", format!("{}: {e}", path.display()), "choose another --env-file")),
    };
    let text = render_env_file(existing.as_deref(), &env_values(answers))
        .map_err(|m| problem("settings", m, "correct the value named"))?;
    Ok((text, existing.is_some()))
}

/// Write the env file mode 600 (its directory 700 when new): a new file beside it, renamed over it.
pub fn write_env_file(path: &Path, text: &str) -> Result<(), InitProblem> {
    crate::private::write_private_file(path, text.as_bytes())
        .map_err(|e| problem("env_file", format!("cannot write {}: {e}", path.display()), "choose another --env-file"))
}
