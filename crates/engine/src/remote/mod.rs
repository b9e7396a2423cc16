//! The only code that runs commands on a login host. A remote operation is one shell script run by a
//! persistent `bash -s` on the host (see `session`): one round trip, whatever the script does.

mod local;
mod mux;
pub mod openssh;
mod resolve;
mod session;

pub use local::LocalShell;
pub use openssh::OpenSsh;

use crate::config::{ConfigError, Settings};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteOutput {
    pub exit_code: i32,
    pub stdout: String,
    pub stderr: String,
    /// The login host that ran it (`local` in local mode).
    pub host: String,
}

/// A command running on the login host with its standard streams here, binary and unbuffered
/// (no terminal): a TensorBoard connection's relay. Dropping `keep` ends it (the session closes).
pub struct RemoteStream {
    pub stdin: Box<dyn std::io::Write + Send>,
    pub stdout: Box<dyn std::io::Read + Send>,
    pub stderr: Box<dyn std::io::Read + Send>,
    pub keep: Box<dyn Send>,
}

/// A local child process (`ssh`, `bash`) whose streams a [`RemoteStream`] is: killed and reaped when
/// dropped.
pub(crate) struct ChildGuard(pub std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A child started with piped streams, as a [`RemoteStream`].
pub(crate) fn child_stream(mut cmd: std::process::Command, program: &str) -> Result<RemoteStream, RemoteError> {
    use std::process::Stdio;
    let spawn_error = |message: String| RemoteError::Spawn { program: program.into(), message };
    let mut child =
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(|e| spawn_error(e.to_string()))?;
    let (Some(stdin), Some(stdout), Some(stderr)) = (child.stdin.take(), child.stdout.take(), child.stderr.take()) else {
        return Err(spawn_error("no pipes".into()));
    };
    Ok(RemoteStream { stdin: Box::new(stdin), stdout: Box::new(stdout), stderr: Box::new(stderr), keep: Box::new(ChildGuard(child)) })
}

#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("cannot connect to any login host ({hosts}): {message}\n{remediation}")]
    Unreachable { hosts: String, message: String, remediation: String },
    #[error("the connection to {host} was lost while a command ran; its outcome is unknown: {message}")]
    Lost { host: String, message: String },
    #[error("a command on {host} did not finish within {secs} s (TAO_SLURM_REMOTE_TIMEOUT); it was stopped and its outcome is unknown{detail}")]
    TimedOut { host: String, secs: u64, detail: String },
    #[error("the host key of {host} has CHANGED since it was recorded in {known_hosts}: this may be a man-in-the-middle attack, so tao-slurm stopped and tried no other host. If the site confirms the key really changed, remove the old key (ssh-keygen -R {host} -f {known_hosts}) and add the new one after checking its fingerprint.\n{message}")]
    HostKeyChanged { host: String, known_hosts: String, message: String },
    #[error("SSH key {path} is readable by group or others; ssh refuses such keys and tao-slurm never changes your files. Fix it with: chmod 600 {path}")]
    KeyPermissions { path: String },
    #[error("SSH key {path} does not exist or cannot be read: {message}")]
    KeyMissing { path: String, message: String },
    #[error("a command on {host} wrote more than {cap} bytes to its output (the cap of one call: what a job's files can make a command print is bounded); it was stopped, its output dropped, and its outcome is unknown")]
    OutputTooLarge { host: String, cap: u64 },
    #[error("cannot run {program}: {message}")]
    Spawn { program: String, message: String },
    #[error(transparent)]
    Config(#[from] ConfigError),
}

impl RemoteError {
    /// The same failure once more, for each member of a batch whose one round trip failed (a
    /// settings error, which comes before any connection, becomes the message it printed).
    pub fn for_each_member(&self) -> RemoteError {
        use RemoteError::*;
        match self {
            Unreachable { hosts, message, remediation } => {
                Unreachable { hosts: hosts.clone(), message: message.clone(), remediation: remediation.clone() }
            }
            Lost { host, message } => Lost { host: host.clone(), message: message.clone() },
            TimedOut { host, secs, detail } => TimedOut { host: host.clone(), secs: *secs, detail: detail.clone() },
            HostKeyChanged { host, known_hosts, message } => {
                HostKeyChanged { host: host.clone(), known_hosts: known_hosts.clone(), message: message.clone() }
            }
            KeyPermissions { path } => KeyPermissions { path: path.clone() },
            KeyMissing { path, message } => KeyMissing { path: path.clone(), message: message.clone() },
            OutputTooLarge { host, cap } => OutputTooLarge { host: host.clone(), cap: *cap },
            Spawn { program, message } => Spawn { program: program.clone(), message: message.clone() },
            Config(e) => Spawn { program: "ssh".into(), message: e.to_string() },
        }
    }
}

/// The most bytes a call keeps of each of a script's output streams unless it asks for another cap
/// ([`Remote::run_script_capped`]: a results download asks for what its own cap needs); more fails
/// the call with [`RemoteError::OutputTooLarge`]. A job's files reach some outputs (logs, listings).
pub const MAX_OUTPUT_BYTES: u64 = 64 << 20;

/// May a script be run again after a lost connection? Reads may; submissions may not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idempotency {
    Idempotent,
    RunAtMostOnce,
}

/// What a transport has cost so far: counts are stable where times are not, so benchmarks and
/// tests measure these.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct TransportStats {
    /// Remote scripts run (one round trip each).
    pub round_trips: u64,
    /// SSH masters this process started (each is one login).
    pub logins: u64,
    /// Persistent shells started (each is one ssh client and channel over the master).
    pub sessions: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    round_trips: std::sync::atomic::AtomicU64,
    logins: std::sync::atomic::AtomicU64,
    sessions: std::sync::atomic::AtomicU64,
    bytes_sent: std::sync::atomic::AtomicU64,
    bytes_received: std::sync::atomic::AtomicU64,
}

