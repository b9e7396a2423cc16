//! The HTTP API under `/api/v2/orgs/{org}`, in the TAO service's shape. Every handler reads the cache
//! or, for what must reach a cluster (create, cancel, logs, the cluster view), runs the engine on a
//! blocking thread. Requests are validated, with the field at fault named, before any of that.

use super::common::*;
use super::error::{ApiError, ApiResult, ErrorBody};
use super::state::CachedJob;
use super::token_info::TokenInfo;
use super::types::*;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use std::sync::Arc;
use tao_slurm_engine::status::PlatformStatus;

#[utoipa::path(post, path = "/api/v2/orgs/{org}/jobs", tag = "jobs", security(("bearer" = [])),
    params(("org" = String, Path), CreateQuery),
    request_body(content = inline(JobCreateBody), description = "tao-slurm's job, or TAO's ExperimentJobReq / DatasetJobReq (`kind`, `action`, `network_arch`, `specs`, ... and no `image`): run as tao-core runs it on Slurm (TAO's image table, its container entrypoint); fields not used are ignored and named in the reply's `warnings`"),
    responses((status = 201, description = "Submitted to Slurm", body = JobOut),
        (status = 200, description = "With `dry_run=true`: what would be submitted; nothing was", body = DryRunOut),
        (status = 202, description = "With `Prefer: respond-async`: recorded, and submitted after in a batch; the job's status and message tell how that went", body = JobOut),
        (status = 400, description = "Invalid: `field` names the field; nothing was sent to a cluster", body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 413, body = ErrorBody),
        (status = 415, body = ErrorBody), (status = 502, description = "The cluster could not be reached or refused", body = ErrorBody),
        (status = 503, body = ErrorBody)))]
