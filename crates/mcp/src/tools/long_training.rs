//! Tools for training longer than the queue allows: a job's checkpoints, `retry` of a job that ended
//! Error or Canceled from its newest checkpoint, and `pause`/`resume`.

use crate::reply::{JobBrief, Reply, ToolError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tao_slurm_engine::ops::files::CheckpointFile;
use tao_slurm_engine::Client;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobArgs {
    /// The job (its id or an unambiguous prefix).
    pub job_id: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct CheckpointsOut {
    /// Paths relative to the job's results directory, newest last (what the next attempt resumes from).
    pub checkpoints: Vec<CheckpointFile>,
}

/// The checkpoints in a job's results directory, newest last (one round trip).
pub fn checkpoints(client: &Client, args: JobArgs) -> Result<Reply<CheckpointsOut>, ToolError> {
    let checkpoints = client.checkpoint_files(&args.job_id).map_err(|e| ToolError::engine(e, "job_id"))?;
    let summary = match checkpoints.last() {
        Some(newest) => format!("{} checkpoints; newest {}", checkpoints.len(), newest.path),
        None => "no checkpoint yet".to_string(),
    };
    Ok(Reply::new(summary, "retry runs an ended job again from the newest one", CheckpointsOut { checkpoints }))
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct RetryOut {
    pub job: JobBrief,
}

/// A new attempt of a job that ended Error or Canceled, from its newest checkpoint.
pub fn retry(client: &Client, args: JobArgs) -> Result<Reply<RetryOut>, ToolError> {
    let view = client.retry_job(&args.job_id).map_err(|e| ToolError::engine(e, "job_id"))?;
    let job = JobBrief::from(&view);
    Ok(Reply::new(
        format!("job {} is {} (attempt {})", view.job_id, view.status, view.attempt),
        "wait follows it; logs show where it resumed from",
        RetryOut { job },
    ))
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PauseArgs {
    /// The job (its id or an unambiguous prefix).
    pub job_id: String,
    /// Send the checkpoint signal (USR2) first and cancel only when the job ends or its checkpoint
    /// grace passes (Pausing until then); false: cancelled at once.
    #[serde(default)]
    pub graceful: bool,
}

/// Pause a job: its allocation released, Paused (Pausing first when graceful).
pub fn pause(client: &Client, args: PauseArgs) -> Result<Reply<RetryOut>, ToolError> {
    let view = client.pause_job(&args.job_id, args.graceful).map_err(|e| ToolError::engine(e, "job_id"))?;
    let job = JobBrief::from(&view);
    Ok(Reply::new(
        format!("job {} is {}", view.job_id, view.status),
        "wait follows it to Paused; resume runs it again from its newest checkpoint",
        RetryOut { job },
    ))
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResumeArgs {
    /// The paused job (its id or an unambiguous prefix).
    pub job_id: String,
    /// Specs replacing the job's own (a JSON object of spec keys, as TAO's resume body's); omitted
    /// or empty: as they were.
    #[serde(default)]
    pub specs: Option<serde_json::Value>,
}

/// Resume a paused job: a new attempt from its newest checkpoint.
pub fn resume(client: &Client, args: ResumeArgs) -> Result<Reply<RetryOut>, ToolError> {
    let view = client.resume_job(&args.job_id, args.specs.as_ref()).map_err(|e| ToolError::engine(e, "job_id"))?;
    let job = JobBrief::from(&view);
    Ok(Reply::new(
        format!("job {} is {} (attempt {})", view.job_id, view.status, view.attempt),
        "wait follows it; logs show where it resumed from",
        RetryOut { job },
    ))
}
