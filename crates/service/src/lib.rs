//! `tao-slurm serve`: one process that runs the HTTP API (in the TAO service's shape), the dashboard
//! and the monitor of every workspace, over the same engine and state file as the CLI.
//!
//! ```text
//! HTTP clients ──► axum (tokio) ──► auth (bearer token, org) ──► handlers ──► cache (snapshot, read-only)
//!                                                      │                         ▲
//!                                   create/cancel/logs ▼                         │ publish
//!                                   blocking pool: Client per workspace ────────┤
//!                                   monitor thread per workspace: one refresh ──┘ per interval
//! ```
//!
//! The engine is synchronous; it runs on blocking threads (requests) and one dedicated thread per
//! workspace (its monitor), never on the async workers, so no request waits behind a cluster.

pub mod api;
pub mod audit;
pub mod certificates;
pub mod common;
mod dashboard;
pub mod error;
mod followers;
mod grants;
mod identity;
mod kpis;
pub mod lease;
pub mod limits;
pub mod metrics;
pub mod openapi;
pub mod operator;
pub mod org_secrets;
mod pause;
pub mod people;
pub mod places;
pub mod policy;
pub mod replica;
mod request_metrics;
mod results;
mod revoke;
mod secrets;
pub mod sign_in;
mod sign_in_routes;
mod sign_in_seal;
mod sse;
mod start;
pub mod state;
pub mod tao_jobs;
pub mod tao_routes;
pub mod tensorboard;
mod tensorboard_sessions;
pub mod token_info;
mod translate;
pub mod types;
pub mod workspace;
pub mod workspaces;

pub use certificates::DEFAULT_CERTIFICATE_SECS;
pub use lease::LEASE_SECS;
pub use start::{start, Action, SettingsFor, Start};

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::Router;
use error::ApiError;
use state::AppState;
use std::net::SocketAddr;
use std::sync::Arc;
use tao_slurm_engine::error::Error;
use workspace::Workspace;

pub use openapi::document_json;

/// Largest request body by default.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;
/// Requests a second one token may make by default (`serve --rate-limit`).
pub const DEFAULT_REQUESTS_PER_SEC: u32 = limits::REQUESTS_PER_SEC;

#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub bind: SocketAddr,
    pub max_body_bytes: usize,
    /// Requests a second one token may make (bursts of twice as many).
    pub requests_per_sec: u32,
    /// Where `/metrics` is served (never on the API's address: it spans every org); None: nowhere.
    pub metrics_addr: Option<SocketAddr>,
    /// How long a workspace's monitor lease lasts without renewal, in seconds (see `replica`).
    pub lease_secs: i64,
    /// The CA key that signs persons' SSH certificates (per-person workspaces need it).
    pub ssh_ca_key: Option<std::path::PathBuf>,
    /// How long each certificate is valid, in seconds.
    pub ssh_cert_secs: u64,
    /// TensorBoard's own host name (`serve --tensorboard-host`): its pages only there, nothing else.
    pub tensorboard_host: Option<String>,
}

/// Every request under `/api/` but health and login needs a valid token; under `/api/v2/orgs/{org}/` its org.
async fn authenticate(State(state): State<Arc<AppState>>, mut req: Request, next: Next) -> Response {
    state.http_requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = req.uri().path();
    if !path.starts_with("/api/")
        || path == "/api/v2/login"
        || path == "/api/v2/health"
        || path.starts_with("/api/v2/health/")
    {
        return next.run(req).await;
    }
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    let Some(presented) = presented else {
        return ApiError::unauthorized(
            "a bearer token is required (Authorization: Bearer <token>); an admin makes one with `tao-slurm token create --org ORG`",
        )
        .into_response();
    };
    let hash = tao_slurm_engine::client::records::token_hash(presented);
    let token = state.tokens.read().unwrap_or_else(|e| e.into_inner()).get(&hash).cloned();
    let Some(token) = token else {
        return ApiError::unauthorized("the token is not valid (unknown or revoked)").into_response();
    };
    if token.expired(tao_slurm_engine::client::now_secs()) {
        return ApiError::unauthorized(format!(
            "token {} expired; an admin makes a new one with `tao-slurm token create --org {}`",
            token.id, token.org
        ))
        .into_response();
    }
    if let Some(rest) = path.strip_prefix("/api/v2/orgs/") {
        let org = path_org(rest);
        if org != token.org {
            return ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("this token is for org {}, not {org}", token.org),
            )
            .into_response();
        }
    }
    state.count_for(&token.org, |c| c.http_requests += 1);
    if let Err(e) = state.rate_limits.check(&token.id) {
        return e.into_response();
    }
    let token_id = token.id.clone();
    req.extensions_mut().insert(token);
    let response = next.run(req).await;
    revoke::end_with_token(state, token_id, response)
}