pub async fn create_job(
    State(state): State<AppStateRef>,
    Extension(token): Extension<TokenInfo>,
    Path(org): Path<String>,
    Query(query): Query<CreateQuery>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let body: serde_json::Value = parse_json(&headers, body)?;
    // TAO's ExperimentJobReq / DatasetJobReq (no image), or tao-slurm's own body.
    let (req, tao) = if super::tao_jobs::is_tao_body(&body) {
        let (req, fields) = super::tao_jobs::to_job_create(&state, &org, &from_value(body)?)?;
        (req, Some(serde_json::to_value(fields).map_err(|e| ApiError::internal(e.to_string()))?))
    } else {
        // JobCreate flattens the core's placement: what serde cannot refuse there is refused first.
        if let Some((name, message)) =
            body.as_object().and_then(tao_slurm_engine::spec::doors::refused_field::<JobCreate>)
        {
            return Err(ApiError::field(name, message));
        }
        (from_value::<JobCreate>(body)?, None)
    };
    let (mut spec, ws) = super::translate::to_spec(&state, &token, &org, &req)?;
    // Whose identity runs it: the workspace's, or the signed-in person's own.
    let ws = match super::identity::for_new_job(&ws)? {
        super::identity::NewJobRunsAs::TheWorkspaces => ws,
        super::identity::NewJobRunsAs::TheTokensPerson => super::people::for_token(&state, ws, &token)?,
    };
    let policy = super::policy::effective(&state, &org, &ws);
    if policy.allow_home_mount != Some(true) {
        // Home is not mounted unless the operator allows it.
        spec.no_container_mount_home = true;
    }
    let values = state.org_secret_values(&org).map_err(|m| {
        tracing::warn!(%org, error = %m, "cannot read the org's secrets");
        ApiError::internal("the service cannot read the org's secrets; the operator finds why in its log")
    })?;
    let secrets = super::org_secrets::resolve(&spec.secret_env, &org, &values)?;
    if query.dry_run == Some(true) {
        return dry_run(ws, policy, spec, secrets).await;
    }
    let meta = tao_slurm_engine::client::ApiJob {
        job_id: String::new(),
        org: org.clone(),
        workspace: ws.id.clone(),
        action: req.action.clone(),
        specs: spec.specs.clone().unwrap_or_else(|| serde_json::json!({})),
        num_gpu: req.num_gpu,
        token_id: Some(token.id.clone()),
        created_at: tao_slurm_engine::client::now_secs(),
        tao,
        person: token.person.clone(),
    };
    let respond_async = prefers_respond_async(&headers);
    let (st, w, o) = (state.clone(), ws.clone(), org.clone());
    let in_pool = ws.creates.enter(&ws.id).await?;
    // Told once the job is recorded (only when the client prefers the early answer): its id and
    // the warnings known then.
    let (recorded_tx, recorded_rx) = tokio::sync::oneshot::channel::<(String, Vec<String>)>();
    let recorded_tx = std::sync::Mutex::new(Some(recorded_tx));
    // The job's place among the org's active jobs is taken in the database with its record.
    let mut work = tokio::task::spawn_blocking(move || -> ApiResult<(String, Vec<String>)> {
        let _in_pool = in_pool;
        w.with_client(|client| {
            let admitted = std::sync::Mutex::new(None);
            // The service's bodies are single jobs: one plan, checked before any connection.
            let admit =
                |plan: &tao_slurm_engine::plan::Plan| admit_and_record(&st, &w, &o, &policy, plan, &meta, &admitted);
            let recorded = |job_id: &str, warnings: &[String]| {
                st.publish_jobs(client, &[job_id.to_string()]);
                if let Some(tx) = recorded_tx.lock().unwrap_or_else(|e| e.into_inner()).take() {
                    let _ = tx.send((job_id.to_string(), warnings.to_vec()));
                }
            };
            let opts = tao_slurm_engine::client::SubmitOptions {
                admit: Some(&admit),
                recorded: respond_async.then_some(&recorded as tao_slurm_engine::client::Recorded<'_>),
                ..tao_slurm_engine::client::SubmitOptions::with_values(secrets)
            };
            let outcome = client.submit(&spec, opts);
            let admitted = admitted.into_inner().unwrap_or_else(|e| e.into_inner());
            match (outcome, admitted) {
                (Ok(outcome), Some(job_id)) => {
                    st.publish_jobs(client, std::slice::from_ref(&job_id));
                    Ok((job_id, outcome.warnings))
                }
                (Ok(outcome), None) => Err(tao_slurm_engine::Error::RemoteCommand(format!(
                    "internal: {} was submitted without the service's admission",
                    outcome.submission.id()
                ))),
                (Err(e), admitted) => {
                    if let Some(job_id) = admitted {
                        if client.stored_jobs(std::slice::from_ref(&job_id)).is_ok_and(|v| !v.is_empty()) {
                            // Kept (refused after an early answer, or its outcome unknown).
                            st.publish_jobs(client, std::slice::from_ref(&job_id));
                        } else {
                            // Refused before the engine recorded it: nothing of it remains (nor its place).
                            let _ = st.remove_job(&job_id);
                        }
                    }
                    Err(e)
                }
            }
        })
        .map_err(ApiError::engine)
    });
    let recorded_early = tokio::select! {
        done = &mut work => {
            let (job_id, submit_warnings) = joined(done)?;
            ws.wake_monitor();
            tracing::info!(%org, workspace = %ws.id, job = %job_id, token = %token.id, "job created");
            return created(&state, &org, &job_id, submit_warnings, StatusCode::CREATED);
        }
        Ok(told) = recorded_rx => told,
    };
    // Answered now; the submission goes on, and the job's record tells how it went.
    let (job_id, warnings) = recorded_early;
    let (bg_ws, bg_org, bg_job) = (ws.clone(), org.clone(), job_id.clone());
    tokio::spawn(async move {
        match work.await {
            Ok(Ok(_)) => tracing::info!(org = %bg_org, job = %bg_job, "job submitted (answered early)"),
            Ok(Err(e)) => {
                tracing::warn!(org = %bg_org, job = %bg_job, error = %e, "job answered early, then not submitted")
            }
            Err(e) => tracing::error!(org = %bg_org, job = %bg_job, error = %e, "internal error (a bug in tao-slurm)"),
        }
        bg_ws.wake_monitor();
    });
    tracing::info!(%org, workspace = %ws.id, job = %job_id, token = %token.id, "job created (answered once recorded)");
    let mut r = created(&state, &org, &job_id, warnings, StatusCode::ACCEPTED)?;
    r.headers_mut().insert("preference-applied", header::HeaderValue::from_static("respond-async"));
    Ok(r)
}

/// A create's dry run: the client's one preview of the job, with the cluster's checks, then the
/// service's policy on its plan; nothing is recorded or submitted.
async fn dry_run(
    ws: Arc<super::workspace::Workspace>,
    policy: tao_slurm_core::policy::Policy,
    spec: tao_slurm_engine::JobSpec,
    secrets: tao_slurm_engine::spec::SecretValues,
) -> ApiResult<Response> {
    let in_pool = ws.creates.enter(&ws.id).await?;
    let preview = tokio::task::spawn_blocking(move || {
        let _in_pool = in_pool;
        let checks =
            tao_slurm_engine::client::PreviewChecks::Online(tao_slurm_engine::client::Secrets::Values(secrets));
        ws.with_client(|client| client.preview(&spec, checks)).map_err(ApiError::engine)
    });
    let preview = joined(preview.await)?;
    super::policy::admit(&policy, &preview.plan)?;
    let out = DryRunOut {
        dry_run: true,
        job_id: preview.plan.layout.job_id.clone(),
        plan: serde_json::to_value(&preview.plan).map_err(|e| ApiError::internal(e.to_string()))?,
        files: preview.files,
        warnings: preview.warnings,
    };
    Ok((StatusCode::OK, Json(out)).into_response())
}

/// Whether the request's `Prefer` header (RFC 7240) asks for `respond-async`: answered once the
/// job is recorded (202), not once Slurm took it (201).
fn prefers_respond_async(headers: &HeaderMap) -> bool {
    headers.get_all("prefer").iter().filter_map(|v| v.to_str().ok()).any(|v| {
        v.split(',').any(|p| p.split(';').next().is_some_and(|t| t.trim().eq_ignore_ascii_case("respond-async")))
    })
}

/// The answer to a create: the job as the cache has it, its warnings, and where it lives.
fn created(
    state: &AppStateRef,
    org: &str,
    job_id: &str,
    warnings: Vec<String>,
    status: StatusCode,
) -> ApiResult<Response> {
    let job = org_job(state, org, job_id)?;
    let mut r = json_text(status, with_warnings(&job.json, warnings));
    if let Ok(v) = header::HeaderValue::from_str(&format!("/api/v2/orgs/{org}/jobs/{job_id}")) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    Ok(r)
}

/// The service's rule on a job's plan, before anything is recorded or sent: the org's and the
/// workspace's policy, the workspace's preflight if it has not passed, then the org's record of the
/// job with its place among the org's active jobs, counted and taken in the database (every
/// replica's jobs count), first, so that a replica that dies mid-submission leaves a job the next
/// lease holder finishes submitting, and that job is the org's.
fn admit_and_record(
    state: &AppStateRef,
    ws: &super::workspace::Workspace,
    org: &str,
    policy: &tao_slurm_core::policy::Policy,
    plan: &tao_slurm_engine::plan::Plan,
    meta: &tao_slurm_engine::client::ApiJob,
    admitted: &std::sync::Mutex<Option<String>>,
) -> tao_slurm_engine::Result<()> {
    super::policy::admit(policy, plan).map_err(ApiError::refused)?;
    if !ws.ready.load(std::sync::atomic::Ordering::Relaxed) {
        super::workspaces::preflight(state, ws, org).map_err(ApiError::refused)?;
    }
    let job_id = plan.layout.job_id.clone();
    let recorded = state.add_job_within(
        tao_slurm_engine::client::ApiJob { job_id: job_id.clone(), ..meta.clone() },
        policy.max_active_jobs,
    );
    if let Ok(Err(tao_slurm_engine::client::AtCap(n))) = recorded {
        return Err(super::policy::at_cap(policy, plan, n).refused());
    }
    if let Err(m) = recorded {
        tracing::warn!(job = %job_id, error = %m, "cannot record a job in the service's database; not submitted");
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "database_unavailable",
            "the service could not record the job, so it did not submit it; ask again later (the operator finds why in its log)",
        )
        .retry_after(5)
        .refused());
    }
    *admitted.lock().unwrap_or_else(|e| e.into_inner()) = Some(job_id);
    Ok(())
}

