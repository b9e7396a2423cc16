//! `tao-slurm gen-docs DIR` (hidden): the release archive's shell completions (bash, zsh, fish) and man
//! page, written from the CLI's own definition: DIR/completions/{tao-slurm.bash,_tao-slurm,
//! tao-slurm.fish} and DIR/man/tao-slurm.1. dev/release runs the executable it ships.

use crate::error::Error;
use clap::{Args, CommandFactory};
use clap_complete::Shell;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct GenDocsCmd {
    /// The directory to write completions/ and man/ into (made if missing)
    pub dir: PathBuf,
}

impl GenDocsCmd {
    pub fn run(self) -> Result<i32, Error> {
        self.write().map_err(|e| crate::spec::SpecError::new("dir", format!("{}: {e}", self.dir.display())))?;
        Ok(0)
    }

    fn write(&self) -> std::io::Result<()> {
        let mut cmd = super::Cli::command();
        let completions = self.dir.join("completions");
        let man = self.dir.join("man");
        std::fs::create_dir_all(&completions)?;
        std::fs::create_dir_all(&man)?;
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            clap_complete::generate_to(shell, &mut cmd, "tao-slurm", &completions)?;
        }
        // The page of the visible commands: gen-docs itself is hidden from it as from --help.
        clap_mangen::Man::new(cmd).render(&mut std::fs::File::create(man.join("tao-slurm.1"))?)
    }
}
