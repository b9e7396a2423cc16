//! Local mode: we are on the login node; the same scripts run in a local persistent `bash -s`.

use super::session::{CallError, Pool, Session};
use super::{Idempotency, Remote, RemoteError, RemoteOutput};
use std::process::Command;

#[derive(Default)]
pub struct LocalShell {
    counters: super::Counters,
    sessions: Pool,
}

impl Remote for LocalShell {
    fn describe(&self) -> String {
        "local".into()
    }

    fn stats(&self) -> super::TransportStats {
        self.counters.snapshot()
    }

    fn run_script(&self, script: &str, _idempotency: Idempotency) -> Result<RemoteOutput, RemoteError> {
        let start = || {
            let mut bash = Command::new("bash");
            bash.arg("-s");
            self.counters.session();
            Session::start(bash, 0)
        };
        match self.sessions.call(0, &start, script)? {
            Ok(reply) => {
                self.counters.round_trip(script.len(), reply.stdout.len() + reply.stderr.len());
                Ok(RemoteOutput {
                    exit_code: reply.exit_code,
                    stdout: reply.stdout,
                    stderr: reply.stderr,
                    host: "local".into(),
                })
            }
            Err(CallError::NotDelivered(message) | CallError::Lost(message)) => {
                Err(RemoteError::Lost { host: "local".into(), message })
            }
        }
    }
}
