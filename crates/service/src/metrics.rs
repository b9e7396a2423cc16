//! `GET /metrics` in Prometheus' text format, served on its own address (`serve --metrics-addr`),
//! never on the API's: it spans every org.
//!
//! Nothing here waits for a database or a cluster. Request latencies are observed as they happen
//! (one histogram, labelled by the route's template, never the path with its ids). Everything else
//! is read at scrape time from what the service already keeps (workspaces' transport and monitor
//! counters, the retries the monitor counted after its last refresh, the job cache, the open
//! streams), so each figure has one source: `/stats` and `/metrics` cannot disagree.

use super::state::AppState;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus::{Encoder, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

/// Time every request, labelled by its route's template (`/api/v2/orgs/{org}/jobs/{job_ref}`).
pub async fn observe(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let route = req.extensions().get::<MatchedPath>().map(|p| p.as_str().to_string());
    let method = req.method().as_str().to_string();
    let start = Instant::now();
    state.metrics.in_flight.inc();
    let response = next.run(req).await;
    state.metrics.in_flight.dec();
    let route = route.unwrap_or_else(|| "unmatched".to_string());
    let status = response.status().as_u16().to_string();
    state.metrics.latency.with_label_values(&[&method, &route, &status]).observe(start.elapsed().as_secs_f64());
    response
}

/// `GET /metrics`.
pub async fn scrape(State(state): State<Arc<AppState>>) -> Response {
    let scratch = Registry::new();
    if let Err(e) = read_now(&state, &scratch) {
        return (StatusCode::INTERNAL_SERVER_ERROR, format!("cannot gather the metrics: {e}\n")).into_response();
    }
    let mut families = state.metrics.registry.gather();
    families.extend(scratch.gather());
    let mut body = Vec::new();
    if let Err(e) = TextEncoder::new().encode(&families, &mut body) {
        return (StatusCode::INTERNAL_SERVER_ERROR, format!("cannot encode the metrics: {e}\n")).into_response();
    }
    ([(header::CONTENT_TYPE, TextEncoder::new().format_type().to_string())], body).into_response()
}

fn counter(r: &Registry, name: &str, help: &str, labels: &[&str]) -> prometheus::Result<IntCounterVec> {
    let c = IntCounterVec::new(Opts::new(name, help), labels)?;
    r.register(Box::new(c.clone()))?;
    Ok(c)
}

fn gauge(r: &Registry, name: &str, help: &str, labels: &[&str]) -> prometheus::Result<IntGaugeVec> {
    let g = IntGaugeVec::new(Opts::new(name, help), labels)?;
    r.register(Box::new(g.clone()))?;
    Ok(g)
}

fn single(r: &Registry, name: &str, help: &str, value: i64) -> prometheus::Result<()> {
    let g = prometheus::IntGauge::new(name, help)?;
    g.set(value);
    r.register(Box::new(g))
}

/// Fill `r` with the figures as they are now.
fn read_now(state: &AppState, r: &Registry) -> prometheus::Result<()> {
    let jobs =
        gauge(r, "tao_slurm_jobs", "Jobs created through the API, by workspace and status", &["workspace", "status"])?;
    let mut by: std::collections::BTreeMap<(String, &str), i64> = Default::default();
    for j in state.snapshot().order.iter() {
        // The status as the API shows it (Done, not the engine's Complete).
        // A person's workspace counts under its per-person workspace: no person in a label.
        let workspace = super::workspace::shown_workspace(&j.out.workspace).to_string();
        *by.entry((workspace, super::types::TaoStatus::from(j.status).as_str())).or_default() += 1;
    }
    for ((w, s), n) in by {
        jobs.with_label_values(&[&w, s]).set(n);
    }
    let per_ws = |name: &str, help: &str| counter(r, name, help, &["workspace"]);
    let refreshes =
        per_ws("tao_slurm_refreshes_total", "Monitor refreshes (one round trip each for every active job)")?;
    let refresh_errors = per_ws("tao_slurm_refresh_errors_total", "Monitor refreshes that failed")?;
    let round_trips = per_ws("tao_slurm_round_trips_total", "Remote scripts run on the cluster (one round trip each)")?;
    let refresh_trips = per_ws(
        "tao_slurm_refresh_round_trips_total",
        "Round trips of the monitor's refreshes (slurmctld serves each with a fixed few RPCs)",
    )?;
    let logins = per_ws("tao_slurm_ssh_logins_total", "SSH logins (masters started)")?;
    let follower_reads = per_ws("tao_slurm_log_follower_reads_total", "Reads of the log followers")?;
    let ws_gauge = |name: &str, help: &str| gauge(r, name, help, &["workspace"]);
    let active = ws_gauge("tao_slurm_active_jobs", "Jobs the monitor follows")?;
    let interval = ws_gauge("tao_slurm_monitor_interval_milliseconds", "The monitor's current interval")?;
    let in_use = ws_gauge("tao_slurm_remote_in_use", "Places of the request pool taken (cluster work of requests)")?;
    let ready = ws_gauge("tao_slurm_workspace_ready", "1 when the workspace's preflight passed")?;
    let lease = gauge(
        r,
        "tao_slurm_lease_held",
        "1 when this replica holds the workspace's monitor lease (it refreshes that cluster)",
        &["workspace", "replica"],
    )?;
    let epoch = ws_gauge("tao_slurm_lease_epoch", "The epoch of the workspace's lease when this replica holds it")?;
    for w in state.workspaces() {
        let c = &w.counters;
        let l = [w.id.as_str()];
        refreshes.with_label_values(&l).inc_by(c.refreshes.load(Relaxed));
        refresh_errors.with_label_values(&l).inc_by(c.refresh_errors.load(Relaxed));
        round_trips.with_label_values(&l).inc_by(c.round_trips.load(Relaxed));
        refresh_trips.with_label_values(&l).inc_by(c.refresh_round_trips.load(Relaxed));
        logins.with_label_values(&l).inc_by(c.logins.load(Relaxed));
        follower_reads.with_label_values(&l).inc_by(c.follower_reads.load(Relaxed));
        active.with_label_values(&l).set(c.active_jobs.load(Relaxed) as i64);
        interval.with_label_values(&l).set(c.interval_ms.load(Relaxed) as i64);
        in_use.with_label_values(&l).set(w.pool.in_use() as i64);
        ready.with_label_values(&l).set(w.ready.load(Relaxed) as i64);
        lease.with_label_values(&[w.id.as_str(), state.replica_id.as_str()]).set(w.lease.held.load(Relaxed) as i64);
        epoch.with_label_values(&l).set(w.lease.epoch.load(Relaxed));
    }
    let retried = counter(
        r,
        "tao_slurm_retries_total",
        "Resubmissions, by the failure class that caused them",
        &["workspace", "class"],
    )?;
    for w in state.workspaces() {
        for (class, n) in w.counters.retries.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            retried.with_label_values(&[w.id.as_str(), class]).inc_by(*n);
        }
    }
    let open = state.open_streams.load(Relaxed);
    single(r, "tao_slurm_open_streams", "Open event streams (jobs:stream and log follows)", open)?;
    let followers = state.followers.count(|_, _| true) as i64;
    single(r, "tao_slurm_log_followers", "Log followers running", followers)?;
    let requests = state.http_requests.load(Relaxed) as i64;
    single(r, "tao_slurm_http_requests", "HTTP requests received since the start", requests)?;
    single(
        r,
        "tao_slurm_uptime_seconds",
        "Seconds since the service started",
        state.started.elapsed().as_secs() as i64,
    )?;
    Ok(())
}
