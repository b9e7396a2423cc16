//! The two sandbox clusters the end-to-end group runs on: Slurm 22.05 (`dev/sandbox/up.sh`) and Slurm
//! 24.11 (`dev/sandbox/up.sh --slurm 24.11`). A missing cluster is a failure, never a skip.

use super::Env;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::OnceLock;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cluster {
    Slurm22_05,
    Slurm24_11,
}

impl Cluster {
    /// The release, as `sinfo --version` prints its first two numbers.
    pub fn release(self) -> &'static str {
        match self {
            Cluster::Slurm22_05 => "22.05",
            Cluster::Slurm24_11 => "24.11",
        }
    }

    /// Its state directory (settings.env, logs, the shared results root).
    pub fn dir(self) -> PathBuf {
        match self {
            Cluster::Slurm22_05 => super::sandbox_dir(),
            Cluster::Slurm24_11 => PathBuf::from(
                std::env::var("SANDBOX_DIR_2411").unwrap_or_else(|_| "/var/lib/tao-slurm-sandbox-24.11".into()),
            ),
        }
    }

    fn settings(self) -> HashMap<String, String> {
        let path = self.dir().join("settings.env");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "the Slurm {} sandbox is not set up ({}: {e}); start it with: bash dev/sandbox/up.sh --slurm {}",
                self.release(),
                path.display(),
                self.release()
            )
        });
        text.lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect()
    }

    /// A user of the CLI on this cluster (as [`Env::new`]), after checking once that the cluster
    /// really runs this release.
    pub fn env(self) -> Env {
        let mut env = Env::new();
        env.vars.extend(self.settings());
        static SEEN: [OnceLock<String>; 2] = [OnceLock::new(), OnceLock::new()];
        let seen = SEEN[self as usize].get_or_init(|| env.ssh("sinfo --version\n"));
        assert!(
            seen.split_whitespace().nth(1).is_some_and(|v| v.starts_with(&format!("{}.", self.release()))),
            "the cluster at {} runs {seen:?}, not Slurm {}",
            self.dir().display(),
            self.release()
        );
        env
    }
}
