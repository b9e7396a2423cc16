//! The service's counted caps, held in its database so that every replica counts the same rows (issue
//! 50): an org's active jobs as places (`job_places`, a row per job from its admission until it is
//! seen terminal) and its workspaces (`org_workspaces`). A place is counted and taken in one
//! statement of a write transaction, and write transactions on the service's records take turns
//! across processes (SQLite's `BEGIN IMMEDIATE`, PostgreSQL's schema lock in `Pg::begin`): parallel
//! creates on any number of replicas never overshoot a cap.

use super::service_records::{sql_err, ApiJob, ServiceDb};
use super::sql::{params, Conn};

/// What a grouped write of a capped insert answers: recorded, or (a count >= 0) refused at the cap.
const RECORDED: i64 = -1;

/// A place refused: the org holds `0` places (or workspaces) already, its cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtCap(pub u32);

/// A cap as the SQL compares it (None: no cap).
fn cap_value(cap: Option<u32>) -> i64 {
    cap.map_or(i64::MAX, i64::from)
}

fn count_of(n: i64) -> u32 {
    u32::try_from(n.max(0)).unwrap_or(u32::MAX)
}

impl ServiceDb {
    /// Record a job created through the API with its place among its org's active jobs, when the org
    /// holds fewer than `cap` places: both rows or neither, in a commit it may share with others.
    pub(crate) fn insert_job_within(&self, job: &ApiJob, cap: Option<u32>, now: i64) -> Result<Result<(), AtCap>, String> {
        let job = job.clone();
        let path = self.path.clone();
        let written = self.write_grouped(Box::new(move |conn| {
            let taken = take_place(conn, &job.job_id, &job.org, 0, cap, now, false).map_err(|e| sql_err(&path, e))?;
            if let Some(n) = taken {
                return Ok(n);
            }
            super::service_records::insert_job_row(conn, &job).map_err(|e| sql_err(&path, e))?;
            Ok(RECORDED)
        }))?;
        Ok(if written == RECORDED { Ok(()) } else { Err(AtCap(count_of(written))) })
    }

    /// Take (or keep) the place of a job that starts again (a retry, a resume) at `attempt`, when
    /// the org's other jobs hold fewer than `cap` places.
    pub(crate) fn take_job_place(
        &self,
        job_id: &str,
        org: &str,
        attempt: u32,
        cap: Option<u32>,
        now: i64,
    ) -> Result<Result<(), AtCap>, String> {
        let (job_id, org, path) = (job_id.to_string(), org.to_string(), self.path.clone());
        let written = self.write_grouped(Box::new(move |conn| {
            let taken = take_place(conn, &job_id, &org, attempt, cap, now, true).map_err(|e| sql_err(&path, e))?;
            Ok(taken.unwrap_or(RECORDED))
        }))?;
        Ok(if written == RECORDED { Ok(()) } else { Err(AtCap(count_of(written))) })
    }

    /// Give back the places of jobs seen terminal at an attempt (job id, attempt): a place taken for
    /// a later attempt (a restart another replica admitted since) stays. Reads the places (few: one
    /// per active job), then removes those that match.
    pub(crate) fn free_job_places(&self, ended: &[(String, u32)]) -> Result<usize, String> {
        if ended.is_empty() {
            return Ok(0);
        }
        let held = self.job_places()?;
        let ended: std::collections::HashMap<&str, u32> = ended.iter().map(|(id, a)| (id.as_str(), *a)).collect();
        let free: Vec<(String, i64)> = held
            .into_iter()
            .filter(|(id, _, at)| ended.get(id.as_str()).is_some_and(|a| i64::from(*a) >= *at))
            .map(|(id, _, at)| (id, at))
            .collect();
        if free.is_empty() {
            return Ok(0);
        }
        let path = self.path.clone();
        let n = self.write_grouped(Box::new(move |conn| {
            let mut n = 0;
            for (id, at) in &free {
                n += conn
                    .execute("DELETE FROM job_places WHERE job_id = ?1 AND attempt <= ?2", params![id, *at])
                    .map_err(|e| sql_err(&path, e))?;
            }
            Ok(n as i64)
        }))?;
        Ok(count_of(n) as usize)
    }

    /// Give places to active jobs that hold none (job id, org, attempt), whatever the cap: jobs that
    /// started before places were kept (an upgrade) count from then on. Reads the places (few), then
    /// writes only those missing; how many it wrote.
    pub(crate) fn keep_job_places(&self, active: &[(String, String, u32)], now: i64) -> Result<usize, String> {
        if active.is_empty() {
            return Ok(0);
        }
        let held: std::collections::HashSet<String> = self.job_places()?.into_iter().map(|(id, _, _)| id).collect();
        let missing: Vec<(String, String, u32)> = active.iter().filter(|(id, _, _)| !held.contains(id)).cloned().collect();
        if missing.is_empty() {
            return Ok(0);
        }
        let path = self.path.clone();
        let n = self.write_grouped(Box::new(move |conn| {
            let mut n = 0;
            for (id, org, attempt) in &missing {
                n += conn
                    .execute(
                        "INSERT INTO job_places (job_id, org, attempt, taken_at) VALUES (?1, ?2, ?3, ?4) ON CONFLICT (job_id) DO NOTHING",
                        params![id, org, i64::from(*attempt), now],
                    )
                    .map_err(|e| sql_err(&path, e))?;
            }
            Ok(n as i64)
        }))?;
        Ok(count_of(n) as usize)
    }

