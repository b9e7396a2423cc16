//! Each person their own Unix identity. A shared workspace with `identity = "person"` reaches no
//! cluster itself: a person's request goes to a workspace of their own under it (`PARENT@USER`), whose
//! settings are the parent's with the person's Unix user, their directory (`{user}` in
//! `base_results_dir`) and a key of the service's for that user with a certificate for that principal
//! only, valid for minutes, renewed before a login when half its time is gone. Its monitor follows
//! that person's jobs as that person. A machine's token (no person) cannot use such a workspace.
//! A person whose access ended (`grants`) has their workspaces closed: monitor stopped, key and
//! certificate removed, masters ended; their jobs' records stay.

use super::certificates::{check_unix_user, Authority};
use super::error::{ApiError, ApiResult};
use super::state::AppState;
use super::token_info::TokenInfo;
use super::workspace::{person_workspace_id, split_person_workspace_id, Identity, Workspace};
use axum::http::StatusCode;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A person's Unix user: as `people` maps them, else their own name when that is a Unix user name.
pub fn unix_user(people: &BTreeMap<String, String>, person: &str) -> Result<String, String> {
    if let Some(user) = people.get(person) {
        return Ok(user.clone());
    }
    if !people.is_empty() {
        return Err(format!(
            "{person:?} has no Unix user on this workspace: the operator maps them in its people table"
        ));
    }
    check_unix_user(person)
        .map_err(|m| format!("{m}; the operator maps {person:?} to a Unix user in the workspace's people table"))?;
    Ok(person.to_string())
}

/// Whether `person`'s access through a workspace whose parent `orgs` may use has ended: a grant of
/// theirs for one of those orgs ended, and none of those orgs' grants holds. A person who never
/// signed in through the provider (a token the operator made) has no grant: their access is the
/// token's.
pub fn access_ended(person: &str, orgs: &[String], grants: &[tao_slurm_engine::client::records::Grant]) -> bool {
    let theirs = grants.iter().filter(|g| g.person == person && orgs.contains(&g.org));
    let (ended, holding): (Vec<_>, Vec<_>) = theirs.partition(|g| g.ended_at.is_some());
    !ended.is_empty() && holding.is_empty()
}

/// The orgs that may use `parent` (a person's workspace's), by its access.
pub fn orgs_of(parent: &Workspace) -> Vec<String> {
    match &parent.access {
        super::workspace::Access::Shared(orgs) => orgs.clone(),
        super::workspace::Access::Owned(org) => vec![org.clone()],
    }
}

/// Close the person's workspace `id` on this replica (their access ended): its monitor stopped (their
/// jobs' records stay, the org still sees them), its key and certificate removed (no new login),
/// then its master ended at once. Blocking: at most the monitor's cycle under way and ssh's answer.
pub fn close(state: &Arc<AppState>, id: &str, why: &str) {
    let Some(w) = state.remove_person_workspace(id) else { return };
    w.stop();
    let user = w.settings.slurm_user.clone();
    // The key is the Unix user's: kept while another workspace of that user stays open here.
    if !state.person_workspaces().iter().any(|o| o.settings.slurm_user == user) {
        if let Some(key) = &w.settings.ssh_key_path {
            let mut cert = key.as_os_str().to_owned();
            cert.push("-cert.pub");
            for f in [key.clone(), std::path::PathBuf::from(cert)] {
                if let Err(e) = std::fs::remove_file(&f) {
                    if e.kind() != std::io::ErrorKind::NotFound {
                        tracing::warn!(workspace = %id, file = %f.display(), error = %e, "cannot remove a person's key");
                    }
                }
            }
        }
    }
    if !w.wait_for_monitor(std::time::Duration::from_secs(30)) {
        tracing::warn!(workspace = %id, "a closed workspace's monitor is still in its cycle; its login ends under it");
    }
    w.end_logins();
    tracing::info!(workspace = %id, person = ?w.settings.person, %why, "closed a person's workspace: their access ended");
}

/// Whether a certificate valid until `valid_before` is due for renewal at `now`: less than half of its
/// `lifetime` left (a login never starts with one about to end).
pub fn renewal_due(valid_before: u64, now: u64, lifetime: u64) -> bool {
    valid_before.saturating_sub(now) < lifetime / 2
}

