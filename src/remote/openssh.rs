//! Transport over the system's OpenSSH: one ControlMaster connection per login host, shared by every
//! command of this process and, through ControlPersist, by the CLI invocations that follow it.
//!
//! Why OpenSSH and not an SSH library: it reads the user's `~/.ssh/config` (aliases, ProxyJump,
//! certificates), their agent and known_hosts exactly as `ssh` does, and its ControlMaster lets separate
//! short-lived CLI processes share one authenticated connection, which no in-process library can.

use super::{run_with_input, Idempotency, Remote, RemoteError, RemoteOutput};
use crate::config::{LoginHost, Settings};
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

pub struct OpenSsh {
    user: String,
    hosts: Vec<LoginHost>,
    ssh_config: Option<PathBuf>,
    known_hosts: Option<PathBuf>,
    key_path: Option<PathBuf>,
    auth_sock: Option<String>,
    connect_timeout_secs: u32,
    control_persist_secs: u32,
    control_dir: PathBuf,
    /// Index into `hosts` of the host whose master is up, once one is.
    active: Mutex<Option<usize>>,
}

/// The contract's remediation when passwordless SSH fails.
pub fn ssh_remediation(user: &str, host: &str) -> String {
    format!(
        "SLURM is blocked on passwordless SSH. Please provide: SSH_KEY_PATH=/path/to/private_key\n\
         To set up a key:\n\
         1. ssh-keygen -t ed25519 -N \"\" -f ~/.ssh/id_ed25519\n\
         2. ssh-copy-id -i ~/.ssh/id_ed25519.pub {user}@{host}\n\
         3. ssh-keyscan -H {host} >> ~/.ssh/known_hosts\n\
         4. chmod 600 ~/.ssh/id_ed25519\n\
         5. ssh -o BatchMode=yes -i ~/.ssh/id_ed25519 {user}@{host} 'hostname'"
    )
}

impl OpenSsh {
    pub fn new(settings: &Settings, user: &str, hosts: &[LoginHost]) -> Result<OpenSsh, RemoteError> {
        if let Some(key) = &settings.ssh_key_path {
            check_key_file(key)?;
        }
        Ok(OpenSsh {
            user: user.to_string(),
            hosts: hosts.to_vec(),
            ssh_config: settings.ssh_config.clone(),
            known_hosts: settings.ssh_known_hosts.clone(),
            key_path: settings.ssh_key_path.clone(),
            auth_sock: settings.ssh_auth_sock.clone(),
            connect_timeout_secs: settings.connect_timeout_secs,
            control_persist_secs: settings.control_persist_secs,
            control_dir: settings.control_dir.clone(),
            active: Mutex::new(None),
        })
    }

    /// Options common to every ssh invocation for `host`, ending with the destination.
    fn base_command(&self, host: &LoginHost) -> Command {
        let mut cmd = Command::new("ssh");
        if let Some(cfg) = &self.ssh_config {
            cmd.arg("-F").arg(cfg);
        }
        for opt in [
            "BatchMode=yes".to_string(),
            // Host keys are always verified; a new host is trusted only by an explicit choice.
            "StrictHostKeyChecking=yes".to_string(),
            format!("ConnectTimeout={}", self.connect_timeout_secs),
            "ServerAliveInterval=15".to_string(),
            "ServerAliveCountMax=3".to_string(),
            format!("ControlPath={}/%C", self.control_dir.display()),
            "LogLevel=ERROR".to_string(),
        ] {
            cmd.arg("-o").arg(opt);
        }
        if let Some(kh) = &self.known_hosts {
            cmd.arg("-o").arg(format!("UserKnownHostsFile={}", kh.display()));
        }
        if let Some(key) = &self.key_path {
            cmd.arg("-i").arg(key).arg("-o").arg("IdentitiesOnly=yes");
        }
        if let Some(sock) = &self.auth_sock {
            cmd.env("SSH_AUTH_SOCK", sock);
        }
        cmd.arg("-l").arg(&self.user);
        if let Some(port) = host.port {
            cmd.arg("-p").arg(port.to_string());
        }
        cmd.arg(&host.host);
        cmd
    }

    fn master_alive(&self, host: &LoginHost) -> bool {
        let mut cmd = self.control_command(host, "check");
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        cmd.status().map(|s| s.success()).unwrap_or(false)
    }

    fn control_command(&self, host: &LoginHost, op: &str) -> Command {
        let mut cmd = Command::new("ssh");
        cmd.arg("-O").arg(op);
        let base = self.base_command(host);
        cmd.args(base.get_args());
        cmd
    }

