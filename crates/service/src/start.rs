//! How the command line starts the service (`tao-slurm serve`, `serve key`, `serve ca-key`): the one
//! function the command line calls, with the flags it parsed as plain values. The operator's rules,
//! the workspaces served, the secrets' key and each org workspace's settings are the service's
//! business and are read here.

use crate::ServeOptions;
use std::path::PathBuf;
use tao_slurm_engine::config::Settings;
use tao_slurm_engine::error::Error;
use tao_slurm_engine::spec::SpecError;

/// What `tao-slurm serve` was asked to do.
#[derive(Debug, Clone)]
pub enum Action {
    /// Serve the API, the dashboard and the monitors until interrupted.
    Serve,
    /// Print the public key the service logs in with for an org's own workspaces.
    OrgKey { org: String },
    /// Print the SSH certificate authority's public key.
    CaKey,
}

/// The settings of a workspace: the global flags laid over the named cluster profile (`None`: the
/// one the flags name), the environment and the env file.
pub type SettingsFor = Box<dyn Fn(Option<String>) -> Result<Settings, Error>>;

/// The command line's flags and how it makes settings from them.
pub struct Start {
    pub action: Action,
    pub options: ServeOptions,
    /// `--database URL` (its password never on the command line).
    pub database: Option<String>,
    pub env_file: Option<PathBuf>,
    pub state: Option<PathBuf>,
    /// `--cluster NAME`: serve that profile only.
    pub cluster: Option<String>,
    pub settings_for: SettingsFor,
}

/// Serve (or print a key) as `tao-slurm serve` was asked. Workspaces: every profile of clusters.toml,
/// plus `default` (the settings without a profile) when it names a cluster; with `--cluster NAME`,
/// that profile only.
pub fn start(start: Start) -> Result<i32, Error> {
    if let Some(url) = &start.database {
        if has_password(url) {
            return Err(SpecError::new(
                "--database",
                "the URL carries a password: give it in TAO_SLURM_DATABASE_PASSWORD (or the whole URL in \
                 TAO_SLURM_DATABASE_URL), never on the command line",
            )
            .into());
        }
        // Before any settings are read (one thread yet): every workspace's settings see it.
        std::env::set_var("TAO_SLURM_DATABASE_URL", url);
    }
    let operator = read_operator(&start)?;
    match &start.action {
        Action::OrgKey { org } => return print_org_key(&start, &operator, org),
        Action::CaKey => return print_ca_key(start.options.ssh_ca_key.as_deref()),
        Action::Serve => {}
    }
    let workspaces = served_workspaces(&start)?;
    let secret_box = secret_box(&start)?;
    let make_settings = settings_maker(&start);
    crate::serve(start.options, crate::Setup { workspaces, operator, secret_box, make_settings })?;
    Ok(0)
}

/// The operator's rules: the service's keys of the profiles file.
fn read_operator(globals: &Start) -> Result<crate::operator::Operator, Error> {
    let env: std::collections::HashMap<String, String> = std::env::vars().collect();
    let Some(path) = tao_slurm_engine::profiles::profiles_path(globals.env_file.as_deref(), &env) else {
        return Ok(Default::default());
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Default::default()),
        Err(e) => {
            return Err(SpecError::new(
                tao_slurm_engine::profiles::FILE_SETTING,
                format!("cannot read {}: {e}", path.display()),
            )
            .into())
        }
    };
    crate::operator::parse(&text).map_err(|m| {
        SpecError::new(tao_slurm_engine::profiles::FILE_SETTING, format!("{}: {m}", path.display())).into()
    })
}

/// `serve key --org ORG`: the public key the service logs in with for the org's workspaces.
fn print_org_key(globals: &Start, operator: &crate::operator::Operator, org: &str) -> Result<i32, Error> {
    let settings = (globals.settings_for)(None)?;
    let rules = operator.org(org);
    let key = crate::workspaces::org_key(&settings.state_path, org, rules.ssh_key.as_deref())
        .map_err(|m| SpecError::new("org", m))?;
    let line = crate::workspaces::public_key(&key).map_err(|m| SpecError::new("org", m))?;
    println!("{line}");
    eprintln!("add it to ~/.ssh/authorized_keys of the slurm_user of each of org {org}'s workspaces");
    Ok(0)
}

