//! Read a job's main.out and main.err: whole or tail in one round trip, or followed by byte offset
//! (each poll reads only the bytes added since the last one, and refreshes the job's status in the
//! same round trip). The scripts and readers are the core's `ops::logs`.

use crate::cosmos::Role;
use crate::error::{Error, Result};
use crate::ops::refresh::parse_refresh_output;
use crate::ops::refresh::refresh_script;
use crate::ops::refresh::RefreshTarget;
use crate::remote::{Idempotency, Remote};
use crate::store::JobRecord;
use tao_slurm_core::ops::logs::*;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct JobLogs {
    pub job_id: String,
    pub slurm_job_id: String,
    pub stdout_path: String,
    pub stderr_path: String,
    pub stdout: String,
    pub stderr: String,
}

/// The paths of the current attempt's two log files (the core's layout of them); an error while the
/// attempt has no Slurm job.
pub fn log_paths(job: &JobRecord) -> Result<(String, String, String)> {
    crate::ops::logs::log_paths(job).ok_or_else(|| no_logs(job))
}

/// [`log_paths`] of one task of a Cosmos-RL role.
pub fn role_log_paths(job: &JobRecord, role: Role, task: u32) -> Result<(String, String, String)> {
    crate::ops::logs::role_log_paths(job, role, task).ok_or_else(|| no_logs(job))
}

fn no_logs(job: &JobRecord) -> Error {
    Error::RemoteCommand(format!("job {} has no Slurm job yet, so it has no logs", job.job_id))
}

/// The job as seen from one of its attempts (for `logs --attempt K`).
pub fn as_attempt(job: &JobRecord, attempt: &crate::store::AttemptRecord) -> JobRecord {
    let mut view = job.clone();
    view.attempt = attempt.number;
    view.attempt_name = attempt.slurm_job_name.clone();
    view.slurm_job_id = attempt.slurm_job_id.clone();
    view
}

pub fn read_logs(remote: &dyn Remote, job: &JobRecord, tail_lines: Option<u32>) -> Result<JobLogs> {
    let (slurm_job_id, out_path, err_path) = log_paths(job)?;
    let slurm = crate::ops::logs::slurm_paths(job);
    let out = remote.run_script_capped(
        &logs_script(&out_path, &err_path, slurm.as_ref().map(|(o, e)| (o.as_str(), e.as_str())), tail_lines),
        Idempotency::Idempotent,
        remote.default_deadline(),
        crate::ops::logs::logs_output_cap(2),
    )?;
    let (stdout, stderr) = parse_pairs(&out.stdout, tail_lines).pop().unwrap_or_default();
    Ok(JobLogs {
        job_id: job.job_id.clone(),
        slurm_job_id,
        stdout_path: out_path,
        stderr_path: err_path,
        stdout,
        stderr,
    })
}

/// One task's logs of a Cosmos-RL role.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct TaskLogs {
    pub task: u32,
    pub stdout_path: String,
    pub stderr_path: String,
    pub stdout: String,
    pub stderr: String,
}

/// The logs of a Cosmos-RL role: one entry per task (node) read.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct RoleLogs {
    pub job_id: String,
    pub slurm_job_id: String,
    pub role: Role,
    pub tasks: Vec<TaskLogs>,
}

/// Read the logs of a role's tasks (whole or tail) in one round trip.
pub fn read_role_logs(
    remote: &dyn Remote,
    job: &JobRecord,
    role: Role,
    task: Option<u32>,
    tail_lines: Option<u32>,
) -> Result<RoleLogs> {
    let tasks = role_tasks(job, role, task)?;
    let mut script = String::new();
    let mut paths = Vec::new();
    let mut slurm_job_id = String::new();
    for t in &tasks {
        let (id, out, err) = role_log_paths(job, role, *t)?;
        script.push_str(&logs_script(&out, &err, None, tail_lines));
        paths.push((out, err));
        slurm_job_id = id;
    }
    let out = remote.run_script_capped(
        &script,
        Idempotency::Idempotent,
        remote.default_deadline(),
        crate::ops::logs::logs_output_cap(2 * tasks.len()),
    )?;
    let texts = parse_pairs(&out.stdout, tail_lines);
    let tasks = tasks
        .iter()
        .zip(paths)
        .zip(texts.into_iter().chain(std::iter::repeat_with(Default::default)))
        .map(|((t, (out, err)), (stdout, stderr))| TaskLogs {
            task: *t,
            stdout_path: out,
            stderr_path: err,
            stdout,
            stderr,
        })
        .collect();
    Ok(RoleLogs { job_id: job.job_id.clone(), slurm_job_id, role, tasks })
}

/// One poll of `logs -f`: refresh the job and read what was added to the files, in one round trip.
/// Returns the new chunks; the cursor advances by the byte counts the host reported.
pub fn follow_once(
    cycle: &crate::engine::cycle::Cycle,
    job: &JobRecord,
    streams: &[Stream],
    cursor: &mut FollowCursor,
) -> Result<Vec<Chunk>> {
    let (_, out_path, err_path) = log_paths(job)?;
    follow_files_once(cycle, job, (&out_path, &err_path), streams, cursor)
}

/// [`follow_once`] for any pair of the job's log files (a Cosmos-RL role's task, for instance).
pub fn follow_files_once(
    cycle: &crate::engine::cycle::Cycle,
    job: &JobRecord,
    (out_path, err_path): (&str, &str),
    streams: &[Stream],
    cursor: &mut FollowCursor,
) -> Result<Vec<Chunk>> {
    let files: Vec<(Stream, &str, u64)> = streams
        .iter()
        .map(|s| match s {
            Stream::Stdout => (Stream::Stdout, out_path, cursor.stdout_offset),
            Stream::Stderr => (Stream::Stderr, err_path, cursor.stderr_offset),
        })
        .collect();
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    let mut script = String::new();
    let summary = &job.summary;
    if !job.status.is_terminal() {
        script.push_str(&refresh_script(&[RefreshTarget::of(summary)]));
    }
    script.push_str(&follow_chunks_script(&files, &nonce));
    let out = cycle.remote.run_script(&script, Idempotency::Idempotent)?;
    let (refresh_part, chunks) = parse_chunks(&out.stdout, &nonce);
    if !job.status.is_terminal() {
        cycle.settle(std::slice::from_ref(summary), &parse_refresh_output(&refresh_part), &out.host)?;
    }
    for c in &chunks {
        match c.stream {
            Stream::Stdout => cursor.stdout_offset = c.offset + c.len,
            Stream::Stderr => cursor.stderr_offset = c.offset + c.len,
        }
    }
    Ok(chunks)
}