/// The org a path under `/api/v2/orgs/` names, exactly as the routes will read it: the whole first
/// segment of `/orgs/{org}/...`; only the org's own route (`/orgs/{org}:action`, no segment after)
/// ends it at a `:`. So `/orgs/team-a:x/jobs` names "team-a:x", never "team-a".
fn path_org(rest: &str) -> &str {
    match rest.split_once('/') {
        Some((org, _)) => org,
        None => rest.split(':').next().unwrap_or(""),
    }
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such route; the API is described at /api/v2/openapi.json")
}

/// The service's routes.
pub fn router(state: Arc<AppState>, max_body_bytes: usize) -> Router {
    let org = "/api/v2/orgs/{org}";
    Router::new()
        .route("/", get(dashboard::index))
        .route("/assets/app.js", get(dashboard::app_js))
        .route("/assets/app.css", get(dashboard::app_css))
        .route("/api/v2/health", get(openapi::health))
        .route("/api/v2/health/liveness", get(tao_routes::liveness))
        .route("/api/v2/health/readiness", get(tao_routes::readiness))
        .route("/api/v2/login", axum::routing::post(tao_routes::login))
        .route("/auth/login", get(sign_in_routes::login))
        .route("/auth/callback", get(sign_in_routes::callback))
        .route("/auth/device", get(sign_in_routes::device_page).post(sign_in_routes::device))
        .route("/auth/device/verify", axum::routing::post(sign_in_routes::verify))
        .route("/auth/device/token", axum::routing::post(sign_in_routes::device_token))
        .route("/auth/device/confirm", axum::routing::post(sign_in_routes::confirm))
        .route("/auth/session", axum::routing::post(sign_in_routes::session))
        .route("/api/v2/openapi.json", get(openapi::openapi_json))
        .route("/api/v2/orgs/{org_ref}", get(audit::org_ref))
        .route(&format!("{org}/stats"), get(api::stats))
        .route(&format!("{org}/workspaces"), get(workspaces::list_workspaces).post(workspaces::create_workspace))
        .route(
            &format!("{org}/workspaces/{{workspace_ref}}"),
            get(workspaces::workspace_ref).delete(workspaces::delete_workspace).put(tao_routes::workspace_update),
        )
        .route(&format!("{org}/workspaces/{{workspace_ref}}/gpu_types"), get(tao_routes::workspace_gpu_types))
        .route(&format!("{org}/workspaces:backup"), axum::routing::any(tao_routes::workspace_update))
        .route(&format!("{org}/workspaces:restore"), axum::routing::any(tao_routes::workspace_update))
        .route(&format!("{org}/datasets"), axum::routing::any(tao_routes::datasets))
        .route(&format!("{org}/datasets/{{rest}}"), axum::routing::any(tao_routes::datasets))
        .route(&format!("{org}/inference_microservices"), axum::routing::any(tao_routes::inference_microservices))
        .route(
            &format!("{org}/inference_microservices/{{rest}}"),
            axum::routing::any(tao_routes::inference_microservices),
        )
        .route(&format!("{org}/automl:get_param_details"), axum::routing::any(tao_routes::automl))
        .route(&format!("{org}/ssh-key"), get(workspaces::ssh_key))
        .route(&format!("{org}/secrets"), get(secrets::list_secrets))
        .route(&format!("{org}/secrets/{{name}}"), put(secrets::put_secret).delete(secrets::delete_secret))
        .route(&format!("{org}/jobs"), get(api::list_jobs).post(api::create_job))
        // Outside /api/: reached with the session a :tensorboard link's ticket becomes, not a token.
        .route("/tensorboard/{job_id}/", axum::routing::any(tensorboard::proxy))
        .route("/tensorboard/{job_id}/{*rest}", axum::routing::any(tensorboard::proxy))
        .route(&format!("{org}/jobs:stream"), get(sse::jobs_stream))
        .route(&format!("{org}/jobs:gpu_types"), get(tao_routes::gpu_types))
        .route(&format!("{org}/jobs:schema"), axum::routing::any(|| async { tao_routes::not_here("jobs:schema") }))
        .route(
            &format!("{org}/jobs:list_base_experiments"),
            axum::routing::any(|| async { tao_routes::not_here("jobs:list_base_experiments") }),
        )
        .route(
            &format!("{org}/jobs:load_airgapped"),
            axum::routing::any(|| async { tao_routes::not_here("jobs:load_airgapped") }),
        )
        .route(
            &format!("{org}/jobs/{{job_ref}}"),
            get(api::job_get_ref).post(api::job_post_ref).delete(api::job_delete_ref).patch(tao_routes::job_update),
        )
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(state.clone(), audit::record))
        .layer(axum::middleware::from_fn_with_state(state.clone(), authenticate))
        .layer(axum::middleware::from_fn_with_state(state.clone(), metrics::observe))
        .layer(axum::middleware::from_fn_with_state(state.clone(), tensorboard::own_host))
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(state)
}

