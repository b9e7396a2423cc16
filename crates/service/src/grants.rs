//! A person's access lasts while the provider says they belong (issue 50, item 7). Each sign-in
//! keeps the person's grant at the provider for the org (their refresh token, sealed with the
//! service's key: `sign_in_routes::keep_grant`). Every [`CHECK_EVERY`], the replica that holds the
//! grants' lease exchanges each grant's refresh token at the provider and reads the person's claims
//! again, with the rule sign-in uses (`sign_in::membership`), a few at once, each within a deadline.
//! When the provider refuses the grant or the person is no longer in the org's group (or no longer
//! its admin, for an admin's grant), in one commit: the grant is ended, every token of the person in
//! that org revoked (every replica reloads its tokens each second; streams end with their token) and
//! an audit entry written. Every [`CLOSE_EVERY`], every replica closes the workspaces of the persons
//! whose access ended (`people::close`: monitor stopped, key removed, master ended). A provider that
//! does not answer changes nothing (no verdict without its word); a person signs in again to get a
//! new grant.

use super::people;
use super::sign_in::{Recheck, SignIn};
use super::sign_in_seal::{grant_purpose, Seal};
use super::state::AppState;
use futures_util::StreamExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tao_slurm_engine::client::records::{AuditEntry, Grant};

/// How often the grants are checked at the provider (by one replica at a time).
pub const CHECK_EVERY: Duration = Duration::from_secs(20);
/// How often each replica closes the workspaces of persons whose access ended.
pub const CLOSE_EVERY: Duration = Duration::from_secs(5);
/// Persons checked at the provider at once.
const AT_ONCE: usize = 4;
/// The grants' lease among the replicas, and how long it lasts without renewal (renewed each check).
const LEASE: &str = "grants:check";
const LEASE_SECS: i64 = 45;
/// The audit trail's action for an ended access.
pub const ENDED_ACTION: &str = "people.access_ended";

/// What a check makes of the provider's answer about a grant for `org` (`admin`: the grant made
/// its person the org's admin). Pure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The access holds; keep the provider's new refresh token if it sent one.
    Holds { rotated: Option<String> },
    /// The access ends, for this reason.
    Ends(String),
    /// The provider said nothing of the person: nothing changes.
    Unknown(String),
}

pub fn decide(org: &str, admin: bool, answer: Recheck) -> Decision {
    match answer {
        Recheck::Refused(why) => Decision::Ends(why),
        Recheck::Unknown(why) => Decision::Unknown(why),
        Recheck::Claims { membership: Err(why), .. } => {
            Decision::Ends(format!("the identity provider's claims no longer let the person in: {why}"))
        }
        Recheck::Claims { membership: Ok(m), rotated } => match m.orgs.get(org) {
            None => Decision::Ends(format!("{} is no longer in org {org}'s group at the identity provider", m.person)),
            Some(false) if admin => Decision::Ends(format!(
                "{} is no longer an admin of org {org} at the identity provider (signing in again gives a member's token)",
                m.person
            )),
            Some(_) => Decision::Holds { rotated },
        },
    }
}

/// The grants a check asks the provider about: those that hold and carry a refresh token (a grant
/// without one is the token's lifetime alone: docs/trust.md).
pub fn to_check(grants: Vec<Grant>) -> Vec<Grant> {
    grants.into_iter().filter(|g| g.ended_at.is_none() && g.refresh_sealed.is_some()).collect()
}

/// The workspaces among `open` ((id, person, the orgs its parent serves)) to close: their person's
/// access ended (`people::access_ended`). Pure.
pub fn to_close(open: &[(String, String, Vec<String>)], grants: &[Grant]) -> Vec<String> {
    open.iter()
        .filter(|(_, person, orgs)| people::access_ended(person, orgs, grants))
        .map(|(id, _, _)| id.clone())
        .collect()
}

fn now() -> i64 {
    tao_slurm_engine::client::now_secs()
}

/// Run `f` on the records off the async runtime.
async fn records<T: Send + 'static>(
    state: &Arc<AppState>,
    f: impl FnOnce(&tao_slurm_engine::client::records::ServiceRecords) -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    let st = state.clone();
    tokio::task::spawn_blocking(move || f(&st.records)).await.unwrap_or_else(|e| Err(e.to_string()))
}

/// Start the checks and closes (when the service signs people in), until the service stops.
pub fn start(state: &Arc<AppState>) {
    let Some(sign_in) = state.sign_in.clone() else { return };
    let st = state.clone();
    tokio::spawn(async move {
        let lease = Arc::new(Mutex::new(None));
        let mut tick = tokio::time::interval(CLOSE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut checked: Option<Instant> = None;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = st.shutdown.cancelled() => break,
            }
            if checked.is_none_or(|t| t.elapsed() >= CHECK_EVERY) {
                checked = Some(Instant::now());
                if holds_lease(&st, &lease).await {
                    check_all(&st, &sign_in).await;
                }
            }
            close_ended(&st).await;
        }
    });
}

