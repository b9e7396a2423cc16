//! Parsers for the machine-readable output we ask Slurm for. The exact formats requested are defined
//! next to the parsers ([`SQUEUE_FORMAT`], [`SACCT_FIELDS`]) so the two can never drift apart.

use super::SlurmState;
use serde::{Deserialize, Serialize};

/// `squeue -o` format: job id, state, reason, node list, start time, time limit.
/// `squeue -O` fields, each followed by `|`: id, state, reason, node list, start, limit, exit status
/// (a raw wait status: code × 256 + signal), name. The id is `JobArrayID`: a plain job's id, and
/// `<array>_<index>` for a task of a job array (squeue's `-r` lists every task on a line of its own). With `-t all`, squeue lists finished jobs that the
/// controller still remembers: its word on how they ended is authoritative, where sacct lags. The job
/// name comes last: it is the only free-text field, so a `|` in it cannot shift the others.
pub const SQUEUE_FORMAT: &str = "JobArrayID:|,State:|,Reason:|,NodeList:|,StartTime:|,TimeLimit:|,Exit_Code:|,Name:";
/// `sacct --format` fields, in the order [`parse_sacct`] reads them.
pub const SACCT_FIELDS: &str = "JobID,State,ExitCode,DerivedExitCode,NodeList,Start,End,JobName";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SqueueRecord {
    pub job_id: String,
    pub state: SlurmState,
    pub reason: String,
    pub node_list: String,
    pub start_time: String,
    pub time_limit: String,
    /// Exit code and signal of a finished job (from the raw wait status).
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SacctRecord {
    pub job_id: String,
    pub state: SlurmState,
    /// Raw state text, e.g. `CANCELLED by 1000`.
    pub state_text: String,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub derived_exit_code: Option<i32>,
    pub node_list: String,
    pub start: String,
    pub end: String,
    pub name: String,
}

/// `sbatch --parsable` prints `ID` or `ID;CLUSTER`.
pub fn parse_sbatch_parsable(stdout: &str) -> Option<String> {
    let line = stdout.lines().map(str::trim).rfind(|l| !l.is_empty())?;
    let id = line.split(';').next()?.trim();
    if !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) {
        Some(id.to_string())
    } else {
        None
    }
}

pub fn parse_squeue(stdout: &str) -> Vec<SqueueRecord> {
    stdout
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.trim_end().splitn(8, '|').collect();
            if f.len() < 6 || f[0].trim().is_empty() {
                return None;
            }
            Some(SqueueRecord {
                job_id: f[0].trim().to_string(),
                state: SlurmState::parse(f[1]),
                reason: f[2].trim().to_string(),
                node_list: f[3].trim().to_string(),
                start_time: f[4].trim().to_string(),
                time_limit: f[5].trim().to_string(),
                exit_code: f.get(6).and_then(|w| w.trim().parse::<i32>().ok()).map(|w| (w >> 8) & 0xff),
                exit_signal: f.get(6).and_then(|w| w.trim().parse::<i32>().ok()).map(|w| w & 0x7f),
                name: f.get(7).map(|n| n.trim().to_string()).unwrap_or_default(),
            })
        })
        .collect()
}

/// Parse `sacct -P -n --format=SACCT_FIELDS`. Step lines (`123.batch`, `123.0`) are skipped in case
/// `-X` was not honoured; for a job listed twice the last line wins (sacct lists the newest last).
pub fn parse_sacct(stdout: &str) -> Vec<SacctRecord> {
    let mut records: Vec<SacctRecord> = Vec::new();
    for line in stdout.lines() {
        let f: Vec<&str> = line.trim_end().splitn(8, '|').collect();
        if f.len() < 7 || f[0].is_empty() || f[0].contains('.') {
            continue;
        }
        let (exit_code, exit_signal) = parse_exit_pair(f[2]);
        let rec = SacctRecord {
            job_id: f[0].trim().to_string(),
            state: SlurmState::parse(f[1]),
            state_text: f[1].trim().to_string(),
            exit_code,
            exit_signal,
            derived_exit_code: parse_exit_pair(f[3]).0,
            node_list: f[4].trim().to_string(),
            start: f[5].trim().to_string(),
            end: f[6].trim().to_string(),
            name: f.get(7).map(|n| n.trim().to_string()).unwrap_or_default(),
        };
        records.retain(|r| r.job_id != rec.job_id);
        records.push(rec);
    }
    records
}

/// `3:0` → (Some(3), Some(0)).
fn parse_exit_pair(text: &str) -> (Option<i32>, Option<i32>) {
    let mut parts = text.trim().splitn(2, ':');
    let code = parts.next().and_then(|s| s.parse().ok());
    let signal = parts.next().and_then(|s| s.parse().ok());
    (code, signal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sbatch_ids() {
        let cases = [
            ("123\n", Some("123")),
            ("123;ci\n", Some("123")),
            ("warning: something\n456\n", Some("456")),
            ("", None),
            ("Submitted batch job 5\n", None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_sbatch_parsable(text).as_deref(), want, "{text:?}");
        }
    }

    #[test]
    fn squeue_lines() {
        let out = "12|PENDING|Priority|||4:00:00|0|tao-job-a\n13|RUNNING|None|node[1-2]|2026-12-02T10:00:00|4:00:00|0|odd|name\n14|FAILED|NonZeroExitCode|node1|x|4:00:00|768|w\n";
        let recs = parse_squeue(out);
        assert_eq!(recs.len(), 3);
        assert_eq!(recs[0].state, SlurmState::Pending);
        assert_eq!(recs[0].reason, "Priority");
        assert_eq!(recs[1].node_list, "node[1-2]");
        assert_eq!(recs[1].state, SlurmState::Running);
        assert_eq!(recs[0].name, "tao-job-a");
        assert_eq!(recs[1].name, "odd|name");
        assert_eq!(
            (recs[2].state.clone(), recs[2].exit_code, recs[2].exit_signal),
            (SlurmState::Failed, Some(3), Some(0))
        );
    }

    #[test]
    fn sacct_lines() {
        let out = "\
20|COMPLETED|0:0|0:0|node1|2026-12-02T10:00:00|2026-12-02T10:00:01
20.batch|COMPLETED|0:0||node1|x|y
21|FAILED|3:0|0:0|node[1-2]|a|b
22|CANCELLED by 1000|0:15|0:0|None assigned|Unknown|Unknown
23|PENDING|0:0|0:0|None assigned|Unknown|Unknown
23|COMPLETED|0:0|0:0|node3|a|b
";
        let recs = parse_sacct(out);
        assert_eq!(recs.len(), 4);
        assert_eq!(recs[0].state, SlurmState::Completed);
        assert_eq!(recs[0].exit_code, Some(0));
        assert_eq!(recs[1].state, SlurmState::Failed);
        assert_eq!(recs[1].exit_code, Some(3));
        assert_eq!(recs[2].state, SlurmState::Cancelled);
        assert_eq!(recs[2].state_text, "CANCELLED by 1000");
        assert_eq!(recs[2].exit_signal, Some(15));
        let last = recs.iter().find(|r| r.job_id == "23").unwrap();
        assert_eq!(last.state, SlurmState::Completed, "later line for the same job wins");
    }
}