/// The created job's reply with the submission's warnings (a capped wall time, a registry pull)
/// after those of its body's unused fields.
fn with_warnings(json: &str, warnings: Vec<String>) -> String {
    match serde_json::from_str::<serde_json::Value>(json) {
        Ok(mut v) if !warnings.is_empty() => {
            if let Some(list) = v.get_mut("warnings").and_then(|w| w.as_array_mut()) {
                list.extend(warnings.into_iter().map(serde_json::Value::String));
            }
            v.to_string()
        }
        _ => json.to_string(),
    }
}

#[utoipa::path(get, path = "/api/v2/orgs/{org}/jobs", tag = "jobs", security(("bearer" = [])),
    params(("org" = String, Path), ListQuery),
    responses((status = 200, description = "The org's jobs, from the cache (no cluster round trip): all of them without `size`, as TAO lists them", body = JobList),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
pub async fn list_jobs(
    State(state): State<AppStateRef>,
    Extension(token): Extension<TokenInfo>,
    Path(org): Path<String>,
    uri: Uri,
) -> ApiResult<Response> {
    let q: ListQuery = query(&uri)?;
    // The caller's own: those its person created (a machine's token: those no person created).
    let mine = flag("user_only", q.user_only.as_deref())? || flag("mine", q.mine.as_deref())?;
    if let Some(size) = q.size {
        if !(1..=1000).contains(&size) {
            return Err(ApiError::field("size", format!("{size} is not from 1 to 1000")));
        }
    }
    let skip = q.skip.unwrap_or(0);
    let statuses = match &q.status {
        None => None,
        Some(list) => {
            let (negated, list) = list.strip_prefix('!').map_or((false, list.as_str()), |l| (true, l));
            let parsed = list
                .split(',')
                .filter(|s| !s.trim().is_empty())
                .map(|s| tao_slurm_engine::filter::parse_status("status", s).map_err(ApiError::from_spec))
                .collect::<ApiResult<Vec<_>>>()?;
            Some((negated, parsed))
        }
    };
    let (descending, key) = sort_key(q.sort.as_deref())?;
    let snapshot = state.snapshot();
    let mut jobs: Vec<&Arc<CachedJob>> = snapshot
        .order
        .iter()
        .filter(|j| j.out.org == org)
        .filter(|j| statuses.as_ref().is_none_or(|(neg, s)| s.contains(&j.status) != *neg))
        .filter(|j| q.workspace.as_ref().is_none_or(|w| in_workspace(&j.out.workspace, w)))
        .filter(|j| !mine || j.out.user == token.person)
        .filter(|j| tao_filters(&q, j))
        .collect();
    // `order` is newest first already; sorts are stable, ties keep it.
    match key {
        "created_on" => jobs.sort_by_key(|j| std::cmp::Reverse(j.created_at)),
        "last_modified" => jobs.sort_by_key(|j| std::cmp::Reverse(j.updated_at)),
        "name" => jobs.sort_by(|a, b| b.out.name.cmp(&a.out.name)),
        _ => jobs.sort_by(|a, b| b.out.platform_status.cmp(&a.out.platform_status)),
    }
    if !descending {
        jobs.reverse();
    }
    let total = jobs.len();
    let size = q.size.unwrap_or(total.max(1));
    let page: Vec<&str> = jobs.iter().skip(skip).take(size).map(|j| &*j.json).collect();
    let info = PaginationInfo {
        total_records: total,
        total_pages: total.div_ceil(size),
        page_size: size,
        page_index: skip / size,
    };
    Ok(json_text(
        StatusCode::OK,
        format!("{{\"jobs\":[{}],\"pagination_info\":{}}}", page.join(","), serde_json::to_string(&info).unwrap()),
    ))
}

/// A query's yes/no: `true`/`1`/`yes` or `false`/`0`/`no` (absent: no).
fn flag(field: &str, value: Option<&str>) -> ApiResult<bool> {
    match value.map(str::to_ascii_lowercase).as_deref() {
        None | Some("false" | "0" | "no") => Ok(false),
        Some("true" | "1" | "yes") => Ok(true),
        Some(other) => Err(ApiError::field(field, format!("{other:?} is not true or false"))),
    }
}

/// Whether a job of workspace `job_ws` is in the workspace `asked`: that one, or a person's under it.
fn in_workspace(job_ws: &str, asked: &str) -> bool {
    super::workspace::shown_workspace(job_ws) == asked || job_ws == asked
}

/// The sort of a listing: ours (`created_on`, `-name`...) or TAO's (`date-descending`...), as
/// (descending, key).
fn sort_key(sort: Option<&str>) -> ApiResult<(bool, &str)> {
    let sort = sort.unwrap_or("-created_on");
    let tao = |s: &str| match s {
        "date-descending" => Some((true, "created_on")),
        "date-ascending" => Some((false, "created_on")),
        "name-descending" => Some((true, "name")),
        "name-ascending" => Some((false, "name")),
        "status-descending" => Some((true, "status")),
        "status-ascending" => Some((false, "status")),
        _ => None,
    };
    let (descending, key) = tao(sort).unwrap_or_else(|| match sort.strip_prefix('-') {
        Some(k) => (true, k),
        None => (false, sort),
    });
    if !["created_on", "last_modified", "name", "status"].contains(&key) {
        return Err(ApiError::field(
            "sort",
            format!("{sort:?}: sort by created_on, last_modified, name or status (a leading - for descending), or TAO's date-descending, name-ascending..."),
        ));
    }
    Ok((descending, key))
}

/// TAO's filters of a listing: exact `name` (`!name` for all but), `network_arch`, `kind`, a tag
/// (`tags` or `tag`), `search` in name, description or id.
fn tao_filters(q: &ListQuery, j: &CachedJob) -> bool {
    let exact = |want: &Option<String>, have: Option<&str>| match want.as_deref() {
        None => true,
        Some(w) => match w.strip_prefix('!') {
            Some(not) => have != Some(not),
            None => have == Some(w),
        },
    };
    let tao = &j.out.tao;
    let tag = q.tags.as_ref().or(q.tag.as_ref());
    let tagged = tag.is_none_or(|t| match t.strip_prefix('!') {
        Some(not) => !tao.tags.iter().any(|x| x == not),
        None => tao.tags.iter().any(|x| x == t),
    });
    let found = q.search.as_ref().is_none_or(|s| {
        let low = s.to_lowercase();
        j.out.name.as_deref().is_some_and(|n| n.to_lowercase().contains(&low))
            || tao.description.as_deref().is_some_and(|d| d.to_lowercase().contains(&low))
            || j.out.id.contains(s.as_str())
    });
    exact(&q.name, j.out.name.as_deref())
        && exact(&q.network_arch, tao.network_arch.as_deref())
        && exact(&q.kind, tao.kind.as_deref())
        && tagged
        && found
}

/// `GET /jobs/{job_id}`, `:logs`, `:events`, `:attempts`, `:kpis` and `:stream`.
pub async fn job_get_ref(
    State(state): State<AppStateRef>,
    Path((org, reference)): Path<(String, String)>,
    Extension(token): Extension<TokenInfo>,
    uri: Uri,
) -> ApiResult<Response> {
    let (id, action) = match reference.rsplit_once(':') {
        Some((id, action)) => (id.to_string(), action),
        None => (reference.clone(), ""),
    };
    match action {
        "" => get_job(state, org, id).await,
        "logs" => job_logs(state, &token, org, id, query(&uri)?).await,
        "events" => job_events(state, &token, org, id, query(&uri)?).await.map(IntoResponse::into_response),
        "attempts" => job_attempts(state, &token, org, id).await.map(IntoResponse::into_response),
        "kpis" => super::kpis::job_kpis(state, &token, org, id).await.map(IntoResponse::into_response),
        "stream" => super::sse::job_stream(state, &token, org, id, query(&uri)?).await,
        "list_files" => super::results::list_files(state, &token, org, id, uri).await.map(IntoResponse::into_response),
        "download" => super::results::download(state, &token, org, id, uri).await,
        "download_selective_files" => super::results::download_selective(state, &token, org, id, uri).await,
        other => Err(ApiError::not_found(format!(
            "no job action :{other} for GET (there are :logs, :events, :attempts, :kpis, :stream, :list_files, :download, :download_selective_files)"
        ))),
    }
}

/// `POST /jobs/{job_id}:cancel`, `:retry`, `:pause`, `:resume` and `:tensorboard`.
pub async fn job_post_ref(
    State(state): State<AppStateRef>,
    Path((org, reference)): Path<(String, String)>,
    Extension(token): Extension<TokenInfo>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    if let Some((id, "cancel" | "retry" | "pause" | "resume")) = reference.rsplit_once(':') {
        may_change(&token, &*org_job(&state, &org, id)?)?;
    }
    match reference.rsplit_once(':') {
        Some((id, "cancel")) => cancel_job(state, &token, org, id.to_string()).await,
        Some((id, "retry")) => retry_job(state, &token, org, id.to_string()).await,
        Some((id, "pause")) => super::pause::pause_job(state, &token, org, id.to_string(), headers, body).await,
        Some((id, "resume")) => super::pause::resume_job(state, &token, org, id.to_string(), headers, body).await,
        Some((id, "tensorboard")) => super::tensorboard::open(state, &token, org, id.to_string(), &headers).await,
        Some((_, a @ ("publish_model" | "log_update" | "status_update"))) => Err(super::tao_routes::not_here(a)),
        _ => Err(ApiError::not_found(
            "no such job action for POST (there are :cancel, :retry, :pause, :resume and :tensorboard)",
        )),
    }
}

/// `DELETE /jobs/{job_id}`.
pub async fn job_delete_ref(
    State(state): State<AppStateRef>,
    Path((org, reference)): Path<(String, String)>,
    Extension(token): Extension<TokenInfo>,
) -> ApiResult<Response> {
    if reference.ends_with(":remove_published_model") {
        return Err(super::tao_routes::not_here("remove_published_model"));
    }
    if reference.contains(':') {
        return Err(ApiError::not_found("DELETE takes a job id"));
    }
    may_change(&token, &*org_job(&state, &org, &reference)?)?;
    delete_job(state, &token, org, reference).await.map(IntoResponse::into_response)
}

#[utoipa::path(get, path = "/api/v2/orgs/{org}/jobs/{job_id}", tag = "jobs", security(("bearer" = [])),
    params(("org" = String, Path), ("job_id" = String, Path)),
    responses((status = 200, description = "The job, from the cache (no cluster round trip)", body = JobOut),
        (status = 404, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
pub async fn get_job(state: AppStateRef, org: String, id: String) -> ApiResult<Response> {
    Ok(json_text(StatusCode::OK, org_job(&state, &org, &id)?.json.to_string()))
}

#[utoipa::path(post, path = "/api/v2/orgs/{org}/jobs/{job_id}:cancel", tag = "jobs", security(("bearer" = [])),
    params(("org" = String, Path), ("job_id" = String, Path)),
    responses((status = 200, description = "Cancelled (idempotent: a terminal job is returned as it is)", body = JobOut),
        (status = 404, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 502, description = "The cluster could not confirm the cancel; the job is as it was", body = ErrorBody)))]
pub async fn cancel_job(state: AppStateRef, token: &TokenInfo, org: String, id: String) -> ApiResult<Response> {
    let job = org_job(&state, &org, &id)?;
    if job.status.is_terminal() {
        return Ok(json_text(StatusCode::OK, job.json.to_string()));
    }
    let reply = act_on_job(state, token, &org, &id, |c, jid| c.cancel_job(jid).map(|_| ())).await?;
    tracing::info!(%org, job = %id, "job cancelled");
    Ok(reply)
}

/// A new attempt of a job that ended Error or Canceled, from its newest checkpoint (TAO's `retry_job`).
#[utoipa::path(post, path = "/api/v2/orgs/{org}/jobs/{job_id}:retry", tag = "jobs", security(("bearer" = [])),
    params(("org" = String, Path), ("job_id" = String, Path)),
    responses((status = 200, description = "The job with its new attempt, from its newest checkpoint (idempotent: a job already running again is returned as it is)", body = JobOut),
        (status = 400, description = "A job that completed, or had secrets", body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
pub async fn retry_job(state: AppStateRef, token: &TokenInfo, org: String, id: String) -> ApiResult<Response> {
    let placed =
        admit_restart(&state, token, &org, &id, |s| matches!(s, PlatformStatus::Error | PlatformStatus::Canceled))
            .await?;
    let reply = give_back_if_not_started(
        &state,
        &org,
        &id,
        placed,
        act_on_job(state.clone(), token, &org, &id, |c, jid| c.retry_job(jid).map(|_| ())).await,
    )?;
    tracing::info!(%org, job = %id, "job retried");
    Ok(reply)
}

#[utoipa::path(delete, path = "/api/v2/orgs/{org}/jobs/{job_id}", tag = "jobs", security(("bearer" = [])),
    params(("org" = String, Path), ("job_id" = String, Path)),
    responses((status = 200, description = "Removed from the org's jobs (the state file keeps its history)", body = Deleted),
        (status = 409, description = "The job is not terminal: cancel it first", body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
pub async fn delete_job(state: AppStateRef, token: &TokenInfo, org: String, id: String) -> ApiResult<Json<Deleted>> {
    let job = org_job(&state, &org, &id)?;
    if !job.status.is_terminal() {
        return Err(ApiError::conflict(format!(
            "job {id} is {}: cancel it first (:cancel), then delete it",
            job.out.platform_status
        )));
    }
    let ws = workspace_of(&state, token, &job)?;
    let (st, jid) = (state.clone(), id.clone());
    blocking(move || {
        st.remove_job(&jid).map_err(ApiError::internal)?;
        ws.with_client(|client| {
            st.publish(client);
            Ok(())
        })
        .map_err(ApiError::engine)
    })
    .await?;
    Ok(Json(Deleted { id, deleted: true }))
}

/// Largest log read.
const MAX_LOG_BYTES: u64 = 1 << 20;

/// A log read asked for, checked.
struct LogAsk {
    stream: Option<tao_slurm_engine::client::Stream>,
    limit: u64,
}

/// Check a log query against the job before anything reaches the cluster.
fn log_ask(job: &CachedJob, q: &LogsQuery) -> ApiResult<LogAsk> {
    let stream = match q.stream.as_deref().unwrap_or("both") {
        "stdout" => Some(tao_slurm_engine::client::Stream::Stdout),
        "stderr" => Some(tao_slurm_engine::client::Stream::Stderr),
        "both" => None,
        other => return Err(ApiError::field("stream", format!("{other:?} is not stdout, stderr or both"))),
    };
    if q.automl_experiment_index.is_some() {
        return Err(ApiError::field(
            "automl_experiment_index",
            "AutoML is TAO's own scheduler; jobs here have one log",
        ));
    }
    if q.tail.is_some() && q.offset.is_some() {
        return Err(ApiError::field("offset", "give tail or offset, not both"));
    }
    if let Some(t) = q.tail {
        if !(1..=10_000).contains(&t) {
            return Err(ApiError::field("tail", format!("{t} is not from 1 to 10000")));
        }
    }
    let limit = q.limit.unwrap_or(if q.offset.is_some() { 65536 } else { MAX_LOG_BYTES });
    if !(1..=MAX_LOG_BYTES).contains(&limit) {
        return Err(ApiError::field("limit", format!("{limit} is not from 1 to {MAX_LOG_BYTES}")));
    }
    if let Some(a) = q.attempt {
        if a == 0 || a > job.attempt {
            return Err(ApiError::field("attempt", format!("job {} has attempts 1 to {}", job.out.id, job.attempt)));
        }
    }
    if q.offset.is_some() && stream.is_none() {
        return Err(ApiError::field("stream", "reading from an offset needs stdout or stderr"));
    }
    Ok(LogAsk { stream, limit })
}

fn text_reply(t: String) -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], t).into_response()
}

#[utoipa::path(get, path = "/api/v2/orgs/{org}/jobs/{job_id}:logs", tag = "jobs", security(("bearer" = [])),
    params(("org" = String, Path), ("job_id" = String, Path), LogsQuery),
    responses((status = 200, description = "The whole log, main.out then main.err, as TAO gives it (at most 1 MiB: the end is kept, a first line says what was cut, and X-Log-Truncated: true), or the last `tail` lines, or one file's bytes from `offset` with X-Log-Offset, X-Next-Offset and X-Log-Size headers; empty before the job reaches Slurm", content_type = "text/plain", body = String),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 401, body = ErrorBody), (status = 502, body = ErrorBody)))]
