use super::{settings_from, GlobalFlags};
use clap::{Args, Subcommand};
use std::net::{IpAddr, SocketAddr};
use tao_slurm_engine::error::Error;
use tao_slurm_service::{Action, ServeOptions, Start};

#[derive(Args, Debug)]
pub struct ServeCmd {
    /// Address to listen on (loopback by default; anything else is plain HTTP: put TLS in front)
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,
    /// Port (0: any free port, printed on start)
    #[arg(long, default_value_t = 8570)]
    pub port: u16,
    /// Largest request body, in bytes
    #[arg(long, default_value_t = tao_slurm_service::DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,
    /// Requests a second each token may make (bursts of twice as many); beyond it 429 + Retry-After
    #[arg(long, default_value_t = tao_slurm_service::DEFAULT_REQUESTS_PER_SEC)]
    pub rate_limit: u32,
    /// Serve Prometheus' `/metrics` on this address (e.g. 127.0.0.1:9464; port 0: any, printed on
    /// start). It spans every org and has no token: bind it where only the operator's scraper reaches
    #[arg(long)]
    pub metrics_addr: Option<SocketAddr>,
    /// Seconds a replica's lease on a workspace's monitor lasts without renewal (renewed every
    /// third of it): another replica takes over a silent one within about this long
    #[arg(long, default_value_t = tao_slurm_service::LEASE_SECS, value_parser = clap::value_parser!(i64).range(1..=3600))]
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
    #[arg(long, env = "TAO_SLURM_SSH_CERT_LIFETIME", default_value_t = tao_slurm_service::DEFAULT_CERTIFICATE_SECS, value_parser = parse_cert_lifetime)]
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

impl ServeCmd {
    /// Start the service as asked: the service's crate reads the operator's rules and serves.
    pub(crate) fn run(self, globals: GlobalFlags) -> Result<i32, Error> {
        let action = match self.action {
            Some(ServeAction::Key { org }) => Action::OrgKey { org },
            Some(ServeAction::CaKey) => Action::CaKey,
            None => Action::Serve,
        };
        let options = ServeOptions {
            bind: SocketAddr::new(self.bind, self.port),
            max_body_bytes: self.max_body_bytes,
            requests_per_sec: self.rate_limit,
            metrics_addr: self.metrics_addr,
            lease_secs: self.lease_secs,
            ssh_ca_key: self.ssh_ca_key,
            ssh_cert_secs: self.ssh_cert_lifetime,
            tensorboard_host: self.tensorboard_host,
        };
        let (env_file, state, cluster) = (globals.env_file.clone(), globals.state.clone(), globals.cluster.clone());
        let settings_for = Box::new(move |profile: Option<String>| match profile {
            Some(name) => settings_from(&GlobalFlags { cluster: Some(name), ..globals.clone() }),
            None => settings_from(&globals),
        });
        tao_slurm_service::start(Start {
            action,
            options,
            database: self.database,
            env_file,
            state,
            cluster,
            settings_for,
        })
    }
}
