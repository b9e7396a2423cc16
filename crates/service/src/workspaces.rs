//! The orgs' own workspaces (TAO's WorkspaceReq with `cloud_type` "slurm"): each logs in as its own
//! `slurm_user` with the key the service made for the org (or the one the operator assigned it), is
//! usable only by the org that made it, and only once its preflight passes. Also the route that shows
//! an org the public key to authorise, and the monitors of workspaces that appear at run time.

use super::common::{blocking, query, AppStateRef};
use super::error::{ApiError, ApiResult, ErrorBody};
use super::state::AppState;
use super::token_info::TokenInfo;
use super::types::*;
use super::workspace::{Access, Workspace};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;
use utoipa::ToSchema;

/// How long a cluster view is served from the cache.
const CLUSTER_VIEW_SECS: u64 = 60;

/// A workspace to create: TAO's WorkspaceReq, for `cloud_type` "slurm".
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceCreate {
    pub name: String,
    /// TAO's flag; here a workspace is never shared beyond the org that makes it.
    #[serde(default)]
    pub shared: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// "slurm".
    pub cloud_type: String,
    pub cloud_specific_details: SlurmDetailsIn,
    /// Keep the workspace even when its preflight fails (it becomes usable once a later preflight,
    /// at a job's create or `:cluster?refresh=true`, passes).
    #[serde(default)]
    pub force_create: bool,
}

/// TAO's SlurmCloudPull, plus the partition and account jobs default to.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SlurmDetailsIn {
    pub slurm_user: String,
    /// Login hosts, for failover: `host`, `host:port` or an ssh_config alias of the service (one
    /// string is one host, as TAO's client's SlurmCloudPull sends it).
    #[serde(deserialize_with = "one_or_many")]
    #[schema(value_type = Vec<String>)]
    pub slurm_hostname: Vec<String>,
    /// Default `/lustre/users/<slurm_user>/tao-slurm`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_results_dir: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// TAO repeats the cloud type here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_type: Option<String>,
}

/// A list of strings, or one string as a list of one.
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    })
}

/// The public key the service logs in with for an org.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SshKeyOut {
    pub org: String,
    /// One line of `authorized_keys`.
    pub public_key: String,
    /// Whether the operator assigned the org a key of its own (then this is its public half).
    pub assigned_by_operator: bool,
    pub how_to_authorise: String,
}

/// The directory of the service's keys, beside its state file.
pub fn keys_dir(state_path: &FsPath) -> PathBuf {
    let mut p = state_path.as_os_str().to_owned();
    p.push(".keys");
    PathBuf::from(p)
}