pub async fn job_logs(
    state: AppStateRef,
    token: &TokenInfo,
    org: String,
    id: String,
    q: LogsQuery,
) -> ApiResult<Response> {
    let job = org_job(&state, &org, &id)?;
    let ask = log_ask(&job, &q)?;
    let on_slurm = match q.attempt {
        Some(a) if a < job.attempt => true,
        _ => job.out.backend_details.slurm_metadata.slurm_job_id.is_some(),
    };
    if !on_slurm {
        return Ok(text_reply(String::new()));
    }
    let ws = workspace_of(&state, token, &job)?;
    let _in_pool = ws.pool.enter(&ws.id).await?;
    // The org's secret values never come back in a log (a job could still print one encoded).
    let values = state.org_secret_values(&org).map_err(|m| {
        tracing::warn!(%org, error = %m, "cannot read the org's secrets");
        ApiError::internal("the service cannot read the org's secrets; the operator finds why in its log")
    })?;
    let (text, headers) = match (q.offset, ask.stream) {
        (Some(offset), Some(stream)) => {
            let range = blocking(move || {
                ws.with_client(|c| c.log_range(&id, stream, offset, ask.limit, q.attempt)).map_err(ApiError::engine)
            })
            .await?;
            let mut h = vec![("x-log-offset", range.offset), ("x-next-offset", range.next_offset)];
            h.extend(range.size.map(|s| ("x-log-size", s)));
            (range.text, h.into_iter().map(|(k, v)| (k, header::HeaderValue::from(v))).collect())
        }
        _ => {
            let logs =
                blocking(move || ws.with_client(|c| c.job_logs(&id, q.tail, q.attempt)).map_err(ApiError::engine))
                    .await?;
            joined_logs(logs, ask.stream, ask.limit)
        }
    };
    let mut r = text_reply(super::org_secrets::redact(text, &values));
    r.headers_mut().extend(headers.into_iter().map(|(k, v)| (header::HeaderName::from_static(k), v)));
    Ok(r)
}

