//! Local mode: we are on the login node; the same scripts run under a local `bash -s`.

use super::{run_with_input, unwrap_output, wrap_script, Idempotency, Remote, RemoteError, RemoteOutput};
use std::process::Command;

#[derive(Default)]
pub struct LocalShell {
    counters: super::Counters,
}

impl Remote for LocalShell {
    fn describe(&self) -> String {
        "local".into()
    }

    fn stats(&self) -> super::TransportStats {
        self.counters.snapshot()
    }

    fn run_script(&self, script: &str, _idempotency: Idempotency) -> Result<RemoteOutput, RemoteError> {
        let mut cmd = Command::new("bash");
        cmd.arg("-s");
        let wrapped = wrap_script(script);
        let (_, stdout, stderr) = run_with_input(cmd, &wrapped)?;
        self.counters.round_trip(wrapped.len(), stdout.len() + stderr.len());
        let (stdout, exit_code) = unwrap_output(&stdout)
            .ok_or_else(|| RemoteError::Lost { host: "local".into(), message: stderr.trim().to_string() })?;
        Ok(RemoteOutput { exit_code, stdout, stderr, host: "local".into() })
    }
}