/// The private key an org's workspaces log in with: the operator's assignment, else the service's
/// own key for the org, made on first use (ed25519, mode 600 in a directory of mode 700).
pub fn org_key(state_path: &FsPath, org: &str, assigned: Option<&FsPath>) -> Result<PathBuf, String> {
    if let Some(k) = assigned {
        return Ok(k.to_path_buf());
    }
    tao_slurm_engine::client::records::check_org(org)?;
    let dir = keys_dir(state_path);
    tao_slurm_engine::private::ensure_private_dir(&dir)?;
    let key = dir.join(format!("{org}_ed25519"));
    // One maker at a time: parallel first creates of an org would share the partial file's name.
    static MAKING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = MAKING.lock().unwrap_or_else(|e| e.into_inner());
    if std::fs::symlink_metadata(&key).is_err() {
        let partial = dir.join(format!(".{org}_ed25519.{}", std::process::id()));
        let _ = std::fs::remove_file(&partial);
        let _ = std::fs::remove_file(partial.with_extension("pub"));
        let out = std::process::Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", &format!("tao-slurm-service-{org}"), "-f"])
            .arg(&partial)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("cannot run ssh-keygen: {e}"))?;
        if !out.status.success() {
            return Err(format!("ssh-keygen failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        let mut pub_partial = partial.as_os_str().to_owned();
        pub_partial.push(".pub");
        let mut pub_key = key.as_os_str().to_owned();
        pub_key.push(".pub");
        std::fs::rename(&pub_partial, &pub_key).map_err(|e| format!("cannot keep the key: {e}"))?;
        std::fs::rename(&partial, &key).map_err(|e| format!("cannot keep the key: {e}"))?;
    }
    tao_slurm_engine::private::ensure_private_file(&key)?;
    Ok(key)
}

/// The public half of a private key (its `.pub` beside it, else derived by ssh-keygen).
pub fn public_key(private: &FsPath) -> Result<String, String> {
    let mut p = private.as_os_str().to_owned();
    p.push(".pub");
    if let Ok(text) = std::fs::read_to_string(PathBuf::from(p)) {
        return Ok(text.trim().to_string());
    }
    let out = std::process::Command::new("ssh-keygen")
        .arg("-y")
        .arg("-f")
        .arg(private)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run ssh-keygen: {e}"))?;
    if !out.status.success() {
        return Err("the org's key cannot be read; ask the operator".into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// An org's key line, with how to authorise it.
pub fn key_out(state: &AppState, org: &str) -> Result<SshKeyOut, String> {
    let rules = state.operator.org(org);
    let key = org_key(&state.state_path, org, rules.ssh_key.as_deref())?;
    let public_key = public_key(&key)?;
    Ok(SshKeyOut {
        org: org.to_string(),
        how_to_authorise: format!(
            "append this line to ~/.ssh/authorized_keys of the slurm_user on every login host (mode 600): it lets this service, for org {org} only, log in as that user"
        ),
        public_key,
        assigned_by_operator: rules.ssh_key.is_some(),
    })
}

/// Replace the service's own local paths in a text shown to a client.
pub fn scrub(state: &AppState, text: &str) -> String {
    let mut out = text.to_string();
    let dir = state.state_path.parent().map(|d| d.display().to_string()).unwrap_or_default();
    if dir.len() > 1 {
        out = out.replace(&dir, "<service>");
    }
    for k in state.operator.orgs.values().filter_map(|o| o.ssh_key.as_ref()) {
        out = out.replace(&k.display().to_string(), "<the org's key>");
    }
    out
}

fn check_details(d: &SlurmDetailsIn) -> ApiResult<()> {
    let f = |n: &str| format!("cloud_specific_details.{n}");
    let user_ok = !d.slurm_user.is_empty()
        && d.slurm_user.len() <= 32
        && d.slurm_user.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && d.slurm_user.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_.-".contains(c));
    if !user_ok {
        return Err(ApiError::field(f("slurm_user"), format!("{:?} is not a Unix user name", d.slurm_user)));
    }
    if d.slurm_hostname.is_empty() || d.slurm_hostname.len() > 16 {
        return Err(ApiError::field(f("slurm_hostname"), "give 1 to 16 login hosts"));
    }
    for h in &d.slurm_hostname {
        let ok = !h.is_empty()
            && h.len() <= 253
            && h.starts_with(|c: char| c.is_ascii_alphanumeric())
            && h.chars().all(|c| c.is_ascii_alphanumeric() || ".-_:".contains(c));
        if !ok {
            return Err(ApiError::field(f("slurm_hostname"), format!("{h:?} is not a host, host:port or alias")));
        }
    }
    if let Some(b) = &d.base_results_dir {
        tao_slurm_engine::spec::check_text("base_results_dir", b)
            .map_err(|e| ApiError::field(f("base_results_dir"), e.message))?;
        if !b.starts_with('/') || b.split('/').any(|c| c == "..") || b.contains(',') {
            return Err(ApiError::field(
                f("base_results_dir"),
                format!("{b:?} is not an absolute path on the cluster"),
            ));
        }
    }
    for (name, v) in [("partition", &d.partition), ("account", &d.account)] {
        if let Some(v) = v {
            tao_slurm_engine::spec::check_slurm_word(name, v).map_err(|e| ApiError::field(f(name), e.message))?;
        }
    }
    if d.cloud_type.as_deref().is_some_and(|t| t != "slurm") {
        return Err(ApiError::field(f("cloud_type"), "this service makes \"slurm\" workspaces only"));
    }
    Ok(())
}

/// The settings of an org's workspace: the service's own, with the workspace's identity, hosts and
/// directories laid over them, the org's key, and never the operator's credentials.
fn workspace_settings(
    state: &AppState,
    id: &str,
    org: &str,
    d: &SlurmDetailsIn,
) -> ApiResult<tao_slurm_engine::config::Settings> {
    let rules = state.operator.org(org);
    let key = org_key(&state.state_path, org, rules.ssh_key.as_deref()).map_err(|m| {
        tracing::warn!(%org, error = %m, "cannot make the org's key");
        ApiError::internal("the service cannot make the org's SSH key; the operator finds why in its log")
    })?;
    let mut flags = BTreeMap::new();
    flags.insert("SLURM_USER".to_string(), d.slurm_user.clone());
    flags.insert("SLURM_HOSTNAME".to_string(), d.slurm_hostname.join(","));
    flags.insert(
        "SLURM_BASE_RESULTS_DIR".to_string(),
        d.base_results_dir.clone().unwrap_or_else(|| format!("/lustre/users/{}/tao-slurm", d.slurm_user)),
    );
    if let Some(p) = &d.partition {
        flags.insert("SLURM_PARTITION".to_string(), p.clone());
    }
    flags.insert("SLURM_ACCOUNT".to_string(), d.account.clone().unwrap_or_default());
    flags.insert("SSH_KEY_PATH".to_string(), key.display().to_string());
    // Always over SSH as the workspace's user: never the service's own account on this machine.
    flags.insert("TAO_SLURM_LOCAL".to_string(), "false".to_string());
    flags.insert(tao_slurm_engine::profiles::CLUSTER_SETTING.to_string(), id.to_string());
    let mut settings = (state.make_settings)(flags)
        .map_err(|e| ApiError::field("cloud_specific_details", scrub(state, &e.to_string())))?;
    let aliases = granted_aliases(&settings, org, &rules, d)?;
    // The org's key only: an ssh config of the service's own making (the granted aliases' host
    // names and ports, nothing else), no agent; nothing of the operator's ssh_config (its
    // identities, agent, proxies, local commands, includes).
    let own = own_ssh_config(state, id, &aliases).map_err(|m| {
        tracing::warn!(%org, workspace = %id, error = %m, "cannot write the workspace's ssh config");
        ApiError::internal("the service cannot write the workspace's ssh config; the operator finds why in its log")
    })?;
    org_only(&mut settings, own);
    Ok(settings)
}

/// Take the operator's own out of an org workspace's settings: its ssh config, agent and identities
/// (the org's key only, with `own_config`, the service's config for the workspace, or none), the
/// credentials forwarded to jobs, its webhooks (`TAO_SLURM_NOTIFY`) and its mail (`SLURM_MAIL_USER`).
fn org_only(settings: &mut tao_slurm_engine::config::Settings, own_config: Option<PathBuf>) {
    settings.ssh_key_only = true;
    settings.ssh_config = own_config;
    settings.ssh_auth_sock = None;
    settings.forwarded_secrets.clear();
    settings.notify.clear();
    settings.mail_user = None;
}

/// The ssh_config aliases of the service an org's workspace names, each with its host name and port
/// as the operator's ssh_config resolves them: only aliases the operator granted the org
/// (`ssh_aliases`); any other name is a host name. Within the operator's `login_hosts` when it lists
/// them.
fn granted_aliases(
    operator: &tao_slurm_engine::config::Settings,
    org: &str,
    rules: &super::operator::OrgRules,
    d: &SlurmDetailsIn,
) -> ApiResult<Vec<(String, String, u16)>> {
    let field = "cloud_specific_details.slurm_hostname";
    let mut aliases = Vec::new();
    for given in &d.slurm_hostname {
        let host =
            tao_slurm_engine::config::LoginHost::parse(given).map_err(|e| ApiError::field(field, e.to_string()))?;
        if host.port.is_none() && rules.ssh_aliases.contains(&host.host) {
            // A plain host name or address: nothing ssh would read as a token, option or word.
            let (name, port) = tao_slurm_engine::client::alias_destination(operator, &host.host)
                .filter(|(name, _)| {
                    name.starts_with(|c: char| c.is_ascii_alphanumeric())
                        && name.chars().all(|c| c.is_ascii_alphanumeric() || ".-_:".contains(c))
                })
                .ok_or_else(|| {
                    tracing::warn!(%org, alias = %host.host, "a granted ssh_config alias does not resolve to a host name");
                    ApiError::field(field, format!("{given:?}: the operator's alias does not resolve; ask the operator"))
                })?;
            aliases.push((host.host, name, port));
            continue;
        }
        if rules.login_hosts.as_ref().is_some_and(|allowed| !allowed.contains(given)) {
            let mut e = ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!(
                    "{given:?} is not a login host the operator allows org {org} (clusters.toml [orgs.{org}] login_hosts, ssh_aliases)"
                ),
            );
            e.body.field = Some(field.into());
            return Err(e);
        }
    }
    Ok(aliases)
}

/// The text of an org workspace's own ssh config: one `Host` block per granted alias with its host
/// name and port, nothing else. Pure.
fn ssh_config_text(aliases: &[(String, String, u16)]) -> String {
    let mut text = String::from("# written by tao-slurm for one org workspace: its granted aliases, nothing else\n");
    for (alias, name, port) in aliases {
        text.push_str(&format!("Host {alias}\n    HostName {name}\n    Port {port}\n"));
    }
    text
}

/// Write a workspace's own ssh config beside the org keys (mode 600); None when it names no alias
/// (then ssh reads no config file at all).
fn own_ssh_config(state: &AppState, id: &str, aliases: &[(String, String, u16)]) -> Result<Option<PathBuf>, String> {
    if aliases.is_empty() {
        return Ok(None);
    }
    let dir = keys_dir(&state.state_path);
    tao_slurm_engine::private::ensure_private_dir(&dir)?;
    let file = dir.join(format!("{id}.ssh_config"));
    tao_slurm_engine::private::write_private_file(&file, ssh_config_text(aliases).as_bytes())
        .map_err(|e| format!("{}: {e}", file.display()))?;
    Ok(Some(file))
}

/// Remove a workspace's own ssh config (it was deleted, or never kept).
fn forget_ssh_config(state: &AppState, id: &str) {
    let _ = std::fs::remove_file(keys_dir(&state.state_path).join(format!("{id}.ssh_config")));
}

/// The preflight checks whose failure is a failure to log in (their details are ssh's).
const CONNECTION_CHECKS: &[&str] = &["ssh key", "ssh login", "remote checks"];

/// What an org hears when its own workspace cannot log in (the operator's log has ssh's words).
fn cannot_log_in(w: &Workspace, org: &str) -> String {
    format!(
        "the service cannot log in to the login hosts as {} with the org's key (GET /api/v2/orgs/{org}/ssh-key shows it: authorise it for that user on every login host; a host must be a host name or host:port the service reaches, or an ssh_config alias the operator granted the org). The operator's log has the details.",
        w.settings.slurm_user.as_deref().unwrap_or("the slurm_user")
    )
}

/// A preflight check's detail and remediation as the org may see them: an org's own workspace's
/// failed login says only that it failed (see [`cannot_log_in`]).
pub fn org_facing_check(
    state: &AppState,
    w: &Workspace,
    c: &tao_slurm_engine::preflight::Check,
) -> (String, Option<String>) {
    match &w.access {
        Access::Owned(org) if !c.ok && CONNECTION_CHECKS.contains(&c.name.as_str()) => {
            tracing::warn!(workspace = %w.id, %org, check = %c.name, host = ?c.host, detail = %c.detail.trim(), "an org workspace cannot log in");
            (cannot_log_in(w, org), None)
        }
        _ => (scrub(state, &c.detail), c.remediation.as_ref().map(|r| scrub(state, r))),
    }
}

/// An error of a remote call as the org may see it (an org's own workspace: no connection details).
pub fn org_facing_error(state: &AppState, w: &Workspace, error: &str) -> String {
    match &w.access {
        Access::Owned(org) => {
            tracing::warn!(workspace = %w.id, %org, %error, "a remote call of an org workspace failed");
            "the cluster could not be read; the operator's log has why".to_string()
        }
        Access::Shared(_) => scrub(state, error),
    }
}

/// Run a workspace's preflight (blocking); Err names the first required check that failed and what
/// to do.
pub fn preflight(state: &AppState, w: &Workspace, org: &str) -> Result<(), ApiError> {
    let checks = tao_slurm_engine::client::preflight(&w.settings).checks;
    match checks.iter().find(|c| c.required && !c.ok) {
        None => {
            w.ready.store(true, std::sync::atomic::Ordering::Relaxed);
            Ok(())
        }
        Some(c) if matches!(w.access, Access::Owned(_)) && CONNECTION_CHECKS.contains(&c.name.as_str()) => {
            w.ready.store(false, std::sync::atomic::Ordering::Relaxed);
            // What ssh said (refused, timed out, no route, denied) would let an org probe the
            // service's network through its login hosts: the org hears one answer, the operator's
            // log has the rest.
            tracing::warn!(workspace = %w.id, %org, check = %c.name, host = ?c.host, detail = %c.detail.trim(), "an org workspace's preflight cannot log in");
            let mut e = ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "preflight_failed",
                format!("workspace {} is not usable yet: {}", w.id, cannot_log_in(w, org)),
            );
            e.body.field = Some("preflight.ssh login".into());
            Err(e)
        }
        Some(c) => {
            w.ready.store(false, std::sync::atomic::Ordering::Relaxed);
            let mut desc = format!(
                "workspace {} is not usable yet: its preflight check {:?}{} failed: {}",
                w.id,
                c.name,
                c.host.as_deref().map(|h| format!(" on {h}")).unwrap_or_default(),
                c.detail.trim()
            );
            if let Some(r) = &c.remediation {
                desc.push_str(&format!("; what to do: {}", r.trim()));
            }
            if matches!(w.access, Access::Owned(_)) {
                desc.push_str(&format!(
                    " (the service logs in with the key GET /api/v2/orgs/{org}/ssh-key shows: authorise it for {})",
                    w.settings.slurm_user.as_deref().unwrap_or("the slurm_user")
                ));
            }
            let mut e = ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "preflight_failed", scrub(state, &desc));
            e.body.field = Some(format!("preflight.{}", c.name));
            Err(e)
        }
    }
}

/// Take the cluster's monitor lock (when free) and start the workspace's monitor thread.
pub fn start_monitor(state: &Arc<AppState>, w: &Arc<Workspace>) -> Result<(), tao_slurm_engine::Error> {
    // Its clients' automatic restarts are put to the service's policy (the monitor's first).
    let _ = w.restart_gate.set(super::policy::restart_gate(Arc::downgrade(state)));
    match tao_slurm_engine::client::MonitorLock::take(&w.settings)? {
        Some(lock) => *w.monitor_lock.lock().unwrap_or_else(|e| e.into_inner()) = Some(lock),
        None => tracing::warn!(
            workspace = %w.id,
            "another monitor follows this workspace's jobs too; both are safe (retries are claimed by compare-and-set)"
        ),
    }
    let (w, st) = (w.clone(), state.clone());
    std::thread::Builder::new()
        .name(format!("monitor-{}", w.id))
        .spawn(move || {
            let renew_every = super::lease::renew_every(st.lease_secs);
            w.run_monitor(&|client| st.publish(client), &|client| st.keep_lease(&w, client), renew_every)
        })
        .map_err(|e| tao_slurm_engine::Error::RemoteCommand(format!("cannot start a monitor: {e}")))?;
    Ok(())
}

/// An org's workspace from its stored request (at start, or just made).
fn build(state: &AppState, id: &str, org: &str, req: &WorkspaceCreate, created_at: i64) -> ApiResult<Workspace> {
    let settings = workspace_settings(state, id, org, &req.cloud_specific_details)?;
    let mut w = Workspace::new(id.to_string(), settings, Access::Owned(org.to_string()));
    w.name = req.name.clone();
    w.created_at = Some(created_at);
    Ok(w)
}

/// The orgs' workspaces recorded in the service database (at start; their preflight runs at first
/// use).
pub fn load(state: &Arc<AppState>) -> Result<(), String> {
    for (id, org, request, created_at) in state.records.workspaces().list()? {
        let req: WorkspaceCreate = match serde_json::from_str(&request) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(workspace = %id, error = %e, "cannot read a stored workspace; skipped");
                continue;
            }
        };
        match build(state, &id, &org, &req, created_at) {
            Ok(w) => {
                let w = Arc::new(w);
                state.add_workspace(w.clone());
                if let Err(e) = start_monitor(state, &w) {
                    tracing::warn!(workspace = %id, error = %e, "its monitor did not start");
                }
            }
            Err(e) => tracing::warn!(workspace = %id, error = %e.body.error_desc, "a stored workspace is unusable"),
        }
    }
    Ok(())
}

