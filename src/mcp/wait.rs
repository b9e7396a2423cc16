//! The wait tool: block until one of the given jobs changes (a new event in its history: a status or
//! Slurm state change, a retry) or the timeout passes, refreshing at the monitor's pace (within the
//! query budget), then answer with the changes and a cursor. This is how an agent keeps following a
//! job at a few tokens per minute instead of polling.

use super::args::{check_range, WaitArgs, WAIT_DEFAULT_SECS, WAIT_MAX_SECS};
use super::clients::{blocking, Clients};
use super::hints::{for_jobs, jobs_summary};
use super::reply::{briefs, JobBrief, Reply, ToolError};
use crate::client::{now_secs, EventRecord};
use crate::monitor::{next_interval, Pace};
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RoleServer};
use schemars::JsonSchema;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Events read at most per poll (a wait over thousands of jobs reads the rest at the next poll).
const MAX_EVENTS: usize = 10_000;

/// One job's platform status changing (or a new attempt starting), from its event history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Change {
    pub job_id: String,
    pub from: String,
    pub to: String,
    pub attempt: u32,
    /// The event's own words (Slurm state, exit code, reason).
    pub detail: String,
    /// Unix seconds.
    pub at: i64,
}

/// A job's platform status and attempt, as its history tells them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    status: String,
    attempt: u32,
}

impl Default for Seen {
    /// A job is recorded Pending, attempt 1.
    fn default() -> Seen {
        Seen { status: "Pending".into(), attempt: 1 }
    }
}

/// Apply one event to what is known of its job; the change it makes, if it changes the platform
/// status or starts an attempt (a Slurm state change within one status, or a submission, is not one).
/// Status events read `<Status> (Slurm <STATE>): <message>`; an unreadable one counts as a change,
/// so that a wait ends early rather than misses one. Pure.
fn apply(seen: &mut Seen, e: &EventRecord) -> Option<Change> {
    let before = seen.clone();
    match e.kind.as_str() {
        "status" => {
            let word = e.detail.split_whitespace().next().unwrap_or("");
            match crate::PlatformStatus::parse(word) {
                Some(s) if s.as_str() == seen.status => return None,
                Some(s) => seen.status = s.as_str().to_string(),
                None => seen.status = word.to_string(),
            }
        }
        "retry" => {
            seen.status = "Pending".into();
            seen.attempt += 1;
        }
        _ => return None,
    }
    Some(Change {
        job_id: e.job_id.clone(),
        from: before.status,
        to: seen.status.clone(),
        attempt: seen.attempt,
        detail: e.detail.clone(),
        at: e.at,
    })
}

/// What each job was at `cursor`, from its events up to it. Pure.
fn seen_at(history: &[EventRecord], cursor: i64) -> HashMap<String, Seen> {
    let mut seen: HashMap<String, Seen> = HashMap::new();
    for e in history.iter().filter(|e| e.id <= cursor) {
        apply(seen.entry(e.job_id.clone()).or_default(), e);
    }
    seen
}