impl Counters {
    pub(crate) fn round_trip(&self, sent: usize, received: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        self.round_trips.fetch_add(1, Relaxed);
        self.bytes_sent.fetch_add(sent as u64, Relaxed);
        self.bytes_received.fetch_add(received as u64, Relaxed);
    }
    pub(crate) fn login(&self) {
        self.logins.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    pub(crate) fn session(&self) {
        self.sessions.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    pub(crate) fn snapshot(&self) -> TransportStats {
        use std::sync::atomic::Ordering::Relaxed;
        TransportStats {
            round_trips: self.round_trips.load(Relaxed),
            logins: self.logins.load(Relaxed),
            sessions: self.sessions.load(Relaxed),
            bytes_sent: self.bytes_sent.load(Relaxed),
            bytes_received: self.bytes_received.load(Relaxed),
        }
    }
}

pub trait Remote: Send + Sync {
    /// Where commands run, for messages (`host` or `local`).
    fn describe(&self) -> String;

    /// Round trips, logins and bytes so far.
    fn stats(&self) -> TransportStats;

    /// How long a call may take unless it asks for longer.
    fn default_deadline(&self) -> std::time::Duration;

    /// Run a bash script on the login host and return its output, within the default deadline. A
    /// non-zero exit of the script is a result, not an error; errors are connection-level only.
    fn run_script(&self, script: &str, idempotency: Idempotency) -> Result<RemoteOutput, RemoteError> {
        self.run_script_within(script, idempotency, self.default_deadline())
    }

    /// [`Remote::run_script`] with its own deadline (for calls that legitimately run long). Past it the
    /// call ends with [`RemoteError::TimedOut`]: the script may or may not have run to its end.
    fn run_script_within(
        &self,
        script: &str,
        idempotency: Idempotency,
        deadline: std::time::Duration,
    ) -> Result<RemoteOutput, RemoteError> {
        self.run_script_capped(script, idempotency, deadline, MAX_OUTPUT_BYTES)
    }

    /// [`Remote::run_script_within`] keeping at most `cap` bytes of each output stream (not
    /// [`MAX_OUTPUT_BYTES`]); more ends the call with [`RemoteError::OutputTooLarge`].
    fn run_script_capped(
        &self,
        script: &str,
        idempotency: Idempotency,
        deadline: std::time::Duration,
        cap: u64,
    ) -> Result<RemoteOutput, RemoteError>;

    /// Run one command line on the login host with this process's standard streams (a terminal of
    /// its own when `tty`), streaming its output; returns its exit status. The line is made by quoting
    /// (see `ops::running`), never from user text.
    fn attach(&self, command_line: &str, tty: bool) -> Result<i32, RemoteError> {
        let _ = (command_line, tty);
        Err(RemoteError::Spawn { program: self.describe(), message: "this transport cannot attach a command".into() })
    }

    /// Start one command line on the login host with its standard streams piped here ([`RemoteStream`]),
    /// in a session of its own. The line is made by quoting (see `ops::running`), never from user text.
    fn open_stream(&self, command_line: &str) -> Result<RemoteStream, RemoteError> {
        let _ = command_line;
        Err(RemoteError::Spawn { program: self.describe(), message: "this transport cannot open a stream".into() })
    }

    /// Open the connection to `host` (every login host when None) with the person at the terminal
    /// answering its prompts, kept `persist` idle; per host, whether a new one was opened (false:
    /// one was up).
    fn login(&self, host: Option<&str>, persist: std::time::Duration) -> Result<Vec<(String, bool)>, RemoteError> {
        let _ = (host, persist);
        Err(RemoteError::Spawn { program: self.describe(), message: "this transport has no login".into() })
    }

    /// Let go of this transport's connections: its idle sessions end, sessions in use end with their
    /// call, and each login host's connection takes no new session and closes once its last one ends;
    /// the next call logs in again (with credentials renewed since: a person's certificate).
    fn retire_connections(&self) {}

    /// End this transport's connections now: each login host's connection closes at once, sessions in
    /// use with it (`ssh -O exit`: a person whose access ended keeps no connection). Retiring is all a
    /// transport without a connection of its own does.
    fn end_connections(&self) {
        self.retire_connections()
    }

    /// Forward (or, with `cancel`, stop forwarding) `listen` on this machine to `to` as the login host
    /// sees it (`node:port`), through the transport's existing connection.
    fn forward(&self, listen: &str, to: &str, cancel: bool) -> Result<(), RemoteError> {
        let _ = (listen, to, cancel);
        Err(RemoteError::Spawn { program: self.describe(), message: "this transport cannot forward ports".into() })
    }
}

/// The transport the settings ask for: local shell on the login node, else OpenSSH.
pub fn connect(settings: &Settings) -> Result<Box<dyn Remote>, RemoteError> {
    if settings.local {
        return Ok(Box::new(LocalShell::new(settings.remote_timeout_secs)));
    }
    let (user, hosts) = settings.require_remote()?;
    Ok(Box::new(OpenSsh::new(settings, user, hosts)?))
}

/// The error of a call stopped at its deadline.
pub(crate) fn timed_out(host: &str, deadline: std::time::Duration, stderr: &str) -> RemoteError {
    RemoteError::TimedOut {
        host: host.to_string(),
        secs: deadline.as_secs_f64().ceil() as u64,
        detail: if stderr.is_empty() { String::new() } else { format!(": {stderr}") },
    }
}
