//! The only code that runs commands on a login host. A remote operation is one shell script sent on
//! standard input to `bash -s` on the host: one round trip, whatever the script does.

mod local;
mod openssh;

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

pub trait Remote: Send + Sync {
    /// Run a bash script on the login host and return its output. A non-zero exit of the script is a
    /// result, not an error; errors are connection-level only.
    fn run_script(&self, script: &str, idempotency: Idempotency) -> Result<RemoteOutput, RemoteError>;
}

/// The transport the settings ask for: local shell on the login node, else OpenSSH.
pub fn connect(settings: &Settings) -> Result<Box<dyn Remote>, RemoteError> {
    if settings.local {
        return Ok(Box::new(LocalShell));
    }
    let (user, hosts) = settings.require_remote()?;
    Ok(Box::new(OpenSsh::new(settings, user, hosts)?))
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
