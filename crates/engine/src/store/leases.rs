//! Leases (issue 25): which replica follows a workspace's cluster. A lease is taken when free or
//! expired, renewed by its holder, and its epoch grows each time it changes hands. They live in the
//! jobs' own database, beside what they guard (issue 35): a store that holds a lease keeps every
//! write to it ([`Fence`]: each write is refused in its own transaction once the epoch moved on), so a
//! holder that stalled past its lease writes nothing. Callers pass `now` (Unix seconds).

use super::sql::{params, Fence, OptionalExtension};
use super::{Store, StoreError};
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

impl Store {
    /// Take or renew lease `name` for `holder` until `now + ttl`: yes when it was free, expired or
    /// already `holder`'s. Returns its epoch when `holder` holds it now, None when another does.
    /// From now on this store's writes keep to the lease: they land only while `holder` holds it at
    /// the epoch returned (none at all while another holds it).
    pub fn hold_lease(&self, name: &str, holder: &str, ttl: i64, now: i64) -> Result<Option<i64>, StoreError> {
        let taken = self.conn.unfenced(|| self.in_transaction(|| self.take_lease(name, holder, ttl, now)));
        // Not held: the fence it had stays (that epoch never comes back); none yet, epoch 0, which
        // no lease has (they start at 1).
        let fence = Fence { name: name.to_string(), holder: holder.to_string(), epoch: 0 };
        match &taken {
            Ok(Some(epoch)) => self.conn.set_fence(Some(Fence { epoch: *epoch, ..fence })),
            _ => self.conn.fence_if_none(fence),
        }
        taken
    }

    fn take_lease(&self, name: &str, holder: &str, ttl: i64, now: i64) -> Result<Option<i64>, StoreError> {
        self.conn
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
            .map_err(|e| self.err(e))
    }

    /// Err when this store keeps to a lease that moved on: nothing it would write lands (checked
    /// again, under the write lock, by each write).
    pub fn lease_still_held(&self) -> Result<(), StoreError> {
        self.conn.fence_holds().map_err(|e| self.err(e))
    }

    /// Let go of `name` if `holder` holds it (a stopping replica): another may take it at once.
    pub fn release_lease(&self, name: &str, holder: &str) -> Result<bool, StoreError> {
        self.conn.unfenced(|| {
            self.in_transaction(|| {
                self.conn
                    .execute("UPDATE leases SET expires_at = 0 WHERE name = ?1 AND holder = ?2", params![name, holder])
                    .map(|n| n > 0)
                    .map_err(|e| self.err(e))
            })
        })
    }

