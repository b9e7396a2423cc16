//! A running job's TensorBoard through the service (issue 26). `POST jobs/{id}:tensorboard` starts it
//! in the job's container, served under `/tensorboard/<job id>`, forwards it to a port of the
//! service's host through the workspace's SSH master, and answers a link with a one-time ticket. A
//! link cannot carry a bearer token, so the browser trades the ticket for a cookie scoped to that
//! path; every request under the path is proxied to the forward only with that cookie, for the
//! job's org, while the job runs.

use super::api::{blocking, org_job, workspace_of, AppStateRef};
use super::error::{ApiError, ApiResult};
use super::workspace::Workspace;
use crate::client::Forward;
use crate::status::PlatformStatus;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A ticket is good once, for this long after the link was made.
const TICKET_SECS: i64 = 120;
/// The cookie a ticket becomes lasts this long (and never beyond the job's run).
const COOKIE_SECS: i64 = 8 * 3600;
const COOKIE: &str = "tao_slurm_tb";
/// The largest request body proxied to TensorBoard (its own requests are small forms).
const MAX_BODY: usize = 1 << 20;

/// Where the service serves a job's TensorBoard (also its `--path_prefix`).
pub fn prefix(job_id: &str) -> String {
    format!("/tensorboard/{job_id}")
}

#[derive(Debug, Clone)]
struct Grant {
    org: String,
    job_id: String,
    expires_at: i64,
}

struct Open {
    workspace: Arc<Workspace>,
    attempt: u32,
    forward: Forward,
}

/// The forwards the service holds and the tickets and cookies that reach them, by the SHA-256 of
/// their secret (a memory dump shows no usable one).
#[derive(Default)]
pub struct Sessions {
    forwards: Mutex<HashMap<String, Open>>,
    tickets: Mutex<HashMap<String, Grant>>,
    cookies: Mutex<HashMap<String, Grant>>,
}

fn digest(secret: &str) -> String {
    format!("{:x}", Sha256::digest(secret.as_bytes()))
}

fn mint() -> ApiResult<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| ApiError::internal(format!("the system's random generator failed: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

impl Sessions {
    fn grant(map: &Mutex<HashMap<String, Grant>>, grant: Grant, now: i64) -> ApiResult<String> {
        let secret = mint()?;
        let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, g| g.expires_at > now);
        map.insert(digest(&secret), grant);
        Ok(secret)
    }

    /// The grant of an unexpired `secret` for `job_id`; a ticket is removed as it is used.
    fn check(map: &Mutex<HashMap<String, Grant>>, secret: &str, job_id: &str, now: i64, once: bool) -> Option<Grant> {
        let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
        let key = digest(secret);
        let grant = map.get(&key).filter(|g| g.job_id == job_id && g.expires_at > now).cloned()?;
        if once {
            map.remove(&key);
        }
        Some(grant)
    }

    /// The local port and node of the job's forward, if it is for this attempt.
    fn forwarded(&self, job_id: &str, attempt: u32) -> Option<(u16, String)> {
        let forwards = self.forwards.lock().unwrap_or_else(|e| e.into_inner());
        forwards.get(job_id).filter(|o| o.attempt == attempt).map(|o| (o.forward.local_port, o.forward.node.clone()))
    }

    /// Stop the job's forward (its job ended or moved): its cookies stop working with it.
    fn close(&self, job_id: &str) {
        let open = self.forwards.lock().unwrap_or_else(|e| e.into_inner()).remove(job_id);
        self.cookies.lock().unwrap_or_else(|e| e.into_inner()).retain(|_, g| g.job_id != job_id);
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

#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct TensorBoardLink {
    /// Open it in a browser (relative to the service): good once, within `expires_at`.
    pub url: String,
    pub expires_at: String,
    /// The node TensorBoard runs on.
    pub node: String,
}

/// `POST /jobs/{id}:tensorboard`.
#[utoipa::path(post, path = "/api/v2/orgs/{org}/jobs/{job_id}:tensorboard", tag = "jobs", security(("bearer" = [])),
    params(("org" = String, Path), ("job_id" = String, Path)),
    responses((status = 200, description = "TensorBoard runs on the job's results; open the link (one use, two minutes) to reach it through the service", body = TensorBoardLink),
        (status = 409, description = "The job is not running", body = super::error::ErrorBody),
        (status = 404, body = super::error::ErrorBody), (status = 401, body = super::error::ErrorBody), (status = 403, body = super::error::ErrorBody)))]