/// main.out then main.err (or one of them), `limit` bytes in all with the ends of the files kept; a
/// first line says what was cut.
fn joined_logs(
    mut logs: tao_slurm_engine::client::JobLogs,
    stream: Option<tao_slurm_engine::client::Stream>,
    limit: u64,
) -> (String, Vec<(&'static str, header::HeaderValue)>) {
    let keep_end = |text: &mut String, cap: usize| {
        let (kept, cut) = tao_slurm_engine::ops::logs::keep_end(text, cap);
        *text = kept;
        cut
    };
    let cap = (if stream.is_none() && !logs.stderr.is_empty() { limit / 2 } else { limit }) as usize;
    let (out_cut, err_cut) = (keep_end(&mut logs.stdout, cap), keep_end(&mut logs.stderr, cap));
    let mut text = match stream {
        Some(tao_slurm_engine::client::Stream::Stdout) => logs.stdout,
        Some(tao_slurm_engine::client::Stream::Stderr) => logs.stderr,
        None if logs.stderr.is_empty() => logs.stdout,
        None => format!(
            "{}{}{}",
            logs.stdout,
            if logs.stdout.ends_with('\n') || logs.stdout.is_empty() { "" } else { "\n" },
            logs.stderr
        ),
    };
    if !(out_cut || err_cut) {
        return (text, Vec::new());
    }
    text.insert_str(
        0,
        &format!("[tao-slurm: the log is longer than {limit} bytes; only the end of each file is shown here; read it all with ?stream=stdout&offset=0]\n"),
    );
    (text, vec![("x-log-truncated", header::HeaderValue::from_static("true"))])
}

#[utoipa::path(get, path = "/api/v2/orgs/{org}/jobs/{job_id}:events", tag = "jobs", security(("bearer" = [])),
    params(("org" = String, Path), ("job_id" = String, Path), EventsQuery),
    responses((status = 200, description = "The job's history, oldest first (state file only)", body = EventList),
        (status = 404, body = ErrorBody), (status = 401, body = ErrorBody)))]
