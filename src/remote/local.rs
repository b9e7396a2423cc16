//! Local mode: we are on the login node; the same scripts run under a local `bash -s`.

use super::{run_with_input, Idempotency, Remote, RemoteError, RemoteOutput};
use std::process::Command;

pub struct LocalShell;

impl Remote for LocalShell {
    fn run_script(&self, script: &str, _idempotency: Idempotency) -> Result<RemoteOutput, RemoteError> {
        let mut cmd = Command::new("bash");
        cmd.arg("-s");
        let (exit_code, stdout, stderr) = run_with_input(cmd, script)?;
        Ok(RemoteOutput { exit_code, stdout, stderr, host: "local".into() })
    }
}
