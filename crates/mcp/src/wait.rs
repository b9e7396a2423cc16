//! The wait tool: block until one of the given jobs changes (a new event in its history: a status or
//! Slurm state change, a retry) or the timeout passes, refreshing at the monitor's pace (within the
//! query budget), then answer with the changes and a cursor. This is how an agent keeps following a
//! job at a few tokens per minute instead of polling. Each poll is the client's one wait step
//! (`Client::wait_step`); this loop adds the timeout, progress notifications and cancellation.

use super::args::{check_range, WaitArgs, WAIT_DEFAULT_SECS, WAIT_MAX_SECS};
use super::clients::{blocking, Clients};
use super::hints::{for_jobs, jobs_summary};
use super::reply::{briefs, JobBrief, Reply, ToolError};
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RoleServer};
use schemars::JsonSchema;
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tao_slurm_engine::client::{Change, WaitTick};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Serialize, JsonSchema)]
pub struct WaitOut {
    /// Something happened to the jobs (see events) before the timeout.
    pub changed: bool,
    /// The timeout passed with no change.
    pub timed_out: bool,
    pub waited_secs: f64,
    /// Status changes (and retries), oldest first.
    pub changes: Vec<Change>,
    /// Pass it to the next wait (or events) to hear only of later changes.
    pub cursor: i64,
    pub jobs: Vec<JobBrief>,
}

/// What a progress notification needs: where to send it and the client's token.
pub struct Progress {
    pub peer: Peer<RoleServer>,
    pub token: ProgressToken,
}

pub async fn wait(
    clients: &Arc<Clients>,
    args: WaitArgs,
    cancelled: CancellationToken,
    progress: Option<Progress>,
) -> Result<Reply<WaitOut>, ToolError> {
    let timeout = check_range("timeout_secs", args.timeout_secs.unwrap_or(WAIT_DEFAULT_SECS), 1, WAIT_MAX_SECS)?;
    if args.cursor.is_some_and(|c| c < 0) {
        return Err(ToolError::invalid("cursor", "must be a cursor from an earlier wait, status or events result"));
    }
    let started = Instant::now();
    let deadline = started + Duration::from_secs(timeout);
    // The jobs (full ids) and the cursor before anything is refreshed: every change from here on
    // (or from the caller's cursor) is an event after it.
    let (given, given_cursor) = (args.job_ids.clone(), args.cursor);
    let wait = blocking(clients, move |c| {
        c.wait_start(&given, given_cursor, None).map_err(|e| ToolError::engine(e, "job_ids"))
    })
    .await?;
    if wait.ids().is_empty() {
        return Ok(Reply::new(
            "no active jobs to wait for",
            "submit a job, or call list to see earlier ones",
            WaitOut {
                changed: false,
                timed_out: false,
                waited_secs: 0.0,
                changes: Vec::new(),
                cursor: wait.start_cursor(),
                jobs: Vec::new(),
            },
        ));
    }
    let wait = Arc::new(wait);
    loop {
        let step = wait.clone();
        let tick = blocking(clients, move |c| c.wait_step(&step).map_err(|e| ToolError::engine(e, "job_ids"))).await?;
        let jobs = briefs(&tick.views);
        let now = Instant::now();
        if !tick.changes.is_empty() || tick.all_settled || now >= deadline {
            return Ok(answer(tick, jobs, started));
        }
        if let Some(p) = &progress {
            let note = ProgressNotificationParam::new(p.token.clone(), started.elapsed().as_secs_f64())
                .with_total(timeout as f64)
                .with_message(jobs_summary(&jobs));
            // A client that stopped listening is not a reason to fail the wait.
            let _ = p.peer.notify_progress(note).await;
        }
        tokio::select! {
            _ = tokio::time::sleep(tick.pause.min(deadline - now)) => {}
            _ = cancelled.cancelled() => {
                return Err(ToolError::failed("the wait was cancelled by the client", "call wait again to keep following the jobs"));
            }
        }
    }
}

/// The reply to a wait that ended: what changed, or that nothing did.
fn answer(tick: WaitTick, jobs: Vec<JobBrief>, started: Instant) -> Reply<WaitOut> {
    let changed = !tick.changes.is_empty();
    let waited_secs = (started.elapsed().as_secs_f64() * 10.0).round() / 10.0;
    let summary = match tick.changes.last() {
        Some(c) => format!("{} changed {} -> {} ({}); {}", c.job_id, c.from, c.to, c.detail, jobs_summary(&jobs)),
        None if tick.all_settled && !tick.paused.is_empty() => {
            format!("nothing to wait for: {} paused, until resumed; {}", tick.paused.join(", "), jobs_summary(&jobs))
        }
        None if tick.all_settled => format!("nothing to wait for: {}", jobs_summary(&jobs)),
        None => format!("no change in {waited_secs:.0} s: {}", jobs_summary(&jobs)),
    };
    let next = for_jobs(&jobs, Some(tick.cursor));
    let timed_out = !changed && !tick.all_settled;
    Reply::new(
        summary,
        next,
        WaitOut { changed, timed_out, waited_secs, changes: tick.changes, cursor: tick.cursor, jobs },
    )
}