    /// Bring up the master for `host` unless one is already up. Serialised across processes by a lock
    /// file, so concurrent CLI invocations never open two logins to the same host.
    fn ensure_master(&self, host: &LoginHost) -> Result<(), String> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.control_dir)
            .map_err(|e| format!("cannot create {}: {e}", self.control_dir.display()))?;
        let lock_path = self.control_dir.join(format!("{}.lock", sanitize(&host.label())));
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| format!("cannot open {}: {e}", lock_path.display()))?;
        lock.lock().map_err(|e| format!("cannot lock {}: {e}", lock_path.display()))?;
        let result = if self.master_alive(host) { Ok(()) } else { self.start_master(host) };
        let _ = File::unlock(&lock);
        result
    }

    fn start_master(&self, host: &LoginHost) -> Result<(), String> {
        // stderr goes to a file, not a pipe: the backgrounded master (-f) keeps its stderr open, and a
        // pipe would never reach EOF.
        let err_file = tempfile::NamedTempFile::new().map_err(|e| e.to_string())?;
        let mut cmd = Command::new("ssh");
        cmd.args(["-f", "-N", "-o", "ControlMaster=yes"])
            .arg("-o")
            .arg(format!("ControlPersist={}", self.control_persist_secs.max(1)));
        cmd.args(self.base_command(host).get_args());
        if let Some(sock) = &self.auth_sock {
            cmd.env("SSH_AUTH_SOCK", sock);
        }
        let stderr = err_file.reopen().map_err(|e| e.to_string())?;
        let status = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .status()
            .map_err(|e| format!("cannot run ssh: {e}"))?;
        if status.success() {
            return Ok(());
        }
        let text = fs::read_to_string(err_file.path()).unwrap_or_default();
        Err(describe_ssh_failure(host, text.trim()))
    }

    /// The host to use: the active one, else the first in the list whose master comes up.
    fn select_host(&self, skip: Option<usize>) -> Result<usize, RemoteError> {
        let mut failures = Vec::new();
        for (i, host) in self.hosts.iter().enumerate() {
            if Some(i) == skip {
                continue;
            }
            match self.ensure_master(host) {
                Ok(()) => {
                    *self.active.lock().unwrap() = Some(i);
                    return Ok(i);
                }
                Err(message) => {
                    tracing::warn!(host = %host.label(), %message, "login host unreachable");
                    failures.push(format!("{}: {message}", host.label()));
                }
            }
        }
        let first = self.hosts.first().map(|h| h.host.clone()).unwrap_or_default();
        Err(RemoteError::Unreachable {
            hosts: self.hosts.iter().map(LoginHost::label).collect::<Vec<_>>().join(", "),
            message: failures.join("; "),
            remediation: ssh_remediation(&self.user, &first),
        })
    }

    fn run_on(&self, index: usize, script: &str) -> Result<RemoteOutput, RemoteError> {
        let host = &self.hosts[index];
        let mut cmd = self.base_command(host);
        cmd.arg("-o").arg("ControlMaster=no").arg("--").arg("bash -s");
        let (exit_code, stdout, stderr) = run_with_input(cmd, script)?;
        if exit_code == 255 {
            // 255 is ssh's own failure (our scripts never exit 255): the connection, not the command.
            return Err(RemoteError::Lost { host: host.label(), message: stderr.trim().to_string() });
        }
        Ok(RemoteOutput { exit_code, stdout, stderr, host: host.label() })
    }
}

impl Remote for OpenSsh {
    fn run_script(&self, script: &str, idempotency: Idempotency) -> Result<RemoteOutput, RemoteError> {
        let current = *self.active.lock().unwrap();
        let index = match current {
            Some(i) => i,
            None => self.select_host(None)?,
        };
        match self.run_on(index, script) {
            Err(RemoteError::Lost { host, message }) if idempotency == Idempotency::Idempotent => {
                tracing::warn!(%host, %message, "connection lost; reconnecting");
                *self.active.lock().unwrap() = None;
                let index = match self.select_host(None) {
                    Ok(i) => i,
                    Err(_) => self.select_host(Some(index))?,
                };
                self.run_on(index, script)
            }
            other => other,
        }
    }
}

fn describe_ssh_failure(host: &LoginHost, stderr: &str) -> String {
    if stderr.contains("Host key verification failed")
        || stderr.contains("No ED25519 host key is known")
        || stderr.contains("host key for") && stderr.contains("is not known")
    {
        let scan = match host.port {
            Some(p) => format!("ssh-keyscan -p {p} -H {}", host.host),
            None => format!("ssh-keyscan -H {}", host.host),
        };
        return format!(
            "the host key of {} is unknown or does not match ({stderr}); after checking its fingerprint with the site, add it: {scan} >> ~/.ssh/known_hosts",
            host.label()
        );
    }
    if stderr.is_empty() {
        "ssh exited with status 255 and no message".to_string()
    } else {
        stderr.to_string()
    }
}

fn sanitize(text: &str) -> String {
    text.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' }).collect()
}

/// ssh refuses private keys readable by others; say so (and how to fix it) before ssh does, without
/// touching the user's file.
fn check_key_file(path: &Path) -> Result<(), RemoteError> {
    let meta = fs::metadata(path)
        .map_err(|e| RemoteError::KeyMissing { path: path.display().to_string(), message: e.to_string() })?;
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(RemoteError::KeyPermissions { path: path.display().to_string() });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_with_open_permissions_is_refused_and_left_alone() {
        let f = tempfile::NamedTempFile::new().unwrap();
        fs::set_permissions(f.path(), fs::Permissions::from_mode(0o644)).unwrap();
        let err = check_key_file(f.path()).unwrap_err();
        assert!(err.to_string().contains(&format!("chmod 600 {}", f.path().display())));
        assert_eq!(fs::metadata(f.path()).unwrap().permissions().mode() & 0o777, 0o644);
        fs::set_permissions(f.path(), fs::Permissions::from_mode(0o600)).unwrap();
        assert!(check_key_file(f.path()).is_ok());
    }

    #[test]
    fn unknown_host_key_gives_keyscan_remediation() {
        let h = LoginHost { host: "login1".into(), port: Some(2222) };
        let msg = describe_ssh_failure(&h, "Host key verification failed.");
        assert!(msg.contains("ssh-keyscan -p 2222 -H login1 >> ~/.ssh/known_hosts"), "{msg}");
    }
}
