//! Slurm job states as `squeue` (`%T`) and `sacct` (`State`) print them.

use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SlurmState {
    Pending,
    Configuring,
    Resizing,
    Requeued,
    RequeueHold,
    RequeueFed,
    Running,
    Completing,
    Completed,
    Failed,
    BootFail,
    Deadline,
    OutOfMemory,
    NodeFail,
    Cancelled,
    Preempted,
    Revoked,
    Timeout,
    Suspended,
    Stopped,
    SpecialExit,
    /// A state this version does not know: kept, logged, and treated as not terminal.
    Unknown(String),
}

/// The states in which Slurm will not run a job again by itself.
pub const FINISHED_STATES: [SlurmState; 11] = [
    SlurmState::Completed,
    SlurmState::Failed,
    SlurmState::BootFail,
    SlurmState::Deadline,
    SlurmState::OutOfMemory,
    SlurmState::NodeFail,
    SlurmState::Cancelled,
    SlurmState::Preempted,
    SlurmState::Revoked,
    SlurmState::Timeout,
    SlurmState::SpecialExit,
];

impl SlurmState {
    /// Parse a state word. sacct decorates some states (`CANCELLED by 1000`, `COMPLETED+`), and squeue
    /// may print short or long forms; both are accepted.
    pub fn parse(text: &str) -> SlurmState {
        let word = text.split_whitespace().next().unwrap_or("").trim_end_matches('+').to_ascii_uppercase();
        match word.as_str() {
            "PENDING" | "PD" => SlurmState::Pending,
            "CONFIGURING" | "CF" => SlurmState::Configuring,
            "RESIZING" | "RS" => SlurmState::Resizing,
            "REQUEUED" | "RQ" => SlurmState::Requeued,
            "REQUEUE_HOLD" | "RH" => SlurmState::RequeueHold,
            "REQUEUE_FED" | "RF" => SlurmState::RequeueFed,
            "RUNNING" | "R" => SlurmState::Running,
            "COMPLETING" | "CG" => SlurmState::Completing,
            "COMPLETED" | "CD" => SlurmState::Completed,
            "FAILED" | "F" => SlurmState::Failed,
            "BOOT_FAIL" | "BF" => SlurmState::BootFail,
            "DEADLINE" | "DL" => SlurmState::Deadline,
            "OUT_OF_MEMORY" | "OOM" => SlurmState::OutOfMemory,
            "NODE_FAIL" | "NF" => SlurmState::NodeFail,
            "CANCELLED" | "CA" => SlurmState::Cancelled,
            "PREEMPTED" | "PR" => SlurmState::Preempted,
            "REVOKED" | "RV" => SlurmState::Revoked,
            "TIMEOUT" | "TO" => SlurmState::Timeout,
            "SUSPENDED" | "S" => SlurmState::Suspended,
            "STOPPED" | "ST" => SlurmState::Stopped,
            "SPECIAL_EXIT" | "SE" => SlurmState::SpecialExit,
            _ => SlurmState::Unknown(text.trim().to_string()),
        }
    }

    /// True once Slurm will not run this job again by itself.
    pub fn is_finished(&self) -> bool {
        FINISHED_STATES.contains(self)
    }

    pub fn as_str(&self) -> &str {
        match self {
            SlurmState::Pending => "PENDING",
            SlurmState::Configuring => "CONFIGURING",
            SlurmState::Resizing => "RESIZING",
            SlurmState::Requeued => "REQUEUED",
            SlurmState::RequeueHold => "REQUEUE_HOLD",
            SlurmState::RequeueFed => "REQUEUE_FED",
            SlurmState::Running => "RUNNING",
            SlurmState::Completing => "COMPLETING",
            SlurmState::Completed => "COMPLETED",
            SlurmState::Failed => "FAILED",
            SlurmState::BootFail => "BOOT_FAIL",
            SlurmState::Deadline => "DEADLINE",
            SlurmState::OutOfMemory => "OUT_OF_MEMORY",
            SlurmState::NodeFail => "NODE_FAIL",
            SlurmState::Cancelled => "CANCELLED",
            SlurmState::Preempted => "PREEMPTED",
            SlurmState::Revoked => "REVOKED",
            SlurmState::Timeout => "TIMEOUT",
            SlurmState::Suspended => "SUSPENDED",
            SlurmState::Stopped => "STOPPED",
            SlurmState::SpecialExit => "SPECIAL_EXIT",
            SlurmState::Unknown(s) => s,
        }
    }
}

impl fmt::Display for SlurmState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_decorated_and_short_forms() {
        let cases = [
            ("PENDING", SlurmState::Pending),
            ("PD", SlurmState::Pending),
            ("RUNNING", SlurmState::Running),
            ("CANCELLED by 1000", SlurmState::Cancelled),
            ("COMPLETED+", SlurmState::Completed),
            ("NODE_FAIL", SlurmState::NodeFail),
            ("OUT_OF_MEMORY", SlurmState::OutOfMemory),
            ("requeued", SlurmState::Requeued),
            ("  TIMEOUT ", SlurmState::Timeout),
        ];
        for (text, want) in cases {
            assert_eq!(SlurmState::parse(text), want, "parse({text:?})");
        }
    }

    #[test]
    fn unknown_states_are_kept_and_not_finished() {
        let s = SlurmState::parse("WEIRD_NEW_STATE");
        assert_eq!(s, SlurmState::Unknown("WEIRD_NEW_STATE".into()));
        assert!(!s.is_finished());
        assert!(!SlurmState::Running.is_finished());
        assert!(SlurmState::Failed.is_finished());
    }
}
