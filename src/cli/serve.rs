use super::{settings_from, GlobalFlags};
use crate::error::Error;
use crate::spec::SpecError;
use clap::{Args, Subcommand};
use std::net::{IpAddr, SocketAddr};

#[derive(Args, Debug)]
pub struct ServeCmd {
    /// Address to listen on (loopback by default; anything else is plain HTTP: put TLS in front)
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,
    /// Port (0: any free port, printed on start)
    #[arg(long, default_value_t = 8570)]
    pub port: u16,
    /// Largest request body, in bytes
    #[arg(long, default_value_t = crate::service::DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,
    /// Requests a second each token may make (bursts of twice as many); beyond it 429 + Retry-After
    #[arg(long, default_value_t = crate::service::DEFAULT_REQUESTS_PER_SEC)]
    pub rate_limit: u32,
    /// Serve Prometheus' `/metrics` on this address (e.g. 127.0.0.1:9464; port 0: any, printed on
    /// start). It spans every org and has no token: bind it where only the operator's scraper reaches
    #[arg(long)]
    pub metrics_addr: Option<SocketAddr>,
    /// Seconds a replica's lease on a workspace's monitor lasts without renewal (renewed every
    /// third of it): another replica takes over a silent one within about this long
    #[arg(long, default_value_t = crate::service::lease::LEASE_SECS, value_parser = clap::value_parser!(i64).range(1..=3600))]
    pub lease_secs: i64,
    /// Keep the jobs' state in this PostgreSQL database (`postgresql://user@host:port/db`; as
    /// TAO_SLURM_DATABASE_URL). Its password comes from TAO_SLURM_DATABASE_PASSWORD, never the
    /// command line
    #[arg(long, value_name = "URL")]
    pub database: Option<String>,
    /// The SSH certificate authority's private key (an OpenSSH key, mode 600, no passphrase): with
    /// it, a workspace with `identity = "person"` logs in as each person's own Unix user with a
    /// certificate the service signs for that user only. The login hosts trust its public key
    /// (`serve ca-key`)
    #[arg(long, env = "TAO_SLURM_SSH_CA_KEY", value_name = "PATH")]
    pub ssh_ca_key: Option<std::path::PathBuf>,
    /// How long each certificate it signs is valid, in seconds or as `10min`, `1h` (10 s to 24 h),
    /// renewed before a login once half of it is gone
    #[arg(long, env = "TAO_SLURM_SSH_CERT_LIFETIME", default_value_t = crate::service::certificates::DEFAULT_CERTIFICATE_SECS, value_parser = parse_cert_lifetime)]
    pub ssh_cert_lifetime: u64,
    /// A host name of TensorBoard's own (e.g. `tensorboard.example.com`, pointed at this service):
    /// jobs' TensorBoard pages are served only on it, in an origin apart from the dashboard's, and it
    /// serves nothing else. Unset: they are served under `/tensorboard/` of the service's own host
    #[arg(long, env = "TAO_SLURM_TENSORBOARD_HOST", value_name = "NAME", value_parser = parse_host_name)]
    pub tensorboard_host: Option<String>,
    #[command(subcommand)]
    pub action: Option<ServeAction>,
}

#[derive(Subcommand, Debug)]
pub enum ServeAction {
    /// Print the public key the service logs in with for an org's own workspaces (made on first
    /// use), to add to the slurm_user's ~/.ssh/authorized_keys
    Key {
        #[arg(long)]
        org: String,
    },
    /// Print the public key of the SSH certificate authority (`--ssh-ca-key`): the line the login
    /// hosts' `TrustedUserCAKeys` file holds
    CaKey,
}

/// A certificate's lifetime in seconds, from `10min`, `1h`, `30s` or a number of seconds (10 s to 24 h).
fn parse_cert_lifetime(text: &str) -> Result<u64, String> {
    let secs = match text.parse::<u64>() {
        Ok(n) => n,
        Err(_) => humantime::parse_duration(text)
            .map_err(|e| format!("{text:?} is not a duration like 10min or 1h ({e})"))?
            .as_secs(),
    };
    if !(10..=86_400).contains(&secs) {
        return Err(format!("{text:?}: a certificate lives from 10s to 24h"));
    }
    Ok(secs)
}

fn parse_host_name(text: &str) -> Result<String, String> {
    let name = text.trim().to_ascii_lowercase();
    let ok = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
    if ok {
        Ok(name)
    } else {
        Err(format!("{text:?} is not a host name (letters, digits, `-`, dots)"))
    }
}

/// The operator's rules: the service's keys of the profiles file.
fn read_operator(globals: &GlobalFlags) -> Result<crate::service::operator::Operator, Error> {
    let env: std::collections::HashMap<String, String> = std::env::vars().collect();
    let Some(path) = crate::profiles::profiles_path(globals.env_file.as_deref(), &env) else {
        return Ok(Default::default());
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Default::default()),
        Err(e) => {
            return Err(
                SpecError::new(crate::profiles::FILE_SETTING, format!("cannot read {}: {e}", path.display())).into()
            )
        }
    };
    crate::service::operator::parse(&text)
        .map_err(|m| SpecError::new(crate::profiles::FILE_SETTING, format!("{}: {m}", path.display())).into())
}

