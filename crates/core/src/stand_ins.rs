//! For tests: run a remote script under bash on this machine with stand-in commands (`squeue`,
//! `sacct`, `scancel`, `srun`...) first on its PATH, so the scripts the core builds are tested by
//! running them, not by reading them.

use std::path::PathBuf;
use std::process::{Command, Output};

/// A directory of executable stand-ins, removed when dropped.
pub struct StandIns {
    dir: tempfile::TempDir,
}

impl StandIns {
    pub fn new() -> StandIns {
        StandIns { dir: tempfile::tempdir().unwrap() }
    }

    /// Stand-ins from (command, bash body) pairs.
    pub fn of(commands: &[(&str, &str)]) -> StandIns {
        let s = StandIns::new();
        for (name, body) in commands {
            s.add(name, body);
        }
        s
    }

    /// A stand-in `name` that runs `body` under bash.
    pub fn add(&self, name: &str, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = self.dir.path().join(name);
        std::fs::write(&path, format!("#!/bin/bash\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// `bash -c script` with the stand-ins first on PATH.
    pub fn command(&self, script: &str) -> Command {
        let mut cmd = Command::new("bash");
        cmd.arg("-c").arg(script).env("PATH", format!("{}:/usr/bin:/bin", self.dir.path().display()));
        cmd
    }

    pub fn run(&self, script: &str) -> Output {
        self.command(script).output().unwrap()
    }

    /// The script's standard output.
    pub fn stdout(&self, script: &str) -> String {
        String::from_utf8(self.run(script).stdout).unwrap()
    }
}