/// What `tao-slurm serve` hands the service: the operator's workspaces (id, settings), at least one,
/// its rules, the cipher of the orgs' secrets, and how to make settings for an org's workspace.
pub struct Setup {
    pub workspaces: Vec<(String, tao_slurm_engine::config::Settings)>,
    pub operator: operator::Operator,
    pub secret_box: Option<org_secrets::SecretBox>,
    pub make_settings: state::SettingsMaker,
}

/// How long a stopping service waits for the requests in flight.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(60);

/// Ctrl-C (SIGINT) or SIGTERM (what `docker stop` and systemd send).
async fn stop_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch for SIGTERM; Ctrl-C still stops the service");
                std::future::pending::<()>().await
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

/// The service's state: the operator's workspaces, the service database, the org workspaces it
/// recorded, a monitor thread per workspace.
fn start_state(opts: &ServeOptions, setup: Setup) -> Result<Arc<AppState>, Error> {
    let Setup { workspaces, operator, secret_box, make_settings } = setup;
    let first = workspaces.first().map(|(_, s)| s.clone()).expect("at least one workspace");
    let state_path = first.state_path.clone();
    let db = tao_slurm_engine::client::ServiceRecords::open_for(&first)
        .map_err(|m| tao_slurm_engine::spec::SpecError::new("TAO_SLURM_STATE", m))?;
    let authority = match &opts.ssh_ca_key {
        Some(path) => Some(Arc::new(
            certificates::Authority::load(path)
                .map_err(|m| tao_slurm_engine::spec::SpecError::new("--ssh-ca-key", m))?,
        )),
        None => None,
    };
    let workspaces: Vec<Arc<Workspace>> = workspaces
        .into_iter()
        .map(|(id, mut settings)| {
            let rules = operator.shared(&id);
            // The operator's credentials reach a shared workspace's jobs only when it opts in.
            if !rules.forward_credentials {
                settings.forwarded_secrets.clear();
            }
            if rules.per_person {
                people::check_parent(&id, &settings).map_err(|m| tao_slurm_engine::spec::SpecError::new("clusters.toml", m))?;
                if authority.is_none() {
                    return Err(tao_slurm_engine::spec::SpecError::new(
                        "--ssh-ca-key",
                        format!("[{id}] identity = \"person\" needs the SSH certificate authority's key (serve --ssh-ca-key PATH, or TAO_SLURM_SSH_CA_KEY)"),
                    ));
                }
            }
            let mut w = Workspace::new(id, settings, workspace::Access::Shared(rules.orgs));
            w.policy = rules.policy;
            if rules.per_person {
                w.identity = workspace::Identity::PerPerson(rules.people);
                // Never a login with the operator's identity in a person's stead.
                let said = format!("workspace {} logs in as each person, never as itself", w.id);
                w.before_login = Some(Box::new(move || Err(said.clone())));
            }
            // The operator's own clusters: their preflight is the operator's to run.
            w.ready.store(true, std::sync::atomic::Ordering::Relaxed);
            Ok(Arc::new(w))
        })
        .collect::<Result<_, _>>()?;
    let mut state = AppState::new(workspaces, db, operator, secret_box, make_settings, state_path)
        .map_err(|m| tao_slurm_engine::spec::SpecError::new("TAO_SLURM_STATE", m))?;
    state.rate_limits = limits::RateLimits::new(opts.requests_per_sec, opts.requests_per_sec.saturating_mul(2));
    state.lease_secs = opts.lease_secs;
    state.authority = authority;
    state.certificate_secs = opts.ssh_cert_secs;
    state.tensorboard_host = opts.tensorboard_host.clone();
    if let Some(rules) = state.operator.sign_in.clone() {
        let secret = std::env::var(sign_in::CLIENT_SECRET_VAR).ok().filter(|s| !s.is_empty());
        let s =
            sign_in::SignIn::new(rules, secret).map_err(|m| tao_slurm_engine::spec::SpecError::new("sign_in", m))?;
        state.sign_in = Some(Arc::new(s));
    }
    let state = Arc::new(state);
    // Every client of a workspace puts the engine's automatic restarts to the service's policy.
    for w in state.workspaces() {
        let _ = w.restart_gate.set(policy::restart_gate(Arc::downgrade(&state)));
    }
    // The first snapshot before the first request; then one monitor thread per workspace.
    if let Some(w) = state.workspaces().iter().find(|w| w.before_login.is_none()) {
        let _ = w.with_client(|c| {
            state.publish(c);
            Ok(())
        });
    }
    // A per-person workspace reaches no cluster itself: its persons' workspaces have the monitors.
    for w in state.workspaces().iter().filter(|w| !matches!(w.identity, workspace::Identity::PerPerson(_))) {
        workspaces::start_monitor(&state, w)?;
    }
    workspaces::load(&state).map_err(|m| tao_slurm_engine::spec::SpecError::new("TAO_SLURM_STATE", m))?;
    people::load(&state);
    Ok(state)
}