impl ServeCmd {
    /// Serve the API, the dashboard and the monitors until interrupted. Workspaces: every profile of
    /// clusters.toml, plus `default` (the settings without a profile) when it names a cluster; with
    /// `--cluster NAME`, that profile only.
    pub(crate) fn run(self, globals: GlobalFlags) -> Result<i32, Error> {
        if let Some(url) = &self.database {
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
        let operator = read_operator(&globals)?;
        match &self.action {
            Some(ServeAction::Key { org }) => return print_org_key(&globals, &operator, org),
            Some(ServeAction::CaKey) => return print_ca_key(self.ssh_ca_key.as_deref()),
            None => {}
        }
        let workspaces = served_workspaces(&globals)?;
        let secret_box = secret_box(&globals)?;
        let make_settings = settings_maker(&globals);
        crate::service::serve(
            crate::service::ServeOptions {
                bind: SocketAddr::new(self.bind, self.port),
                max_body_bytes: self.max_body_bytes,
                requests_per_sec: self.rate_limit,
                metrics_addr: self.metrics_addr,
                lease_secs: self.lease_secs,
                ssh_ca_key: self.ssh_ca_key,
                ssh_cert_secs: self.ssh_cert_lifetime,
                tensorboard_host: self.tensorboard_host.clone(),
            },
            crate::service::Setup { workspaces, operator, secret_box, make_settings },
        )?;
        Ok(0)
    }
}

/// `serve key --org ORG`: the public key the service logs in with for the org's workspaces.
fn print_org_key(
    globals: &GlobalFlags,
    operator: &crate::service::operator::Operator,
    org: &str,
) -> Result<i32, Error> {
    let settings = settings_from(globals)?;
    let rules = operator.org(org);
    let key = crate::service::workspaces::org_key(&settings.state_path, org, rules.ssh_key.as_deref())
        .map_err(|m| SpecError::new("org", m))?;
    let line = crate::service::workspaces::public_key(&key).map_err(|m| SpecError::new("org", m))?;
    println!("{line}");
    eprintln!("add it to ~/.ssh/authorized_keys of the slurm_user of each of org {org}'s workspaces");
    Ok(0)
}

/// `serve ca-key`: the certificate authority's public key, for the login hosts' `TrustedUserCAKeys`.
fn print_ca_key(path: Option<&std::path::Path>) -> Result<i32, Error> {
    let path = path.ok_or_else(|| {
        SpecError::new("--ssh-ca-key", "give the CA's private key: --ssh-ca-key PATH (or TAO_SLURM_SSH_CA_KEY)")
    })?;
    let ca = crate::service::certificates::Authority::load(path).map_err(|m| SpecError::new("--ssh-ca-key", m))?;
    println!("{}", ca.public_key().map_err(|m| SpecError::new("--ssh-ca-key", m))?);
    eprintln!("add it to the file the login hosts' sshd_config names in TrustedUserCAKeys (see docs/service.md, \"Each person their own Unix identity\")");
    Ok(0)
}

/// The operator's workspaces: every profile of clusters.toml, plus `default` (the settings without
/// a profile) when it names a cluster; with `--cluster NAME`, that profile only. One state file.
fn served_workspaces(globals: &GlobalFlags) -> Result<Vec<(String, crate::config::Settings)>, Error> {
    let mut workspaces = Vec::new();
    if let Some(name) = &globals.cluster {
        workspaces.push((name.clone(), settings_from(globals)?));
    } else {
        let env: std::collections::HashMap<String, String> = std::env::vars().collect();
        let names: Vec<String> = match crate::profiles::profiles_path(globals.env_file.as_deref(), &env) {
            Some(path) => crate::profiles::read_profiles(&path)?.into_iter().map(|p| p.name).collect(),
            None => Vec::new(),
        };
        let default = settings_from(globals)?;
        if default.cluster.is_none() && default.require_remote().is_ok() {
            workspaces.push(("default".to_string(), default));
        }
        for name in names {
            if workspaces.iter().any(|(n, _)| *n == name) {
                continue;
            }
            let g = GlobalFlags { cluster: Some(name.clone()), ..globals.clone() };
            workspaces.push((name, settings_from(&g)?));
        }
    }
    if workspaces.is_empty() {
        return Err(SpecError::new(
            "cluster",
            format!(
                "no cluster to serve: {} (or define clusters in clusters.toml beside the env file)",
                crate::config::MISSING_MESSAGE
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
fn secret_box(globals: &GlobalFlags) -> Result<Option<crate::service::org_secrets::SecretBox>, Error> {
    let sources = crate::config::gather(Default::default(), globals.env_file.as_deref())?;
    let key_file = [&sources.flags, &sources.env, &sources.file]
        .into_iter()
        .find_map(|m| m.get(crate::service::org_secrets::KEY_FILE_SETTING).filter(|v| !v.trim().is_empty()));
    match key_file {
        Some(p) => Ok(Some(
            crate::service::org_secrets::SecretBox::from_key_file(std::path::Path::new(p.trim()))
                .map_err(|m| SpecError::new(crate::service::org_secrets::KEY_FILE_SETTING, m))?,
        )),
        None => Ok(None),
    }
}

/// How an org workspace's settings are made: the operator's sources, its state file, and the
/// workspace's own values on top.
fn settings_maker(globals: &GlobalFlags) -> crate::service::state::SettingsMaker {
    let g = GlobalFlags { cluster: None, ..globals.clone() };
    Box::new(move |mut extra| {
        // The cluster's name is the workspace's id, not a profile to look up.
        let cluster = extra.remove(crate::profiles::CLUSTER_SETTING);
        let mut sources = crate::config::gather(Default::default(), g.env_file.as_deref())?;
        if let Some(s) = &g.state {
            sources.flags.insert("TAO_SLURM_STATE".to_string(), s.display().to_string());
        }
        sources.flags.extend(extra);
        if let Some(c) = cluster {
            sources.flags.insert(crate::profiles::CLUSTER_SETTING.to_string(), c);
        }
        Ok(crate::config::Settings::from_sources(&sources)?)
    })
}
