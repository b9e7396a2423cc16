//! What bounds the cluster work clients can cause: a per-token rate limit on requests (429), a bounded
//! pool of remote work per workspace (503 when it stays full), the pace of `:cluster?refresh=true`,
//! and the number of log followers per org. Every refusal says when to come back (`Retry-After`).

use super::error::ApiError;
use axum::http::StatusCode;
use governor::clock::{Clock, DefaultClock};
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

/// Requests per second a token may make, sustained.
pub const REQUESTS_PER_SEC: u32 = 10;
/// Requests a token may make at once after a quiet spell.
pub const REQUEST_BURST: u32 = 20;
/// Remote operations (logs, submit, cancel, the cluster view, followers' reads) one workspace runs at
/// once; the monitor's refresh has its own client and never waits for them.
pub const REMOTE_POOL_SIZE: usize = 4;
/// Job creates one workspace takes at once: they wait for each other's round trips and go to the
/// cluster together (the engine's group commit, up to `TAO_SLURM_SUBMIT_BATCH` a round trip), so they
/// are not held to [`REMOTE_POOL_SIZE`]. Each holds a client until it is submitted (a create answered
/// early too), but a client holds a database connection only while it reads or writes: on
/// PostgreSQL the process's stores share a few (`store::pg_links`), on SQLite it is a file handle.
pub const CREATES_AT_ONCE: usize = 256;
/// How long a request waits for a place in the pool before it is told to come back.
pub const REMOTE_POOL_WAIT: Duration = Duration::from_secs(3);
/// `Retry-After` of a request turned away by a full pool.
pub const REMOTE_POOL_RETRY_SECS: u64 = 2;
/// Log followers (one per followed job, shared by its watchers) an org may have at once.
pub const FOLLOWERS_PER_ORG: usize = 8;
/// `:cluster?refresh=true` runs the checks again at most this often per workspace.
pub const CLUSTER_REFRESH_SECS: u64 = 30;

/// Requests a second one token may make of the TensorBoards it opened (its own allowance, apart from
/// the API's: a TensorBoard page asks for many small things at once, then polls).
pub const TENSORBOARD_REQUESTS_PER_SEC: u32 = 20;
/// TensorBoard requests one token may make at once after a quiet spell (a page's first load).
pub const TENSORBOARD_REQUEST_BURST: u32 = 200;

/// A per-token request limit (GCRA, by token id).
pub struct RateLimits {
    limiter: RateLimiter<String, DefaultKeyedStateStore<String>, DefaultClock>,
    per_sec: u32,
    burst: u32,
    /// What is counted, as the refusal names it.
    what: &'static str,
    /// Who is counted ("this token", "this address"), as the refusal names it.
    who: &'static str,
}

impl Default for RateLimits {
    fn default() -> RateLimits {
        RateLimits::new(REQUESTS_PER_SEC, REQUEST_BURST)
    }
}

impl RateLimits {
    pub fn new(per_sec: u32, burst: u32) -> RateLimits {
        RateLimits::counting("requests", per_sec, burst)
    }

    /// A limit on `what` (e.g. "TensorBoard requests").
    pub fn counting(what: &'static str, per_sec: u32, burst: u32) -> RateLimits {
        let quota = Quota::per_second(NonZeroU32::new(per_sec.max(1)).expect("at least 1"))
            .allow_burst(NonZeroU32::new(burst.max(1)).expect("at least 1"));
        RateLimits {
            limiter: RateLimiter::keyed(quota),
            per_sec: per_sec.max(1),
            burst: burst.max(1),
            what,
            who: "this token",
        }
    }

    /// A limit on `what` per client address (the public sign-in routes, which have no token).
    pub fn per_address(what: &'static str, per_sec: u32, burst: u32) -> RateLimits {
        RateLimits { who: "this address", ..RateLimits::counting(what, per_sec, burst) }
    }

    /// Count one request of `token_id`; a 429 with the seconds to wait when over the limit.
    pub fn check(&self, token_id: &str) -> Result<(), ApiError> {
        self.limiter.check_key(&token_id.to_string()).map_err(|not_until| {
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                format!(
                    "{} made more than {} {} a second (bursts of {}); retry after {secs} s",
                    self.who, self.per_sec, self.what, self.burst
                ),
            )
            .retry_after(secs.max(1))
        })
    }
}

/// The bounded pool of remote work of one workspace.
pub struct RemotePool {
    slots: Arc<tokio::sync::Semaphore>,
    size: usize,
    /// What the pool runs, as a refusal names it.
    what: &'static str,
}

impl Default for RemotePool {
    fn default() -> RemotePool {
        RemotePool::new(REMOTE_POOL_SIZE, "cluster operations")
    }
}

impl RemotePool {
    pub fn new(size: usize, what: &'static str) -> RemotePool {
        RemotePool { slots: Arc::new(tokio::sync::Semaphore::new(size)), size, what }
    }

    /// The pool of job creates: [`CREATES_AT_ONCE`] when they go in batches, else (a batch of one,
    /// `TAO_SLURM_SUBMIT_BATCH=1`) each is a cluster operation of its own, as many as
    /// [`REMOTE_POOL_SIZE`].
    pub fn creates(settings: &tao_slurm_engine::config::Settings) -> RemotePool {
        if settings.submit_batch <= 1 {
            RemotePool::new(REMOTE_POOL_SIZE, "cluster operations")
        } else {
            RemotePool::new(CREATES_AT_ONCE, "job creates")
        }
    }

    /// A place in the pool, waited for up to [`REMOTE_POOL_WAIT`]; a 503 with `Retry-After` when the
    /// pool stayed full (the work was not started).
    pub async fn enter(&self, workspace: &str) -> Result<tokio::sync::OwnedSemaphorePermit, ApiError> {
        match tokio::time::timeout(REMOTE_POOL_WAIT, self.slots.clone().acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "busy",
                format!(
                    "workspace {workspace} is running {} {} already; retry after {REMOTE_POOL_RETRY_SECS} s",
                    self.size, self.what
                ),
            )
            .retry_after(REMOTE_POOL_RETRY_SECS)),
        }
    }

    /// Places in use now.
    pub fn in_use(&self) -> usize {
        self.size - self.slots.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_over_its_burst_is_told_when_to_come_back() {
        let limits = RateLimits::new(1, 3);
        for _ in 0..3 {
            assert!(limits.check("a").is_ok());
        }
        let refused = limits.check("a").unwrap_err();
        assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(refused.retry_after, Some(1));
        assert!(limits.check("b").is_ok(), "each token has its own allowance");
    }

    #[tokio::test]
    async fn a_full_pool_turns_requests_away_with_retry_after() {
        let pool = RemotePool::default();
        let mut held = Vec::new();
        for _ in 0..REMOTE_POOL_SIZE {
            held.push(pool.enter("w").await.unwrap());
        }
        assert_eq!(pool.in_use(), REMOTE_POOL_SIZE);
        let refused = pool.enter("w").await.unwrap_err();
        assert_eq!(
            (refused.status, refused.retry_after),
            (StatusCode::SERVICE_UNAVAILABLE, Some(REMOTE_POOL_RETRY_SECS))
        );
        held.pop();
        assert!(pool.enter("w").await.is_ok(), "a freed place is taken");
    }
}
