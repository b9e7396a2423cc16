//! What the service's sign-in keeps in its database, so that every replica sees the same and a
//! replica's restart loses no one's sign-in: who each person is (the provider's issuer and subject,
//! bound to one name for good), the terminals' sign-ins under way (device codes, bounded per
//! client), and the service's own keys (what seals a browser's sign-in state in its cookie).

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

impl ServiceDb {
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
}