#[utoipa::path(post, path = "/api/v2/orgs/{org}/workspaces", tag = "workspaces", security(("bearer" = [])),
    params(("org" = String, Path)), request_body = WorkspaceCreate,
    responses((status = 201, description = "Made, and its preflight passed (or force_create)", body = super::types::WorkspaceOut),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 422, description = "Its preflight failed: `field` names the check (preflight.NAME), the text what to do; nothing kept", body = ErrorBody)))]
pub async fn create_workspace(
    State(state): State<AppStateRef>,
    Extension(token): Extension<TokenInfo>,
    Path(org): Path<String>,
    headers: axum::http::HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    token.admin_only("creates or deletes the org's workspaces")?;
    let req: WorkspaceCreate = super::common::parse_json(&headers, body)?;
    if req.cloud_type != "slurm" {
        return Err(ApiError::field(
            "cloud_type",
            format!("{:?}: this service makes \"slurm\" workspaces only", req.cloud_type),
        ));
    }
    if req.name.trim().is_empty() || req.name.len() > 500 || req.name.chars().any(char::is_control) {
        return Err(ApiError::field("name", "one line of 1 to 500 characters"));
    }
    check_details(&req.cloud_specific_details)?;
    // Held until the workspace is recorded (or refused), so that parallel creates here count each
    // other before their preflight; the record's insert counts every replica's in the database.
    let place = super::policy::admit_workspace(&state, &org)?;
    let id = uuid::Uuid::new_v4().to_string();
    let now = tao_slurm_engine::client::now_secs();
    let w = Arc::new(build(&state, &id, &org, &req, now)?);
    let (st, w2, o) = (state.clone(), w.clone(), org.clone());
    let checked = blocking(move || Ok(preflight(&st, &w2, &o))).await?;
    if let Err(e) = checked {
        if !req.force_create {
            forget_ssh_config(&state, &id);
            return Err(e);
        }
    }
    let text = serde_json::to_string(&req).map_err(|e| ApiError::internal(e.to_string()))?;
    // The stored count decides now (this one's place would count it twice).
    drop(place);
    let cap = state.operator.max_workspaces(&org);
    let recorded = state.records.workspaces().insert_within(&id, &org, &text, now, cap).map_err(|m| {
        tracing::warn!(error = %m, "cannot record a workspace");
        ApiError::internal("the service cannot record the workspace; the operator finds why in its log")
    });
    if let Err(tao_slurm_engine::client::AtCap(n)) = recorded? {
        forget_ssh_config(&state, &id);
        return Err(super::policy::workspace_at_cap(&org, n, cap));
    }
    state.add_workspace(w.clone());
    start_monitor(&state, &w).map_err(|e| ApiError::internal(e.to_string()))?;
    tracing::info!(%org, workspace = %id, token = %token.id, "workspace created");
    Ok((StatusCode::CREATED, Json(workspace_out(&w))).into_response())
}

