//! A running job's TensorBoard through the service (issue 26; its trust, issue 35).
//! `POST jobs/{id}:tensorboard` starts it in the job's container, served under `/tensorboard/<job
//! id>`, on a Unix socket in a directory of the job user's made for that start (`Client::tensorboard`,
//! issue 50: no TCP port on the node, nothing another user reaches or plants first), listens on a
//! socket in a private directory of the service's (no local port raced for) whose each connection is
//! relayed to TensorBoard's by a step of the job on its node (`srun --overlap`, in a session of the
//! workspace's SSH master: the node need not be the login host), and answers a link with a one-time ticket. The ticket becomes a session:
//! a secret in the path, `/tensorboard/<job id>/<session>/...`, which the proxy strips before
//! TensorBoard sees the request.
//!
//! What TensorBoard serves is the job's (the job's image, the job's user, the job's files; the job
//! can replace it on its socket at any time), so every reply under `/tensorboard/` carries
//! `Content-Security-Policy: sandbox` without `allow-same-origin`: the page runs in an opaque origin
//! and can read none of the dashboard's storage (the org's token) nor call the API as the
//! dashboard. A browser sends no cookie from such a page (not even to its own path), which is why
//! the session is in the path, not a cookie; its requests come as cross-origin ones (`Origin:
//! null`), which the proxy allows (`Access-Control-Allow-Origin: *`, no credentials). TensorBoard
//! runs there with a shim put first in its page (`assets/tensorboard-shim.js`: storage in memory,
//! no cookie, charts drawn without a worker); checked with TensorBoard 2.21 in Chromium. A session
//! ends with the token that opened it (checked on every request), with the job's run, or after
//! [`SESSION_SECS`]. Replies are streamed, cut past [`MAX_REPLY`]; requests are counted against
//! the token's own TensorBoard rate limit.

use super::common::{blocking, org_job, workspace_of, AppStateRef};
use super::error::{ApiError, ApiResult};
use super::tensorboard_sessions::{is_secret, Grant, Open, Sessions};
use super::token_info::TokenInfo;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::{Stream, StreamExt};
use std::collections::HashMap;
use tao_slurm_engine::status::PlatformStatus;

/// A ticket is good once, for this long after the link was made.
const TICKET_SECS: i64 = 120;
/// The session a ticket becomes lasts this long (and never beyond the job's run or its token).
pub const SESSION_SECS: i64 = 8 * 3600;
/// The largest request body proxied to TensorBoard (its own requests are small forms).
const MAX_BODY: usize = 1 << 20;
/// The largest reply passed back from TensorBoard: one past it is cut (a larger announced length is
/// refused with a 502 before anything is sent).
pub const MAX_REPLY: u64 = 64 << 20;
/// The headers of TensorBoard's own requests, passed on (its page preflights them: see `serve`).
const TB_HEADERS: &str = "content-type, x-xsrf-protected, x-tensorboard-feature-flags";
/// Put at the start of every HTML page proxied: what TensorBoard needs to run in an opaque origin.
const SHIM: &str = concat!("<script>", include_str!("assets/tensorboard-shim.js"), "</script>");
/// How far into an HTML page its `<head>` is looked for (the shim goes right after it, else first).
const HEAD_WITHIN: usize = 64 << 10;
/// How a proxied page runs: scripts and forms, in an origin of its own (no `allow-same-origin`).
pub const SANDBOX: &str = "sandbox allow-scripts allow-forms allow-popups allow-downloads; frame-ancestors 'none'";

/// Where the service serves a job's TensorBoard (also its `--path_prefix`).
pub fn prefix(job_id: &str) -> String {
    format!("/tensorboard/{job_id}")
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
    responses((status = 200, description = "TensorBoard runs on the job's results; open the link (one use, two minutes) to reach it through the service, sandboxed in an origin of its own", body = TensorBoardLink),
        (status = 409, description = "The job is not running", body = super::error::ErrorBody),
        (status = 404, body = super::error::ErrorBody), (status = 401, body = super::error::ErrorBody), (status = 403, body = super::error::ErrorBody)))]