pub async fn open(state: AppStateRef, org: String, id: String) -> ApiResult<Response> {
    let job = org_job(&state, &org, &id)?;
    if job.status != PlatformStatus::Running {
        return Err(ApiError::conflict(format!(
            "job {id} is {}: TensorBoard runs inside a running job; open it once the job runs",
            job.status
        )));
    }
    let node = match state.tensorboards.forwarded(&id, job.attempt) {
        Some((_, node)) => node,
        None => start(&state, &job, &id).await?,
    };
    let now = crate::client::now_secs();
    let grant = Grant { org, job_id: id.clone(), expires_at: now + TICKET_SECS };
    let ticket = Sessions::grant(&state.tensorboards.tickets, grant, now)?;
    let link = TensorBoardLink {
        url: format!("{}/?ticket={ticket}", prefix(&id)),
        expires_at: crate::clock::rfc3339(now + TICKET_SECS),
        node,
    };
    Ok(axum::Json(link).into_response())
}

/// Start TensorBoard for the job's current attempt and hold its forward; the node it runs on.
async fn start(state: &AppStateRef, job: &super::state::CachedJob, id: &str) -> ApiResult<String> {
    state.tensorboards.close(id);
    let ws = workspace_of(state, job)?;
    let _in_pool = ws.pool.enter(&ws.id).await?;
    let (w, jid) = (ws.clone(), id.to_string());
    let forward = blocking(move || {
        let port = crate::ops::running::service_tensorboard_port(&jid);
        w.with_client(|c| c.tensorboard(&jid, port, 0, Some(&prefix(&jid)))).map_err(ApiError::engine)
    })
    .await?;
    let node = forward.node.clone();
    tracing::info!(job = %id, node = %node, local_port = forward.local_port, "TensorBoard forwarded");
    let open = Open { workspace: ws, attempt: job.attempt, forward };
    state.tensorboards.forwards.lock().unwrap_or_else(|e| e.into_inner()).insert(id.to_string(), open);
    Ok(node)
}

/// Everything under `/tensorboard/{job_id}/`: a ticket becomes a cookie, a cookie reaches the proxy.
pub async fn proxy(
    State(state): State<AppStateRef>,
    Path(params): Path<HashMap<String, String>>,
    req: Request,
) -> Response {
    let job_id = params.get("job_id").cloned().unwrap_or_default();
    match serve(&state, &job_id, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn serve(state: &AppStateRef, job_id: &str, req: Request) -> ApiResult<Response> {
    let now = crate::client::now_secs();
    let sessions = &state.tensorboards;
    if let Some(ticket) = query_value(req.uri().query(), "ticket") {
        let grant = Sessions::check(&sessions.tickets, &ticket, job_id, now, true).ok_or_else(|| {
            ApiError::unauthorized(
                "the link is not valid (used, expired or for another job); ask for a new one (:tensorboard)",
            )
        })?;
        let secret = Sessions::grant(&sessions.cookies, Grant { expires_at: now + COOKIE_SECS, ..grant }, now)?;
        let path = format!("{}/", prefix(job_id));
        let cookie = format!("{COOKIE}={secret}; Path={path}; Max-Age={COOKIE_SECS}; HttpOnly; SameSite=Strict");
        return Ok((StatusCode::SEE_OTHER, [(header::LOCATION, path), (header::SET_COOKIE, cookie)]).into_response());
    }
    let grant = cookie_values(req.headers())
        .find_map(|c| Sessions::check(&sessions.cookies, &c, job_id, now, false))
        .ok_or_else(|| {
        ApiError::unauthorized("no valid TensorBoard session for this job; open a new link (:tensorboard)")
    })?;
    let job = org_job(state, &grant.org, job_id)?;
    let port = match sessions.forwarded(job_id, job.attempt) {
        Some((p, _)) if job.status == PlatformStatus::Running => p,
        _ => {
            sessions.close(job_id);
            return Err(ApiError::new(
                StatusCode::GONE,
                "gone",
                format!("job {job_id} is {} (attempt {}): its TensorBoard ended with its run", job.status, job.attempt),
            ));
        }
    };
    forward(port, req).await
}

/// Pass the request on to TensorBoard, without the browser's cookies or credentials.
async fn forward(port: u16, req: Request) -> ApiResult<Response> {
    let (parts, body) = req.into_parts();
    let path_and_query = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let url = format!("http://127.0.0.1:{port}{path_and_query}");
    let body = axum::body::to_bytes(body, MAX_BODY)
        .await
        .map_err(|_| ApiError::field("body", format!("a TensorBoard request body is at most {MAX_BODY} bytes")))?;
    let method = reqwest::Method::from_bytes(parts.method.as_str().as_bytes()).unwrap_or(reqwest::Method::GET);
    let mut out = client().request(method, url);
    for name in [header::ACCEPT, header::CONTENT_TYPE, header::ACCEPT_ENCODING] {
        if let Some(v) = parts.headers.get(&name) {
            out = out.header(name.as_str(), v.as_bytes());
        }
    }
    if parts.method != Method::GET && parts.method != Method::HEAD {
        out = out.body(body);
    }
    let reply = out.send().await.map_err(|e| {
        ApiError::new(StatusCode::BAD_GATEWAY, "tensorboard_unreachable", format!("TensorBoard did not answer: {e}"))
    })?;
    let status = StatusCode::from_u16(reply.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut response = Response::builder().status(status);
    for name in [header::CONTENT_TYPE, header::CONTENT_ENCODING, header::CACHE_CONTROL, header::LOCATION] {
        if let Some(v) = reply.headers().get(name.as_str()).and_then(|v| HeaderValue::from_bytes(v.as_bytes()).ok()) {
            response = response.header(name, v);
        }
    }
    let bytes: Bytes = reply.bytes().await.map_err(|e| {
        ApiError::new(StatusCode::BAD_GATEWAY, "tensorboard_unreachable", format!("TensorBoard's reply broke off: {e}"))
    })?;
    response.body(Body::from(bytes)).map_err(|e| ApiError::internal(e.to_string()))
}

/// One HTTP client for every proxied request (its connection pool), with a deadline.
fn client() -> &'static reqwest::Client {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(60))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("a plain HTTP client builds")
    })
}