#[utoipa::path(delete, path = "/api/v2/orgs/{org}/workspaces/{workspace_id}", tag = "workspaces", security(("bearer" = [])),
    params(("org" = String, Path), ("workspace_id" = String, Path)),
    responses((status = 200, body = super::types::Deleted),
        (status = 403, description = "A workspace of the operator's: only the operator removes it", body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, description = "It has active jobs", body = ErrorBody)))]
pub async fn delete_workspace(
    State(state): State<AppStateRef>,
    Extension(token): Extension<TokenInfo>,
    Path((org, id)): Path<(String, String)>,
) -> ApiResult<Json<super::types::Deleted>> {
    token.admin_only("creates or deletes the org's workspaces")?;
    let w = state.org_workspace(&org, &id).ok_or_else(|| ApiError::not_found(format!("no workspace {id}")))?;
    if !matches!(w.access, Access::Owned(_)) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("workspace {id} is the operator's; only the operator removes it (clusters.toml)"),
        ));
    }
    let active = state.snapshot().jobs.values().filter(|j| j.out.workspace == id && !j.status.is_terminal()).count();
    if active > 0 {
        return Err(ApiError::conflict(format!("workspace {id} has {active} active jobs: cancel them first")));
    }
    state.records.workspaces().delete(&id, tao_slurm_engine::client::now_secs()).map_err(|m| {
        tracing::warn!(error = %m, "cannot delete a workspace");
        ApiError::internal("the service cannot delete the workspace; the operator finds why in its log")
    })?;
    state.remove_workspace(&id);
    forget_ssh_config(&state, &id);
    Ok(Json(super::types::Deleted { id, deleted: true }))
}

