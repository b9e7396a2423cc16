use clap::Args;
use tao_slurm_engine::error::Error;
use tao_slurm_mcp::SettingsLoader;

#[derive(Args, Debug)]
pub struct McpCmd {
    /// Offer only the tools that change nothing (no submit, cancel or image_import)
    #[arg(long)]
    pub read_only: bool,
}

impl McpCmd {
    /// Serve until the client disconnects. Settings are read again for every tool call (a fixed env
    /// file needs no restart), so a settings error is reported by the tools, not here.
    pub fn run(self, load_settings: SettingsLoader) -> Result<i32, Error> {
        tao_slurm_mcp::serve(load_settings, self.read_only)?;
        Ok(0)
    }
}
