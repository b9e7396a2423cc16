//! Transport over the system's OpenSSH: one ControlMaster connection per login host, shared by every
//! command of this process and, through ControlPersist, by the CLI invocations that follow it.
//!
//! Why OpenSSH and not an SSH library: it reads the user's `~/.ssh/config` (aliases, ProxyJump,
//! certificates), their agent and known_hosts exactly as `ssh` does, and its ControlMaster lets separate
//! short-lived CLI processes share one authenticated connection, which no in-process library can.

use super::session::{CallError, Pool, Session};
use super::{Idempotency, Remote, RemoteError, RemoteOutput};
use crate::config::{LoginHost, Settings};
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

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
    accept_new_host_keys: bool,
    counters: super::Counters,
    /// Index into `hosts` of the host whose master is up, once one is.
    active: Mutex<Option<usize>>,
    /// Idle persistent shells.
    sessions: Pool,
}

/// A host that failed to connect is skipped for this long (by every process: the mark is a file in the
/// control directory), then tried again; the first host is preferred again as soon as it answers.
const RETRY_FAILED_HOST_AFTER: Duration = Duration::from_secs(60);

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
            accept_new_host_keys: settings.accept_new_host_keys,
            counters: super::Counters::default(),
            active: Mutex::new(None),
            sessions: Pool::default(),
        })
    }

    pub fn hosts(&self) -> &[LoginHost] {
        &self.hosts
    }

    /// Options common to every ssh invocation for `host`, ending with the destination.
    fn base_command(&self, host: &LoginHost) -> Command {
        let mut cmd = Command::new("ssh");
        if let Some(cfg) = &self.ssh_config {
            cmd.arg("-F").arg(cfg);
        }
        // Host keys are always verified; a new host is trusted only by an explicit choice.
        let strict = if self.accept_new_host_keys { "accept-new" } else { "yes" };
        for opt in [
            "BatchMode=yes".to_string(),
            format!("StrictHostKeyChecking={strict}"),
            format!("ConnectTimeout={}", self.connect_timeout_secs),
            // A dead connection is noticed within about 45 s instead of hanging.
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
        let mut cmd = Command::new("ssh");
        cmd.args(["-O", "check"]).args(self.base_command(host).get_args());
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        cmd.status().map(|s| s.success()).unwrap_or(false)
    }

    fn control_file(&self, host: &LoginHost, suffix: &str) -> PathBuf {
        self.control_dir.join(format!("{}.{suffix}", sanitize(&format!("{}@{}", self.user, host.label()))))
    }

    fn marked_down(&self, host: &LoginHost) -> bool {
        fs::metadata(self.control_file(host, "down"))
            .and_then(|m| m.modified())
            .map(|t| t.elapsed().unwrap_or_default() < RETRY_FAILED_HOST_AFTER)
            .unwrap_or(false)
    }

    /// Bring up the master for `host` unless one is already up. Serialised across processes by a lock
    /// file, so concurrent CLI invocations never open two logins to the same host.
    pub fn ensure_master(&self, host: &LoginHost) -> Result<(), String> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.control_dir)
            .map_err(|e| format!("cannot create {}: {e}", self.control_dir.display()))?;
        let lock_path = self.control_file(host, "lock");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| format!("cannot open {}: {e}", lock_path.display()))?;
        lock.lock().map_err(|e| format!("cannot lock {}: {e}", lock_path.display()))?;
        let result = if self.master_alive(host) { Ok(()) } else { self.start_master(host) };
        let down = self.control_file(host, "down");
        match &result {
            Ok(()) => {
                let _ = fs::remove_file(&down);
            }
            Err(_) => {
                let _ = File::create(&down);
            }
        }
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
        self.counters.login();
        if status.success() {
            return Ok(());
        }
        let text = fs::read_to_string(err_file.path()).unwrap_or_default();
        Err(describe_ssh_failure(host, text.trim()))
    }

    /// The first host, in the configured order, whose master is up or comes up. Hosts that failed
    /// recently are tried only when no other host answers.
    fn select_host(&self) -> Result<usize, RemoteError> {
        let mut failures = Vec::new();
        let (fresh, recently_failed): (Vec<usize>, Vec<usize>) =
            (0..self.hosts.len()).partition(|i| !self.marked_down(&self.hosts[*i]));
        for i in fresh.into_iter().chain(recently_failed) {
            let host = &self.hosts[i];
            match self.ensure_master(host) {
                Ok(()) => {
                    *self.active.lock().unwrap() = Some(i);
                    return Ok(i);
                }
                Err(message) => {
                    tracing::warn!(host = %host.label(), %message, "login host unreachable; trying the next one");
                    failures.push(format!("{}: {message}", host.label()));
                }
            }
        }
        Err(self.unreachable(failures))
    }

    fn unreachable(&self, failures: Vec<String>) -> RemoteError {
        let first = self.hosts.first().map(|h| h.host.clone()).unwrap_or_default();
        let message = failures.join("; ");
        // The key set-up steps help only when authentication was the problem.
        let remediation = if message.contains("Permission denied") || message.contains("no such identity") {
            ssh_remediation(&self.user, &first)
        } else if message.contains("host key") {
            String::new()
        } else {
            "Check SLURM_HOSTNAME (and SSH_CONFIG if you use aliases) and that the login host is reachable \
             from this machine: ssh -o BatchMode=yes <host> hostname"
                .to_string()
        };
        RemoteError::Unreachable {
            hosts: self.hosts.iter().map(LoginHost::label).collect::<Vec<_>>().join(", "),
            message,
            remediation,
        }
    }

    fn start_session(&self, index: usize) -> Result<Session, RemoteError> {
        let mut cmd = self.base_command(&self.hosts[index]);
        // `auto`: normally a client of the master; if the master died since, this command becomes the
        // new one (a transparent reconnect). A backgrounded master detaches from our pipes.
        cmd.args(["-o", "ControlMaster=auto", "-o"])
            .arg(format!("ControlPersist={}", self.control_persist_secs.max(1)))
            .arg("--")
            .arg("bash -s");
        self.counters.session();
        Session::start(cmd, index)
    }

    /// Run a script on one given host through its master (preflight checks every host this way).
    pub fn run_on(&self, index: usize, script: &str) -> Result<RemoteOutput, RemoteError> {
        let host = &self.hosts[index];
        let result = self.sessions.call(index, &|| self.start_session(index), script)?;
        match result {
            Ok(reply) => {
                self.counters.round_trip(script.len(), reply.stdout.len() + reply.stderr.len());
                tracing::trace!(host = %host.label(), %script, stdout = %reply.stdout, stderr = %reply.stderr, "round trip");
                Ok(RemoteOutput {
                    exit_code: reply.exit_code,
                    stdout: reply.stdout,
                    stderr: reply.stderr,
                    host: host.label(),
                })
            }
            // The status comes in-band; without it the connection dropped mid-script. Text in the
            // output ("Connection refused") or an exit code of 255 from the script mean nothing here.
            Err(CallError::NotDelivered(message) | CallError::Lost(message)) => {
                self.counters.round_trip(script.len(), 0);
                Err(RemoteError::Lost {
                    host: host.label(),
                    message: format!("ssh ended before the command finished: {message}"),
                })
            }
        }
    }

    /// The active host, after checking that no earlier (preferred) host has become eligible again.
    fn current_host(&self) -> Result<usize, RemoteError> {
        let current = *self.active.lock().unwrap();
        match current {
            Some(i) if (0..i).all(|j| self.marked_down(&self.hosts[j])) => Ok(i),
            _ => self.select_host(),
        }
    }
}

impl Remote for OpenSsh {
    fn describe(&self) -> String {
        self.hosts.iter().map(LoginHost::label).collect::<Vec<_>>().join(",")
    }

    fn stats(&self) -> super::TransportStats {
        self.counters.snapshot()
    }

    fn run_script(&self, script: &str, idempotency: Idempotency) -> Result<RemoteOutput, RemoteError> {
        let index = self.current_host()?;
        match self.run_on(index, script) {
            Err(RemoteError::Lost { host, message }) if idempotency == Idempotency::Idempotent => {
                // Reads may run again: reconnect (this host or the next) and retry once.
                tracing::warn!(%host, %message, "connection lost; reconnecting");
                *self.active.lock().unwrap() = None;
                let index = self.select_host()?;
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
