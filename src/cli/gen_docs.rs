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
        for shell in [Shell::Zsh, Shell::Fish] {
            clap_complete::generate_to(shell, &mut cmd, "tao-slurm", &completions)?;
        }
        std::fs::write(completions.join("tao-slurm.bash"), bash(super::Cli::command()))?;
        // The page of the visible commands: gen-docs itself is hidden from it as from --help.
        clap_mangen::Man::new(cmd).render(&mut std::fs::File::create(man.join("tao-slurm.1"))?)
    }
}

/// The bash completions. clap_complete spells a name with `-` or `_` two ways in its bash script, so no
/// subcommand's options would complete (clap-rs/clap#6421): the script is made for `taoslurm` and only
/// the lines that register it name the command `tao-slurm`.
fn bash(cmd: clap::Command) -> String {
    let mut script = Vec::new();
    clap_complete::generate(Shell::Bash, &mut cmd.name("taoslurm"), "taoslurm", &mut script);
    let script = String::from_utf8_lossy(&script);
    let lines = script.lines().map(|line| match line.trim_start().starts_with("complete ") {
        true => line.strip_suffix(" taoslurm").map_or(line.to_string(), |head| format!("{head} tao-slurm")),
        false => line.to_string(),
    });
    lines.map(|line| line + "\n").collect()
}