/// Refuse a per-person workspace whose results would not be each person's own: its
/// `base_results_dir` must name `{user}` (or be unset: `/lustre/users/{user}/tao-slurm`).
pub fn check_parent(id: &str, settings: &tao_slurm_engine::config::Settings) -> Result<(), String> {
    match &settings.base_results_dir {
        Some(b) if !b.contains("{user}") => Err(format!(
            "[{id}] identity = \"person\": base_results_dir must name each person's directory with {{user}} (e.g. /lustre/users/{{user}}/tao-slurm), not {b}"
        )),
        _ => Ok(()),
    }
}

/// The workspace a token's job goes to: `ws`, or for a per-person workspace the token's person's own.
pub fn for_token(state: &Arc<AppState>, ws: Arc<Workspace>, token: &TokenInfo) -> ApiResult<Arc<Workspace>> {
    let Identity::PerPerson(people) = &ws.identity else { return Ok(ws) };
    let Some(person) = &token.person else {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "workspace {} runs each person's jobs as their own Unix user, and this token is a machine's (it names no person): use a person's token (`tao-slurm token create --person NAME`)",
                ws.id
            ),
        ));
    };
    let user = unix_user(people, person).map_err(|m| ApiError::new(StatusCode::FORBIDDEN, "forbidden", m))?;
    open(state, &ws, person, &user).map_err(|m| {
        tracing::warn!(workspace = %ws.id, %user, error = %m, "cannot open a person's workspace");
        ApiError::internal("the service cannot sign the person's SSH certificate; the operator finds why in its log")
    })
}

/// `user`'s workspace under `parent` (opened once: its key and first certificate made, its monitor
/// started).
pub fn open(state: &Arc<AppState>, parent: &Workspace, person: &str, user: &str) -> Result<Arc<Workspace>, String> {
    let id = person_workspace_id(&parent.id, user);
    if let Some(w) = state.workspace(&id) {
        return Ok(w);
    }
    let authority = state.authority.clone().ok_or("no SSH certificate authority (serve --ssh-ca-key)")?;
    let dir = super::workspaces::keys_dir(&state.state_path).join("people");
    let lifetime = state.certificate_secs;
    let issued = authority.issue(&dir, user, person, tao_slurm_engine::client::now_secs() as u64, lifetime)?;
    let mut settings = parent.settings.clone();
    settings.slurm_user = Some(user.to_string());
    settings.base_results_dir = settings.base_results_dir.map(|b| b.replace("{user}", user));
    // The person's certificate only: no ssh_config of the operator's, no agent, no mail of theirs.
    settings.ssh_key_path = Some(issued.key.clone());
    settings.ssh_key_only = true;
    settings.ssh_config = None;
    settings.ssh_auth_sock = None;
    settings.mail_user = None;
    // An idle connection ends before its certificate would; a busy one is let go at each renewal
    // (`Workspace::with_client`), so none outlives its certificate.
    settings.control_persist_secs = settings.control_persist_secs.min((lifetime / 2).max(5) as u32);
    settings.cluster = Some(id.clone());
    settings.person = Some(person.to_string());
    let mut w = Workspace::new(id, settings, parent.access.clone());
    w.name = parent.name.clone();
    w.policy = parent.policy.clone();
    w.ready.store(true, Ordering::Relaxed);
    w.identity = Identity::Person;
    w.before_login = Some(renewer(authority, dir, user.to_string(), person.to_string(), lifetime, issued.valid_before));
    let (w, new) = state.add_person_workspace(Arc::new(w));
    if new {
        super::workspaces::start_monitor(state, &w).map_err(|e| e.to_string())?;
    }
    Ok(w)
}

/// Renews the certificate before a login once half its lifetime is gone.
fn renewer(
    authority: Arc<Authority>,
    dir: std::path::PathBuf,
    user: String,
    person: String,
    lifetime: u64,
    valid_before: u64,
) -> super::workspace::BeforeLogin {
    let valid_before = AtomicU64::new(valid_before);
    let one_at_a_time = std::sync::Mutex::new(());
    Box::new(move || {
        let _one = one_at_a_time.lock().unwrap_or_else(|e| e.into_inner());
        let now = tao_slurm_engine::client::now_secs() as u64;
        if !renewal_due(valid_before.load(Ordering::Relaxed), now, lifetime) {
            return Ok(false);
        }
        let issued = authority.issue(&dir, &user, &person, now, lifetime)?;
        valid_before.store(issued.valid_before, Ordering::Relaxed);
        tracing::info!(%user, valid_before = issued.valid_before, "renewed a person's SSH certificate");
        Ok(true)
    })
}

