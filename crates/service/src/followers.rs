//! The log followers of the service's streams: one per followed job, shared by every stream of it,
//! keeping a bounded backlog for streams that join later; an org follows at most
//! [`FOLLOWERS_PER_ORG`] jobs at once. What feeds a follower is `sse.rs`.

use super::error::ApiError;
use super::limits::FOLLOWERS_PER_ORG;
use super::types::{JobOut, LogChunkOut};
use axum::http::StatusCode;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};

/// Log bytes a follower keeps for clients that join later.
const BACKLOG_BYTES: usize = 1 << 20;

#[derive(Debug, Clone)]
pub enum LogMsg {
    Chunk(LogChunkOut),
    /// A retry started a new attempt: its logs follow.
    Attempt(u32),
    /// Every byte of the terminal job's logs was sent.
    Done,
}

#[derive(Default)]
struct Backlog {
    msgs: VecDeque<LogMsg>,
    bytes: usize,
    done: bool,
}

pub struct Follower {
    tx: tokio::sync::broadcast::Sender<LogMsg>,
    backlog: Mutex<Backlog>,
}

impl Follower {
    pub fn push(&self, msg: LogMsg) {
        let mut b = self.backlog.lock().unwrap_or_else(|e| e.into_inner());
        if let LogMsg::Chunk(c) = &msg {
            b.bytes += c.text.len();
        }
        if matches!(msg, LogMsg::Done) {
            b.done = true;
        }
        b.msgs.push_back(msg.clone());
        while b.bytes > BACKLOG_BYTES {
            match b.msgs.pop_front() {
                Some(LogMsg::Chunk(c)) => b.bytes -= c.text.len(),
                Some(_) => {}
                None => break,
            }
        }
        let _ = self.tx.send(msg);
    }

    /// What was sent so far, and a receiver of what comes next (no gap between them).
    pub fn subscribe(&self) -> (Vec<LogMsg>, tokio::sync::broadcast::Receiver<LogMsg>) {
        let b = self.backlog.lock().unwrap_or_else(|e| e.into_inner());
        (b.msgs.iter().cloned().collect(), self.tx.subscribe())
    }
}

/// A follower as the map keeps it: whose it is, and a handle that does not keep it alive.
struct FollowerEntry {
    org: String,
    workspace: String,
    follower: Weak<Follower>,
}

/// The followers, by job id.
#[derive(Default)]
pub struct Followers(Mutex<HashMap<String, FollowerEntry>>);

impl Followers {
    /// Live followers that `keep` accepts (by org and workspace).
    pub fn count(&self, keep: impl Fn(&str, &str) -> bool) -> usize {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.values().filter(|e| e.follower.strong_count() > 0 && keep(&e.org, &e.workspace)).count()
    }

    /// The job's follower, started if it has none; an org at its [`FOLLOWERS_PER_ORG`] gets a 429.
    /// `start` is given the new follower (a handle that does not keep it alive) to feed it.
    pub fn get_or_start(&self, job: &JobOut, start: impl FnOnce(Weak<Follower>)) -> Result<Arc<Follower>, ApiError> {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = map.get(&job.id).and_then(|e| e.follower.upgrade()) {
            return Ok(f);
        }
        map.retain(|_, e| e.follower.strong_count() > 0);
        let org = &job.org;
        if map.values().filter(|e| &e.org == org).count() >= FOLLOWERS_PER_ORG {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                format!(
                    "org {org} follows the logs of {FOLLOWERS_PER_ORG} jobs already; close a stream, open this one with logs=false, or retry later"
                ),
            )
            .retry_after(FOLLOWER_RETRY_SECS));
        }
        let f = Arc::new(Follower { tx: tokio::sync::broadcast::channel(1024).0, backlog: Default::default() });
        let entry = FollowerEntry { org: org.clone(), workspace: job.workspace.clone(), follower: Arc::downgrade(&f) };
        map.insert(job.id.clone(), entry);
        start(Arc::downgrade(&f));
        Ok(f)
    }

    /// Drop the job's entry when it is still `follower` (a follower that ended; a new one may have
    /// taken its place).
    pub fn forget(&self, job_id: &str, follower: &Weak<Follower>) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if map.get(job_id).is_some_and(|e| e.follower.ptr_eq(follower)) {
            map.remove(job_id);
        }
    }
}

/// `Retry-After` of a stream refused for the org's follower limit.
const FOLLOWER_RETRY_SECS: u64 = 10;
