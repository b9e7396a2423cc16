//! Which identity runs a request: the one place that decides it. A request names an org's or the
//! operator's workspace (never a person's: those are not found by name), and a job by its id; what
//! reaches the cluster for it runs as
//! - the workspace's shared Unix user (a shared workspace), or
//! - the token's own person's Unix user, in that person's workspace (a per-person workspace): derived
//!   from the signed-in person, never chosen by the request. A machine's token reaches no person's
//!   workspace, and no token reaches another person's: their jobs' logs, files, events, TensorBoard
//!   and actions (cancel, retry, pause, resume, delete) are refused.
//!
//! The cache's view of a job (its status in a listing or `GET /jobs/{id}`) stays the org's: it runs
//! nothing on the cluster.

use super::error::{ApiError, ApiResult};
use super::state::{AppState, CachedJob};
use super::token_info::TokenInfo;
use super::workspace::{split_person_workspace_id, Identity, Workspace};
use axum::http::StatusCode;
use std::sync::Arc;

/// Whose identity a new job in a named workspace runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NewJobRunsAs {
    /// The workspace's own (shared) Unix user.
    TheWorkspaces,
    /// The signed-in person's own Unix user, in their workspace under this one (`people::for_token`
    /// opens it; a machine's token is refused there).
    TheTokensPerson,
}

/// Whose identity a new job of the workspace its request named (an org's or the operator's, as
/// `AppState::org_workspace` finds them) runs under.
pub fn for_new_job(named: &Workspace) -> ApiResult<NewJobRunsAs> {
    match &named.identity {
        Identity::Shared => Ok(NewJobRunsAs::TheWorkspaces),
        Identity::PerPerson(_) => Ok(NewJobRunsAs::TheTokensPerson),
        // Never found by name (see `AppState::org_workspace`); refused should one get here.
        Identity::Person => Err(not_theirs(&named.id)),
    }
}

/// Whether `token` may reach the cluster for `job` (its logs, files, events, actions): a job run as a
/// person is that person's alone; any other job, any token of its org.
pub fn may_reach(token: &TokenInfo, job: &CachedJob) -> ApiResult<()> {
    reach(token, &job.out.id, &job.out.workspace, job.out.user.as_deref())
}

/// [`may_reach`] over a job's id, workspace and person. Pure.
fn reach(token: &TokenInfo, id: &str, workspace: &str, runs_as: Option<&str>) -> ApiResult<()> {
    let Some((_, user)) = split_person_workspace_id(workspace) else { return Ok(()) };
    match (&token.person, runs_as) {
        (Some(person), Some(owner)) if person == owner => Ok(()),
        _ => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "job {} runs as {user}'s own Unix user: only that person reaches it (its logs, files and actions); this token {}",
                id,
                match &token.person {
                    Some(p) => format!("is {p}'s"),
                    None => "is a machine's".to_string(),
                }
            ),
        )),
    }
}

/// The workspace whose identity acts for `token` on `job`, once [`may_reach`] allows it.
pub fn job_workspace(state: &AppState, token: &TokenInfo, job: &CachedJob) -> ApiResult<Arc<Workspace>> {
    may_reach(token, job)?;
    let ws = state.workspace(&job.out.workspace).ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "workspace_unavailable",
            format!("the job's workspace {} is not configured in this service any more", job.out.workspace),
        )
    })?;
    // A person's workspace acts only for the person it was opened for.
    if matches!(ws.identity, Identity::Person) && ws.settings.person.as_deref() != token.person.as_deref() {
        return Err(not_theirs(&ws.id));
    }
    Ok(ws)
}

fn not_theirs(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "forbidden",
        format!("workspace {id} is a person's own: only that person's requests run there, and they name its parent"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(person: Option<&str>, admin: bool) -> TokenInfo {
        TokenInfo {
            id: "t".into(),
            org: "team-a".into(),
            name: "n".into(),
            admin,
            expires_at: None,
            person: person.map(String::from),
        }
    }

    fn may_reach(token: &TokenInfo, (workspace, user): (&str, Option<&str>)) -> ApiResult<()> {
        reach(token, "j1", workspace, user)
    }

    fn job<'a>(workspace: &'a str, user: Option<&'a str>) -> (&'a str, Option<&'a str>) {
        (workspace, user)
    }

    #[test]
    fn a_persons_job_is_reached_by_that_person_alone() {
        let bos = job("people@bo", Some("bo"));
        assert!(may_reach(&token(Some("bo"), false), bos).is_ok());
        for other in [token(Some("ada"), false), token(Some("ada"), true), token(None, true), token(None, false)] {
            let e = may_reach(&other, bos).unwrap_err();
            assert_eq!((e.status.as_u16(), e.body.error_type.as_str()), (403, "forbidden"), "{other:?}");
        }
        // A job of a shared workspace: any token of the org (the workspace's one Unix user).
        let shared = job("login1", Some("bo"));
        assert!(may_reach(&token(Some("ada"), false), shared).is_ok());
        assert!(may_reach(&token(None, false), job("login1", None)).is_ok());
        // A person's workspace whose job names no person: no one.
        assert!(may_reach(&token(Some("bo"), false), job("people@bo", None)).is_err());
    }
}