pub async fn open(
    state: AppStateRef,
    token: &TokenInfo,
    org: String,
    id: String,
    headers: &HeaderMap,
) -> ApiResult<Response> {
    let job = org_job(&state, &org, &id)?;
    super::identity::may_reach(token, &job)?;
    if job.status != PlatformStatus::Running {
        return Err(ApiError::conflict(format!(
            "job {id} is {}: TensorBoard runs inside a running job; open it once the job runs",
            job.status
        )));
    }
    let node = match state.tensorboards.forwarded(&id, job.attempt) {
        Some((_, node)) => node,
        None => start(&state, token, &job, &id).await?,
    };
    let now = tao_slurm_engine::client::now_secs();
    let grant = Grant { org, job_id: id.clone(), token_id: token.id.clone(), expires_at: now + TICKET_SECS };
    let ticket = Sessions::grant(&state.tensorboards.tickets, grant, now)?;
    let link = TensorBoardLink {
        url: format!("{}{}/?ticket={ticket}", own_origin(state.tensorboard_host.as_deref(), headers), prefix(&id)),
        expires_at: tao_slurm_engine::clock::rfc3339(now + TICKET_SECS),
        node,
    };
    Ok(axum::Json(link).into_response())
}

/// Start TensorBoard for the job's current attempt and hold its forward; the node it runs on.
async fn start(state: &AppStateRef, token: &TokenInfo, job: &super::state::CachedJob, id: &str) -> ApiResult<String> {
    state.tensorboards.close(id);
    let ws = workspace_of(state, token, job)?;
    let _in_pool = ws.pool.enter(&ws.id).await?;
    let (w, jid) = (ws.clone(), id.to_string());
    let forward =
        blocking(move || w.with_client(|c| c.tensorboard(&jid, Some(&prefix(&jid)))).map_err(ApiError::engine)).await?;
    let node = forward.node.clone();
    let socket = forward.local_socket.clone().unwrap_or_default();
    tracing::info!(job = %id, node = %node, socket = %socket, "TensorBoard forwarded");
    let client = match client(&socket) {
        Ok(c) => c,
        Err(e) => {
            let ws = ws.clone();
            std::thread::spawn(move || ws.with_client(|c| c.stop_forward(&forward)));
            return Err(e);
        }
    };
    let open = Open { workspace: ws, attempt: job.attempt, forward, client };
    state.tensorboards.forwards.lock().unwrap_or_else(|e| e.into_inner()).insert(id.to_string(), open);
    Ok(node)
}

/// Where a link points: `//<TensorBoard's host>[:<the port this request came to>]` when the operator
/// gave TensorBoard a host name of its own (the scheme the browser used), else nothing: this host.
fn own_origin(tensorboard_host: Option<&str>, headers: &HeaderMap) -> String {
    let Some(name) = tensorboard_host else { return String::new() };
    let port = request_host(headers).and_then(|h| h.rsplit_once(':').map(|(_, p)| p.to_string()));
    match port.filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())) {
        Some(port) => format!("//{name}:{port}"),
        None => format!("//{name}"),
    }
}

fn request_host(headers: &HeaderMap) -> Option<&str> {
    headers.get(header::HOST).and_then(|h| h.to_str().ok())
}

/// The host name a request came to (`Host`, without its port), lowercase.
fn host_name(headers: &HeaderMap) -> String {
    let host = request_host(headers).unwrap_or("");
    let name = if host.starts_with('[') {
        host.split_once(']').map_or(host, |(n, _)| n).trim_start_matches('[')
    } else {
        host.rsplit_once(':').map_or(host, |(n, _)| n)
    };
    name.to_ascii_lowercase()
}

