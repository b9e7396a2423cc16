//! The `pauses` table and the pause's and resume's compare-and-sets on `jobs`: a job paused by
//! tao-slurm (its allocation released) is one with status Paused or Pausing and a pause row for its
//! current attempt; Slurm's SUSPENDED (also Paused) has none.

use super::reopen::Reopening;
use super::sql::params;
use super::{Store, StoreError};
use crate::notify::status_detail;
use crate::status::PlatformStatus;

/// A pause asked for: the attempt it stops, and when a graceful one cancels the job.
#[derive(Debug, Clone, Copy)]
pub struct PauseAsk<'a> {
    pub attempt: u32,
    /// The status the job was in when the caller looked (the compare of the compare-and-set).
    pub from: PlatformStatus,
    pub graceful: bool,
    pub cancel_at: i64,
    pub message: &'a str,
}

/// A job's docs replaced on resume (new specs).
#[derive(Debug, Clone, Copy)]
pub struct NewDocs<'a> {
    pub spec_json: &'a str,
    pub plan_json: &'a str,
}

impl Store {
    /// `job_id` is Pausing from `ask.from`, if it is still there at `ask.attempt`. Returns whether
    /// this call made it so (of concurrent callers, one).
    pub fn begin_pause(&self, job_id: &str, ask: &PauseAsk<'_>, now: i64) -> Result<bool, StoreError> {
        self.in_transaction(|| {
            let won = self
                .conn
                .execute(
                    "UPDATE jobs SET status = 'Pausing', message = ?4, pending_reason = NULL, updated_at = ?5
                     WHERE job_id = ?1 AND attempt = ?2 AND status = ?3",
                    params![job_id, ask.attempt, ask.from.as_str(), ask.message, now],
                )
                .map_err(|e| self.err(e))?;
            if won == 0 {
                return Ok(false);
            }
            self.conn
                .execute(
                    "INSERT INTO pauses (job_id, attempt, graceful, requested_at, cancel_at) VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (job_id) DO UPDATE SET attempt = ?2, graceful = ?3, requested_at = ?4, cancel_at = ?5",
                    params![job_id, ask.attempt, ask.graceful as i64, now, ask.cancel_at],
                )
                .map_err(|e| self.err(e))?;
            let detail = status_detail(PlatformStatus::Pausing, None, ask.message);
            self.add_event(job_id, "status", &detail, now)?;
            Ok(true)
        })
    }

    /// A pausing job's Slurm job is stopped: it is Paused (if still pausing at `attempt`).
    pub fn finish_pause(&self, job_id: &str, attempt: u32, message: &str, now: i64) -> Result<bool, StoreError> {
        self.in_transaction(|| {
            let won = self
                .conn
                .execute(
                    "UPDATE jobs SET status = 'Paused', message = ?3, pending_reason = NULL, updated_at = ?4
                     WHERE job_id = ?1 AND attempt = ?2 AND status = 'Pausing'",
                    params![job_id, attempt, message, now],
                )
                .map_err(|e| self.err(e))?;
            if won > 0 {
                self.add_event(job_id, "status", &status_detail(PlatformStatus::Paused, None, message), now)?;
            }
            Ok(won > 0)
        })
    }

    /// Of `jobs` (id and status as the caller has them), those tao-slurm paused; no query when none
    /// of them is Paused.
    pub fn paused_by_us_among<'a>(
        &self,
        jobs: impl IntoIterator<Item = (&'a str, PlatformStatus)>,
    ) -> Result<std::collections::HashSet<String>, StoreError> {
        let ids: Vec<&str> = jobs.into_iter().filter(|(_, s)| *s == PlatformStatus::Paused).map(|(id, _)| id).collect();
        if ids.is_empty() {
            return Ok(Default::default());
        }
        self.paused_by_us(&ids)
    }