#[utoipa::path(get, path = "/api/v2/orgs/{org}/ssh-key", tag = "workspaces", security(("bearer" = [])),
    params(("org" = String, Path)),
    responses((status = 200, description = "The public key this service logs in with for the org's own workspaces", body = SshKeyOut),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
pub async fn ssh_key(State(state): State<AppStateRef>, Path(org): Path<String>) -> ApiResult<Json<SshKeyOut>> {
    let st = state.clone();
    blocking(move || {
        key_out(&st, &org).map(Json).map_err(|m| {
            tracing::warn!(%org, error = %m, "cannot show the org's key");
            ApiError::internal("the service cannot read the org's key; the operator finds why in its log")
        })
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn details(user: &str, host: &str, base: Option<&str>) -> SlurmDetailsIn {
        SlurmDetailsIn {
            slurm_user: user.into(),
            slurm_hostname: vec![host.into()],
            base_results_dir: base.map(String::from),
            partition: None,
            account: None,
            cloud_type: None,
        }
    }

    #[test]
    fn details_that_could_become_options_or_escape_are_refused() {
        assert!(check_details(&details("alice", "login1.example.org:2222", Some("/lustre/alice"))).is_ok());
        for (d, field) in [
            (details("-oProxyCommand=x", "h", None), "slurm_user"),
            (details("Alice Smith", "h", None), "slurm_user"),
            (details("alice", "-oProxyCommand=x", None), "slurm_hostname"),
            (details("alice", "h h", None), "slurm_hostname"),
            (details("alice", "h", Some("relative")), "base_results_dir"),
            (details("alice", "h", Some("/lustre/../etc")), "base_results_dir"),
        ] {
            let e = check_details(&d).unwrap_err();
            assert_eq!(e.body.field.as_deref(), Some(format!("cloud_specific_details.{field}").as_str()), "{d:?}");
        }
    }

    #[test]
    fn only_a_granted_alias_is_laid_out_and_only_as_its_host_and_port() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config");
        std::fs::write(
            &config,
            "Host op-login\n  HostName 127.0.0.1\n  Port 2222\n  IdentityFile /operator/key\n  ProxyCommand nc %h %p\n\
             Host *\n  IdentityFile /operator/other\n  IdentityAgent /operator/agent\n",
        )
        .unwrap();
        let mut operator = tao_slurm_core::fixtures::settings();
        operator.ssh_config = Some(config);
        let granted = crate::operator::OrgRules { ssh_aliases: vec!["op-login".into()], ..Default::default() };
        let asked = details("alice", "op-login", None);
        let aliases = granted_aliases(&operator, "team-a", &granted, &asked).unwrap();
        assert_eq!(aliases, vec![("op-login".to_string(), "127.0.0.1".to_string(), 2222)]);
        let text = ssh_config_text(&aliases);
        assert!(text.contains("Host op-login\n    HostName 127.0.0.1\n    Port 2222\n"), "{text}");
        for operator_only in ["IdentityFile", "ProxyCommand", "IdentityAgent", "/operator", "Include", "Match"] {
            assert!(!text.contains(operator_only), "{operator_only} in {text}");
        }
        // Not granted: a host name like any other, never looked up in the operator's config.
        let none = crate::operator::OrgRules::default();
        assert!(granted_aliases(&operator, "team-a", &none, &asked).unwrap().is_empty());
        // The operator's host list, when it has one.
        let listed = crate::operator::OrgRules { login_hosts: Some(vec!["h1".into()]), ..Default::default() };
        assert!(granted_aliases(&operator, "team-a", &listed, &details("alice", "h1", None)).is_ok());
        let e = granted_aliases(&operator, "team-a", &listed, &details("alice", "127.0.0.1:22", None)).unwrap_err();
        assert_eq!((e.status.as_u16(), e.body.field.as_deref()), (403, Some("cloud_specific_details.slurm_hostname")));
        assert!(e.body.error_desc.contains("login_hosts"), "{}", e.body.error_desc);
    }

    #[test]
    fn an_org_workspace_keeps_nothing_of_the_operators() {
        let mut s = tao_slurm_core::fixtures::settings();
        s.ssh_config = Some("/operator/ssh_config".into());
        s.ssh_auth_sock = Some("/operator/agent".into());
        s.mail_user = Some("operator@example.org".into());
        s.notify = vec![tao_slurm_engine::spec::Secret::new("json:http://127.0.0.1:9/operator-hook")];
        s.forwarded_secrets.push(("NGC_KEY".into(), tao_slurm_engine::spec::Secret::new("operator-ngc")));
        org_only(&mut s, None);
        assert!(s.ssh_key_only && s.ssh_config.is_none() && s.ssh_auth_sock.is_none());
        assert!(s.mail_user.is_none() && s.notify.is_empty() && s.forwarded_secrets.is_empty());
        org_only(&mut s, Some("/service/w.ssh_config".into()));
        assert_eq!(s.ssh_config.as_deref(), Some(FsPath::new("/service/w.ssh_config")));
    }

    #[test]
    fn an_org_key_is_made_once_private_and_per_org() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state.db");
        let a = org_key(&state, "team-a", None).unwrap();
        let again = org_key(&state, "team-a", None).unwrap();
        assert_eq!(a, again);
        let b = org_key(&state, "team-b", None).unwrap();
        assert_ne!(public_key(&a).unwrap(), public_key(&b).unwrap(), "each org its own key");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&a).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::metadata(keys_dir(&state)).unwrap().permissions().mode() & 0o777, 0o700);
        assert!(public_key(&a).unwrap().starts_with("ssh-ed25519 "));
        assert!(org_key(&state, "../x", None).is_err());
    }
}

