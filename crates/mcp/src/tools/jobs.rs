//! Tools about jobs already submitted: status, list, cancel, events, explain.

use crate::args::{check_range, CancelArgs, EventsArgs, ExplainArgs, ListArgs, StatusArgs};
use crate::hints::{for_jobs, jobs_summary};
use crate::reply::{briefs, JobBrief, Reply, ToolError};
use schemars::JsonSchema;
use serde::Serialize;
use tao_slurm_engine::client::{EventRecord, JobFilter};
use tao_slurm_engine::filter::parse_age;
use tao_slurm_engine::Client;

#[derive(Debug, Serialize, JsonSchema)]
pub struct JobsOut {
    pub jobs: Vec<JobBrief>,
}

/// Every given job (all active ones when none is given), refreshed in one round trip.
pub fn status(client: &Client, args: StatusArgs) -> Result<Reply<JobsOut>, ToolError> {
    let jobs = briefs(&client.refresh(&args.job_ids).map_err(|e| ToolError::engine(e, "job_ids"))?);
    let summary =
        if jobs.is_empty() && args.job_ids.is_empty() { "no active jobs".to_string() } else { jobs_summary(&jobs) };
    let cursor = client.last_event_id().ok();
    Ok(Reply::new(summary, for_jobs(&jobs, cursor), JobsOut { jobs }))
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ListOut {
    pub jobs: Vec<JobBrief>,
    /// Jobs that matched (more than `jobs` holds when the limit cut the list).
    pub total: usize,
}

/// The local state's jobs, newest first (no remote call).
pub fn list(client: &Client, args: ListArgs) -> Result<Reply<ListOut>, ToolError> {
    let limit = check_range("limit", args.limit.unwrap_or(50), 1, 500)? as usize;
    let filter = JobFilter {
        active_only: args.active_only,
        statuses: args
            .status
            .as_deref()
            .map(|s| tao_slurm_engine::filter::parse_status("status", s))
            .transpose()
            .map_err(ToolError::from_spec)?
            .into_iter()
            .collect(),
        since_secs: args.since.as_deref().map(|t| parse_age("since", t)).transpose().map_err(ToolError::from_spec)?,
        groups: args.sweep_id.into_iter().collect(),
        limit: Some(limit),
    };
    let listed = client.list(&filter).map_err(|e| ToolError::engine(e, "sweep_id"))?;
    let (total, jobs): (usize, Vec<JobBrief>) = (listed.total, listed.jobs.iter().map(JobBrief::from).collect());
    let summary = if total > jobs.len() {
        format!("{} (showing the newest {})", jobs_summary(&jobs), jobs.len())
    } else {
        jobs_summary(&jobs)
    };
    let next = if jobs.iter().any(|j| !j.terminal) {
        "status refreshes these from the cluster; wait follows the active ones".to_string()
    } else {
        "logs shows a job's output".to_string()
    };
    Ok(Reply::new(summary, next, ListOut { jobs, total }))
}

pub fn cancel(client: &Client, args: CancelArgs) -> Result<Reply<JobsOut>, ToolError> {
    if args.job_ids.is_empty() {
        return Err(ToolError::invalid("job_ids", "give at least one job id to cancel"));
    }
    let jobs = briefs(&client.cancel_jobs(&args.job_ids).map_err(|e| ToolError::engine(e, "job_ids"))?);
    Ok(Reply::new(
        format!("cancelled: {}", jobs_summary(&jobs)),
        "logs show how far each job got; tell the user they are cancelled",
        JobsOut { jobs },
    ))
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct EventOut {
    pub id: i64,
    pub job_id: String,
    /// Unix seconds.
    pub at: i64,
    /// created, submitted, status, retry, adopted, submit_failed...
    pub kind: String,
    pub detail: String,
}

impl From<EventRecord> for EventOut {
    fn from(e: EventRecord) -> EventOut {
        EventOut { id: e.id, job_id: e.job_id, at: e.at, kind: e.kind, detail: e.detail }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct EventsOut {
    pub events: Vec<EventOut>,
    /// Pass it as `cursor` to get only later events.
    pub cursor: i64,
    /// The limit cut the list: call again with the cursor for the rest.
    pub more: bool,
}

pub fn events(client: &Client, args: EventsArgs) -> Result<Reply<EventsOut>, ToolError> {
    let limit = check_range("limit", args.limit.unwrap_or(100), 1, 500)? as usize;
    if args.cursor < 0 {
        return Err(ToolError::invalid("cursor", "must be 0 or a cursor from an earlier result"));
    }
    let found =
        client.events_since(args.cursor, &args.job_ids, limit + 1).map_err(|e| ToolError::engine(e, "job_ids"))?;
    let more = found.len() > limit;
    let events: Vec<EventOut> = found.into_iter().take(limit).map(EventOut::from).collect();
    let cursor = events.last().map(|e| e.id).unwrap_or(args.cursor);
    let summary = match events.len() {
        0 => "no new events".to_string(),
        n => {
            format!("{n} event(s); the last: {} {} {}", events[n - 1].job_id, events[n - 1].kind, events[n - 1].detail)
        }
    };
    let next = if more {
        format!("call events with cursor {cursor} for the rest")
    } else {
        format!("to follow jobs, call wait with cursor {cursor}")
    };
    Ok(Reply::new(summary, next, EventsOut { events, cursor, more }))
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct Estimate {
    /// Slurm's expected start (the cluster's local time), when it has computed one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub starts_in_secs: Option<i64>,
    /// Pending jobs in its partition(s) with a higher priority.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending_ahead: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<u64>,
    pub partition: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ExplainOut {
    pub job: JobBrief,
    pub pending: bool,
    /// Slurm's reason code (Resources, Priority, BeginTime...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The reason in plain words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason_words: Option<String>,
    /// What the user can do about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advice: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimate: Option<Estimate>,
}

/// Why a job is pending, in plain words, with Slurm's start-time estimate where it has one.
pub fn explain(client: &Client, args: ExplainArgs) -> Result<Reply<ExplainOut>, ToolError> {
    let view = client.job_status(&args.job_id).map_err(|e| ToolError::engine(e, "job_id"))?;
    let job = JobBrief::from(&view);
    let cursor = client.last_event_id().ok();
    if view.status != tao_slurm_engine::PlatformStatus::Pending {
        let summary = format!("job {} is not pending: it is {} ({})", job.job_id, job.status, job.message);
        let next = for_jobs(std::slice::from_ref(&job), cursor);
        return Ok(Reply::new(
            summary,
            next,
            ExplainOut { job, pending: false, reason: None, reason_words: None, advice: None, estimate: None },
        ));
    }
    let estimate = client.start_estimate(&view.job_id).map_err(|e| ToolError::engine(e, "job_id"))?;
    let reason = estimate.as_ref().map(|e| e.reason.clone()).filter(|r| !r.is_empty() && r != "None");
    let explained = reason.as_deref().and_then(tao_slurm_engine::slurm::explain_pending);
    let words = match (&view.slurm_job_id, view.next_retry_at, &reason, explained) {
        (None, Some(at), _, _) => format!(
            "an infrastructure failure is being retried: attempt {} is submitted at {at} (Unix time)",
            view.attempt
        ),
        (None, None, _, _) => {
            "the submission is not confirmed yet; status keeps looking for it by its unique name".to_string()
        }
        (Some(_), _, Some(_), Some((w, _))) => w.to_string(),
        (Some(_), _, Some(r), None) => format!("Slurm's reason is {r}"),
        (Some(_), _, None, _) => {
            "Slurm has not given a reason yet (just submitted, or the scheduler has not looked at it)".to_string()
        }
    };
    let when = match &estimate {
        Some(e) => match (&e.start_time, e.starts_in_secs) {
            (Some(t), Some(s)) if s > 0 => format!("; Slurm expects it to start at {t} (in about {})", human_secs(s)),
            (Some(t), _) => format!("; Slurm's expected start: {t}"),
            _ => "; Slurm has no start-time estimate yet".to_string(),
        },
        None => String::new(),
    };
    let ahead = estimate
        .as_ref()
        .and_then(|e| e.pending_ahead)
        .map(|n| format!("; {n} pending job(s) ahead of it by priority"))
        .unwrap_or_default();
    let summary = format!("job {} is pending: {words}{when}{ahead}", job.job_id);
    let advice = explained.map(|(_, a)| a.to_string());
    let next = match &advice {
        Some(a) => format!("tell the user: {a}. Then {}", for_jobs(std::slice::from_ref(&job), cursor)),
        None => for_jobs(std::slice::from_ref(&job), cursor),
    };
    let estimate = estimate.map(|e| Estimate {
        start_time: e.start_time,
        starts_in_secs: e.starts_in_secs,
        pending_ahead: e.pending_ahead,
        priority: e.priority,
        partition: e.partition,
    });
    Ok(Reply::new(
        summary,
        next,
        ExplainOut { job, pending: true, reason, reason_words: Some(words), advice, estimate },
    ))
}

/// `3 h 20 min`, `12 min`, `40 s`.
fn human_secs(secs: i64) -> String {
    match secs {
        s if s >= 86400 => format!("{} d {} h", s / 86400, s % 86400 / 3600),
        s if s >= 3600 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        s if s >= 60 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn durations() {
        assert_eq!(super::human_secs(3 * 86400 + 7200), "3 d 2 h");
        assert_eq!(super::human_secs(4000), "1 h 6 min");
        assert_eq!(super::human_secs(59), "59 s");
    }
}
