//! `tao-slurm gen-docs DIR` (hidden): the release archive's shell completions (bash, zsh, fish) and man
//! page, written from the CLI's own definition: DIR/completions/{tao-slurm.bash,_tao-slurm,
//! tao-slurm.fish} and DIR/man/tao-slurm.1. dev/release runs the executable it ships.
//! `tao-slurm gen-docs --settings FILE`: FILE's generated settings tables (docs/configuration.md's),
//! written again in place from the settings' definitions (`config::reference`).

use clap::{Args, CommandFactory};
use clap_complete::Shell;
use std::path::{Path, PathBuf};
use tao_slurm_engine::error::Error;

#[derive(Args, Debug)]
pub struct GenDocsCmd {
    /// The directory to write completions/ and man/ into (made if missing)
    #[arg(required_unless_present = "settings")]
    pub dir: Option<PathBuf>,
    /// Rewrite the generated settings tables of this page in place (docs/configuration.md)
    #[arg(long, value_name = "FILE")]
    pub settings: Option<PathBuf>,
}

impl GenDocsCmd {
    pub fn run(self) -> Result<i32, Error> {
        if let Some(page) = &self.settings {
            write_settings(page)
                .map_err(|e| tao_slurm_engine::spec::SpecError::new("settings", format!("{}: {e}", page.display())))?;
        }
        if let Some(dir) = &self.dir {
            write(dir).map_err(|e| tao_slurm_engine::spec::SpecError::new("dir", format!("{}: {e}", dir.display())))?;
        }
        Ok(0)
    }
}

/// The page with its marked blocks replaced by the rendered tables; unchanged files are not written.
fn write_settings(page: &Path) -> Result<(), String> {
    use tao_slurm_engine::config::reference;
    let text = std::fs::read_to_string(page).map_err(|e| e.to_string())?;
    let fresh = reference::replace_blocks(&text, &reference::render())?;
    if fresh != text {
        std::fs::write(page, fresh).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The completions and the man page, into DIR.
fn write(dir: &Path) -> std::io::Result<()> {
    let mut cmd = super::Cli::command();
    let completions = dir.join("completions");
    let man = dir.join("man");
    std::fs::create_dir_all(&completions)?;
    std::fs::create_dir_all(&man)?;
    for shell in [Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut cmd, "tao-slurm", &completions)?;
    }
    std::fs::write(completions.join("tao-slurm.bash"), bash(super::Cli::command()))?;
    // The page of the visible commands: gen-docs itself is hidden from it as from --help.
    clap_mangen::Man::new(cmd).render(&mut std::fs::File::create(man.join("tao-slurm.1"))?)
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

#[cfg(test)]
mod tests {
    use super::super::{Cli, Command};
    use clap::Parser;
    use tao_slurm_engine::config::reference::{render, BEGIN_MARKER, END_MARKER};

    #[test]
    fn settings_rewrites_the_marked_blocks_of_the_page_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let page = dir.path().join("configuration.md");
        let stale =
            format!("# Settings\n{BEGIN_MARKER}\n| old |\n{END_MARKER}\nprose\n{BEGIN_MARKER}\n{END_MARKER}\nend\n");
        std::fs::write(&page, &stale).unwrap();
        let cli = Cli::try_parse_from(["tao-slurm", "gen-docs", "--settings", page.to_str().unwrap()]).unwrap();
        let Command::GenDocs(cmd) = cli.command else { panic!("not gen-docs") };
        assert_eq!(cmd.run().unwrap(), 0);
        let [settings, tao] = &render()[..] else { panic!("two tables") };
        let want = format!(
            "# Settings\n{BEGIN_MARKER}\n{settings}{END_MARKER}\nprose\n{BEGIN_MARKER}\n{tao}{END_MARKER}\nend\n"
        );
        assert_eq!(std::fs::read_to_string(&page).unwrap(), want);
        // A page without the second block is refused, naming the option, and left as it was.
        std::fs::write(&page, "x\n").unwrap();
        let cli = Cli::try_parse_from(["tao-slurm", "gen-docs", "--settings", page.to_str().unwrap()]).unwrap();
        let Command::GenDocs(cmd) = cli.command else { panic!("not gen-docs") };
        let err = cmd.run().unwrap_err().to_string();
        assert!(err.contains("settings") && err.contains("fewer generated blocks"), "{err}");
        assert_eq!(std::fs::read_to_string(&page).unwrap(), "x\n");
        assert!(Cli::try_parse_from(["tao-slurm", "gen-docs"]).is_err(), "DIR or --settings is required");
    }
}