/// `serve ca-key`: the certificate authority's public key, for the login hosts' `TrustedUserCAKeys`.
fn print_ca_key(path: Option<&std::path::Path>) -> Result<i32, Error> {
    let path = path.ok_or_else(|| {
        SpecError::new("--ssh-ca-key", "give the CA's private key: --ssh-ca-key PATH (or TAO_SLURM_SSH_CA_KEY)")
    })?;
    let ca = crate::certificates::Authority::load(path).map_err(|m| SpecError::new("--ssh-ca-key", m))?;
    println!("{}", ca.public_key().map_err(|m| SpecError::new("--ssh-ca-key", m))?);
    eprintln!("add it to the file the login hosts' sshd_config names in TrustedUserCAKeys (see docs/service.md, \"Each person their own Unix identity\")");
    Ok(0)
}

/// The operator's workspaces: every profile of clusters.toml, plus `default` (the settings without
/// a profile) when it names a cluster; with `--cluster NAME`, that profile only. One state file.
fn served_workspaces(globals: &Start) -> Result<Vec<(String, Settings)>, Error> {
    let mut workspaces = Vec::new();
    if let Some(name) = &globals.cluster {
        workspaces.push((name.clone(), (globals.settings_for)(None)?));
    } else {
        let env: std::collections::HashMap<String, String> = std::env::vars().collect();
        let names: Vec<String> = match tao_slurm_engine::profiles::profiles_path(globals.env_file.as_deref(), &env) {
            Some(path) => tao_slurm_engine::profiles::read_profiles(&path)?.into_iter().map(|p| p.name).collect(),
            None => Vec::new(),
        };
        let default = (globals.settings_for)(None)?;
        if default.cluster.is_none() && default.require_remote().is_ok() {
            workspaces.push(("default".to_string(), default));
        }
        for name in names {
            if workspaces.iter().any(|(n, _)| *n == name) {
                continue;
            }
            let settings = (globals.settings_for)(Some(name.clone()))?;
            workspaces.push((name, settings));
        }
    }
    if workspaces.is_empty() {
        return Err(SpecError::new(
            "cluster",
            format!(
                "no cluster to serve: {} (or define clusters in clusters.toml beside the env file)",
                tao_slurm_engine::config::MISSING_MESSAGE
            ),
        )
        .into());
    }
    if let Some((id, s)) = workspaces.iter().find(|(_, s)| s.state_path != workspaces[0].1.state_path) {
        return Err(SpecError::new(
            "TAO_SLURM_STATE",
            format!("workspace {id} uses another state file ({}); one service has one", s.state_path.display()),
        )
        .into());
    }
    Ok(workspaces)
}

/// Whether a database URL holds a password (`user:password@` or `password=`).
fn has_password(url: &str) -> bool {
    let authority = url.split_once("://").map_or("", |(_, rest)| rest.split(['/', '?']).next().unwrap_or(""));
    authority.rsplit_once('@').is_some_and(|(user, _)| user.contains(':'))
        || url.to_ascii_lowercase().contains("password=")
}

/// The key that seals the orgs' secrets, when the operator names its file.
fn secret_box(globals: &Start) -> Result<Option<crate::org_secrets::SecretBox>, Error> {
    let sources = tao_slurm_engine::config::gather(Default::default(), globals.env_file.as_deref())?;
    let key_file = [&sources.flags, &sources.env, &sources.file]
        .into_iter()
        .find_map(|m| m.get(crate::org_secrets::KEY_FILE_SETTING).filter(|v| !v.trim().is_empty()));
    match key_file {
        Some(p) => Ok(Some(
            crate::org_secrets::SecretBox::from_key_file(std::path::Path::new(p.trim()))
                .map_err(|m| SpecError::new(crate::org_secrets::KEY_FILE_SETTING, m))?,
        )),
        None => Ok(None),
    }
}

/// How an org workspace's settings are made: the operator's sources, its state file, and the
/// workspace's own values on top.
fn settings_maker(globals: &Start) -> crate::state::SettingsMaker {
    let (env_file, state) = (globals.env_file.clone(), globals.state.clone());
    Box::new(move |mut extra| {
        // The cluster's name is the workspace's id, not a profile to look up.
        let cluster = extra.remove(tao_slurm_engine::profiles::CLUSTER_SETTING);
        let mut sources = tao_slurm_engine::config::gather(Default::default(), env_file.as_deref())?;
        if let Some(s) = &state {
            sources.flags.insert("TAO_SLURM_STATE".to_string(), s.display().to_string());
        }
        sources.flags.extend(extra);
        if let Some(c) = cluster {
            sources.flags.insert(tao_slurm_engine::profiles::CLUSTER_SETTING.to_string(), c);
        }
        Ok(Settings::from_sources(&sources)?)
    })
}
