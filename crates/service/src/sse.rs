//! Server-sent events: a job's status changes and log lines, and the org's job list. Streams are
//! built from the cache's change notifications; no stream owns a task, so a client that disconnects
//! drops its stream and with it everything it held. Log lines come from one follower per job, shared
//! by every client watching that job; it reads the two files at a fixed pace while someone watches
//! and stops when nobody does.

use super::common::{blocking, org_job, AppStateRef};
use super::error::{ApiError, ApiResult};
use super::followers::{Follower, LogMsg};
use super::state::CachedJob;
use super::types::{JobListChange, JobStreamQuery, LogChunkOut};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tao_slurm_engine::client::{LogRange, Stream};

/// How often a followed job's log files are read.
const LOG_POLL: Duration = Duration::from_millis(1000);
/// Bytes read per file and poll.
const LOG_READ_BYTES: u64 = 256 * 1024;
/// A new follower starts this far from the end of a long file.
const LOG_START_BYTES: u64 = 64 * 1024;
/// The pause between two reads of one follower: [`LOG_POLL`], or longer so that the workspace's
/// followers together keep within its query budget (queries a minute). Pure.
fn follower_pause(followers_in_workspace: usize, queries_per_minute: u32) -> Duration {
    let share = Duration::from_secs_f64(60.0 * followers_in_workspace.max(1) as f64 / queries_per_minute.max(1) as f64);
    share.max(LOG_POLL)
}

fn stream_name(s: Stream) -> &'static str {
    match s {
        Stream::Stdout => "stdout",
        Stream::Stderr => "stderr",
    }
}

/// Where a follower stands in its job's logs: the attempt it reads and how far into each file.
#[derive(Default)]
struct Place {
    attempt: u32,
    offsets: [u64; 2],
    started: bool,
}

/// What a follower does after a poll.
enum Next {
    Stop,
    /// More is waiting: read again at once.
    Now,
    Pause,
}

/// Read a job's logs while anyone holds the follower.
async fn follow(state: AppStateRef, id: String, follower: Weak<Follower>) {
    let mut place = Place::default();
    let mut pause = LOG_POLL;
    loop {
        let Some(f) = follower.upgrade() else { break };
        let next = poll_logs(&state, &id, &f, &mut place, &mut pause).await;
        drop(f);
        match next {
            Next::Stop => break,
            Next::Now => continue,
            Next::Pause => tokio::time::sleep(pause).await,
        }
    }
    state.followers.forget(&id, &follower);
}

/// One poll of a follower: read what is new in the job's two files and hand it to the clients.
async fn poll_logs(state: &AppStateRef, id: &str, f: &Follower, place: &mut Place, pause: &mut Duration) -> Next {
    let Some(job) = state.snapshot().jobs.get(id).cloned() else {
        f.push(LogMsg::Done);
        return Next::Stop;
    };
    if job.out.backend_details.slurm_metadata.slurm_job_id.is_none() {
        if job.status.is_terminal() {
            f.push(LogMsg::Done);
            return Next::Stop;
        }
        return Next::Pause;
    }
    if job.attempt != place.attempt {
        if place.attempt != 0 {
            f.push(LogMsg::Attempt(job.attempt));
        }
        *place = Place { attempt: job.attempt, ..Place::default() };
    }
    let Some(ws) = state.workspace(&job.out.workspace) else {
        f.push(LogMsg::Done);
        return Next::Stop;
    };
    // A follower's reads are remote work like any request's: in the workspace's pool (a full pool
    // skips this poll), counted, and paced by the workspace's query budget.
    *pause = follower_pause(state.followers.count(|_, w| w == ws.id), ws.settings.max_queries_per_minute);
    let Ok(in_pool) = ws.pool.enter(&ws.id).await else { return Next::Pause };
    ws.counters.follower_reads.fetch_add(1, Ordering::Relaxed);
    let (jid, offs, first, attempt) = (id.to_string(), place.offsets, !place.started, place.attempt);
    let read = blocking(move || {
        let _in_pool = in_pool;
        ws.with_client(|c| {
            let mut out = Vec::new();
            for (i, s) in [Stream::Stdout, Stream::Stderr].into_iter().enumerate() {
                let mut r = c.log_range(&jid, s, offs[i], LOG_READ_BYTES, Some(attempt))?;
                // A long log joined late: start near its end.
                if first && r.size.is_some_and(|size| size > r.next_offset + LOG_START_BYTES) {
                    let from = r.size.unwrap_or(0) - LOG_START_BYTES;
                    r = c.log_range(&jid, s, from, LOG_READ_BYTES, Some(attempt))?;
                }
                out.push((s, r));
            }
            Ok(out)
        })
        .map_err(ApiError::engine)
    })
    .await;
    match read {
        Ok(ranges) => publish(state, f, &job, place, ranges),
        Err(e) => {
            tracing::debug!(job = %id, error = %e.body.error_desc, "log read failed; trying again");
            Next::Pause
        }
    }
}

