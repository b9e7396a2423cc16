//! Parsers for the machine-readable output we ask Slurm for. The exact formats requested are defined
//! next to the parsers ([`SQUEUE_FORMAT`], [`SACCT_FIELDS`]) so the two can never drift apart.

use super::SlurmState;
use serde::{Deserialize, Serialize};

/// `squeue -O` fields, each followed by `|`: id, state, reason, node list, start, limit, exit status,
/// name. The id is `JobArrayID`: a plain job's id, and `<array>_<index>` for a task of a job array
/// (squeue's `-r` lists every task on a line of its own). With `-t all`, squeue lists finished jobs
/// that the controller still remembers: its word on how they ended is authoritative, where sacct
/// lags. The exit status is a raw wait status (code × 256 + signal) up to Slurm 23.02 and
/// `code:signal` from 23.11 on; both are read. The job name comes last: the only free-text field.
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
    /// Exit code and signal of a finished job.
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub name: String,
    /// What in this line was not understood (an unknown state, an unexpected field count, an
    /// unreadable exit status): such a record is never the ground of a verdict.
    pub unread: Option<String>,
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
    /// What in this line was not understood, as for [`SqueueRecord::unread`].
    pub unread: Option<String>,
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

/// The fields of one `|`-separated line, trimmed, and what about their number was not understood.
/// tao-slurm's own job names never hold a `|`, so a line with more fields than were asked for is
/// output of a format we do not know (a field added, or one that changed its separator).
fn fields<'a>(line: &'a str, asked: &str) -> (Vec<&'a str>, Option<String>) {
    let f: Vec<&str> = line.trim_end().split('|').map(str::trim).collect();
    let want = asked.split(',').count();
    let problem = (f.len() != want).then(|| {
        format!(
            "{} fields where {want} were asked for ({}): {:?}",
            f.len(),
            asked.replace(":|", "").replace(':', ""),
            line.trim_end()
        )
    });
    (f, problem)
}

/// The problems found in a line, joined for one log line; None when there were none.
fn joined(problems: [Option<String>; 3]) -> Option<String> {
    let all: Vec<String> = problems.into_iter().flatten().collect();
    (!all.is_empty()).then(|| all.join("; "))
}

/// The state field read, and what was not understood of it.
fn state_of(text: &str) -> (SlurmState, Option<String>) {
    let state = SlurmState::parse(text);
    let problem = matches!(state, SlurmState::Unknown(_)).then(|| format!("unknown Slurm state {:?}", text.trim()));
    (state, problem)
}

/// Parse `squeue -h -O SQUEUE_FORMAT`. Lines that do not start with a job id are not records (squeue
/// prints its errors on the same stream) and are skipped; a record line keeps what it could not read
/// in [`SqueueRecord::unread`].
pub fn parse_squeue(stdout: &str) -> Vec<SqueueRecord> {
    stdout
        .lines()
        .filter_map(|line| {
            let (f, count) = fields(line, SQUEUE_FORMAT);
            let job_id = f[0];
            if f.len() < 2 || !super::is_slurm_job_id(job_id) {
                return None;
            }
            let get = |i: usize| f.get(i).copied().unwrap_or("");
            let (state, bad_state) = state_of(get(1));
            let (exit_code, exit_signal) = parse_exit_status(get(6));
            let bad_exit = (state.is_finished() && exit_code.is_none())
                .then(|| format!("exit status {:?} is neither a wait status nor code:signal", get(6)));
            Some(SqueueRecord {
                job_id: job_id.to_string(),
                state,
                reason: get(2).to_string(),
                node_list: get(3).to_string(),
                start_time: get(4).to_string(),
                time_limit: get(5).to_string(),
                exit_code,
                exit_signal,
                name: get(7).to_string(),
                unread: joined([bad_state, count, bad_exit]),
            })
        })
        .collect()
}

/// Parse `sacct -P -n --format=SACCT_FIELDS`. Step lines (`123.batch`, `123.0`) are skipped in case
/// `-X` was not honoured; for a job listed twice the last line wins (sacct lists the newest last).
pub fn parse_sacct(stdout: &str) -> Vec<SacctRecord> {
    let mut records: Vec<SacctRecord> = Vec::new();
    for line in stdout.lines() {
        let (f, count) = fields(line, SACCT_FIELDS);
        if f.len() < 2 || !super::is_slurm_job_id(f[0]) {
            continue;
        }
        let get = |i: usize| f.get(i).copied().unwrap_or("");
        let (state, bad_state) = state_of(get(1));
        let (exit_code, exit_signal) = parse_exit_pair(get(2));
        let bad_exit =
            (state.is_finished() && exit_code.is_none()).then(|| format!("exit code {:?} is not code:signal", get(2)));
        let rec = SacctRecord {
            job_id: f[0].to_string(),
            state,
            state_text: get(1).to_string(),
            exit_code,
            exit_signal,
            derived_exit_code: parse_exit_pair(get(3)).0,
            node_list: get(4).to_string(),
            start: get(5).to_string(),
            end: get(6).to_string(),
            name: get(7).to_string(),
            unread: joined([bad_state, count, bad_exit]),
        };
        records.retain(|r| r.job_id != rec.job_id);
        records.push(rec);
    }
    records
}

/// squeue's exit status: `code:signal` (Slurm 23.11 and later), or a raw wait status (code × 256 +
/// signal, up to 23.02). None when it is neither.
pub fn parse_exit_status(text: &str) -> (Option<i32>, Option<i32>) {
    let text = text.trim();
    if text.contains(':') {
        return parse_exit_pair(text);
    }
    match text.parse::<i32>() {
        Ok(w) if w >= 0 => (Some((w >> 8) & 0xff), Some(w & 0x7f)),
        _ => (None, None),
    }
}

/// `3:0` → (Some(3), Some(0)); both parts must be numbers.
fn parse_exit_pair(text: &str) -> (Option<i32>, Option<i32>) {
    match text.trim().split_once(':') {
        Some((code, signal)) => match (code.parse::<i32>(), signal.parse::<i32>()) {
            (Ok(c), Ok(s)) if c >= 0 && s >= 0 => (Some(c), Some(s)),
            _ => (None, None),
        },
        None => (None, None),
    }
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
        assert_eq!(recs[1].name, "odd", "a ninth field is not part of the name…");
        assert!(recs[1].unread.as_deref().unwrap().contains("9 fields where 8 were asked for"), "…but not understood");
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
