//! The sandbox cluster as dev/sandbox/up.sh left it: its directory and its settings (settings.env),
//! read once for the whole test binary, and what its sshd logs say. A missing sandbox is a failure,
//! never a skip.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The sandbox's directory: `SANDBOX_DIR`, else where dev/sandbox/up.sh puts it.
pub fn dir() -> PathBuf {
    PathBuf::from(std::env::var("SANDBOX_DIR").unwrap_or_else(|_| "/var/lib/tao-slurm-sandbox".into()))
}

/// Every setting the sandbox's start script wrote (the user's, such as SLURM_USER, and the
/// sandbox's own, SANDBOX_*).
pub fn settings() -> &'static HashMap<String, String> {
    static SETTINGS: OnceLock<HashMap<String, String>> = OnceLock::new();
    SETTINGS.get_or_init(|| read_settings(&dir(), "bash dev/sandbox/up.sh"))
}

/// The settings.env a sandbox's start script wrote into `dir` (this sandbox's, or another
/// cluster's); `start` is the command that sets that sandbox up.
pub fn read_settings(dir: &Path, start: &str) -> HashMap<String, String> {
    let path = dir.join("settings.env");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("the sandbox cluster is not set up ({}: {e}); start it with: {start}", path.display())
    });
    text.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.trim().to_string(), v.trim().to_string())).collect()
}

/// One setting, or a panic naming it.
pub fn setting(name: &str) -> &'static str {
    settings().get(name).unwrap_or_else(|| panic!("the sandbox's settings.env has no {name}: run dev/sandbox/up.sh"))
}

/// The login hosts' sshd ports on loopback, first host first.
pub fn ssh_ports() -> Vec<String> {
    setting("SANDBOX_SSH_PORTS").split(',').map(String::from).collect()
}

/// Logins accepted with the key of this fingerprint, per login host (in the order of the ports).
pub fn logins_per_host(fingerprint: &str) -> Vec<usize> {
    setting("SANDBOX_SSHD_LOGS")
        .split(',')
        .map(|p| {
            std::fs::read_to_string(p)
                .unwrap_or_else(|e| panic!("cannot read the sshd log {p}: {e}"))
                .lines()
                .filter(|l| l.contains("Accepted publickey for") && l.contains(fingerprint))
                .count()
        })
        .collect()
}

/// Logins accepted with the key of this fingerprint, on every login host.
pub fn accepted_logins_with(fingerprint: &str) -> usize {
    logins_per_host(fingerprint).iter().sum()
}