    /// Give back a job's place whatever its attempt (the job is deleted, or was refused before the
    /// engine recorded it).
    pub(crate) fn free_job_place(&self, job_id: &str) -> Result<bool, String> {
        let n = self
            .conn()
            .execute("DELETE FROM job_places WHERE job_id = ?1", params![job_id])
            .map_err(|e| sql_err(&self.path, e))?;
        Ok(n == 1)
    }

    /// Every place: (job id, org, attempt).
    pub(crate) fn job_places(&self) -> Result<Vec<(String, String, i64)>, String> {
        let conn = self.conn();
        let mut st = conn.prepare("SELECT job_id, org, attempt FROM job_places").map_err(|e| sql_err(&self.path, e))?;
        let rows = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .map_err(|e| sql_err(&self.path, e))?;
        rows.collect::<Result<_, _>>().map_err(|e| sql_err(&self.path, e))
    }

    /// The org's workspaces not deleted, as stored now.
    pub(crate) fn count_workspaces(&self, org: &str) -> Result<u32, String> {
        let n: i64 = self
            .conn()
            .query_row(
                "SELECT COUNT(*) FROM org_workspaces WHERE org = ?1 AND deleted_at IS NULL",
                params![org],
                |r| r.get(0),
            )
            .map_err(|e| sql_err(&self.path, e))?;
        Ok(count_of(n))
    }

    /// Record an org's workspace when the org has fewer than `cap` (counted and written in one
    /// statement of a write transaction).
    pub(crate) fn insert_workspace_within(
        &self,
        id: &str,
        org: &str,
        request: &str,
        now: i64,
        cap: u32,
    ) -> Result<Result<(), AtCap>, String> {
        let (id, org, request, path) = (id.to_string(), org.to_string(), request.to_string(), self.path.clone());
        let written = self.write_grouped(Box::new(move |conn| {
            let count = "SELECT COUNT(*) FROM org_workspaces WHERE org = ?2 AND deleted_at IS NULL";
            let n = conn
                .execute(
                    &format!(
                        "INSERT INTO org_workspaces (id, org, request, created_at) SELECT ?1, ?2, ?3, ?4 WHERE ({count}) < ?5"
                    ),
                    params![id, org, request, now, i64::from(cap)],
                )
                .map_err(|e| sql_err(&path, e))?;
            if n == 1 {
                return Ok(RECORDED);
            }
            conn.query_row(count, params![id, org], |r| r.get(0)).map_err(|e| sql_err(&path, e))
        }))?;
        Ok(if written == RECORDED { Ok(()) } else { Err(AtCap(count_of(written))) })
    }
}

