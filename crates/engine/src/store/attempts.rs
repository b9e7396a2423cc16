//! The `attempts` table: one row per submission of a job (the first, and one per retry), with how
//! it ended and why.

use super::sql::params;
use super::{Store, StoreError};
use crate::model::{AttemptRecord, StatusUpdate};

/// A retry to schedule: the failure that ended the current attempt and what the next one is.
#[derive(Debug, Clone, Copy)]
pub struct RetryPlan<'a> {
    /// Why the next attempt is made (`attempts::Cause`: `infra`, `preempted`).
    pub cause: &'a str,
    /// The checkpoint the next attempt starts from, as known now.
    pub resumed_from: Option<&'a str>,
    pub class: &'a str,
    pub evidence: &'a [String],
    pub next_name: &'a str,
    pub excluded_nodes: &'a str,
    pub not_before: i64,
    pub message: &'a str,
}

impl Store {
    /// Retries so far of this store's cluster, by the failure class that caused them: attempts that
    /// ended with a class and were followed by another attempt.
    pub fn retries_by_class(&self) -> Result<Vec<(String, u64)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT a.failure_class, COUNT(*) FROM attempts a JOIN jobs j ON j.job_id = a.job_id
                 WHERE a.failure_class IS NOT NULL AND a.number < j.attempt AND j.cluster IS NOT DISTINCT FROM ?1
                 GROUP BY a.failure_class ORDER BY a.failure_class",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![self.cluster], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64)))
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// The attempts of a job, first to last.
    pub fn attempts(&self, job_id: &str) -> Result<Vec<AttemptRecord>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT number, slurm_job_name, slurm_job_id, login_host, state, exit_code, node_list, failure_class,
                        evidence, excluded_nodes, recorded_at, submitted_at, ended_at, cause, resumed_from, slurm_restart
                 FROM attempts WHERE job_id = ?1 ORDER BY number",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![job_id], |r| {
                let evidence: Option<String> = r.get(8)?;
                Ok(AttemptRecord {
                    number: r.get(0)?,
                    slurm_job_name: r.get(1)?,
                    slurm_job_id: r.get(2)?,
                    login_host: r.get(3)?,
                    state: r.get(4)?,
                    exit_code: r.get(5)?,
                    node_list: r.get(6)?,
                    failure_class: r.get(7)?,
                    evidence: evidence.map(|e| serde_json::from_str(&e).unwrap_or_default()).unwrap_or_default(),
                    excluded_nodes: r.get(9)?,
                    recorded_at: r.get(10)?,
                    submitted_at: r.get(11)?,
                    ended_at: r.get(12)?,
                    cause: r.get(13)?,
                    resumed_from: r.get(14)?,
                    slurm_restart: r.get(15)?,
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }

    /// The first attempt of a job being recorded.
    pub(super) fn insert_first_attempt(&self, job_id: &str, name: &str, now: i64) -> Result<(), StoreError> {
        self.conn
            .execute(
                "INSERT INTO attempts (job_id, number, slurm_job_name, recorded_at) VALUES (?1, 1, ?2, ?3)",
                params![job_id, name, now],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// The job's current attempt reached Slurm (see [`Store::set_submitted`]).
    pub(super) fn attempt_submitted(
        &self,
        job_id: &str,
        slurm_job_id: &str,
        host: &str,
        now: i64,
    ) -> Result<(), StoreError> {
        self.conn
            .execute(
                "UPDATE attempts SET slurm_job_id = ?2, login_host = ?3, submitted_at = ?4
                 WHERE job_id = ?1 AND number = (SELECT attempt FROM jobs WHERE job_id = ?1)",
                params![job_id, slurm_job_id, host, now],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// What a refresh saw of the job's current attempt (see [`Store::update_status`]); a terminal
    /// status ends it.
    pub(super) fn current_attempt_observed(
        &self,
        job_id: &str,
        update: &StatusUpdate,
        now: i64,
    ) -> Result<(), StoreError> {
        self.conn
            .execute(
                "UPDATE attempts SET state = ?2, exit_code = ?3, node_list = COALESCE(node_list, ?4),
                   ended_at = CASE WHEN ?5 <> 0 THEN COALESCE(ended_at, ?6) ELSE ended_at END
                 WHERE job_id = ?1 AND number = (SELECT attempt FROM jobs WHERE job_id = ?1)",
                params![
                    job_id,
                    update.slurm_state,
                    update.exit_code,
                    update.node_list,
                    update.status.is_terminal(),
                    now
                ],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Close the current attempt with its failure class and evidence, and schedule the next one, in
    /// one transaction and only if `attempt` is still the current one (compare-and-set): of several
    /// processes that saw the same failure, exactly one schedules the retry. Returns whether this call
    /// did.
    pub fn schedule_retry(&self, job_id: &str, attempt: u32, retry: &RetryPlan, now: i64) -> Result<bool, StoreError> {
        self.in_transaction(|| {
            let won = self
                .conn
                .execute(
                    "UPDATE jobs SET attempt = ?3, attempt_name = ?4, slurm_job_id = NULL, slurm_state = NULL, exit_code = NULL,
                       submitted_at = NULL, unseen_since = NULL,
                       node_list = NULL, login_host = NULL, pending_reason = NULL, status = 'Pending', message = ?5, next_retry_at = ?6,
                       excluded_nodes = ?7, updated_at = ?8
                     WHERE job_id = ?1 AND attempt = ?2 AND status NOT IN ('Complete', 'Error', 'Canceled')",
                    params![
                        job_id,
                        attempt,
                        attempt + 1,
                        retry.next_name,
                        retry.message,
                        retry.not_before,
                        retry.excluded_nodes,
                        now
                    ],
                )
                .map_err(|e| self.err(e))?;
            if won == 0 {
                return Ok(false);
            }
            self.conn
                .execute(
                    "UPDATE attempts SET failure_class = ?3, evidence = ?4, ended_at = ?5 WHERE job_id = ?1 AND number = ?2",
                    params![job_id, attempt, retry.class, serde_json::to_string(retry.evidence).unwrap(), now],
                )
                .map_err(|e| self.err(e))?;
            self.conn
                .execute(
                    "INSERT INTO attempts (job_id, number, slurm_job_name, excluded_nodes, recorded_at, cause, resumed_from)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                    params![job_id, attempt + 1, retry.next_name, retry.excluded_nodes, now, retry.cause, retry.resumed_from],
                )
                .map_err(|e| self.err(e))?;
            if let Some(c) = retry.resumed_from {
                self.conn
                    .execute("UPDATE jobs SET checkpoint = ?2 WHERE job_id = ?1", params![job_id, c])
                    .map_err(|e| self.err(e))?;
            }
            self.add_event(job_id, if retry.cause == "preempted" { "preempted" } else { "retry" }, retry.message, now)?;
            Ok(true)
        })
    }

    /// Record a restart of the job's current Slurm job (`restart.restart` > 0) as its next attempt:
    /// the same Slurm job, made for `restart.cause`, started from its checkpoint. Only if `attempt` is
    /// still the current one and on that Slurm job (compare-and-set). Returns whether this call did.
    pub fn record_restart(
        &self,
        job_id: &str,
        attempt: u32,
        restart: &crate::ops::refresh::Start,
        message: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        let cause = restart.cause.map(|c| c.as_str());
        self.in_transaction(|| {
            let won = self
                .conn
                .execute(
                    "UPDATE jobs SET attempt = ?3, updated_at = ?4 WHERE job_id = ?1 AND attempt = ?2 AND slurm_job_id = ?5",
                    params![job_id, attempt, attempt + 1, now, restart.slurm_job_id],
                )
                .map_err(|e| self.err(e))?;
            if won == 0 {
                return Ok(false);
            }
            self.conn
                .execute(
                    "UPDATE attempts SET ended_at = COALESCE(ended_at, ?3), failure_class = COALESCE(failure_class, ?4)
                     WHERE job_id = ?1 AND number = ?2",
                    params![job_id, attempt, restart.at, cause],
                )
                .map_err(|e| self.err(e))?;
            self.conn
                .execute(
                    "INSERT INTO attempts (job_id, number, slurm_job_name, slurm_job_id, login_host, excluded_nodes,
                       recorded_at, submitted_at, cause, resumed_from, slurm_restart)
                     SELECT job_id, ?3, slurm_job_name, slurm_job_id, login_host, excluded_nodes, ?4, ?5, ?6, ?7, ?8
                     FROM attempts WHERE job_id = ?1 AND number = ?2",
                    params![job_id, attempt, attempt + 1, now, restart.at, cause, restart.checkpoint, restart.restart],
                )
                .map_err(|e| self.err(e))?;
            self.add_event(job_id, "restarted", message, now)?;
            Ok(true)
        })
    }

    /// The job's newest checkpoint, as a refresh saw it.
    pub fn set_checkpoint(&self, job_id: &str, checkpoint: &str) -> Result<(), StoreError> {
        self.conn
            .execute("UPDATE jobs SET checkpoint = ?2 WHERE job_id = ?1", params![job_id, checkpoint])
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Keep a running job's GPU view (what its nodes' newest samples said), while it is still at
    /// `attempt`: a view of an attempt that a retry or resume moved on from is dropped.
    pub fn set_gpu(&self, job_id: &str, attempt: u32, view: &crate::gpu::GpuView) -> Result<(), StoreError> {
        let json = serde_json::to_string(view).expect("a GPU view serialises");
        self.conn
            .execute("UPDATE jobs SET gpu = ?3 WHERE job_id = ?1 AND attempt = ?2", params![job_id, attempt, json])
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Record how an attempt ended (its Slurm state, exit code and nodes).
    pub fn record_attempt_end(
        &self,
        job_id: &str,
        attempt: u32,
        update: &StatusUpdate,
        now: i64,
    ) -> Result<(), StoreError> {
        self.conn
            .execute(
                "UPDATE attempts SET state = ?3, exit_code = ?4, node_list = COALESCE(node_list, ?5), ended_at = ?6
                 WHERE job_id = ?1 AND number = ?2",
                params![job_id, attempt, update.slurm_state, update.exit_code, update.node_list, now],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Record why the current attempt ended without a retry.
    pub fn close_attempt(
        &self,
        job_id: &str,
        attempt: u32,
        class: &str,
        evidence: &[String],
        now: i64,
    ) -> Result<(), StoreError> {
        self.conn
            .execute(
                "UPDATE attempts SET failure_class = ?3, evidence = ?4, ended_at = COALESCE(ended_at, ?5)
                 WHERE job_id = ?1 AND number = ?2",
                params![job_id, attempt, class, serde_json::to_string(evidence).unwrap(), now],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Take the due retry of `attempt` for submission (compare-and-set on `next_retry_at`).
    pub fn claim_due_retry(&self, job_id: &str, attempt: u32, now: i64) -> Result<bool, StoreError> {
        let n = self
            .conn
            .execute(
                "UPDATE jobs SET next_retry_at = NULL WHERE job_id = ?1 AND attempt = ?2 AND next_retry_at IS NOT NULL
                   AND next_retry_at <= ?3",
                params![job_id, attempt, now],
            )
            .map_err(|e| self.err(e))?;
        Ok(n == 1)
    }
}
