//! The TensorBoard forwards the service holds and the one-time tickets and sessions that reach
//! them (each kept by the SHA-256 of its secret), with each token's TensorBoard rate limit. The
//! routes that open and proxy them are `tensorboard.rs`.

use super::error::{ApiError, ApiResult};
use super::workspace::Workspace;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tao_slurm_engine::client::Forward;

#[derive(Debug, Clone)]
pub(super) struct Grant {
    pub(super) org: String,
    pub(super) job_id: String,
    /// The token that asked for the link: the session ends with it.
    pub(super) token_id: String,
    pub(super) expires_at: i64,
}

pub(super) struct Open {
    pub(super) workspace: Arc<Workspace>,
    pub(super) attempt: u32,
    pub(super) forward: Forward,
    /// The HTTP client that reaches the forward's local socket.
    pub(super) client: reqwest::Client,
}

/// The forwards the service holds and the tickets and sessions that reach them, by the SHA-256 of
/// their secret (a memory dump shows no usable one), and the TensorBoard rate limit of each token.
pub struct Sessions {
    pub(super) forwards: Mutex<HashMap<String, Open>>,
    pub(super) tickets: Mutex<HashMap<String, Grant>>,
    pub(super) sessions: Mutex<HashMap<String, Grant>>,
    pub(super) limits: super::limits::RateLimits,
}

impl Default for Sessions {
    fn default() -> Sessions {
        Sessions {
            forwards: Default::default(),
            tickets: Default::default(),
            sessions: Default::default(),
            limits: super::limits::RateLimits::counting(
                "TensorBoard requests",
                super::limits::TENSORBOARD_REQUESTS_PER_SEC,
                super::limits::TENSORBOARD_REQUEST_BURST,
            ),
        }
    }
}

pub(super) fn digest(secret: &str) -> String {
    format!("{:x}", Sha256::digest(secret.as_bytes()))
}

pub(super) fn mint() -> ApiResult<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| ApiError::internal(format!("the system's random generator failed: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A secret as [`mint`] makes them (64 lowercase hex digits).
pub(super) fn is_secret(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl Sessions {
    pub(super) fn grant(map: &Mutex<HashMap<String, Grant>>, grant: Grant, now: i64) -> ApiResult<String> {
        let secret = mint()?;
        let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, g| g.expires_at > now);
        map.insert(digest(&secret), grant);
        Ok(secret)
    }

    /// The grant of an unexpired `secret` for `job_id` whose token is still valid (`token_valid`);
    /// a ticket is removed as it is used, and every grant of a token found invalid goes with it.
    pub(super) fn check(
        map: &Mutex<HashMap<String, Grant>>,
        secret: &str,
        job_id: &str,
        now: i64,
        once: bool,
        token_valid: impl Fn(&str) -> bool,
    ) -> Option<Grant> {
        let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
        let key = digest(secret);
        let grant = map.get(&key).filter(|g| g.job_id == job_id && g.expires_at > now).cloned()?;
        if !token_valid(&grant.token_id) {
            map.retain(|_, g| g.token_id != grant.token_id);
            return None;
        }
        if once {
            map.remove(&key);
        }
        Some(grant)
    }

    /// The HTTP client (to its local socket) and node of the job's forward, if it is for this attempt.
    pub(super) fn forwarded(&self, job_id: &str, attempt: u32) -> Option<(reqwest::Client, String)> {
        let forwards = self.forwards.lock().unwrap_or_else(|e| e.into_inner());
        forwards.get(job_id).filter(|o| o.attempt == attempt).map(|o| (o.client.clone(), o.forward.node.clone()))
    }

    /// Stop the job's forward (its job ended or moved): its sessions end with it.
    pub(super) fn close(&self, job_id: &str) {
        let open = self.forwards.lock().unwrap_or_else(|e| e.into_inner()).remove(job_id);
        self.sessions.lock().unwrap_or_else(|e| e.into_inner()).retain(|_, g| g.job_id != job_id);
        if let Some(o) = open {
            std::thread::spawn(move || {
                if let Err(e) = o.workspace.with_client(|c| c.stop_forward(&o.forward)) {
                    tracing::warn!(job = %o.forward.job_id, error = %e, "could not stop a TensorBoard forward");
                }
            });
        }
    }

    /// Stop every forward (the service stops).
    pub fn close_all(&self) {
        let jobs: Vec<String> = self.forwards.lock().unwrap_or_else(|e| e.into_inner()).keys().cloned().collect();
        for job in jobs {
            self.close(&job);
        }
    }
}
