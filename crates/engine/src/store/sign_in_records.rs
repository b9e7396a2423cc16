//! What the service's sign-in keeps in its database, so that every replica sees the same and a
//! replica's restart loses no one's sign-in: who each person is (the provider's issuer and subject,
//! bound to one name for good), the terminals' sign-ins under way (device codes, bounded per
//! client), the service's own keys (what seals a browser's sign-in state in its cookie), and each
//! signed-in person's grant at the provider, checked again while it lasts (`grants`).

use super::service_records::{sql_err, ServiceDb};
use super::sql::{params, OptionalExtension};

// The tables are with the service's others (`service_records::SIGN_IN_SCHEMA`).

/// A terminal's sign-in as the person's browser finds it by the code they typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSignIn {
    pub code_sha256: String,
    pub user_code: String,
    /// The address that asked for it (shown to the person before they confirm).
    pub client: String,
    pub org: Option<String>,
    pub created_at: i64,
}

/// Why a terminal's sign-in was not started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceRefused {
    /// This client has `n` under way already.
    ClientBusy(usize),
    /// The service has its most under way.
    Full,
}

/// Where a terminal's sign-in stands when the terminal asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceState {
    /// Unknown, expired, or already collected.
    Gone,
    Pending,
    /// Settled: the outcome the browser left (taken: no one collects it again).
    Settled(String),
}

/// A person's grant at the provider for one org, as their last sign-in to it left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub issuer: String,
    pub subject: String,
    pub org: String,
    /// Their bound name (what their tokens and workspaces name).
    pub person: String,
    pub admin: bool,
    /// The provider's refresh token, sealed by the service (None: the provider issued none).
    pub refresh_sealed: Option<String>,
    /// Grows with each sign-in and each new refresh token: a write of an older one changes nothing.
    pub generation: i64,
    pub signed_in_at: i64,
    pub checked_at: Option<i64>,
    /// When the person's access to the org was ended, and why (None: it holds).
    pub ended_at: Option<i64>,
    pub ended_why: Option<String>,
}

const GRANT_COLUMNS: &str = "issuer, subject, org, person, admin, refresh_sealed, generation, signed_in_at, checked_at, ended_at, ended_why";

fn grant_of(r: &super::sql::Row) -> super::sql::Result<Grant> {
    Ok(Grant {
        issuer: r.get(0)?,
        subject: r.get(1)?,
        org: r.get(2)?,
        person: r.get(3)?,
        admin: r.get::<_, i64>(4)? != 0,
        refresh_sealed: r.get(5)?,
        generation: r.get(6)?,
        signed_in_at: r.get(7)?,
        checked_at: r.get(8)?,
        ended_at: r.get(9)?,
        ended_why: r.get(10)?,
    })
}

impl ServiceDb {
    /// Keep a sign-in's grant (the person's access to the org holds again, if it had ended): the
    /// grant before it, of the same person and org, is replaced.
    pub(crate) fn keep_grant(&self, g: &Grant) -> Result<(), String> {
        self.conn()
            .execute(
                "INSERT INTO grants (issuer, subject, org, person, admin, refresh_sealed, generation, signed_in_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, 1, ?7)
                 ON CONFLICT (issuer, subject, org) DO UPDATE SET
                     person = excluded.person, admin = excluded.admin, refresh_sealed = excluded.refresh_sealed,
                     generation = grants.generation + 1, signed_in_at = excluded.signed_in_at,
                     checked_at = NULL, ended_at = NULL, ended_why = NULL",
                params![g.issuer, g.subject, g.org, g.person, i64::from(g.admin), g.refresh_sealed, g.signed_in_at],
            )
            .map_err(|e| sql_err(&self.path, e))?;
        Ok(())
    }

    /// Every grant, ended ones too.
    pub(crate) fn grants(&self) -> Result<Vec<Grant>, String> {
        let conn = self.conn();
        let mut st = conn
            .prepare(&format!("SELECT {GRANT_COLUMNS} FROM grants ORDER BY issuer, subject, org"))
            .map_err(|e| sql_err(&self.path, e))?;
        let rows = st.query_map([], grant_of).map_err(|e| sql_err(&self.path, e))?;
        rows.collect::<Result<_, _>>().map_err(|e| sql_err(&self.path, e))
    }

