//! Platform status: the contract's mapping from Slurm states (and the container's `status.json`) to
//! Pending, Running, Complete, Error, Canceled, Paused; and the two steps of a pause and a resume
//! that only tao-slurm takes (Pausing, Resuming: `ops::pause`). Pure.

use crate::slurm::SlurmState;
use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum PlatformStatus {
    Pending,
    Running,
    Complete,
    Error,
    Canceled,
    // Slurm suspended the job, or tao-slurm paused it (its allocation released: `pause`).
    Paused,
    // A pause asked for: the job got its checkpoint signal and is cancelled once it ends or its
    // grace passes.
    Pausing,
    // A resume asked for: its new attempt is on its way to Slurm or pending there.
    Resuming,
}

impl PlatformStatus {
    pub const ALL: [PlatformStatus; 8] = [
        PlatformStatus::Pending,
        PlatformStatus::Running,
        PlatformStatus::Complete,
        PlatformStatus::Error,
        PlatformStatus::Canceled,
        PlatformStatus::Paused,
        PlatformStatus::Pausing,
        PlatformStatus::Resuming,
    ];

    /// The statuses a job never leaves.
    pub const TERMINAL: [PlatformStatus; 3] =
        [PlatformStatus::Complete, PlatformStatus::Error, PlatformStatus::Canceled];

    pub fn is_terminal(self) -> bool {
        PlatformStatus::TERMINAL.contains(&self)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            PlatformStatus::Pending => "Pending",
            PlatformStatus::Running => "Running",
            PlatformStatus::Complete => "Complete",
            PlatformStatus::Error => "Error",
            PlatformStatus::Canceled => "Canceled",
            PlatformStatus::Paused => "Paused",
            PlatformStatus::Pausing => "Pausing",
            PlatformStatus::Resuming => "Resuming",
        }
    }

    /// A status name of either vocabulary, any case: ours, or TAO's `Done` for Complete. (With the
    /// field at fault in the error: `filter::parse_status`.)
    pub fn parse(text: &str) -> Option<PlatformStatus> {
        let text = text.trim();
        if text.eq_ignore_ascii_case("done") {
            return Some(PlatformStatus::Complete);
        }
        PlatformStatus::ALL.into_iter().find(|s| s.as_str().eq_ignore_ascii_case(text))
    }
}

impl fmt::Display for PlatformStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One line of the container's `status.json` (JSON Lines).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusLine {
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub date: Option<String>,
    #[serde(default)]
    pub time: Option<String>,
    #[serde(default)]
    pub kpi: Option<serde_json::Value>,
}

/// The last parseable line of a `status.json` text; lines that are not JSON objects are ignored
/// (a line may be half-written while we read it).
pub fn last_status_line(text: &str) -> Option<StatusLine> {
    text.lines().rev().filter(|l| !l.trim().is_empty()).find_map(|l| serde_json::from_str::<StatusLine>(l).ok())
}

/// Progress fields a last line may lack (TAO's final SUCCESS line has no epoch) and that are then
/// carried from the latest earlier line that has them, as TAO's JobResult carries them.
const CARRIED: &[&str] = &["epoch", "max_epoch", "eta", "time_per_epoch", "cur_iter", "kpi", "key_metric"];

/// The last complete JSON line of a `status.json` text: the job's latest progress, as written, or
/// with the [`CARRIED`] fields it lacks taken from the earlier lines of `text`.
pub fn last_status_raw(text: &str) -> Option<String> {
    let mut lines = text
        .lines()
        .rev()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .filter(|l| serde_json::from_str::<StatusLine>(l).is_ok());
    let last = lines.next()?;
    let Ok(serde_json::Value::Object(mut obj)) = serde_json::from_str::<serde_json::Value>(last) else {
        return Some(last.to_string());
    };
    let mut carried = false;
    for earlier in lines {
        let missing: Vec<&str> = CARRIED.iter().copied().filter(|k| obj.get(*k).is_none_or(|v| v.is_null())).collect();
        if missing.is_empty() {
            break;
        }
        if let Ok(serde_json::Value::Object(e)) = serde_json::from_str::<serde_json::Value>(earlier) {
            for k in missing {
                if let Some(v) = e.get(k).filter(|v| !v.is_null()) {
                    obj.insert(k.to_string(), v.clone());
                    carried = true;
                }
            }
        }
    }
    Some(if carried { serde_json::Value::Object(obj).to_string() } else { last.to_string() })
}

/// What decided a status, in words for the user.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusVerdict {
    pub status: PlatformStatus,
    pub message: String,
}

