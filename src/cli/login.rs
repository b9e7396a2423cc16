//! `login`: for login hosts that ask for a password or a second factor.

use crate::config::Settings;
use crate::error::Error;
use crate::Client;
use clap::Args;

#[derive(Args, Debug)]
pub struct LoginCmd {
    /// The login host (default: every one of SLURM_HOSTNAME)
    pub host: Option<String>,
    /// How long the connection stays open without use (e.g. 8h)
    #[arg(long, default_value = "12h")]
    pub persist: String,
}

impl LoginCmd {
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        let persist = humantime::parse_duration(&self.persist)
            .map_err(|e| crate::spec::SpecError::new("persist", format!("{:?}: {e}", self.persist)))?;
        for o in Client::new(settings)?.login(self.host.as_deref(), persist)? {
            let what = if o.opened { "logged in" } else { "already logged in" };
            println!("{}: {what}; commands reuse this connection for {} without use", o.host, self.persist);
        }
        Ok(0)
    }
}