fn query_value(query: Option<&str>, key: &str) -> Option<String> {
    form_urlencoded::parse(query?.as_bytes()).find(|(k, _)| k == key).map(|(_, v)| v.into_owned())
}

/// Every value of our cookie in the request (a browser may send one per matching path).
fn cookie_values(headers: &axum::http::HeaderMap) -> impl Iterator<Item = String> + '_ {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().strip_prefix(COOKIE).and_then(|rest| rest.strip_prefix('=')))
        .map(String::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(job: &str, expires_at: i64) -> Grant {
        Grant { org: "a".into(), job_id: job.into(), expires_at }
    }

    #[test]
    fn a_ticket_works_once_for_its_job_until_it_expires() {
        let s = Sessions::default();
        let t = Sessions::grant(&s.tickets, grant("j1", 200), 100).unwrap();
        assert_eq!(t.len(), 64);
        assert!(Sessions::check(&s.tickets, &t, "j2", 150, true).is_none(), "another job's ticket");
        assert!(Sessions::check(&s.tickets, &t, "j1", 200, true).is_none(), "expired");
        assert!(Sessions::check(&s.tickets, &t, "j1", 150, true).is_some());
        assert!(Sessions::check(&s.tickets, &t, "j1", 150, true).is_none(), "used");
        let c = Sessions::grant(&s.cookies, grant("j1", 900), 100).unwrap();
        assert!(Sessions::check(&s.cookies, &c, "j1", 150, false).is_some());
        assert!(Sessions::check(&s.cookies, &c, "j1", 160, false).is_some(), "a cookie is not used up");
        assert!(!s.cookies.lock().unwrap().contains_key(&c), "kept by digest, not by secret");
    }

    #[test]
    fn cookies_and_queries_are_read_exactly() {
        let mut h = axum::http::HeaderMap::new();
        h.append(header::COOKIE, HeaderValue::from_static("x=1; tao_slurm_tb=abc; tao_slurm_tbx=no"));
        h.append(header::COOKIE, HeaderValue::from_static("tao_slurm_tb=def"));
        assert_eq!(cookie_values(&h).collect::<Vec<_>>(), ["abc", "def"]);
        assert_eq!(query_value(Some("a=1&ticket=t%2B1"), "ticket").as_deref(), Some("t+1"));
        assert_eq!(query_value(Some("tickets=1"), "ticket"), None);
        assert_eq!(query_value(None, "ticket"), None);
    }
}
