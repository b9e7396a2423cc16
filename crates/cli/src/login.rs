//! `login`: for login hosts that ask for a password or a second factor.

use clap::Args;
use tao_slurm_engine::config::Settings;
use tao_slurm_engine::error::Error;
use tao_slurm_engine::Client;

#[derive(Args, Debug)]
pub struct LoginCmd {
    /// The login host (default: every one of SLURM_HOSTNAME)
    pub host: Option<String>,
    /// How long the connection stays open without use (e.g. 8h)
    #[arg(long, default_value = "12h")]
    pub persist: String,
    /// Sign in to a team service (its URL) through its identity provider instead: opens nothing,
    /// prints the service's page and a code to type there in any browser, and keeps the service
    /// token it gets in
    /// ~/.config/tao/service-token.json (mode 600; `--token-file` elsewhere)
    #[arg(long, value_name = "URL", conflicts_with = "host")]
    pub service: Option<String>,
    /// With --service: the org to sign in to, when the person belongs to several
    #[arg(long, requires = "service")]
    pub org: Option<String>,
    /// With --service: where to keep the token
    #[arg(long, requires = "service", value_name = "PATH")]
    pub token_file: Option<std::path::PathBuf>,
}

impl LoginCmd {
    /// `login --service URL`: the device sign-in of a team service (needs no cluster settings).
    pub fn sign_in(self) -> Result<i32, Error> {
        let url = self.service.expect("--service");
        super::service_login::sign_in(&url, self.org.as_deref(), self.token_file)
    }

    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        let persist = humantime::parse_duration(&self.persist)
            .map_err(|e| tao_slurm_engine::spec::SpecError::new("persist", format!("{:?}: {e}", self.persist)))?;
        for o in Client::new(settings)?.login(self.host.as_deref(), persist)? {
            let what = if o.opened { "logged in" } else { "already logged in" };
            println!("{}: {what}; commands reuse this connection for {} without use", o.host, self.persist);
        }
        Ok(0)
    }
}