/// Take or renew the grants' lease for this replica (with a client of its own, whose store keeps
/// to it: it writes nothing else).
async fn holds_lease(state: &Arc<AppState>, lease: &Arc<Mutex<Option<tao_slurm_engine::Client>>>) -> bool {
    let (st, lease) = (state.clone(), lease.clone());
    tokio::task::spawn_blocking(move || {
        let mut client = lease.lock().unwrap_or_else(|e| e.into_inner());
        if client.is_none() {
            let settings = st.workspaces().first().map(|w| w.settings.clone())?;
            *client = tao_slurm_engine::Client::new(settings)
                .map_err(|e| tracing::warn!(error = %e, "cannot open the store for the grants' lease"))
                .ok();
        }
        match client.as_ref()?.hold_lease(LEASE, &st.replica_id, LEASE_SECS) {
            Ok(held) => Some(held.is_some()),
            Err(e) => {
                tracing::warn!(error = %e, "cannot take the grants' lease; not checking until it can");
                Some(false)
            }
        }
    })
    .await
    .ok()
    .flatten()
    .unwrap_or(false)
}

/// Check every grant that holds at the provider, [`AT_ONCE`] at a time.
async fn check_all(state: &Arc<AppState>, sign_in: &Arc<SignIn>) {
    let (st, s) = (state.clone(), sign_in.clone());
    let seal = tokio::task::spawn_blocking(move || super::sign_in_routes::seal_of(&st, &s).map(|_| ())).await;
    let Some(seal) = sign_in.seal.get().filter(|_| matches!(seal, Ok(Ok(())))) else {
        tracing::warn!("cannot read the service's sealing key; the grants are not checked");
        return;
    };
    let grants = match records(state, |r| r.sign_ins().grants()).await {
        Ok(g) => to_check(g),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the persons' grants; not checked this time");
            return;
        }
    };
    let ended: Vec<bool> = futures_util::stream::iter(grants)
        .map(|g| check_one(state, sign_in, seal, g))
        .buffer_unordered(AT_ONCE)
        .collect()
        .await;
    if ended.contains(&true) {
        let st = state.clone();
        if let Ok(Err(e)) = tokio::task::spawn_blocking(move || st.reload_tokens_now()).await {
            tracing::warn!(error = %e, "cannot read the tokens again after revoking some");
        }
    }
}

/// Check one grant; whether it ended it.
async fn check_one(state: &Arc<AppState>, sign_in: &SignIn, seal: &Seal, g: Grant) -> bool {
    let purpose = grant_purpose(&g.issuer, &g.subject, &g.org);
    let refresh: Option<String> = g.refresh_sealed.as_deref().and_then(|t| seal.open(&purpose, t, now()));
    let Some(refresh) = refresh else {
        tracing::warn!(person = %g.person, org = %g.org, "a person's grant does not open with the service's key; it stays until they sign in again");
        return false;
    };
    match decide(&g.org, g.admin, sign_in.recheck(&g.subject, &refresh).await) {
        Decision::Holds { rotated } => {
            let sealed = match rotated.map(|r| seal.seal(&purpose, r, i64::MAX)).transpose() {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(person = %g.person, error = %e, "cannot seal a person's new refresh token");
                    return false;
                }
            };
            if let Err(e) = records(state, move |r| r.sign_ins().grant_holds(&g, sealed.as_deref(), now())).await {
                tracing::warn!(error = %e, "cannot record a person's check");
            }
            false
        }
        Decision::Unknown(why) => {
            tracing::warn!(person = %g.person, org = %g.org, %why, "cannot check a person's grant now; their access stays as it is");
            false
        }
        Decision::Ends(why) => {
            let at = now();
            let entry = AuditEntry {
                id: 0,
                at,
                org: g.org.clone(),
                token_id: None,
                token_name: None,
                person: Some(g.person.clone()),
                action: ENDED_ACTION.into(),
                method: "-".into(),
                path: "-".into(),
                target: Some(g.person.clone()),
                status: 0,
                outcome: why.clone(),
            };
            let (person, org) = (g.person.clone(), g.org.clone());
            match records(state, move |r| r.sign_ins().end_grant(&g, &why, at, entry)).await {
                Ok(true) => {
                    tracing::info!(%person, %org, "a person's access ended: their tokens of the org are revoked");
                    true
                }
                // A sign-in or another check changed the grant meanwhile: the next check reads it.
                Ok(false) => false,
                Err(e) => {
                    tracing::warn!(%person, %org, error = %e, "cannot end a person's access; tried again at the next check");
                    false
                }
            }
        }
    }
}

