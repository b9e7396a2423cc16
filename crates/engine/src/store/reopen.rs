//! A new attempt of a job that has ended (`retry`): the job is Pending again under its next
//! attempt, due now, in one compare-and-set so that of several callers exactly one reopens it.

use super::sql::params;
use super::{Store, StoreError};

impl Store {
    /// Reopen `job_id` for attempt `attempt + 1` (named `next_name`) if it is still at `attempt` and
    /// ended Error or Canceled; the new attempt's row says `cause` (`attempts::Cause`: `retried` for
    /// `retry`, `resumed` for a resume after a pause) and the job's last known checkpoint as the one
    /// it starts from (its batch script looks again). Returns whether this call did.
    pub fn reopen_ended(
        &self,
        job_id: &str,
        attempt: u32,
        next_name: &str,
        cause: &str,
        message: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        let next = Reopening { attempt, next_name, cause, message };
        self.in_transaction(|| self.reopen(job_id, &next, "status IN ('Error', 'Canceled')", "Pending", now))
    }

    /// Reopen `job_id` for its next attempt if it is at `next.attempt` and in a status `from` (an
    /// SQL condition) admits: status `to`, due now, its attempt row and event written. Within the
    /// caller's transaction. Returns whether this call did.
    pub(super) fn reopen(
        &self,
        job_id: &str,
        next: &Reopening<'_>,
        from: &str,
        to: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        let won = self
            .conn
            .execute(
                &format!(
                    "UPDATE jobs SET attempt = ?3, attempt_name = ?4, slurm_job_id = NULL, slurm_state = NULL, exit_code = NULL,
                       submitted_at = NULL, unseen_since = NULL, node_list = NULL, login_host = NULL, pending_reason = NULL,
                       status = ?7, message = ?5, next_retry_at = ?6, updated_at = ?6
                     WHERE job_id = ?1 AND attempt = ?2 AND {from}"
                ),
                params![job_id, next.attempt, next.attempt + 1, next.next_name, next.message, now, to],
            )
            .map_err(|e| self.err(e))?;
        if won == 0 {
            return Ok(false);
        }
        self.conn
            .execute(
                "INSERT INTO attempts (job_id, number, slurm_job_name, excluded_nodes, recorded_at, cause, resumed_from)
                 VALUES (?1, ?2, ?3, '', ?4, ?5, (SELECT checkpoint FROM jobs WHERE job_id = ?1))",
                params![job_id, next.attempt + 1, next.next_name, now, next.cause],
            )
            .map_err(|e| self.err(e))?;
        self.add_event(job_id, next.cause, next.message, now)?;
        Ok(true)
    }
}

/// The attempt a job is at and what its next one is called and why (the cause its attempt row and
/// event say: `retried`, `resumed`).
pub(super) struct Reopening<'a> {
    pub attempt: u32,
    pub next_name: &'a str,
    pub cause: &'a str,
    pub message: &'a str,
}