pub async fn job_events(
    state: AppStateRef,
    token: &TokenInfo,
    org: String,
    id: String,
    q: EventsQuery,
) -> ApiResult<Json<EventList>> {
    let job = org_job(&state, &org, &id)?;
    let ws = workspace_of(&state, token, &job)?;
    let events = blocking(move || {
        ws.with_client(|c| c.events_since(q.after.unwrap_or(0), std::slice::from_ref(&id), 100_000))
            .map_err(ApiError::engine)
    })
    .await?;
    Ok(Json(EventList {
        events: events
            .into_iter()
            .map(|e| EventOut { id: e.id, at: rfc3339(e.at), kind: e.kind, detail: e.detail })
            .collect(),
    }))
}

#[utoipa::path(get, path = "/api/v2/orgs/{org}/jobs/{job_id}:attempts", tag = "jobs", security(("bearer" = [])),
    params(("org" = String, Path), ("job_id" = String, Path)),
    responses((status = 200, description = "Every submission to Slurm (retries are new attempts) with the evidence of how it ended", body = AttemptList),
        (status = 404, body = ErrorBody), (status = 401, body = ErrorBody)))]
pub async fn job_attempts(
    state: AppStateRef,
    token: &TokenInfo,
    org: String,
    id: String,
) -> ApiResult<Json<AttemptList>> {
    let job = org_job(&state, &org, &id)?;
    let ws = workspace_of(&state, token, &job)?;
    let attempts = blocking(move || ws.with_client(|c| c.attempts(&id)).map_err(ApiError::engine)).await?;
    Ok(Json(AttemptList {
        attempts: attempts.into_iter().map(|a| a.map_times(|t| tao_slurm_engine::model::Rfc3339(rfc3339(t)))).collect(),
    }))
}

