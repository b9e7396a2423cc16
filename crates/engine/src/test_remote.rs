//! A fake login host for the offline tests of the engine and the client: it answers each script
//! from a list of replies, in order, or by a rule that reads the script, and keeps every script it was
//! sent. The sandbox tests stay the proof that the scripts work on a real cluster; these pin what the
//! engine and the client do with every answer, failures above all.

use crate::protocol::SECTION;
use crate::remote::{Idempotency, Remote, RemoteError, RemoteOutput, TransportStats};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the login host answers to one script.
pub(crate) type Reply = Result<RemoteOutput, RemoteError>;

type Rule = Box<dyn Fn(&str) -> Reply + Send + Sync>;

/// A remote that answers from scripted replies (or a rule) and records what it was sent.
pub(crate) struct FakeRemote {
    replies: Mutex<VecDeque<Reply>>,
    rule: Option<Rule>,
    sent: Mutex<Vec<String>>,
}

impl FakeRemote {
    /// Answers these replies in order; a script beyond them fails the test.
    pub(crate) fn answering(replies: Vec<Reply>) -> FakeRemote {
        FakeRemote { replies: Mutex::new(replies.into()), rule: None, sent: Mutex::default() }
    }

    /// Answers every script by `rule` (shared, so that the test keeps a handle to what was sent
    /// after handing the remote to a client).
    pub(crate) fn responding(rule: impl Fn(&str) -> Reply + Send + Sync + 'static) -> Arc<FakeRemote> {
        Arc::new(FakeRemote { replies: Mutex::default(), rule: Some(Box::new(rule)), sent: Mutex::default() })
    }

    /// Every script sent so far, in order.
    pub(crate) fn sent(&self) -> Vec<String> {
        self.sent.lock().unwrap().clone()
    }

    /// The scripts sent so far of one kind.
    pub(crate) fn sent_of(&self, kind: Kind) -> Vec<String> {
        self.sent().into_iter().filter(|s| Kind::of(s) == kind).collect()
    }
}

impl Remote for FakeRemote {
    fn describe(&self) -> String {
        "fake".into()
    }
    fn stats(&self) -> TransportStats {
        TransportStats::default()
    }
    fn default_deadline(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn run_script_capped(&self, script: &str, _: Idempotency, _: Duration, _: u64) -> Reply {
        self.sent.lock().unwrap().push(script.to_string());
        if let Some(rule) = &self.rule {
            return rule(script);
        }
        self.replies.lock().unwrap().pop_front().unwrap_or_else(|| panic!("no reply scripted for:\n{script}"))
    }
}

/// A client owns its remote: the test keeps the other handle.
impl Remote for Arc<FakeRemote> {
    fn describe(&self) -> String {
        self.as_ref().describe()
    }
    fn stats(&self) -> TransportStats {
        self.as_ref().stats()
    }
    fn default_deadline(&self) -> Duration {
        self.as_ref().default_deadline()
    }
    fn run_script_capped(&self, script: &str, idempotency: Idempotency, deadline: Duration, cap: u64) -> Reply {
        self.as_ref().run_script_capped(script, idempotency, deadline, cap)
    }
}

/// Which operation a script is, told by the command only it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The checks before a submission (partitions, paths).
    Facts,
    /// Stage, `sbatch`, release: one submission.
    Submit,
    /// squeue, sacct and status.json of the jobs being refreshed.
    Refresh,
    /// The log tails of failed attempts.
    Evidence,
    /// The release of a submission found by its name.
    ReleaseAdopted,
    /// Dependencies re-pointed, released or cancelled.
    Depend,
    Cancel,
    /// Removal of finished jobs' secrets.
    Secrets,
    Other,
}

impl Kind {
    pub(crate) fn of(script: &str) -> Kind {
        if script.contains("sbatch --parsable") {
            Kind::Submit
        } else if script.contains("squeue --me -r -t all") || script.contains("squeue --me -j ") {
            Kind::Refresh
        } else if script.contains("scontrol show partition -o") {
            Kind::Facts
        } else if script.contains(&format!("echo '{SECTION}tail ")) {
            Kind::Evidence
        } else if script.contains(&format!("echo '{SECTION}scancel'")) || script.contains("scancel --me --name=") {
            Kind::Cancel
        } else if script.contains(&format!(">/dev/null 2>&1; echo \"{SECTION}rc ")) {
            Kind::Depend
        } else if script.starts_with("# the attempts adopted") {
            Kind::ReleaseAdopted
        } else if script.contains("rm -rf -- ") && script.contains(&format!("{SECTION}gone")) {
            Kind::Secrets
        } else {
            Kind::Other
        }
    }
}

/// A script that ran and exited 0 with this output.
pub(crate) fn ok(stdout: &str) -> Reply {
    Ok(RemoteOutput { exit_code: 0, stdout: stdout.into(), stderr: String::new(), host: "login1".into() })
}

/// No login host could be reached: nothing was sent.
pub(crate) fn unreachable() -> Reply {
    Err(RemoteError::Unreachable {
        hosts: "login1".into(),
        message: "Connection refused".into(),
        remediation: String::new(),
    })
}

/// The connection dropped while the script ran: it may or may not have run.
pub(crate) fn lost() -> Reply {
    Err(RemoteError::Lost { host: "login1".into(), message: "reset".into() })
}

/// The script did not finish within its deadline: it may or may not have run.
pub(crate) fn timed_out() -> Reply {
    Err(RemoteError::TimedOut { host: "login1".into(), secs: 1, detail: String::new() })
}