    /// Of `ids`, the jobs tao-slurm paused (Paused with a pause row for their current attempt):
    /// nothing on Slurm to refresh, nothing to submit until resumed.
    pub fn paused_by_us(&self, ids: &[&str]) -> Result<std::collections::HashSet<String>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT p.job_id FROM pauses p JOIN jobs j ON j.job_id = p.job_id
                 WHERE j.status = 'Paused' AND j.attempt = p.attempt",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt.query_map([], |r| r.get::<_, String>(0)).map_err(|e| self.err(e))?;
        let all: std::collections::HashSet<String> = rows.collect::<Result<_, _>>().map_err(|e| self.err(e))?;
        Ok(ids.iter().filter(|id| all.contains(**id)).map(|id| id.to_string()).collect())
    }

    /// The pausing jobs whose graceful bound has passed at `now` (to cancel), with their attempt.
    pub fn overdue_pauses(&self, now: i64) -> Result<Vec<(String, u32)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT p.job_id, p.attempt FROM pauses p JOIN jobs j ON j.job_id = p.job_id
                 WHERE j.status = 'Pausing' AND j.attempt = p.attempt AND p.cancel_at <= ?1",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt.query_map(params![now], |r| Ok((r.get(0)?, r.get(1)?))).map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// Resume a paused job: if it is still Paused at `attempt`, it is Resuming under attempt
    /// `attempt + 1` (named `next_name`), due now, with `docs` replacing its spec and plan (new
    /// specs); its pause row goes. One compare-and-set: of concurrent callers, one reopens it.
    pub fn reopen_paused(
        &self,
        job_id: &str,
        attempt: u32,
        next_name: &str,
        docs: Option<NewDocs<'_>>,
        message: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        let next = Reopening { attempt, next_name, cause: "resumed", message };
        self.in_transaction(|| {
            let ours = "status = 'Paused' AND EXISTS (SELECT 1 FROM pauses p WHERE p.job_id = jobs.job_id AND p.attempt = jobs.attempt)";
            if !self.reopen(job_id, &next, ours, "Resuming", now)? {
                return Ok(false);
            }
            if let Some(d) = docs {
                self.conn
                    .execute(
                        "UPDATE job_docs SET spec_json = ?2, plan_json = ?3 WHERE job_id = ?1",
                        params![job_id, d.spec_json, d.plan_json],
                    )
                    .map_err(|e| self.err(e))?;
            }
            self.conn.execute("DELETE FROM pauses WHERE job_id = ?1", params![job_id]).map_err(|e| self.err(e))?;
            self.add_event(job_id, "status", &status_detail(PlatformStatus::Resuming, None, message), now)?;
            Ok(true)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StatusUpdate;
    use tao_slurm_core::fixtures::{settings, spec};

    fn ask(from: PlatformStatus, cancel_at: i64) -> PauseAsk<'static> {
        PauseAsk { attempt: 1, from, graceful: true, cancel_at, message: "pausing" }
    }

    use crate::store::test_place::both;

    both! { fn a_pause_and_a_resume_each_win_once_and_a_paused_job_is_known_as_ours(place) {
        let store = place.open();
        let plan = crate::plan::resolve(&spec(), &settings()).unwrap();
        let j1 = plan.layout.job_id.clone();
        let j1 = j1.as_str();
        store.insert_job("{}", &plan, 100).unwrap();
        store.set_submitted(j1, "10", "h", 101).unwrap();
        store.update_status(j1, &StatusUpdate::bare(PlatformStatus::Running, "r"), 102).unwrap();
        assert!(store.begin_pause(j1, &ask(PlatformStatus::Running, 200), 110).unwrap());
        assert!(!store.begin_pause(j1, &ask(PlatformStatus::Running, 200), 110).unwrap(), "once");
        assert_eq!(store.get(j1).unwrap().status, PlatformStatus::Pausing);
        assert!(store.overdue_pauses(199).unwrap().is_empty());
        assert_eq!(store.overdue_pauses(200).unwrap(), vec![(j1.to_string(), 1)]);
        assert!(store.paused_by_us(&[j1]).unwrap().is_empty(), "pausing is not paused yet");
        assert!(store.finish_pause(j1, 1, "paused", 201).unwrap());
        assert!(!store.finish_pause(j1, 1, "paused", 201).unwrap());
        assert!(store.overdue_pauses(300).unwrap().is_empty());
        assert_eq!(store.paused_by_us(&[j1, "other"]).unwrap().len(), 1);
        // Two resumes: one reopens it, with its new docs.
        let plan_json = serde_json::to_string(&plan).unwrap();
        let docs = NewDocs { spec_json: "{\"x\":1}", plan_json: &plan_json };
        assert!(store.reopen_paused(j1, 1, "next", Some(docs), "resumed", 300).unwrap());
        assert!(!store.reopen_paused(j1, 1, "next", Some(docs), "resumed", 300).unwrap());
        let job = store.get(j1).unwrap();
        assert_eq!((job.status, job.attempt, job.slurm_job_id.as_deref()), (PlatformStatus::Resuming, 2, None));
        assert_eq!(job.spec_json, "{\"x\":1}");
        assert_eq!(job.next_retry_at, Some(300), "due now");
        assert_eq!(store.attempts(j1).unwrap().len(), 2);
        assert!(store.paused_by_us(&[j1]).unwrap().is_empty());
        let events = store.events(j1).unwrap();
        assert_eq!(events.iter().filter(|e| e.1 == "resumed").count(), 1);
        // A Slurm-suspended job (Paused without a pause row) is not ours, and not resumed here.
        let p2 = crate::plan::resolve(&spec(), &settings()).unwrap();
        let j2 = p2.layout.job_id.as_str();
        store.insert_job("{}", &p2, 100).unwrap();
        store.update_status(j2, &StatusUpdate::bare(PlatformStatus::Paused, "SUSPENDED"), 102).unwrap();
        assert!(store.paused_by_us(&[j2]).unwrap().is_empty());
        assert!(!store.reopen_paused(j2, 1, "next", None, "resumed", 300).unwrap());
    }}
}