    /// A check found `g` (at its generation) still good: when, and the provider's new refresh token
    /// if it sent one. Whether `g` was still the grant (a sign-in or another check since changes
    /// nothing here).
    pub(crate) fn grant_holds(&self, g: &Grant, refresh_sealed: Option<&str>, now: i64) -> Result<bool, String> {
        let n = self
            .conn()
            .execute(
                "UPDATE grants SET checked_at = ?5,
                     refresh_sealed = COALESCE(CAST(?6 AS TEXT), refresh_sealed),
                     generation = generation + CASE WHEN CAST(?6 AS TEXT) IS NULL THEN 0 ELSE 1 END
                 WHERE issuer = ?1 AND subject = ?2 AND org = ?3 AND generation = ?4 AND ended_at IS NULL",
                params![g.issuer, g.subject, g.org, g.generation, now, refresh_sealed],
            )
            .map_err(|e| sql_err(&self.path, e))?;
        Ok(n == 1)
    }

    /// End the person's access to the org `g` gave, if `g` (at its generation) is still the grant:
    /// in one commit, the grant ended with `why`, every token of the person in that org revoked, and
    /// `audit` appended. Whether it ended it.
    pub(crate) fn end_grant(
        &self,
        g: &Grant,
        why: &str,
        now: i64,
        audit: super::audit::AuditEntry,
    ) -> Result<bool, String> {
        let (g, why, path) = (g.clone(), why.to_string(), self.path.clone());
        let ended = self.write_grouped(Box::new(move |conn| {
            let err = |e| sql_err(&path, e);
            let n = conn
                .execute(
                    "UPDATE grants SET ended_at = ?5, ended_why = ?6
                     WHERE issuer = ?1 AND subject = ?2 AND org = ?3 AND generation = ?4 AND ended_at IS NULL",
                    params![g.issuer, g.subject, g.org, g.generation, now, why],
                )
                .map_err(err)?;
            if n != 1 {
                return Ok(0);
            }
            conn.execute(
                "UPDATE tokens SET revoked_at = ?3 WHERE person = ?1 AND org = ?2 AND revoked_at IS NULL",
                params![g.person, g.org, now],
            )
            .map_err(err)?;
            super::audit::insert_audit_row(conn, &audit).map_err(err)?;
            Ok(1)
        }))?;
        Ok(ended == 1)
    }

    /// The name bound to the provider's (`issuer`, `subject`): the one bound at their first sign-in
    /// (whatever the provider's claims say now), else `person`, bound now unless it is another
    /// subject's already (then Err names it).
    pub(crate) fn bind_person(&self, issuer: &str, subject: &str, person: &str, now: i64) -> Result<String, String> {
        let conn = self.conn();
        let err = |e| sql_err(&self.path, e);
        let bound = |conn: &super::sql::Conn| {
            conn.query_row(
                "SELECT person FROM people WHERE issuer = ?1 AND subject = ?2",
                params![issuer, subject],
                |r| r.get::<_, String>(0),
            )
            .optional()
        };
        if let Some(p) = bound(&conn).map_err(err)? {
            conn.execute("UPDATE people SET last_at = ?3 WHERE issuer = ?1 AND subject = ?2", params![issuer, subject, now])
                .map_err(err)?;
            return Ok(p);
        }
        conn.execute(
            "INSERT INTO people (issuer, subject, person, first_at, last_at) VALUES (?1, ?2, ?3, ?4, ?4)
             ON CONFLICT DO NOTHING",
            params![issuer, subject, person, now],
        )
        .map_err(err)?;
        // Ours, or what a sign-in of the same subject bound at the same moment; none: the name is
        // another subject's.
        bound(&conn).map_err(err)?.ok_or_else(|| {
            format!("the name {person:?} belongs to another person at this service; ask the operator to map you ([sign_in.people])")
        })
    }