pub fn workspace_out(w: &Workspace) -> WorkspaceOut {
    let s = &w.settings;
    WorkspaceOut {
        id: w.id.clone(),
        name: w.name.clone(),
        shared: matches!(w.access, super::workspace::Access::Shared(_)),
        created_on: w.created_at.map(rfc3339),
        ready: w.ready.load(std::sync::atomic::Ordering::Relaxed),
        cloud_type: "slurm".into(),
        cloud_specific_details: CloudSpecificDetails {
            slurm_user: s.slurm_user.clone(),
            slurm_hostname: s.login_hosts.iter().map(|h| h.label()).collect(),
            base_results_dir: s.base_dir(),
            partition: s.partition.clone(),
            account: s.account.clone(),
            max_gpus_per_node: s.max_gpus_per_node,
            time_hours: s.time_hours,
            use_requeue: s.use_requeue,
            max_job_retries: s.max_retries,
        },
    }
}

#[utoipa::path(get, path = "/api/v2/orgs/{org}/workspaces", tag = "workspaces", security(("bearer" = [])),
    params(("org" = String, Path, description = "The token's org")),
    responses((status = 200, description = "The Slurm workspaces this org may use: the operator's granted to it, and its own", body = WorkspaceList),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
pub async fn list_workspaces(State(state): State<AppStateRef>, Path(org): Path<String>) -> Json<WorkspaceList> {
    let workspaces: Vec<WorkspaceOut> = state.org_workspaces(&org).iter().map(|w| workspace_out(w)).collect();
    let n = workspaces.len();
    Json(WorkspaceList {
        workspaces,
        pagination_info: PaginationInfo { total_records: n, total_pages: 1, page_size: n, page_index: 0 },
    })
}

/// `GET /workspaces/{workspace_id}` and `GET /workspaces/{workspace_id}:cluster`.
pub async fn workspace_ref(
    State(state): State<AppStateRef>,
    Path((org, reference)): Path<(String, String)>,
    uri: Uri,
) -> ApiResult<Response> {
    match reference.rsplit_once(':') {
        None => get_workspace(state, org, reference).await.map(IntoResponse::into_response),
        Some((id, "cluster")) => {
            workspace_cluster(state, org, id.to_string(), query(&uri)?).await.map(IntoResponse::into_response)
        }
        Some((_, other)) => Err(ApiError::not_found(format!("no workspace action :{other} (there is :cluster)"))),
    }
}

/// A workspace the org may use (one it may not is not found, as if it did not exist).
fn find_workspace(state: &AppState, org: &str, id: &str) -> ApiResult<Arc<Workspace>> {
    state.org_workspace(org, id).ok_or_else(|| ApiError::not_found(format!("no workspace {id} for org {org}")))
}

#[utoipa::path(get, path = "/api/v2/orgs/{org}/workspaces/{workspace_id}", tag = "workspaces", security(("bearer" = [])),
    params(("org" = String, Path), ("workspace_id" = String, Path)),
    responses((status = 200, body = WorkspaceOut), (status = 404, body = ErrorBody), (status = 401, body = ErrorBody)))]