/// At start: the persons' workspaces the recorded jobs name (their monitors follow those jobs), from
/// the records the state read as it started.
pub fn load(state: &Arc<AppState>) {
    let mut seen = std::collections::BTreeSet::new();
    let grants = state.records.sign_ins().grants().unwrap_or_else(|e| {
        tracing::warn!(error = %e, "cannot read the persons' grants; the first check closes what ended");
        Vec::new()
    });
    for job in state.api_jobs() {
        let Some((parent, user)) = split_person_workspace_id(&job.workspace) else { continue };
        if !seen.insert(job.workspace.clone()) {
            continue;
        }
        let Some(p) = state.workspace(parent).filter(|w| matches!(w.identity, Identity::PerPerson(_))) else {
            tracing::warn!(workspace = %job.workspace, "a person's workspace whose parent is not a per-person workspace any more; its jobs are not followed");
            continue;
        };
        let person = job.person.clone().unwrap_or_else(|| user.to_string());
        if access_ended(&person, &orgs_of(&p), &grants) {
            tracing::info!(workspace = %job.workspace, "a person whose access ended: their workspace is not opened");
            continue;
        }
        if let Err(e) = open(state, &p, &person, user) {
            tracing::warn!(workspace = %job.workspace, error = %e, "cannot open a person's workspace; its jobs are not followed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_person_is_their_mapped_user_or_their_own_name() {
        let none = BTreeMap::new();
        assert_eq!(unix_user(&none, "ada").unwrap(), "ada");
        assert!(unix_user(&none, "ada@example.org").unwrap_err().contains("people table"));
        let mapped: BTreeMap<String, String> = [("ada@example.org".to_string(), "ada".to_string())].into();
        assert_eq!(unix_user(&mapped, "ada@example.org").unwrap(), "ada");
        assert!(unix_user(&mapped, "bo").unwrap_err().contains("no Unix user"), "a table names everyone");
        assert_eq!(person_workspace_id("login1", "ada"), "login1@ada");
        assert_eq!(split_person_workspace_id("login1@ada"), Some(("login1", "ada")));
        assert_eq!(split_person_workspace_id("login1"), None);
        use super::super::workspace::shown_workspace;
        assert_eq!((shown_workspace("login1@ada"), shown_workspace("login1")), ("login1", "login1"));
    }

    #[test]
    fn a_persons_access_ends_with_their_last_grant_for_the_orgs_and_never_without_one() {
        let g = |person: &str, org: &str, ended: bool| tao_slurm_engine::client::records::Grant {
            issuer: "https://idp".into(),
            subject: format!("s-{person}"),
            org: org.into(),
            person: person.into(),
            admin: false,
            refresh_sealed: None,
            generation: 1,
            signed_in_at: 1,
            checked_at: None,
            ended_at: ended.then_some(5),
            ended_why: None,
        };
        let orgs = |o: &[&str]| o.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let grants = [g("ada", "team-a", true), g("ada", "team-b", false), g("bo", "team-a", false)];
        assert!(access_ended("ada", &orgs(&["team-a"]), &grants));
        assert!(!access_ended("ada", &orgs(&["team-a", "team-b"]), &grants), "team-b's grant holds");
        assert!(!access_ended("bo", &orgs(&["team-a"]), &grants));
        assert!(!access_ended("cy", &orgs(&["team-a"]), &grants), "no grant: the token's access");
        assert!(!access_ended("ada", &orgs(&["team-c"]), &grants), "another org's grant says nothing here");
    }

    #[test]
    fn a_certificate_is_renewed_once_half_its_life_is_gone() {
        assert!(!renewal_due(1_000 + 600, 1_000, 600));
        assert!(!renewal_due(1_000 + 600, 1_300, 600));
        assert!(renewal_due(1_000 + 600, 1_301, 600));
        assert!(renewal_due(1_000, 5_000, 600), "expired");
    }
}