/// Tokens created or revoked by `tao-slurm token` are seen within a second.
fn reload_tokens_every_second(state: &Arc<AppState>) {
    let st = state.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
        loop {
            tick.tick().await;
            let s = st.clone();
            if let Ok(Err(e)) = tokio::task::spawn_blocking(move || s.reload_tokens()).await {
                tracing::warn!(error = %e, "cannot read the tokens; none is accepted until they can be read");
            }
        }
    });
}

/// `/metrics` on its own address (its figures cover every org).
async fn serve_metrics(addr: std::net::SocketAddr, state: &Arc<AppState>) -> Result<(), Error> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| tao_slurm_engine::spec::SpecError::new("metrics-addr", format!("cannot listen on {addr}: {e}")))?;
    let local = listener.local_addr().map_err(|e| Error::RemoteCommand(format!("cannot start the service: {e}")))?;
    println!("metrics on http://{local}/metrics");
    let app = Router::new().route("/metrics", get(metrics::scrape)).with_state(state.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(())
}

/// The monitors finish the cycle under way (a retry being submitted is submitted), within the grace.
async fn stop_monitors(state: &Arc<AppState>) {
    let st = state.clone();
    let stopped = tokio::task::spawn_blocking(move || {
        let workspaces = st.monitored_workspaces();
        let deadline = std::time::Instant::now() + SHUTDOWN_GRACE;
        workspaces.iter().for_each(|w| w.stop_monitor());
        workspaces.iter().all(|w| w.wait_for_monitor(deadline.saturating_duration_since(std::time::Instant::now())))
    })
    .await
    .unwrap_or(false);
    if !stopped {
        eprintln!("tao-slurm serve: a monitor was still busy after {SHUTDOWN_GRACE:?}; stopping anyway");
    }
}