/// The changes that the events after the cursor make to what was seen at it. Pure.
fn changes_after(seen: &HashMap<String, Seen>, events: &[EventRecord]) -> Vec<Change> {
    let mut seen = seen.clone();
    events.iter().filter_map(|e| apply(seen.entry(e.job_id.clone()).or_default(), e)).collect()
}

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
    let given = args.job_ids.clone();
    let given_cursor = args.cursor;
    let (ids, start_cursor, seen, budget) = blocking(clients, move |c| {
        let cursor = match given_cursor {
            Some(cursor) => cursor,
            None => c.last_event_id().map_err(|e| ToolError::engine(e, "job_ids"))?,
        };
        let views = if given.is_empty() {
            c.list(&crate::client::JobFilter { active_only: true, ..Default::default() }).map(|l| l.jobs)
        } else {
            c.stored_jobs(&given)
        };
        let ids: Vec<String> =
            views.map_err(|e| ToolError::engine(e, "job_ids"))?.into_iter().map(|v| v.job_id).collect();
        let history = c.events_since(0, &ids, MAX_EVENTS).map_err(|e| ToolError::engine(e, "job_ids"))?;
        Ok((ids, cursor, seen_at(&history, cursor), c.settings().max_queries_per_minute))
    })
    .await?;
    if ids.is_empty() {
        return Ok(Reply::new(
            "no active jobs to wait for",
            "submit a job, or call list to see earlier ones",
            WaitOut {
                changed: false,
                timed_out: false,
                waited_secs: 0.0,
                changes: Vec::new(),
                cursor: start_cursor,
                jobs: Vec::new(),
            },
        ));
    }
    loop {
        let poll_ids = ids.clone();
        let (views, found) = blocking(clients, move |c| {
            let views = c.refresh(&poll_ids).map_err(|e| ToolError::engine(e, "job_ids"))?;
            let found =
                c.events_since(start_cursor, &poll_ids, MAX_EVENTS).map_err(|e| ToolError::engine(e, "job_ids"))?;
            Ok((views, found))
        })
        .await?;
        let jobs = briefs(&views);
        let all_terminal = jobs.iter().all(|j| j.terminal);
        let changes = changes_after(&seen, &found);
        let now = Instant::now();
        if !changes.is_empty() || all_terminal || now >= deadline {
            // The cursor moves past every event read (of these jobs), changes or not.
            let cursor = found.last().map(|e| e.id).unwrap_or(start_cursor);
            let changed = !changes.is_empty();
            let waited_secs = (started.elapsed().as_secs_f64() * 10.0).round() / 10.0;
            let summary = match changes.last() {
                Some(c) => {
                    format!("{} changed {} -> {} ({}); {}", c.job_id, c.from, c.to, c.detail, jobs_summary(&jobs))
                }
                None if all_terminal => format!("nothing to wait for: {}", jobs_summary(&jobs)),
                None => format!("no change in {waited_secs:.0} s: {}", jobs_summary(&jobs)),
            };
            let next = for_jobs(&jobs, Some(cursor));
            let timed_out = !changed && !all_terminal;
            return Ok(Reply::new(summary, next, WaitOut { changed, timed_out, waited_secs, changes, cursor, jobs }));
        }
        let pause = next_interval(pace(&jobs), budget).min(deadline - now);
        if let Some(p) = &progress {
            let elapsed = started.elapsed().as_secs_f64();
            let note = ProgressNotificationParam::new(p.token.clone(), elapsed)
                .with_total(timeout as f64)
                .with_message(jobs_summary(&jobs));
            // A client that stopped listening is not a reason to fail the wait.
            let _ = p.peer.notify_progress(note).await;
        }
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = cancelled.cancelled() => {
                return Err(ToolError::failed("the wait was cancelled by the client", "call wait again to keep following the jobs"));
            }
        }
    }
}

/// The monitor's pacing inputs for the jobs waited for.
fn pace(jobs: &[JobBrief]) -> Pace {
    let now = now_secs();
    let active: Vec<&JobBrief> = jobs.iter().filter(|j| !j.terminal).collect();
    Pace {
        youngest_age_secs: active.iter().map(|j| now - j.updated_at).min().unwrap_or(0),
        next_retry_in_secs: active.iter().filter_map(|j| j.next_retry_at).map(|at| at - now).min(),
        active_jobs: active.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: i64, job: &str, kind: &str, detail: &str) -> EventRecord {
        EventRecord { id, job_id: job.into(), at: id, kind: kind.into(), detail: detail.into() }
    }

    fn history() -> Vec<EventRecord> {
        vec![
            event(1, "a", "created", "job recorded"),
            event(2, "a", "submitted", "Slurm job 7 via login1"),
            event(3, "a", "status", "Pending (Slurm PENDING): Slurm state PENDING"),
            event(4, "b", "created", "job recorded"),
            event(5, "a", "status", "Running (Slurm RUNNING): running on node1"),
            event(6, "a", "status", "Running (Slurm COMPLETING): completing"),
            event(7, "a", "retry", "node failure: attempt 2 in 1 s"),
            event(8, "a", "status", "Complete (Slurm COMPLETED): exit code 0"),
        ]
    }

    #[test]
    fn a_slurm_state_within_one_status_is_no_change() {
        let h = history();
        let seen = seen_at(&h, 2);
        let changes = changes_after(&seen, &h[2..4]);
        assert!(changes.is_empty(), "PENDING while Pending, and a new job's creation: {changes:?}");
        let seen = seen_at(&h, 5);
        assert!(changes_after(&seen, &h[5..6]).is_empty(), "COMPLETING is still Running");
    }

    #[test]
    fn status_changes_and_retries_are_changes_from_what_the_cursor_saw() {
        let h = history();
        let seen = seen_at(&h, 3);
        let changes = changes_after(&seen, &h[3..]);
        let steps: Vec<(&str, &str, u32)> =
            changes.iter().map(|c| (c.from.as_str(), c.to.as_str(), c.attempt)).collect();
        assert_eq!(steps, vec![("Pending", "Running", 1), ("Running", "Pending", 2), ("Pending", "Complete", 2)]);
        assert!(changes_after(&seen_at(&h, 8), &[]).is_empty());
    }

    #[test]
    fn an_unreadable_status_event_counts_as_a_change() {
        let seen = seen_at(&history(), 3);
        let changes = changes_after(&seen, &[event(9, "a", "status", "Whatever happened")]);
        assert_eq!(changes.len(), 1);
    }
}
