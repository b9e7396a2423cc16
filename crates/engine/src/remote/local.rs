//! Local mode: we are on the login node; the same scripts run in a local persistent `bash -s`.

use super::session::{CallError, Pool, Session};
use super::{Idempotency, Remote, RemoteError, RemoteOutput};
use std::process::Command;
use std::time::Duration;

pub struct LocalShell {
    counters: super::Counters,
    sessions: Pool,
    deadline: Duration,
}

impl LocalShell {
    pub fn new(deadline_secs: u32) -> LocalShell {
        LocalShell {
            counters: Default::default(),
            sessions: Pool::default(),
            deadline: Duration::from_secs(deadline_secs.into()),
        }
    }
}

impl Default for LocalShell {
    fn default() -> LocalShell {
        LocalShell::new(120)
    }
}

impl Remote for LocalShell {
    fn describe(&self) -> String {
        "local".into()
    }

    fn stats(&self) -> super::TransportStats {
        self.counters.snapshot()
    }

    fn default_deadline(&self) -> Duration {
        self.deadline
    }

    fn run_script_capped(
        &self,
        script: &str,
        _idempotency: Idempotency,
        deadline: Duration,
        cap: u64,
    ) -> Result<RemoteOutput, RemoteError> {
        let start = || {
            let mut bash = Command::new("bash");
            bash.arg("-s");
            self.counters.session();
            Session::start(bash, 0)
        };
        match self.sessions.call(0, &start, script, deadline, cap)? {
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
            Err(CallError::TimedOut(message)) => Err(super::timed_out("local", deadline, &message)),
            Err(CallError::TooLarge(cap)) => Err(RemoteError::OutputTooLarge { host: "local".into(), cap }),
        }
    }

    fn open_stream(&self, command_line: &str) -> Result<super::RemoteStream, RemoteError> {
        let mut bash = Command::new("bash");
        bash.arg("-c").arg(command_line);
        self.counters.session();
        super::child_stream(bash, "bash")
    }

    fn attach(&self, command_line: &str, _tty: bool) -> Result<i32, RemoteError> {
        let status = Command::new("bash")
            .arg("-c")
            .arg(command_line)
            .status()
            .map_err(|e| RemoteError::Spawn { program: "bash".into(), message: e.to_string() })?;
        Ok(status.code().unwrap_or(128))
    }
}