/// With a host name of TensorBoard's own, its pages are served only on it and it serves nothing
/// else: a page the job serves there is in an origin apart from the dashboard's (another host name:
/// no storage, no cookie, no same-origin request in common).
pub async fn own_host(State(state): State<AppStateRef>, req: Request, next: axum::middleware::Next) -> Response {
    let Some(tb_host) = state.tensorboard_host.as_deref() else { return next.run(req).await };
    let on_tb_host = host_name(req.headers()) == tb_host;
    let tb_path = req.uri().path().starts_with("/tensorboard/");
    match (on_tb_host, tb_path) {
        (true, true) | (false, false) => next.run(req).await,
        (true, false) => {
            let mut r = ApiError::not_found(format!("{tb_host} serves only jobs' TensorBoard pages")).into_response();
            sandbox(r.headers_mut());
            r
        }
        (false, true) => {
            let mut r =
                ApiError::not_found(format!("jobs' TensorBoard pages are served on {tb_host} only")).into_response();
            sandbox(r.headers_mut());
            r
        }
    }
}

/// Everything under `/tensorboard/{job_id}/`: a ticket becomes a session, a session reaches the
/// proxy. Every reply, an error's too, is sandboxed.
pub async fn proxy(
    State(state): State<AppStateRef>,
    Path(params): Path<HashMap<String, String>>,
    req: Request,
) -> Response {
    let job_id = params.get("job_id").cloned().unwrap_or_default();
    let rest = params.get("rest").cloned().unwrap_or_default();
    let mut response = match serve(&state, &job_id, &rest, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    };
    sandbox(response.headers_mut());
    response
}

/// The headers that keep a proxied page out of the service's origin and its credentials.
fn sandbox(headers: &mut HeaderMap) {
    headers.remove(header::SET_COOKIE);
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, SANDBOX),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
}

async fn serve(state: &AppStateRef, job_id: &str, rest: &str, req: Request) -> ApiResult<Response> {
    let now = tao_slurm_engine::client::now_secs();
    let sessions = &state.tensorboards;
    let valid = |token_id: &str| state.token_valid(token_id);
    let (session, tb_rest) = rest.split_once('/').unwrap_or((rest, ""));
    if !is_secret(session) {
        let Some(ticket) = query_value(req.uri().query(), "ticket") else {
            return Err(ApiError::unauthorized("no TensorBoard session in the path; open a new link (:tensorboard)"));
        };
        let grant = Sessions::check(&sessions.tickets, &ticket, job_id, now, true, valid).ok_or_else(|| {
            ApiError::unauthorized(
                "the link is not valid (used, expired, for another job, or its token was revoked); ask for a new one (:tensorboard)",
            )
        })?;
        let secret = Sessions::grant(&sessions.sessions, Grant { expires_at: now + SESSION_SECS, ..grant }, now)?;
        return Ok(
            (StatusCode::SEE_OTHER, [(header::LOCATION, format!("{}/{secret}/", prefix(job_id)))]).into_response()
        );
    }
    let grant = Sessions::check(&sessions.sessions, session, job_id, now, false, valid).ok_or_else(|| {
        ApiError::unauthorized(
            "no valid TensorBoard session for this job (ended, expired, or its token was revoked); open a new link (:tensorboard)",
        )
    })?;
    sessions.limits.check(&grant.token_id)?;
    if !rest.contains('/') {
        // The page's own relative links need the trailing slash.
        return Ok(
            (StatusCode::SEE_OTHER, [(header::LOCATION, format!("{}/{session}/", prefix(job_id)))]).into_response()
        );
    }
    let job = org_job(state, &grant.org, job_id)?;
    let client = match sessions.forwarded(job_id, job.attempt) {
        Some((c, _)) if job.status == PlatformStatus::Running => c,
        _ => {
            sessions.close(job_id);
            return Err(ApiError::new(
                StatusCode::GONE,
                "gone",
                format!("job {job_id} is {} (attempt {}): its TensorBoard ended with its run", job.status, job.attempt),
            ));
        }
    };
    if req.method() == Method::OPTIONS {
        // The page's origin is opaque: its requests with TensorBoard's own headers are preflighted.
        return Ok((
            StatusCode::NO_CONTENT,
            [
                (header::ACCESS_CONTROL_ALLOW_METHODS, "GET, HEAD, POST"),
                (header::ACCESS_CONTROL_ALLOW_HEADERS, TB_HEADERS),
                (header::ACCESS_CONTROL_MAX_AGE, "600"),
            ],
        )
            .into_response());
    }
    let upstream = format!("{}/{tb_rest}", prefix(job_id));
    forward(&client, &upstream, &format!("{}/{session}/", prefix(job_id)), req).await
}

