use crate::config::Settings;
use crate::error::Error;
use crate::spec::SpecError;
use clap::{Args, Subcommand};

#[derive(Args, Debug)]
pub struct CredentialsCmd {
    #[command(subcommand)]
    pub what: CredentialsKind,
}

#[derive(Subcommand, Debug)]
pub enum CredentialsKind {
    /// Install ~/.config/enroot/.credentials on the cluster from NGC_KEY (for private nvcr.io images)
    Enroot {
        #[arg(long)]
        json: bool,
    },
}

impl CredentialsCmd {
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        let CredentialsKind::Enroot { json } = self.what;
        settings.require_remote()?;
        let key = settings.ngc_key.clone().ok_or_else(|| {
            SpecError::new("NGC_KEY", "is not set; export NGC_KEY (your NGC API key) or put it in ~/.config/tao/.env")
        })?;
        let remote = crate::remote::connect(&settings)?;
        let (path, host) = crate::engine::credentials::install_enroot_credentials(remote.as_ref(), &key)?;
        let machines = crate::engine::credentials::NGC_MACHINES.iter().map(|m| m.to_string()).collect();
        let report = super::output::CredentialsReport { installed: path, host, machines };
        super::output::emit(super::output::Format::from_json_flag(json), &report);
        Ok(0)
    }
}