/// Count the org's places (but the job's own when `restart`) and take one for the job if there are
/// fewer than `cap`, in one statement. None: taken; Some(n): refused, the org holding `n`.
fn take_place(
    conn: &Conn,
    job_id: &str,
    org: &str,
    attempt: u32,
    cap: Option<u32>,
    now: i64,
    restart: bool,
) -> Result<Option<i64>, super::sql::Error> {
    let count = if restart {
        "SELECT COUNT(*) FROM job_places WHERE org = ?2 AND job_id <> ?1"
    } else {
        "SELECT COUNT(*) FROM job_places WHERE org = ?2"
    };
    // A restart keeps the row it may have (a paused job holds its place), at its new attempt.
    let upsert = if restart { " ON CONFLICT (job_id) DO UPDATE SET attempt = excluded.attempt" } else { "" };
    // Without a cap nothing is counted (the place is kept for when the operator sets one); the
    // constant condition keeps SQLite's parser from reading the upsert's ON as a join's.
    let within = if cap.is_some() { format!(" WHERE ({count}) < ?5") } else { " WHERE ?5 > 0".to_string() };
    let n = conn.execute(
        &format!("INSERT INTO job_places (job_id, org, attempt, taken_at) SELECT ?1, ?2, ?3, ?4{within}{upsert}"),
        params![job_id, org, i64::from(attempt), now, cap_value(cap)],
    )?;
    if n == 1 {
        return Ok(None);
    }
    conn.query_row(count, params![job_id, org], |r| r.get(0)).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_place::both;
    use std::sync::Arc;

    fn job(id: &str, org: &str) -> ApiJob {
        ApiJob {
            job_id: id.into(),
            org: org.into(),
            workspace: "w".into(),
            action: None,
            specs: serde_json::json!({}),
            num_gpu: None,
            token_id: None,
            created_at: 100,
            tao: None,
            person: None,
        }
    }

    both! { fn two_databases_on_one_store_hold_the_caps_under_parallel_writers(place) {
        // Two connections (two replicas) on one store, 5 writers each, all at once.
        let dbs = [Arc::new(place.service_db()), Arc::new(place.service_db())];
        let barrier = Arc::new(std::sync::Barrier::new(10));
        let threads: Vec<_> = (0..10)
            .map(|i| {
                let (db, barrier) = (Arc::clone(&dbs[i % 2]), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    barrier.wait();
                    let job = db.insert_job_within(&job(&format!("j{i}"), "team-a"), Some(3), 100).unwrap();
                    let ws = db.insert_workspace_within(&format!("w{i}"), "team-a", "{}", 100, 8).unwrap();
                    (job, ws)
                })
            })
            .collect();
        let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let jobs_taken = results.iter().filter(|(j, _)| j.is_ok()).count();
        let ws_taken = results.iter().filter(|(_, w)| w.is_ok()).count();
        assert_eq!((jobs_taken, ws_taken), (3, 8), "exactly the caps: {results:?}");
        for (j, w) in &results {
            assert!(j.is_ok() || *j == Err(AtCap(3)), "a refusal counts the cap: {j:?}");
            assert!(w.is_ok() || *w == Err(AtCap(8)), "{w:?}");
        }
        // A refused job left no record; an admitted one has both.
        assert_eq!(dbs[0].jobs().unwrap().len(), 3);
        assert_eq!(dbs[1].job_places().unwrap().len(), 3);
        assert_eq!(dbs[1].count_workspaces("team-a").unwrap(), 8);
        // Another org is counted apart.
        assert_eq!(dbs[0].insert_job_within(&job("other", "team-b"), Some(3), 100).unwrap(), Ok(()));
    }}

    both! { fn a_place_is_freed_at_its_attempt_and_a_restart_retakes_it(place) {
        let db = place.service_db();
        for id in ["a", "b"] {
            assert_eq!(db.insert_job_within(&job(id, "o"), Some(2), 100).unwrap(), Ok(()));
        }
        assert_eq!(db.insert_job_within(&job("c", "o"), Some(2), 100).unwrap(), Err(AtCap(2)));
        // A retry of a (not ended) keeps its own place: it does not count itself.
        assert_eq!(db.take_job_place("a", "o", 2, Some(2), 101).unwrap(), Ok(()));
        // a seen ended at attempt 1 (an older view): its place, taken for attempt 2, stays.
        assert_eq!(db.free_job_places(&[("a".into(), 1)]).unwrap(), 0);
        assert_eq!(db.insert_job_within(&job("c", "o"), Some(2), 100).unwrap(), Err(AtCap(2)));
        // Seen ended at attempt 2: freed, and c takes it.
        assert_eq!(db.free_job_places(&[("a".into(), 2), ("nope".into(), 5)]).unwrap(), 1);
        assert_eq!(db.insert_job_within(&job("c", "o"), Some(2), 100).unwrap(), Ok(()));
        // Now a's retry is past the cap; with b deleted, it is not.
        assert_eq!(db.take_job_place("a", "o", 3, Some(2), 102).unwrap(), Err(AtCap(2)));
        assert!(db.free_job_place("b").unwrap());
        assert_eq!(db.take_job_place("a", "o", 3, Some(2), 102).unwrap(), Ok(()));
        // Active jobs without a place (started before places were kept) are given one, uncapped;
        // one that has its place keeps it as it is.
        assert_eq!(db.keep_job_places(&[("old".into(), "o".into(), 1), ("a".into(), "o".into(), 9)], 103).unwrap(), 1);
        let a_place = db.job_places().unwrap().into_iter().find(|(id, _, _)| id == "a").unwrap();
        assert_eq!(a_place.2, 3, "a's place as its restart took it");
        assert_eq!(db.insert_job_within(&job("e", "o"), Some(3), 100).unwrap(), Err(AtCap(3)), "old counts");
        assert_eq!(db.free_job_places(&[("old".into(), 1)]).unwrap(), 1);
        // Without a cap, always taken.
        assert_eq!(db.insert_job_within(&job("d", "o"), None, 100).unwrap(), Ok(()));
        // A deleted workspace no longer counts.
        assert_eq!(db.insert_workspace_within("w1", "o", "{}", 100, 1).unwrap(), Ok(()));
        assert_eq!(db.insert_workspace_within("w2", "o", "{}", 100, 1).unwrap(), Err(AtCap(1)));
        assert!(db.delete_workspace("w1", 101).unwrap());
        assert_eq!(db.insert_workspace_within("w2", "o", "{}", 100, 1).unwrap(), Ok(()));
    }}
}