    /// The service's key `name` (32 random bytes, made by the first replica that asks).
    pub(crate) fn service_key(&self, name: &str) -> Result<Vec<u8>, String> {
        let mut fresh = [0u8; 32];
        getrandom::fill(&mut fresh).map_err(|e| format!("the system's random generator failed: {e}"))?;
        let conn = self.conn();
        let err = |e| sql_err(&self.path, e);
        conn.execute(
            "INSERT INTO service_keys (name, value) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
            params![name, fresh.to_vec()],
        )
        .map_err(err)?;
        conn.query_row("SELECT value FROM service_keys WHERE name = ?1", params![name], |r| r.get::<_, Vec<u8>>(0))
            .map_err(err)
    }

    /// Record a terminal's sign-in, valid until `expires_at`, unless its client has `per_client` under
    /// way or the service `total`. Expired ones are dropped first.
    pub(crate) fn start_device(
        &self,
        d: &DeviceSignIn,
        expires_at: i64,
        per_client: usize,
        total: usize,
    ) -> Result<Result<(), DeviceRefused>, String> {
        let conn = self.conn();
        let err = |e| sql_err(&self.path, e);
        conn.execute("DELETE FROM device_sign_ins WHERE expires_at <= ?1", params![d.created_at]).map_err(err)?;
        let mine: i64 = conn
            .query_row("SELECT COUNT(*) FROM device_sign_ins WHERE client = ?1", params![d.client], |r| r.get(0))
            .map_err(err)?;
        if mine as usize >= per_client {
            return Ok(Err(DeviceRefused::ClientBusy(mine as usize)));
        }
        let all: i64 = conn.query_row("SELECT COUNT(*) FROM device_sign_ins", [], |r| r.get(0)).map_err(err)?;
        if all as usize >= total {
            return Ok(Err(DeviceRefused::Full));
        }
        conn.execute(
            "INSERT INTO device_sign_ins (code_sha256, user_code, client, org, created_at, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![d.code_sha256, d.user_code, d.client, d.org, d.created_at, expires_at],
        )
        .map_err(err)?;
        Ok(Ok(()))
    }

    /// The terminal's sign-in a person's typed `user_code` names, while it waits for them.
    pub(crate) fn device_by_user_code(&self, user_code: &str, now: i64) -> Result<Option<DeviceSignIn>, String> {
        self.conn()
            .query_row(
                "SELECT code_sha256, user_code, client, org, created_at FROM device_sign_ins
                 WHERE user_code = ?1 AND outcome IS NULL AND expires_at > ?2",
                params![user_code, now],
                |r| {
                    Ok(DeviceSignIn {
                        code_sha256: r.get(0)?,
                        user_code: r.get(1)?,
                        client: r.get(2)?,
                        org: r.get(3)?,
                        created_at: r.get(4)?,
                    })
                },
            )
            .optional()
            .map_err(|e| sql_err(&self.path, e))
    }

    /// Settle a terminal's sign-in once: whether it was still waiting.
    pub(crate) fn settle_device(&self, code_sha256: &str, outcome: &str, now: i64) -> Result<bool, String> {
        let n = self
            .conn()
            .execute(
                "UPDATE device_sign_ins SET outcome = ?2 WHERE code_sha256 = ?1 AND outcome IS NULL AND expires_at > ?3",
                params![code_sha256, outcome, now],
            )
            .map_err(|e| sql_err(&self.path, e))?;
        Ok(n == 1)
    }