/// Hand the chunks read to the follower's clients, the org's secret values redacted.
fn publish(
    state: &AppStateRef,
    f: &Follower,
    job: &CachedJob,
    place: &mut Place,
    ranges: Vec<(Stream, LogRange)>,
) -> Next {
    place.started = true;
    // The org's secret values never reach a client (defence in depth).
    let Ok(values) = state.org_secret_values(&job.out.org) else {
        tracing::warn!(job = %job.out.id, "cannot read the org's secrets; its logs are not streamed");
        f.push(LogMsg::Done);
        return Next::Stop;
    };
    let mut caught_up = true;
    for (i, (s, r)) in ranges.into_iter().enumerate() {
        if !r.text.is_empty() {
            f.push(LogMsg::Chunk(LogChunkOut {
                stream: stream_name(s).into(),
                attempt: place.attempt,
                offset: r.offset,
                text: super::org_secrets::redact(r.text, &values),
            }));
        }
        caught_up &= r.size.is_none_or(|size| r.next_offset >= size);
        place.offsets[i] = r.next_offset;
    }
    match (job.status.is_terminal(), caught_up) {
        (true, true) => {
            f.push(LogMsg::Done);
            Next::Stop
        }
        (_, false) => Next::Now,
        (false, true) => Next::Pause,
    }
}

/// Counts an open stream (for the service and for its org) while it lives.
struct StreamGuard(AppStateRef, String);

impl StreamGuard {
    fn new(state: &AppStateRef, org: &str) -> StreamGuard {
        state.open_streams.fetch_add(1, Ordering::Relaxed);
        state.count_for(org, |c| c.open_streams += 1);
        StreamGuard(state.clone(), org.to_string())
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.open_streams.fetch_sub(1, Ordering::Relaxed);
        self.0.count_for(&self.1, |c| c.open_streams -= 1);
    }
}

fn event(name: &str, data: String) -> Event {
    Event::default().event(name).data(data)
}

fn log_event(msg: &LogMsg) -> Event {
    match msg {
        LogMsg::Chunk(c) => event("log", serde_json::to_string(c).expect("serialises")),
        LogMsg::Attempt(a) => event("attempt", format!("{{\"attempt\":{a}}}")),
        LogMsg::Done => event("logs_done", "{}".into()),
    }
}

struct JobStream {
    state: AppStateRef,
    org: String,
    id: String,
    versions: tokio::sync::watch::Receiver<u64>,
    rev: u64,
    logs: Option<(Arc<Follower>, tokio::sync::broadcast::Receiver<LogMsg>)>,
    logs_done: bool,
    pending: VecDeque<Event>,
    ended: bool,
    _guard: StreamGuard,
}

async fn next_log(logs: &mut Option<(Arc<Follower>, tokio::sync::broadcast::Receiver<LogMsg>)>) -> Option<LogMsg> {
    use tokio::sync::broadcast::error::RecvError;
    let Some((_, rx)) = logs.as_mut() else { return std::future::pending().await };
    loop {
        match rx.recv().await {
            Ok(m) => return Some(m),
            // A slow client skipped some pieces: it can read them with :logs?offset=.
            Err(RecvError::Lagged(_)) => continue,
            Err(RecvError::Closed) => return None,
        }
    }
}

impl JobStream {
    /// Queue a status event if the job changed; end when it is terminal and its logs are all sent.
    fn check_job(&mut self) {
        match org_job(&self.state, &self.org, &self.id) {
            Ok(job) => {
                if job.rev > self.rev {
                    self.rev = job.rev;
                    self.pending.push_back(event("status", job.json.to_string()));
                }
                if job.status.is_terminal() && (self.logs.is_none() || self.logs_done) && !self.ended {
                    self.pending.push_back(event("end", format!("{{\"status\":\"{}\"}}", job.out.platform_status)));
                    self.ended = true;
                }
            }
            Err(_) => {
                if !self.ended {
                    self.pending.push_back(event("end", "{\"deleted\":true}".into()));
                    self.ended = true;
                }
            }
        }
    }
}

#[utoipa::path(get, path = "/api/v2/orgs/{org}/jobs/{job_id}:stream", tag = "jobs", security(("bearer" = [])),
    params(("org" = String, Path), ("job_id" = String, Path), JobStreamQuery),
    responses((status = 200, description = "Server-sent events: `status` (a JobOut, at once and on each change), `log` (a LogChunkOut), `attempt` (a retry began), `logs_done`, and `end` when the job is terminal and every log byte was sent", content_type = "text/event-stream", body = LogChunkOut),
        (status = 404, body = super::error::ErrorBody), (status = 401, body = super::error::ErrorBody)))]
