//! Local mode: we are on the login node; the same scripts run under a local `bash -s`.

use super::{run_with_input, unwrap_output, wrap_script, Idempotency, Remote, RemoteError, RemoteOutput};
use std::process::Command;

pub struct LocalShell;

impl Remote for LocalShell {
    fn describe(&self) -> String {
        "local".into()
    }

    fn run_script(&self, script: &str, _idempotency: Idempotency) -> Result<RemoteOutput, RemoteError> {
        let mut cmd = Command::new("bash");
        cmd.arg("-s");
        let (_, stdout, stderr) = run_with_input(cmd, &wrap_script(script))?;
        let (stdout, exit_code) = unwrap_output(&stdout)
            .ok_or_else(|| RemoteError::Lost { host: "local".into(), message: stderr.trim().to_string() })?;
        Ok(RemoteOutput { exit_code, stdout, stderr, host: "local".into() })
    }
}