/// Map what Slurm says (and, for COMPLETED, what the container wrote) to a platform status.
///
/// `exit_code` is the batch script's exit code from sacct; `status_json` is the text of status.json
/// when it could be read.
pub fn map_status(state: &SlurmState, exit_code: Option<i32>, status_json: Option<&str>) -> StatusVerdict {
    use PlatformStatus::*;
    let verdict = |status, message: String| StatusVerdict { status, message };
    match state {
        SlurmState::Pending
        | SlurmState::Configuring
        | SlurmState::Resizing
        | SlurmState::Requeued
        | SlurmState::RequeueHold
        | SlurmState::RequeueFed => verdict(Pending, format!("Slurm state {state}")),
        SlurmState::Running | SlurmState::Completing => verdict(Running, format!("Slurm state {state}")),
        SlurmState::Completed => {
            let last = status_json.and_then(last_status_line);
            match last.as_ref().map(|l| l.status.to_ascii_uppercase()) {
                Some(s) if s == "SUCCESS" => verdict(Complete, "status.json reports SUCCESS".into()),
                Some(s) if s == "FAILURE" => verdict(
                    Error,
                    format!(
                        "status.json reports FAILURE{}",
                        last.and_then(|l| l.message).map(|m| format!(": {m}")).unwrap_or_default()
                    ),
                ),
                _ => match exit_code {
                    Some(0) | None => verdict(Complete, "exit code 0; no terminal status in status.json".into()),
                    Some(code) => verdict(Error, format!("exit code {code}; no terminal status in status.json")),
                },
            }
        }
        SlurmState::Failed
        | SlurmState::BootFail
        | SlurmState::Deadline
        | SlurmState::OutOfMemory
        | SlurmState::NodeFail
        | SlurmState::SpecialExit => verdict(
            Error,
            match exit_code {
                Some(code) => format!("Slurm state {state}, exit code {code}"),
                None => format!("Slurm state {state}"),
            },
        ),
        SlurmState::Cancelled | SlurmState::Preempted | SlurmState::Revoked => {
            verdict(Canceled, format!("Slurm state {state}"))
        }
        SlurmState::Timeout => verdict(Error, "Slurm time limit reached (TIMEOUT)".into()),
        SlurmState::Suspended | SlurmState::Stopped => verdict(Paused, format!("Slurm state {state}")),
        SlurmState::Unknown(text) => verdict(Pending, format!("unrecognised Slurm state {text:?}; kept non-terminal")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use PlatformStatus::*;

    #[test]
    fn mapping_table() {
        let ok = r#"{"status":"STARTED"}
{"status":"SUCCESS","message":"done"}"#;
        let bad = r#"{"status":"RUNNING","message":"Epoch 1"}
{"status":"FAILURE","message":"boom"}"#;
        let running_only = r#"{"status":"RUNNING","message":"Epoch 1"}"#;
        let cases: &[(SlurmState, Option<i32>, Option<&str>, PlatformStatus)] = &[
            (SlurmState::Pending, None, None, Pending),
            (SlurmState::Configuring, None, None, Pending),
            (SlurmState::Requeued, None, None, Pending),
            (SlurmState::Running, None, None, Running),
            (SlurmState::Completing, None, None, Running),
            (SlurmState::Completed, Some(0), Some(ok), Complete),
            (SlurmState::Completed, Some(0), Some(bad), Error),
            (SlurmState::Completed, Some(0), Some(running_only), Complete),
            (SlurmState::Completed, Some(0), None, Complete),
            (SlurmState::Completed, Some(2), None, Error),
            (SlurmState::Failed, Some(3), None, Error),
            (SlurmState::NodeFail, None, None, Error),
            (SlurmState::BootFail, None, None, Error),
            (SlurmState::OutOfMemory, None, None, Error),
            (SlurmState::Deadline, None, None, Error),
            (SlurmState::Cancelled, None, None, Canceled),
            (SlurmState::Preempted, None, None, Canceled),
            (SlurmState::Revoked, None, None, Canceled),
            (SlurmState::Timeout, None, None, Error),
            (SlurmState::Suspended, None, None, Paused),
            (SlurmState::Stopped, None, None, Paused),
            (SlurmState::Unknown("X".into()), None, None, Pending),
        ];
        for (state, code, json, want) in cases {
            assert_eq!(map_status(state, *code, *json).status, *want, "{state:?} {code:?} {json:?}");
        }
    }

    #[test]
    fn status_json_tolerates_garbage_and_half_lines() {
        let text = "{\"status\":\"RUNNING\"}\nnot json\n{\"status\":\"SUCC";
        assert_eq!(last_status_line(text).unwrap().status, "RUNNING");
        assert!(last_status_line("").is_none());
        // A final line without epochs keeps the last ones written; a line with them is as written.
        let text = "{\"status\":\"RUNNING\",\"epoch\":2,\"max_epoch\":3,\"kpi\":{\"loss\":1}}\n{\"status\":\"RUNNING\",\"epoch\":3, \"max_epoch\":3}\n{\"status\":\"SUCCESS\",\"message\":\"done\"}\n";
        let merged: serde_json::Value = serde_json::from_str(&last_status_raw(text).unwrap()).unwrap();
        assert_eq!(
            merged,
            serde_json::json!({"status": "SUCCESS", "message": "done", "epoch": 3, "max_epoch": 3, "kpi": {"loss": 1}})
        );
        assert_eq!(
            last_status_raw("{\"status\":\"RUNNING\",\"epoch\":3, \"max_epoch\":3}\n").unwrap(),
            "{\"status\":\"RUNNING\",\"epoch\":3, \"max_epoch\":3}"
        );
    }
}