    /// Where the terminal's sign-in stands; a settled one is taken (removed) by the one asker that
    /// gets it.
    pub(crate) fn take_device(&self, code_sha256: &str, now: i64) -> Result<DeviceState, String> {
        let conn = self.conn();
        let err = |e| sql_err(&self.path, e);
        let row = conn
            .query_row(
                "SELECT outcome FROM device_sign_ins WHERE code_sha256 = ?1 AND expires_at > ?2",
                params![code_sha256, now],
                |r| r.get::<_, Option<String>>(0),
            )
            .optional()
            .map_err(err)?;
        match row {
            None => Ok(DeviceState::Gone),
            Some(None) => Ok(DeviceState::Pending),
            Some(Some(outcome)) => {
                let n = conn
                    .execute(
                        "DELETE FROM device_sign_ins WHERE code_sha256 = ?1 AND outcome IS NOT NULL",
                        params![code_sha256],
                    )
                    .map_err(err)?;
                Ok(if n == 1 { DeviceState::Settled(outcome) } else { DeviceState::Gone })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_place::both;

    fn device(code: &str, user: &str, client: &str, at: i64) -> DeviceSignIn {
        DeviceSignIn {
            code_sha256: code.into(),
            user_code: user.into(),
            client: client.into(),
            org: Some("team-a".into()),
            created_at: at,
        }
    }

    both! { fn a_subject_keeps_its_first_name_and_a_name_has_one_subject(place) {
        let db = place.service_db();
        assert_eq!(db.bind_person("https://idp", "s-ada", "ada", 1).unwrap(), "ada");
        // Renamed at the provider (to a colleague's name): still ada.
        assert_eq!(db.bind_person("https://idp", "s-ada", "bo", 2).unwrap(), "ada");
        // Another subject naming ada: refused; bo's own subject gets bo.
        let e = db.bind_person("https://idp", "s-eve", "ada", 3).unwrap_err();
        assert!(e.contains("another person"), "{e}");
        assert_eq!(db.bind_person("https://idp", "s-bo", "bo", 4).unwrap(), "bo");
        // The same subject of another provider is another person.
        assert!(db.bind_person("https://other", "s-ada", "ada", 5).is_err());
    }}

    both! { fn the_service_key_is_made_once_and_shared(place) {
        let db = place.service_db();
        let k = db.service_key("sign-in").unwrap();
        assert_eq!(k.len(), 32);
        assert_eq!(db.service_key("sign-in").unwrap(), k);
        assert_ne!(db.service_key("other").unwrap(), k);
    }}

    both! { fn terminals_sign_ins_are_bounded_per_client_settled_once_and_taken_once(place) {
        let db = place.service_db();
        for i in 0..3 {
            db.start_device(&device(&format!("c{i}"), &format!("U{i}"), "10.0.0.1", 100), 400, 3, 10).unwrap().unwrap();
        }
        assert_eq!(
            db.start_device(&device("c9", "U9", "10.0.0.1", 100), 400, 3, 10).unwrap(),
            Err(DeviceRefused::ClientBusy(3))
        );
        // Another client is not held up by the first.
        db.start_device(&device("d0", "V0", "10.0.0.2", 100), 400, 3, 4).unwrap().unwrap();
        assert_eq!(db.start_device(&device("d1", "V1", "10.0.0.2", 100), 400, 3, 4).unwrap(), Err(DeviceRefused::Full));
        let found = db.device_by_user_code("U1", 200).unwrap().unwrap();
        assert_eq!((found.code_sha256.as_str(), found.client.as_str()), ("c1", "10.0.0.1"));
        assert_eq!(db.take_device("c1", 200).unwrap(), DeviceState::Pending);
        assert!(db.settle_device("c1", "{\"ok\":1}", 200).unwrap());
        assert!(!db.settle_device("c1", "{\"ok\":2}", 200).unwrap(), "settled once");
        assert!(db.device_by_user_code("U1", 200).unwrap().is_none(), "a settled code is not typed again");
        assert_eq!(db.take_device("c1", 200).unwrap(), DeviceState::Settled("{\"ok\":1}".into()));
        assert_eq!(db.take_device("c1", 200).unwrap(), DeviceState::Gone, "taken once");
        // Expired: gone, and dropped at the next start (the client has room again).
        assert_eq!(db.take_device("c0", 400).unwrap(), DeviceState::Gone);
        db.start_device(&device("c8", "U8", "10.0.0.1", 401), 700, 3, 10).unwrap().unwrap();
    }}

    both! { fn a_grant_is_kept_checked_and_ended_once_with_its_persons_tokens_of_that_org(place) {
        let db = place.service_db();
        let grant = |org: &str, refresh: Option<&str>, at: i64| Grant {
            issuer: "https://idp".into(),
            subject: "s-ada".into(),
            org: org.into(),
            person: "ada".into(),
            admin: false,
            refresh_sealed: refresh.map(str::to_string),
            generation: 0,
            signed_in_at: at,
            checked_at: None,
            ended_at: None,
            ended_why: None,
        };
        db.keep_grant(&grant("team-a", Some("r1"), 10)).unwrap();
        db.keep_grant(&grant("team-b", None, 10)).unwrap();
        let (a_tok, _) = db.create_token("team-a", "sign-in", Some("ada"), Some(3600), 10).unwrap();
        let (b_tok, _) = db.create_token("team-b", "sign-in", Some("ada"), Some(3600), 10).unwrap();
        let (bo_tok, _) = db.create_token("team-a", "sign-in", Some("bo"), Some(3600), 10).unwrap();
        let read = db.grants().unwrap();
        assert_eq!(read.len(), 2);
        let a = read.iter().find(|g| g.org == "team-a").unwrap().clone();
        assert_eq!((a.refresh_sealed.as_deref(), a.generation, a.ended_at), (Some("r1"), 1, None));
        // A check with a new refresh token moves the generation: a check of the old one changes nothing.
        assert!(db.grant_holds(&a, Some("r2"), 20).unwrap());
        assert!(!db.grant_holds(&a, None, 21).unwrap(), "an older generation");
        let a2 = db.grants().unwrap().into_iter().find(|g| g.org == "team-a").unwrap();
        assert_eq!((a2.refresh_sealed.as_deref(), a2.generation, a2.checked_at), (Some("r2"), 2, Some(20)));
        assert!(db.grant_holds(&a2, None, 22).unwrap(), "no new token: the same generation");
        let audit = |at: i64| crate::store::audit::AuditEntry {
            id: 0,
            at,
            org: "team-a".into(),
            token_id: None,
            token_name: None,
            person: Some("ada".into()),
            action: "people.access_ended".into(),
            method: "-".into(),
            path: "-".into(),
            target: Some("ada".into()),
            status: 0,
            outcome: "left the group".into(),
        };
        // Ending at an old generation ends nothing; at the grant's own, once.
        assert!(!db.end_grant(&a, "left", 30, audit(30)).unwrap());
        assert!(db.end_grant(&a2, "left the group", 31, audit(31)).unwrap());
        assert!(!db.end_grant(&a2, "left the group", 32, audit(32)).unwrap(), "once");
        let revoked: Vec<String> =
            db.tokens().unwrap().into_iter().filter(|t| t.revoked_at.is_some()).map(|t| t.id).collect();
        // Her tokens of that org only: not her team-b token, not bo's.
        assert_eq!(revoked, [a_tok.id], "{} {}", b_tok.id, bo_tok.id);
        let trail = db.audit(Some("team-a"), 0, 10).unwrap();
        assert_eq!(trail.len(), 1, "one entry: {trail:?}");
        assert_eq!((trail[0].action.as_str(), trail[0].outcome.as_str()), ("people.access_ended", "left the group"));
        let ended = db.grants().unwrap().into_iter().find(|g| g.org == "team-a").unwrap();
        assert_eq!((ended.ended_at, ended.ended_why.as_deref()), (Some(31), Some("left the group")));
        assert!(!db.grant_holds(&ended, None, 33).unwrap(), "an ended grant is not checked into holding");
        // Signing in again gives the access back: a new generation, not ended.
        db.keep_grant(&grant("team-a", Some("r3"), 40)).unwrap();
        let again = db.grants().unwrap().into_iter().find(|g| g.org == "team-a").unwrap();
        assert_eq!((again.ended_at, again.generation, again.refresh_sealed.as_deref()), (None, 3, Some("r3")));
    }}
}