/// Pass the request on to TensorBoard at `upstream` (its path, under its prefix), without the
/// browser's cookies or credentials; its reply streamed back, capped, its redirects within the
/// session (`public`: the session's own path), an HTML page with the shim. It is asked for no
/// compression (the shim goes into the page as it is).
async fn forward(client: &reqwest::Client, upstream: &str, public: &str, req: Request) -> ApiResult<Response> {
    let (parts, body) = req.into_parts();
    let query = parts.uri.query().map(|q| format!("?{q}")).unwrap_or_default();
    let url = format!("http://tensorboard{upstream}{query}");
    let body = axum::body::to_bytes(body, MAX_BODY)
        .await
        .map_err(|_| ApiError::field("body", format!("a TensorBoard request body is at most {MAX_BODY} bytes")))?;
    let method = reqwest::Method::from_bytes(parts.method.as_str().as_bytes()).unwrap_or(reqwest::Method::GET);
    let mut out = client.request(method, url);
    for name in TB_HEADERS.split(", ").chain(["accept"]) {
        if let Some(v) = parts.headers.get(name) {
            out = out.header(name, v.as_bytes());
        }
    }
    if parts.method != Method::GET && parts.method != Method::HEAD {
        out = out.body(body);
    }
    let reply = out.send().await.map_err(|e| {
        ApiError::new(StatusCode::BAD_GATEWAY, "tensorboard_unreachable", format!("TensorBoard did not answer: {e}"))
    })?;
    if let Some(length) = reply.content_length().filter(|n| *n > MAX_REPLY) {
        return Err(too_large(format!(
            "TensorBoard's reply is {length} bytes, more than the {MAX_REPLY} bytes the proxy passes on"
        )));
    }
    let status = StatusCode::from_u16(reply.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut response = Response::builder().status(status);
    for name in [header::CONTENT_TYPE, header::CACHE_CONTROL] {
        if let Some(v) = reply.headers().get(name.as_str()).and_then(|v| HeaderValue::from_bytes(v.as_bytes()).ok()) {
            response = response.header(name, v);
        }
    }
    let location = reply.headers().get(header::LOCATION.as_str()).and_then(|v| v.to_str().ok());
    if let Some(location) = location.and_then(|l| within_session(l, upstream, public)) {
        response = response.header(header::LOCATION, location);
    }
    let chunks = futures_util::stream::unfold(reply, |mut reply| async move {
        reply.chunk().await.transpose().map(|chunk| (chunk, reply))
    });
    let body = Box::pin(capped(chunks, MAX_REPLY));
    // A page to run, not a HEAD's or a 304's empty answer.
    let html = status == StatusCode::OK && parts.method != Method::HEAD && reply_is_html(response.headers_ref());
    let body = if html { Body::from_stream(with_shim(body)) } else { Body::from_stream(body) };
    response.body(body).map_err(|e| ApiError::internal(e.to_string()))
}

fn too_large(message: String) -> ApiError {
    ApiError::new(StatusCode::BAD_GATEWAY, "tensorboard_reply_too_large", message)
}

/// A redirect of TensorBoard's, as the browser must follow it: a relative one as it is, one to the
/// job's prefix into the session's path; any other is dropped.
fn within_session(location: &str, upstream: &str, public: &str) -> Option<String> {
    let prefix = upstream.split('/').take(3).collect::<Vec<_>>().join("/");
    if let Some(rest) = location.strip_prefix(&prefix) {
        return match rest.strip_prefix('/') {
            Some(rest) => Some(format!("{public}{rest}")),
            None if rest.is_empty() || rest.starts_with('?') => Some(format!("{public}{rest}")),
            None => None,
        };
    }
    let relative = !location.starts_with('/') && !location.starts_with('\\') && !location.contains("://");
    relative.then(|| location.to_string())
}

/// The reply's chunks as they come, until more than `cap` bytes went by: then an error that ends
/// the reply (a browser sees it cut, not complete) and says so in the service's log.
fn capped<S, E>(stream: S, cap: u64) -> impl Stream<Item = Result<Bytes, std::io::Error>>
where
    S: Stream<Item = Result<Bytes, E>>,
    E: std::fmt::Display,
{
    let mut passed = 0u64;
    let mut cut = false;
    stream.map(move |chunk| {
        if cut {
            return Err(std::io::Error::other("cut"));
        }
        let chunk = chunk.map_err(|e| std::io::Error::other(format!("TensorBoard's reply broke off: {e}")))?;
        passed += chunk.len() as u64;
        if passed > cap {
            cut = true;
            let message = format!("TensorBoard's reply passed the {cap} bytes the proxy passes on: cut there");
            tracing::warn!("{message}");
            return Err(std::io::Error::other(message));
        }
        Ok(chunk)
    })
}

fn reply_is_html(headers: Option<&HeaderMap>) -> bool {
    let kind = headers.and_then(|h| h.get(header::CONTENT_TYPE)).and_then(|v| v.to_str().ok()).unwrap_or("");
    kind.trim_start().to_ascii_lowercase().starts_with("text/html")
}

/// An HTML page's chunks with [`SHIM`] right after its `<head>` (looked for in its first
/// [`HEAD_WITHIN`] bytes; else before them): held back only until then, streamed after.
fn with_shim<S>(stream: S) -> impl Stream<Item = Result<Bytes, std::io::Error>>
where
    S: Stream<Item = Result<Bytes, std::io::Error>> + Unpin,
{
    // (the page's stream, None once it ended; what is held back, None once passed on)
    futures_util::stream::unfold((Some(stream), Some(Vec::new())), |(stream, mut held)| async move {
        let mut stream = stream?;
        let Some(buf) = held.as_mut() else {
            return stream.next().await.map(|chunk| (chunk, (Some(stream), None)));
        };
        loop {
            match stream.next().await {
                Some(Ok(chunk)) => {
                    buf.extend_from_slice(&chunk);
                    if let Some(at) = after_head(buf).or((buf.len() >= HEAD_WITHIN).then_some(0)) {
                        return Some((Ok(spliced(buf, at)), (Some(stream), None)));
                    }
                }
                Some(Err(e)) => return Some((Err(e), (Some(stream), None))),
                None => {
                    let at = after_head(buf).unwrap_or(0);
                    return Some((Ok(spliced(buf, at)), (None, None)));
                }
            }
        }
    })
}

/// Just past the page's `<head ...>` tag, if it has one.
fn after_head(page: &[u8]) -> Option<usize> {
    let lower = page.to_ascii_lowercase();
    let start =
        lower.windows(6).position(|w| w.starts_with(b"<head") && (w[5] == b'>' || w[5].is_ascii_whitespace()))?;
    lower[start..].iter().position(|b| *b == b'>').map(|end| start + end + 1)
}

fn spliced(page: &[u8], at: usize) -> Bytes {
    [&page[..at], SHIM.as_bytes(), &page[at..]].concat().into()
}

/// The HTTP client of one forward (its connection pool): every connection to its local socket, in
/// the service's private directory (no port of the service's host involved), with a deadline.
pub(super) fn client(socket: &str) -> ApiResult<reqwest::Client> {
    reqwest::Client::builder()
        .unix_socket(socket)
        .timeout(std::time::Duration::from_secs(60))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| ApiError::internal(format!("no HTTP client for TensorBoard's socket: {e}")))
}