#[utoipa::path(get, path = "/api/v2/orgs/{org}/stats", tag = "service", security(("bearer" = [])),
    params(("org" = String, Path)),
    responses((status = 200, description = "What the clusters were asked and what clients asked", body = Stats),
        (status = 401, body = ErrorBody)))]
pub async fn stats(State(state): State<AppStateRef>, Path(org): Path<String>) -> Json<Stats> {
    use std::sync::atomic::Ordering::Relaxed;
    let snapshot = state.snapshot();
    let counts = state.org_counts.lock().unwrap_or_else(|e| e.into_inner()).get(&org).cloned().unwrap_or_default();
    Json(Stats {
        uptime_secs: state.started.elapsed().as_secs(),
        http_requests: counts.http_requests,
        open_streams: counts.open_streams,
        log_followers: state.followers.count(|o, _| o == org),
        snapshot_version: snapshot.version,
        jobs_cached: snapshot.jobs.values().filter(|j| j.out.org == org).count(),
        workspaces: state
            .org_workspaces(&org)
            .iter()
            .map(|w| {
                let c = &w.counters;
                let last = c.last_refresh_at.load(Relaxed);
                WorkspaceStatsOut {
                    workspace: w.id.clone(),
                    refreshes: c.refreshes.load(Relaxed),
                    refresh_errors: c.refresh_errors.load(Relaxed),
                    round_trips: c.round_trips.load(Relaxed),
                    refresh_round_trips: c.refresh_round_trips.load(Relaxed),
                    ssh_logins: c.logins.load(Relaxed),
                    active_jobs: c.active_jobs.load(Relaxed),
                    monitor_interval_secs: c.interval_ms.load(Relaxed) as f64 / 1000.0,
                    follower_reads: c.follower_reads.load(Relaxed),
                    remote_in_use: w.pool.in_use(),
                    remote_pool_size: super::limits::REMOTE_POOL_SIZE,
                    last_refresh_at: (last > 0).then(|| rfc3339(last as i64)),
                    last_error: w.last_error.lock().unwrap_or_else(|e| e.into_inner()).clone(),
                }
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn respond_async_is_read_from_any_prefer_header_as_rfc_7240_writes_it() {
        let with = |values: &[&str]| {
            let mut h = HeaderMap::new();
            for v in values {
                h.append("prefer", header::HeaderValue::from_str(v).unwrap());
            }
            prefers_respond_async(&h)
        };
        assert!(with(&["respond-async"]));
        assert!(with(&["Respond-Async"]));
        assert!(with(&["return=minimal, respond-async; wait=10"]));
        assert!(with(&["return=minimal", "respond-async"]));
        assert!(!with(&[]));
        assert!(!with(&["return=minimal"]));
        assert!(!with(&["respond-asyncx", "x-respond-async"]));
    }
}