/// Close this replica's workspaces of persons whose access ended.
async fn close_ended(state: &Arc<AppState>) {
    let open: Vec<(String, String, Vec<String>)> = state
        .person_workspaces()
        .iter()
        .filter_map(|w| {
            let person = w.settings.person.clone()?;
            let (parent, _) = super::workspace::split_person_workspace_id(&w.id)?;
            Some((w.id.clone(), person, people::orgs_of(&*state.workspace(parent)?)))
        })
        .collect();
    if open.is_empty() {
        return;
    }
    let grants = match records(state, |r| r.sign_ins().grants()).await {
        Ok(g) => g,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the persons' grants; nothing closed this time");
            return;
        }
    };
    for id in to_close(&open, &grants) {
        let st = state.clone();
        let _ =
            tokio::task::spawn_blocking(move || people::close(&st, &id, "their access ended at the identity provider"))
                .await;
    }
}

#[cfg(test)]
mod tests {
    use super::super::sign_in::Membership;
    use super::*;

    fn member(orgs: &[(&str, bool)]) -> Result<Membership, String> {
        Ok(Membership {
            subject: "s-ada".into(),
            person: "ada".into(),
            orgs: orgs.iter().map(|(o, a)| (o.to_string(), *a)).collect(),
        })
    }

    fn grant(person: &str, org: &str, ended: bool, refresh: bool) -> Grant {
        Grant {
            issuer: "https://idp".into(),
            subject: format!("s-{person}"),
            org: org.into(),
            person: person.into(),
            admin: false,
            refresh_sealed: refresh.then(|| "sealed".into()),
            generation: 1,
            signed_in_at: 1,
            checked_at: None,
            ended_at: ended.then_some(2),
            ended_why: None,
        }
    }

    #[test]
    fn access_ends_on_the_providers_refusal_or_a_membership_sign_in_would_refuse_and_nothing_else() {
        let claims = |m, rotated: Option<&str>| Recheck::Claims { membership: m, rotated: rotated.map(String::from) };
        assert_eq!(
            decide("team-a", false, claims(member(&[("team-a", false)]), Some("r2"))),
            Decision::Holds { rotated: Some("r2".into()) }
        );
        assert_eq!(
            decide("team-a", true, claims(member(&[("team-a", true)]), None)),
            Decision::Holds { rotated: None }
        );
        assert_eq!(
            decide("team-a", false, claims(member(&[("team-a", true)]), None)),
            Decision::Holds { rotated: None },
            "made an admin since: the member's token holds (signing in again makes an admin's)"
        );
        let ends = |d: Decision, want: &str| match d {
            Decision::Ends(why) => assert!(why.contains(want), "{why}"),
            other => panic!("{other:?}"),
        };
        ends(decide("team-a", false, claims(member(&[("team-b", false)]), None)), "no longer in org team-a's group");
        ends(decide("team-a", true, claims(member(&[("team-a", false)]), None)), "no longer an admin");
        ends(
            decide("team-a", false, claims(Err("ada is in none of the groups that give access".into()), None)),
            "none of the groups",
        );
        ends(decide("team-a", false, Recheck::Refused("refused (invalid_grant)".into())), "invalid_grant");
        assert_eq!(
            decide("team-a", false, Recheck::Unknown("timed out".into())),
            Decision::Unknown("timed out".into()),
            "no answer is no verdict"
        );
    }

    #[test]
    fn only_holding_grants_with_a_refresh_token_are_checked() {
        let checked = to_check(vec![
            grant("ada", "team-a", false, true),
            grant("bo", "team-a", true, true),
            grant("cy", "team-a", false, false),
        ]);
        assert_eq!(checked.iter().map(|g| g.person.as_str()).collect::<Vec<_>>(), ["ada"]);
    }

    #[test]
    fn a_persons_workspaces_close_when_their_grant_for_its_orgs_ended_and_none_holds() {
        let open = vec![
            ("people@ada".to_string(), "ada".to_string(), vec!["team-a".to_string()]),
            ("shared@ada".to_string(), "ada".to_string(), vec!["team-a".to_string(), "team-b".to_string()]),
            ("people@bo".to_string(), "bo".to_string(), vec!["team-a".to_string()]),
            ("people@cy".to_string(), "cy".to_string(), vec!["team-a".to_string()]),
        ];
        let grants = vec![
            grant("ada", "team-a", true, true),
            grant("ada", "team-b", false, true),
            grant("bo", "team-a", false, true),
            // cy never signed in through the provider (a token the operator made): no grant.
        ];
        assert_eq!(to_close(&open, &grants), ["people@ada"], "team-b still gives ada the shared parent");
        let mut all_ended = grants.clone();
        all_ended[1].ended_at = Some(3);
        assert_eq!(to_close(&open, &all_ended), ["people@ada", "shared@ada"]);
        assert!(to_close(&open, &[]).is_empty());
    }
}