pub async fn job_stream(
    state: AppStateRef,
    token: &super::token_info::TokenInfo,
    org: String,
    id: String,
    q: JobStreamQuery,
) -> ApiResult<Response> {
    let job = org_job(&state, &org, &id)?;
    let mut pending = VecDeque::new();
    pending.push_back(event("status", job.json.to_string()));
    let mut logs_done = false;
    let logs = if q.logs.unwrap_or(true) {
        // Its logs are read as the job's identity: a person's, for that person only.
        super::identity::may_reach(token, &job)?;
        let st = state.clone();
        let f = state.followers.get_or_start(&job.out, |f| {
            tokio::spawn(follow(st, job.out.id.clone(), f));
        })?;
        let (backlog, rx) = f.subscribe();
        for m in &backlog {
            logs_done |= matches!(m, LogMsg::Done);
            pending.push_back(log_event(m));
        }
        Some((f, rx))
    } else {
        None
    };
    // Every stream ends when the service stops (a graceful shutdown waits for open connections).
    let state_shutdown = state.shutdown.clone().cancelled_owned();
    let st = JobStream {
        versions: state.version_tx.subscribe(),
        _guard: StreamGuard::new(&state, &org),
        state,
        org,
        id,
        rev: job.rev,
        logs,
        logs_done,
        pending,
        ended: false,
    };
    let stream = futures_util::stream::unfold(st, |mut st| async move {
        loop {
            if let Some(ev) = st.pending.pop_front() {
                return Some((Ok::<Event, Infallible>(ev), st));
            }
            if st.ended {
                return None;
            }
            st.check_job();
            if !st.pending.is_empty() {
                continue;
            }
            tokio::select! {
                changed = st.versions.changed() => {
                    if changed.is_err() { return None; }
                }
                msg = next_log(&mut st.logs) => match msg {
                    Some(m) => {
                        st.logs_done |= matches!(m, LogMsg::Done);
                        st.pending.push_back(log_event(&m));
                    }
                    None => { st.logs = None; }
                },
            }
        }
    });
    let stream = futures_util::StreamExt::take_until(stream, state_shutdown);
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))).into_response())
}

struct ListStream {
    state: AppStateRef,
    org: String,
    versions: tokio::sync::watch::Receiver<u64>,
    seen: u64,
    first: bool,
    _guard: StreamGuard,
}

#[utoipa::path(get, path = "/api/v2/orgs/{org}/jobs:stream", tag = "jobs", security(("bearer" = [])),
    params(("org" = String, Path)),
    responses((status = 200, description = "Server-sent events: `snapshot` (every job of the org) at once, then `jobs` with the jobs that changed and the ids removed, as the cache changes", content_type = "text/event-stream", body = JobListChange),
        (status = 401, body = super::error::ErrorBody), (status = 403, body = super::error::ErrorBody)))]
pub async fn jobs_stream(
    axum::extract::State(state): axum::extract::State<AppStateRef>,
    axum::extract::Path(org): axum::extract::Path<String>,
) -> Response {
    let state_shutdown = state.shutdown.clone().cancelled_owned();
    let st = ListStream {
        versions: state.version_tx.subscribe(),
        _guard: StreamGuard::new(&state, &org),
        state,
        org,
        seen: 0,
        first: true,
    };
    let stream = futures_util::stream::unfold(st, |mut st| async move {
        loop {
            let snapshot = st.state.snapshot();
            if st.first || snapshot.version > st.seen {
                let jobs: Vec<&str> = snapshot
                    .order
                    .iter()
                    .filter(|j| j.out.org == st.org && (st.first || j.rev > st.seen))
                    .map(|j| &*j.json)
                    .collect();
                let removed: Vec<&String> = snapshot
                    .removed
                    .iter()
                    .filter(|(v, _, org)| !st.first && *v > st.seen && *org == st.org)
                    .map(|(_, id, _)| id)
                    .collect();
                let name = if st.first { "snapshot" } else { "jobs" };
                let first = st.first;
                st.first = false;
                st.seen = snapshot.version;
                if first || !jobs.is_empty() || !removed.is_empty() {
                    let data = format!(
                        "{{\"version\":{},\"jobs\":[{}],\"removed\":{}}}",
                        snapshot.version,
                        jobs.join(","),
                        serde_json::to_string(&removed).expect("serialises")
                    );
                    return Some((Ok::<Event, Infallible>(event(name, data)), st));
                }
            }
            if st.versions.changed().await.is_err() {
                return None;
            }
        }
    });
    let stream = futures_util::StreamExt::take_until(stream, state_shutdown);
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))).into_response()
}