    /// Every lease, held or expired, by name.
    pub fn leases(&self) -> Result<Vec<Lease>, StoreError> {
        let mut st = self
            .conn
            .prepare("SELECT name, holder, epoch, expires_at FROM leases ORDER BY name")
            .map_err(|e| self.err(e))?;
        let rows = st
            .query_map([], |r| {
                Ok(Lease { name: r.get(0)?, holder: r.get(1)?, epoch: r.get(2)?, expires_at: r.get(3)? })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::store::test_place::both;

    both! { fn a_lease_has_one_holder_until_it_expires_or_is_released(place) {
        let db = place.open();
        let other = place.open();
        assert_eq!(db.hold_lease("monitor:a", "r1", 15, 100).unwrap(), Some(1));
        assert_eq!(other.hold_lease("monitor:a", "r2", 15, 105).unwrap(), None, "held by r1");
        assert_eq!(db.hold_lease("monitor:a", "r1", 15, 110).unwrap(), Some(1), "renewed, same epoch");
        assert_eq!(other.hold_lease("monitor:a", "r2", 15, 124).unwrap(), None, "the renewal counts");
        assert_eq!(other.hold_lease("monitor:b", "r2", 15, 124).unwrap(), Some(1), "another lease is free");
        assert_eq!(other.hold_lease("monitor:a", "r2", 15, 125).unwrap(), Some(2), "expired: taken over");
        assert_eq!(db.hold_lease("monitor:a", "r1", 15, 126).unwrap(), None, "the old holder lost it");
        assert!(!db.release_lease("monitor:a", "r1").unwrap(), "only the holder releases");
        assert!(other.release_lease("monitor:a", "r2").unwrap());
        assert_eq!(db.hold_lease("monitor:a", "r1", 15, 127).unwrap(), Some(3), "released: free at once");
        let all = db.leases().unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0], Lease { name: "monitor:a".into(), holder: "r1".into(), epoch: 3, expires_at: 142 });
    }}

    both! { fn racing_replicas_get_one_holder(place) {
        // Of many replicas racing for a free lease, exactly one gets it.
        place.open();
        let won: Vec<bool> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|i| {
                    let place = place.clone();
                    s.spawn(move || {
                        let db = place.open();
                        db.hold_lease("monitor:x", &format!("r{i}"), 15, 1000).unwrap().is_some()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(won.iter().filter(|w| **w).count(), 1, "{won:?}");
    }}

    both! { fn a_store_that_lost_its_lease_writes_nothing(place) {
        use crate::model::StatusUpdate;
        use crate::status::PlatformStatus;
        use tao_slurm_core::fixtures::{settings, spec};
        let (stalled, taker, user) = (place.open(), place.open(), place.open());
        let plan = crate::plan::resolve(&spec(), &settings()).unwrap();
        let id = plan.layout.job_id.clone();
        user.insert_job("{}", &plan, 100).unwrap();
        let running = StatusUpdate::bare(PlatformStatus::Running, "running");
        assert_eq!(stalled.hold_lease("monitor:a", "r1", 15, 100).unwrap(), Some(1));
        stalled.update_status(&id, &running, 101).unwrap();
        stalled.add_event(&id, "note", "while held", 101).unwrap();

        // r1 stalls past its lease; r2 takes it and moves the job on.
        assert_eq!(taker.hold_lease("monitor:a", "r2", 15, 120).unwrap(), Some(2));
        taker.update_status(&id, &StatusUpdate::bare(PlatformStatus::Complete, "done"), 121).unwrap();
        let before = (user.summary(&id).unwrap(), user.events(&id).unwrap(), user.change_token().unwrap().others);

        // r1 wakes with its old view: every write is refused, alone or in a transaction, and names the lease.
        let fenced = |r: Result<(), StoreError>| {
            let e = r.expect_err("a write after the lease moved on is refused").to_string();
            assert!(e.contains("lease monitor:a moved on from r1 at epoch 1"), "{e}");
        };
        fenced(stalled.update_status(&id, &running, 122));
        fenced(stalled.add_event(&id, "status", "Running", 122));
        fenced(stalled.add_kpi_lines(&id, &["epoch 1"], 122));
        fenced(stalled.set_status_sig(&id, "sig"));
        fenced(stalled.claim_due_retry(&id, 1, 122).map(|_| ()));
        fenced(stalled.in_transaction(|| {
            stalled.add_event(&id, "status", "Running", 122)?;
            stalled.update_status(&id, &running, 122)
        }));
        // Renewing does not bring it back while r2 holds it.
        assert_eq!(stalled.hold_lease("monitor:a", "r1", 15, 123).unwrap(), None);
        fenced(stalled.add_event(&id, "status", "Running", 123));
        let after = (user.summary(&id).unwrap(), user.events(&id).unwrap(), user.change_token().unwrap().others);
        assert_eq!(before.0.status, PlatformStatus::Complete);
        assert_eq!(after.0.status, PlatformStatus::Complete, "no status went back");
        assert_eq!(before.1, after.1, "no event landed");
        assert_eq!(before.2, after.2, "nothing was committed");

        // The new holder writes; a store that never asked for a lease (a request's) is not fenced;
        // r1 writes again once it holds the lease at a new epoch.
        taker.add_event(&id, "note", "r2 holds it", 124).unwrap();
        user.add_event(&id, "note", "a person's request", 124).unwrap();
        assert!(taker.release_lease("monitor:a", "r2").unwrap());
        assert_eq!(stalled.hold_lease("monitor:a", "r1", 15, 125).unwrap(), Some(3));
        stalled.add_event(&id, "note", "r1 again", 125).unwrap();
        let e = taker.add_event(&id, "note", "r2 lost it", 125).unwrap_err().to_string();
        assert!(e.contains("lease monitor:a moved on from r2 at epoch 2"), "{e}");
    }}
}