fn query_value(query: Option<&str>, key: &str) -> Option<String> {
    form_urlencoded::parse(query?.as_bytes()).find(|(k, _)| k == key).map(|(_, v)| v.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(job: &str, token: &str, expires_at: i64) -> Grant {
        Grant { org: "a".into(), job_id: job.into(), token_id: token.into(), expires_at }
    }

    #[test]
    fn a_ticket_works_once_for_its_job_until_it_expires_and_a_session_ends_with_its_token() {
        let s = Sessions::default();
        let yes = |_: &str| true;
        let t = Sessions::grant(&s.tickets, grant("j1", "tok", 200), 100).unwrap();
        assert!(is_secret(&t));
        assert!(Sessions::check(&s.tickets, &t, "j2", 150, true, yes).is_none(), "another job's ticket");
        assert!(Sessions::check(&s.tickets, &t, "j1", 200, true, yes).is_none(), "expired");
        assert!(Sessions::check(&s.tickets, &t, "j1", 150, true, yes).is_some());
        assert!(Sessions::check(&s.tickets, &t, "j1", 150, true, yes).is_none(), "used");
        let c = Sessions::grant(&s.sessions, grant("j1", "tok", 900), 100).unwrap();
        let other = Sessions::grant(&s.sessions, grant("j2", "tok", 900), 100).unwrap();
        let kept = Sessions::grant(&s.sessions, grant("j1", "tok2", 900), 100).unwrap();
        assert!(Sessions::check(&s.sessions, &c, "j1", 150, false, yes).is_some());
        assert!(Sessions::check(&s.sessions, &c, "j1", 160, false, yes).is_some(), "a session is not used up");
        assert!(!s.sessions.lock().unwrap().contains_key(&c), "kept by digest, not by secret");
        let revoked = |t: &str| t != "tok";
        assert!(Sessions::check(&s.sessions, &c, "j1", 170, false, revoked).is_none(), "its token was revoked");
        assert!(Sessions::check(&s.sessions, &other, "j2", 170, false, yes).is_none(), "every session of it ended");
        assert!(Sessions::check(&s.sessions, &kept, "j1", 170, false, revoked).is_some(), "another token's stays");
    }

    #[test]
    fn redirects_stay_in_the_session_and_queries_are_read_exactly() {
        let (up, public) = ("/tensorboard/j1/data/x", "/tensorboard/j1/S/");
        assert_eq!(within_session("/tensorboard/j1/", up, public).as_deref(), Some("/tensorboard/j1/S/"));
        assert_eq!(within_session("/tensorboard/j1", up, public).as_deref(), Some("/tensorboard/j1/S/"));
        assert_eq!(within_session("/tensorboard/j1/a?b=1", up, public).as_deref(), Some("/tensorboard/j1/S/a?b=1"));
        assert_eq!(within_session("runs/", up, public).as_deref(), Some("runs/"));
        for elsewhere in ["/api/v2/orgs/a/jobs", "/tensorboard/j2/", "/tensorboard/j10/", "http://x/", "//x/", "\\\\x"]
        {
            assert_eq!(within_session(elsewhere, up, public), None, "{elsewhere}");
        }
        assert_eq!(query_value(Some("a=1&ticket=t%2B1"), "ticket").as_deref(), Some("t+1"));
        assert_eq!(query_value(Some("tickets=1"), "ticket"), None);
        assert_eq!(query_value(None, "ticket"), None);
    }

    #[tokio::test]
    async fn a_reply_past_the_cap_is_cut_with_the_cap_named() {
        let chunks = |n: usize| {
            futures_util::stream::iter((0..n).map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![b'x'; 100]))))
        };
        let whole: Vec<_> = capped(chunks(3), 300).collect().await;
        assert_eq!(whole.len(), 3);
        assert!(whole.iter().all(|c| c.is_ok()), "at the cap: all of it");
        let cut: Vec<_> = capped(chunks(10), 250).collect().await;
        let passed: usize = cut.iter().filter_map(|c| c.as_ref().ok()).map(|c| c.len()).sum();
        assert_eq!(passed, 200, "nothing past the cap is passed on");
        let error = cut.iter().find_map(|c| c.as_ref().err()).unwrap().to_string();
        assert!(error.contains("passed the 250 bytes"), "{error}");
    }

    #[tokio::test]
    async fn the_shim_goes_right_after_the_head_however_the_page_is_cut() {
        let page = "<!doctype html><html><HEAD lang=x><title>t</title></head><body>b</body></html>";
        let expected = page.replacen("<HEAD lang=x>", &format!("<HEAD lang=x>{SHIM}"), 1);
        for size in [1, 7, 20, page.len()] {
            let chunks: Vec<Bytes> = page.as_bytes().chunks(size).map(Bytes::copy_from_slice).collect();
            // A source that must not be polled once it ended (as the proxy's is).
            let source = Box::pin(futures_util::stream::unfold(chunks.into_iter(), |mut rest| async move {
                rest.next().map(|c| (Ok::<_, std::io::Error>(c), rest))
            }));
            let out: Vec<_> = with_shim(source).collect().await;
            let out: Vec<u8> = out.into_iter().flat_map(|c| c.unwrap().to_vec()).collect();
            assert_eq!(String::from_utf8(out).unwrap(), expected, "chunks of {size}");
        }
        assert_eq!(after_head(b"<header>x</header>"), None, "<header> is not <head>");
        let once = Box::pin(futures_util::stream::unfold(Some(Bytes::from_static(b"<p>x</p>")), |c| async move {
            c.map(|c| (Ok::<_, std::io::Error>(c), None))
        }));
        let headless: Vec<_> = with_shim(once).collect().await;
        let first = headless[0].as_ref().unwrap();
        assert!(first.starts_with(SHIM.as_bytes()) && first.ends_with(b"<p>x</p>"), "no <head>: first");
        assert_eq!(headless.len(), 1, "and the ended source is not polled again");
        assert!(SHIM.contains("localStorage") && SHIM.starts_with("<script>"), "{SHIM}");
    }

    #[test]
    fn a_link_points_at_tensorboards_own_host_on_the_port_the_request_came_to() {
        let mut h = HeaderMap::new();
        assert_eq!(own_origin(None, &h), "");
        assert_eq!(own_origin(Some("tb.example.com"), &h), "//tb.example.com");
        h.insert(header::HOST, HeaderValue::from_static("dash.example.com:8570"));
        assert_eq!(own_origin(Some("tb.example.com"), &h), "//tb.example.com:8570");
        assert_eq!(host_name(&h), "dash.example.com");
        h.insert(header::HOST, HeaderValue::from_static("[::1]:80"));
        assert_eq!(host_name(&h), "::1");
        h.insert(header::HOST, HeaderValue::from_static("LocalHost"));
        assert_eq!(host_name(&h), "localhost");
        assert_eq!(own_origin(Some("tb"), &h), "//tb");
    }

    #[test]
    fn every_reply_is_sandboxed_without_same_origin() {
        let mut h = HeaderMap::new();
        h.insert(header::SET_COOKIE, HeaderValue::from_static("x=1"));
        h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static("default-src *"));
        sandbox(&mut h);
        let csp = h[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
        assert!(csp.starts_with("sandbox ") && csp.contains("allow-scripts"), "{csp}");
        assert!(!csp.contains("allow-same-origin") && !csp.contains("allow-top-navigation"), "{csp}");
        assert!(!csp.contains("allow-popups-to-escape-sandbox"), "{csp}");
        assert!(h.get(header::SET_COOKIE).is_none(), "a page the job serves sets no cookie on the service");
        assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
    }
}
