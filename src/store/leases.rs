//! Leases in the service's database (issue 25): which replica follows a workspace's cluster. A lease
//! is taken when free or expired, renewed by its holder, and its epoch grows each time it changes
//! hands, so a holder that lost it can tell. Callers pass `now` (Unix seconds).

use super::service_records::{sql_err, ServiceDb};
use super::sql::{params, OptionalExtension};
use serde::Serialize;

/// A lease as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lease {
    pub name: String,
    pub holder: String,
    /// Grows by one each time the lease changes hands.
    pub epoch: i64,
    pub expires_at: i64,
}

impl ServiceDb {
    /// Take or renew lease `name` for `holder` until `now + ttl`: yes when it was free, expired or
    /// already `holder`'s. Returns its epoch when `holder` holds it now, None when another does.
    pub fn take_lease(&self, name: &str, holder: &str, ttl: i64, now: i64) -> Result<Option<i64>, String> {
        self.conn()
            .query_row(
                "INSERT INTO leases (name, holder, epoch, expires_at) VALUES (?1, ?2, 1, ?3 + ?4)
                 ON CONFLICT (name) DO UPDATE SET
                     epoch = CASE WHEN leases.holder = excluded.holder THEN leases.epoch ELSE leases.epoch + 1 END,
                     holder = excluded.holder,
                     expires_at = excluded.expires_at
                 WHERE leases.holder = excluded.holder OR leases.expires_at <= ?3
                 RETURNING epoch",
                params![name, holder, now, ttl],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| sql_err(&self.path, e))
    }

    /// Let go of `name` if `holder` holds it (a stopping replica): another may take it at once.
    pub fn release_lease(&self, name: &str, holder: &str) -> Result<bool, String> {
        self.conn()
            .execute("UPDATE leases SET expires_at = 0 WHERE name = ?1 AND holder = ?2", params![name, holder])
            .map(|n| n > 0)
            .map_err(|e| sql_err(&self.path, e))
    }

    /// Every lease, held or expired, by name.
    pub fn leases(&self) -> Result<Vec<Lease>, String> {
        let conn = self.conn();
        let mut st = conn
            .prepare("SELECT name, holder, epoch, expires_at FROM leases ORDER BY name")
            .map_err(|e| sql_err(&self.path, e))?;
        let rows = st
            .query_map([], |r| {
                Ok(Lease { name: r.get(0)?, holder: r.get(1)?, epoch: r.get(2)?, expires_at: r.get(3)? })
            })
            .map_err(|e| sql_err(&self.path, e))?;
        rows.collect::<Result<_, _>>().map_err(|e| sql_err(&self.path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::store::test_place::both;

    both! { fn a_lease_has_one_holder_until_it_expires_or_is_released(place) {
        let db = place.service_db();
        let other = place.service_db();
        assert_eq!(db.take_lease("monitor:a", "r1", 15, 100).unwrap(), Some(1));
        assert_eq!(other.take_lease("monitor:a", "r2", 15, 105).unwrap(), None, "held by r1");
        assert_eq!(db.take_lease("monitor:a", "r1", 15, 110).unwrap(), Some(1), "renewed, same epoch");
        assert_eq!(other.take_lease("monitor:a", "r2", 15, 124).unwrap(), None, "the renewal counts");
        assert_eq!(other.take_lease("monitor:b", "r2", 15, 124).unwrap(), Some(1), "another lease is free");
        assert_eq!(other.take_lease("monitor:a", "r2", 15, 125).unwrap(), Some(2), "expired: taken over");
        assert_eq!(db.take_lease("monitor:a", "r1", 15, 126).unwrap(), None, "the old holder lost it");
        assert!(!db.release_lease("monitor:a", "r1").unwrap(), "only the holder releases");
        assert!(other.release_lease("monitor:a", "r2").unwrap());
        assert_eq!(db.take_lease("monitor:a", "r1", 15, 127).unwrap(), Some(3), "released: free at once");
        let all = db.leases().unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0], Lease { name: "monitor:a".into(), holder: "r1".into(), epoch: 3, expires_at: 142 });
    }}

    both! { fn racing_replicas_get_one_holder(place) {
        // Of many replicas racing for a free lease, exactly one gets it.
        place.service_db();
        let won: Vec<bool> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|i| {
                    let place = place.clone();
                    s.spawn(move || {
                        let db = place.service_db();
                        db.take_lease("monitor:x", &format!("r{i}"), 15, 1000).unwrap().is_some()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(won.iter().filter(|w| **w).count(), 1, "{won:?}");
    }}
}
