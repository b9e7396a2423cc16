//! The logs tool: the last lines of main.out/main.err, or a byte range to follow a file with, both
//! capped in size (agents pay for every byte they read).

use crate::args::{
    check_range, LogsArgs, StreamChoice, LOG_BYTES_DEFAULT, LOG_BYTES_MAX, LOG_LINES_DEFAULT, LOG_LINES_MAX,
};
use crate::hints::for_jobs;
use crate::reply::{JobBrief, Reply, ToolError};
use schemars::JsonSchema;
use serde::Serialize;
use tao_slurm_engine::client::Stream;
use tao_slurm_engine::Client;

#[derive(Debug, Serialize, JsonSchema)]
pub struct LogText {
    pub path: String,
    pub text: String,
    /// The text was cut to max_bytes (its start is missing).
    pub truncated: bool,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct LogRangeOut {
    /// stdout or stderr.
    pub stream: String,
    pub path: String,
    pub offset: u64,
    /// Pass it as `offset` to read on from here.
    pub next_offset: u64,
    /// The file's size when read (absent: not written yet).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Everything written so far has been read.
    pub at_end: bool,
    pub text: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct LogsOut {
    pub job: JobBrief,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout: Option<LogText>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr: Option<LogText>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range: Option<LogRangeOut>,
}

pub fn logs(client: &Client, args: LogsArgs) -> Result<Reply<LogsOut>, ToolError> {
    let max_bytes = check_range("max_bytes", args.max_bytes.unwrap_or(LOG_BYTES_DEFAULT), 1, LOG_BYTES_MAX)?;
    let view =
        client.stored_jobs(std::slice::from_ref(&args.job_id)).map_err(|e| ToolError::engine(e, "job_id"))?.remove(0);
    let job = JobBrief::from(&view);
    let cursor = client.last_event_id().ok();
    let next_for_job = |job: &JobBrief| for_jobs(std::slice::from_ref(job), cursor);
    if view.slurm_job_id.is_none() && args.attempt.is_none() {
        return Err(ToolError::failed(
            format!("job {} has no Slurm job yet, so it has no logs ({})", job.job_id, job.message),
            next_for_job(&job),
        ));
    }
    if let Some(offset) = args.offset {
        return from_offset(client, &args, &view, job, offset, max_bytes, cursor);
    }
    let lines = check_range("tail_lines", args.tail_lines.unwrap_or(LOG_LINES_DEFAULT), 1, LOG_LINES_MAX)?;
    let logs = client.job_logs(&view.job_id, Some(lines), args.attempt).map_err(|e| ToolError::engine(e, "job_id"))?;
    let cap = |path: String, text: &str| {
        let (text, truncated) = tao_slurm_engine::ops::logs::keep_end(text, max_bytes as usize);
        LogText { path, text, truncated }
    };
    let want_out = args.stream != StreamChoice::Stderr;
    let want_err = args.stream != StreamChoice::Stdout;
    let stdout = want_out.then(|| cap(logs.stdout_path.clone(), &logs.stdout));
    let stderr = want_err.then(|| cap(logs.stderr_path.clone(), &logs.stderr));
    let count = |t: &Option<LogText>| t.as_ref().map(|t| t.text.lines().count()).unwrap_or(0);
    let summary = format!(
        "last lines of job {} ({}): {} of stdout, {} of stderr",
        job.job_id,
        job.status,
        count(&stdout),
        count(&stderr)
    );
    let next = if job.terminal {
        "tell the user the outcome, quoting the lines that matter".to_string()
    } else {
        next_for_job(&job)
    };
    Ok(Reply::new(summary, next, LogsOut { job, stdout, stderr, range: None }))
}

/// One file read from a byte offset (the way to page through a long log).
fn from_offset(
    client: &Client,
    args: &LogsArgs,
    view: &tao_slurm_engine::client::JobView,
    job: JobBrief,
    offset: u64,
    max_bytes: u64,
    cursor: Option<i64>,
) -> Result<Reply<LogsOut>, ToolError> {
    let next_for_job = |job: &JobBrief| for_jobs(std::slice::from_ref(job), cursor);
    let stream = match args.stream {
        StreamChoice::Stdout => Stream::Stdout,
        StreamChoice::Stderr => Stream::Stderr,
        StreamChoice::Both => {
            return Err(ToolError::invalid("stream", "reading from an offset needs one file: stream stdout or stderr"))
        }
    };
    let r = client
        .log_range(&view.job_id, stream, offset, max_bytes, args.attempt)
        .map_err(|e| ToolError::engine(e, "job_id"))?;
    let name = if stream == Stream::Stdout { "stdout" } else { "stderr" };
    let at_end = r.size.is_none_or(|s| r.next_offset >= s);
    let summary = match r.size {
        None => format!("{name} of job {} is not written yet", job.job_id),
        Some(size) => format!(
            "{} bytes of {name} ({}..{} of {size}) of job {} ({})",
            r.next_offset - r.offset,
            r.offset,
            r.next_offset,
            job.job_id,
            job.status
        ),
    };
    let next = if !at_end {
        format!("more is written: call logs with offset {} to read on", r.next_offset)
    } else if job.terminal {
        next_for_job(&job)
    } else {
        format!("call logs with offset {} later for new output; {}", r.next_offset, next_for_job(&job))
    };
    let range = LogRangeOut {
        stream: name.into(),
        path: r.path,
        offset: r.offset,
        next_offset: r.next_offset,
        size: r.size,
        at_end,
        text: r.text,
    };
    Ok(Reply::new(summary, next, LogsOut { job, stdout: None, stderr: None, range: Some(range) }))
}
