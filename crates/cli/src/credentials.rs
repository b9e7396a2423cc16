use clap::{Args, Subcommand};
use tao_slurm_engine::config::Settings;
use tao_slurm_engine::error::Error;

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
        let (path, host, machines) = tao_slurm_engine::Client::new(settings)?.install_enroot_credentials()?;
        let report = super::output::CredentialsReport { installed: path, host, machines };
        super::output::emit(super::output::Format::from_json_flag(json), &report);
        Ok(0)
    }
}
