use clap::{Args, Subcommand};
use tao_slurm_engine::config::Settings;
use tao_slurm_engine::error::Error;
use tao_slurm_engine::Client;

#[derive(Args, Debug)]
pub struct ImageCmd {
    #[command(subcommand)]
    pub what: ImageAction,
}

#[derive(Subcommand, Debug)]
pub enum ImageAction {
    /// Convert an image into the shared squashfs cache (once; concurrent imports wait for it)
    Import {
        image: String,
        /// Convert again even if cached
        #[arg(long)]
        force: bool,
        #[arg(long)]
        json: bool,
    },
}

impl ImageCmd {
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        let ImageAction::Import { image, force, json } = self.what;
        let prepared = Client::new(settings)?.prepare_image(&image, force)?;
        super::output::emit(super::output::Format::from_json_flag(json), &prepared);
        Ok(0)
    }
}