pub async fn get_workspace(state: AppStateRef, org: String, id: String) -> ApiResult<Json<WorkspaceOut>> {
    Ok(Json(workspace_out(&*find_workspace(&state, &org, &id)?)))
}

#[utoipa::path(get, path = "/api/v2/orgs/{org}/workspaces/{workspace_id}:cluster", tag = "workspaces",
    security(("bearer" = [])), params(("org" = String, Path), ("workspace_id" = String, Path), ClusterQuery),
    responses((status = 200, description = "Preflight checks and partitions with free GPUs (cached for a minute)", body = ClusterOut),
        (status = 404, body = ErrorBody), (status = 401, body = ErrorBody)))]
pub async fn workspace_cluster(
    state: AppStateRef,
    org: String,
    id: String,
    q: ClusterQuery,
) -> ApiResult<Json<ClusterOut>> {
    let ws = find_workspace(&state, &org, &id)?;
    if matches!(ws.identity, super::workspace::Identity::PerPerson(_)) {
        // It has no login of its own to look with (each person's is theirs).
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "per_person_workspace",
            format!("workspace {id} runs each person's jobs as their own Unix user and has no cluster view of its own; a job's page shows its partition and pending reason"),
        ));
    }
    // One reader at a time per workspace: concurrent requests wait for it and share its answer.
    let mut cached = ws.cluster_view.lock().await;
    if let Some((at, view)) = cached.as_ref() {
        // A refresh asked for is run at most once per interval; within it the fresh view is shared.
        let age = at.elapsed().as_secs();
        if age < super::limits::CLUSTER_REFRESH_SECS || (!q.refresh.unwrap_or(false) && age < CLUSTER_VIEW_SECS) {
            return Ok(Json(view.clone()));
        }
    }
    let w = ws.clone();
    let _in_pool = ws.pool.enter(&ws.id).await?;
    let st = state.clone();
    let view = blocking(move || {
        let checks = tao_slurm_engine::client::preflight(&w.settings).checks;
        w.ready.store(checks.iter().all(|c| c.ok || !c.required), std::sync::atomic::Ordering::Relaxed);
        let (partitions, partitions_error) = match w.with_client(|c| c.partition_usage()) {
            Ok((p, _host)) => (p, None),
            Err(e) => (Vec::new(), Some(org_facing_error(&st, &w, &e.to_string()))),
        };
        Ok(ClusterOut {
            workspace: w.id.clone(),
            checked_at: rfc3339(tao_slurm_engine::client::now_secs()),
            ok: checks.iter().all(|c| c.ok || !c.required),
            checks: checks
                .into_iter()
                .map(|c| {
                    let (detail, remediation) = org_facing_check(&st, &w, &c);
                    CheckOut { detail, remediation, ..c }
                })
                .collect(),
            partitions,
            partitions_error,
        })
    })
    .await?;
    *cached = Some((std::time::Instant::now(), view.clone()));
    Ok(Json(view))
}
