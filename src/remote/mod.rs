//! The only code that runs commands on a login host. A remote operation is one shell script sent on
//! standard input to `bash -s` on the host: one round trip, whatever the script does.

mod local;
pub mod openssh;

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

#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("cannot connect to any login host ({hosts}): {message}\n{remediation}")]
    Unreachable { hosts: String, message: String, remediation: String },
    #[error("the connection to {host} was lost while a command ran; its outcome is unknown: {message}")]
    Lost { host: String, message: String },
    #[error("SSH key {path} is readable by group or others; ssh refuses such keys and tao-slurm never changes your files. Fix it with: chmod 600 {path}")]
    KeyPermissions { path: String },
    #[error("SSH key {path} does not exist or cannot be read: {message}")]
    KeyMissing { path: String, message: String },
    #[error("cannot run {program}: {message}")]
    Spawn { program: String, message: String },
    #[error(transparent)]
    Config(#[from] ConfigError),
}

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
    pub bytes_sent: u64,
    pub bytes_received: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    round_trips: std::sync::atomic::AtomicU64,
    logins: std::sync::atomic::AtomicU64,
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
    pub(crate) fn snapshot(&self) -> TransportStats {
        use std::sync::atomic::Ordering::Relaxed;
        TransportStats {
            round_trips: self.round_trips.load(Relaxed),
            logins: self.logins.load(Relaxed),
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

    /// Run a bash script on the login host and return its output. A non-zero exit of the script is a
    /// result, not an error; errors are connection-level only.
    fn run_script(&self, script: &str, idempotency: Idempotency) -> Result<RemoteOutput, RemoteError>;
}

/// The transport the settings ask for: local shell on the login node, else OpenSSH.
pub fn connect(settings: &Settings) -> Result<Box<dyn Remote>, RemoteError> {
    if settings.local {
        return Ok(Box::new(LocalShell::default()));
    }
    let (user, hosts) = settings.require_remote()?;
    Ok(Box::new(OpenSsh::new(settings, user, hosts)?))
}

/// The marker of the line the wrapper prints after the script: its exit status. A script's output is
/// complete only when this line arrived; ssh's own exit code says nothing about the script's.
const EXIT_TRAILER: &str = "@@tao-slurm:exit ";

/// Wrap a script so that its exit status is reported in-band, after all its output.
pub(crate) fn wrap_script(script: &str) -> String {
    // A subshell: `exit` inside the script ends only the subshell, then the trailer is printed. Its
    // standard input is /dev/null: the script arrives on bash's stdin, and a command that reads stdin
    // (srun does) would otherwise swallow the rest of it, trailer included.
    format!("(\n{script}\n) </dev/null\n__tao_rc=$?\nprintf '\\n{EXIT_TRAILER}%d\\n' \"$__tao_rc\"\nexit 0\n")
}

/// Split a wrapped script's stdout into (the script's own output, its exit status); None when the
/// trailer is missing, i.e. the script did not run to its end (the connection dropped).
pub(crate) fn unwrap_output(stdout: &str) -> Option<(String, i32)> {
    let body = stdout.strip_suffix('\n')?;
    let at = body.rfind(&format!("\n{EXIT_TRAILER}"))?;
    let code = body[at + 1 + EXIT_TRAILER.len()..].trim().parse().ok()?;
    Some((body[..at].to_string(), code))
}

/// Run a child process with `input` on standard input, collecting stdout and stderr.
pub(crate) fn run_with_input(
    mut cmd: std::process::Command,
    input: &str,
) -> Result<(i32, String, String), RemoteError> {
    use std::io::Write;
    use std::process::Stdio;
    let program = format!("{:?}", cmd.get_program());
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| RemoteError::Spawn { program: program.clone(), message: e.to_string() })?;
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let input = input.to_string();
    // Write on a thread so a large script cannot deadlock against a full stdout pipe.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(input.as_bytes());
    });
    let out = child.wait_with_output().map_err(|e| RemoteError::Spawn { program, message: e.to_string() })?;
    let _ = writer.join();
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapped_scripts_report_their_exit_status_in_band() {
        for (script, want_out, want_rc) in [
            ("echo hi", "hi\n", 0),
            ("echo 'Connection refused' >&2; printf 'x'; exit 255", "x", 255),
            ("exit 3", "", 3),
            ("printf 'a\\nb\\n'", "a\nb\n", 0),
            // A command that reads stdin gets nothing of the script.
            ("cat; echo after", "after\n", 0),
        ] {
            // As on a login host: the script on bash's standard input.
            let mut bash = std::process::Command::new("bash");
            bash.arg("-s");
            let (code, stdout, _) = run_with_input(bash, &wrap_script(script)).unwrap();
            assert_eq!(code, 0);
            let (body, rc) = unwrap_output(&stdout).unwrap();
            assert_eq!((body.as_str(), rc), (want_out, want_rc), "{script}");
        }
        assert_eq!(unwrap_output("partial output, no trailer\n"), None);
    }
}