/// Run the service until interrupted.
pub fn serve(opts: ServeOptions, setup: Setup) -> Result<(), Error> {
    let runtime_error = |e: std::io::Error| Error::RemoteCommand(format!("cannot start the service: {e}"));
    let state = start_state(&opts, setup)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("serve")
        .enable_all()
        .build()
        .map_err(runtime_error)?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(opts.bind).await.map_err(|e| {
            tao_slurm_engine::spec::SpecError::new("bind", format!("cannot listen on {}: {e}", opts.bind))
        })?;
        let addr = listener.local_addr().map_err(runtime_error)?;
        if let Some(s) = &state.sign_in {
            s.listening_at(&format!("http://{addr}"));
        }
        if !addr.ip().is_loopback() {
            tracing::warn!(%addr, "listening beyond loopback over plain HTTP: put a TLS proxy in front, or tokens travel in clear");
        }
        let names: Vec<String> = state.workspaces().iter().map(|w| w.id.clone()).collect();
        println!("listening on http://{addr}/ (workspaces: {})", names.join(", "));
        use std::io::Write;
        let _ = std::io::stdout().flush();
        reload_tokens_every_second(&state);
        grants::start(&state);
        if let Some(metrics_addr) = opts.metrics_addr {
            serve_metrics(metrics_addr, &state).await?;
        }
        let _ = std::io::stdout().flush();
        let app = router(state.clone(), opts.max_body_bytes);
        let shutdown = state.shutdown.clone();
        tokio::spawn(async move {
            stop_signal().await;
            eprintln!("tao-slurm serve: stopping; finishing the requests in flight (at most {SHUTDOWN_GRACE:?})");
            shutdown.cancel();
        });
        // Stopping: the listener closes, event streams end, requests in flight (submissions among
        // them) finish, within the grace period. The state file is consistent after every
        // transaction, and a submission cut short is found and finished by the next monitor.
        // Each request's peer address: the public sign-in routes' limits are per client.
        let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
        let served = axum::serve(listener, app).with_graceful_shutdown(state.shutdown.clone().cancelled_owned());
        tokio::select! {
            served = std::future::IntoFuture::into_future(served) => served.map_err(runtime_error)?,
            _ = async { state.shutdown.cancelled().await; tokio::time::sleep(SHUTDOWN_GRACE).await } => {
                eprintln!("tao-slurm serve: requests still in flight after {SHUTDOWN_GRACE:?}; stopping anyway")
            }
        }
        stop_monitors(&state).await;
        state.release_leases();
        state.tensorboards.close_all();
        eprintln!("tao-slurm serve: stopped");
        Ok::<(), Error>(())
    })?;
    std::process::exit(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_org_of_a_path_is_its_whole_first_segment() {
        for (rest, org) in [
            ("team-a/jobs", "team-a"),
            ("team-a:x/jobs", "team-a:x"),
            ("team-a:x/", "team-a:x"),
            ("team-a%3Ax/jobs", "team-a%3Ax"),
            ("team-a/jobs/j1:cancel", "team-a"),
            ("team-a:audit", "team-a"),
            ("team-a", "team-a"),
            ("", ""),
        ] {
            assert_eq!(super::path_org(rest), org, "{rest}");
        }
    }
}
