//! The `jobs` table (and the documents in `job_docs`): recording a job, finding it by id or prefix,
//! listing, and the writes of its current state (submitted, status, gate, status.json signature).

use super::rows::{list_tail, FromJobRow, ACTIVE};
use super::sql::{params, OptionalExtension};
use super::{Store, StoreError};
use crate::model::timeout_runs;
use crate::model::{JobRecord, JobSummary, StatusUpdate};
use crate::plan::Plan;
use crate::status::PlatformStatus;

/// A job as a caller read it before a round trip: what it observed is about this attempt and status.
#[derive(Clone, Copy, Debug)]
pub struct AsRead<'a> {
    pub attempt_name: &'a str,
    pub status: PlatformStatus,
}

impl<'a> AsRead<'a> {
    pub fn of(job: &'a JobSummary) -> Self {
        AsRead { attempt_name: &job.attempt_name, status: job.status }
    }
}

/// A job to record with others (see [`Store::record_jobs`]).
pub struct NewJob {
    pub spec_json: String,
    pub plan: Plan,
    pub member: Member,
    pub now: i64,
}

/// How a job belongs to a group and to other jobs, as it is recorded.
#[derive(Debug, Clone, Default)]
pub struct Member {
    /// Its first attempt's Slurm job name when not its own (a sweep variant's is its array's).
    pub attempt_name: Option<String>,
    pub sweep_id: Option<String>,
    pub sweep_index: Option<u32>,
    /// The dependency its first attempt is submitted with (see `ops::depend::Gate::stored`).
    pub gate: Option<String>,
    /// The jobs it runs after, with the kind (ok, notok, any).
    pub after: Vec<(String, String)>,
    /// Its own webhooks (`--notify`), recorded with it so that none of its changes is missed.
    pub webhooks: Vec<String>,
}

impl Store {
    /// Record a job before it is submitted (on this store's cluster).
    pub fn insert_job(&self, spec_json: &str, plan: &Plan, now: i64) -> Result<(), StoreError> {
        self.in_transaction(|| self.insert_member(spec_json, plan, &Member::default(), now))
    }

    /// Record jobs in one transaction, each as [`Store::insert_member`] records one and in a savepoint
    /// of its own: one refused (the same job again) is refused alone. A failed commit fails each.
    pub fn record_jobs(&self, jobs: Vec<NewJob>) -> Vec<Result<(), StoreError>> {
        self.each_in_savepoint(jobs, |j| self.insert_member(&j.spec_json, &j.plan, &j.member, j.now))
    }

    /// The message of a job recorded and not yet answered by its submission: nothing since (its
    /// submission's outcome, known or not, writes another).
    pub const RECORDED: &'static str = "staging";

    /// Record one job (in the caller's transaction): its row, its documents, its first attempt, its
    /// dependencies and the event that says so.
    pub fn insert_member(&self, spec_json: &str, plan: &Plan, member: &Member, now: i64) -> Result<(), StoreError> {
        let plan_json = serde_json::to_string(plan).expect("a plan always serialises");
        let job_id = &plan.layout.job_id;
        let attempt_name = member.attempt_name.clone().unwrap_or_else(|| plan.layout.job_name.clone());
        self.conn
            .execute(
                "INSERT INTO jobs (job_id, name, status, message, created_at, updated_at, attempt, attempt_name,
                   job_dir, image, nodes, gpus_per_node, partition, timeout_seconds, timeout_runs, has_secrets, cluster,
                   sweep_id, sweep_index, gate, checkpoint_patterns)
                 VALUES (?1, ?2, ?3, ?19, ?4, ?4, 1, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
                params![
                    job_id,
                    plan.name,
                    PlatformStatus::Pending.as_str(),
                    now,
                    attempt_name,
                    plan.layout.base_dir,
                    plan.image.pyxis,
                    plan.resources.nodes,
                    plan.resources.gpus_per_node,
                    plan.partition,
                    plan.timeout_seconds as i64,
                    timeout_runs(plan),
                    !plan.secret_names.is_empty(),
                    self.cluster,
                    member.sweep_id,
                    member.sweep_index,
                    member.gate,
                    crate::script::resume::warns(plan).then(|| plan.checkpoint_patterns.join(",")),
                    Self::RECORDED
                ],
            )
            .map_err(|e| self.err(e))?;
        self.conn
            .execute(
                "INSERT INTO job_docs (job_id, spec_json, plan_json) VALUES (?1, ?2, ?3)",
                params![job_id, spec_json, plan_json],
            )
            .map_err(|e| self.err(e))?;
        self.insert_first_attempt(job_id, &attempt_name, now)?;
        for (parent, kind) in &member.after {
            self.add_dependency(job_id, parent, kind)?;
        }
        self.add_job_webhooks(job_id, &member.webhooks)?;
        self.add_event(job_id, "created", &format!("job recorded before submission as {attempt_name}"), now)
    }

    /// Forget a job that never reached the cluster (a warm submit whose checks, made in its one round
    /// trip, refused it before anything was staged): all its rows, as if it had never been recorded.
    /// A job that has a Slurm job (any attempt) is never forgotten. Whether it was.
    pub fn forget_unsent(&self, job_id: &str) -> Result<bool, StoreError> {
        self.in_transaction(|| {
            // Recorded, with no Slurm job, in the job's row or any of its attempts.
            let unsent: i64 = self
                .conn
                .query_row(
                    "SELECT COUNT(*) FROM jobs WHERE job_id = ?1 AND slurm_job_id IS NULL
                       AND NOT EXISTS (SELECT 1 FROM attempts WHERE job_id = ?1 AND slurm_job_id IS NOT NULL)",
                    params![job_id],
                    |r| r.get(0),
                )
                .map_err(|e| self.err(e))?;
            if unsent == 0 {
                return Ok(false);
            }
            for sql in [
                "DELETE FROM events WHERE job_id = ?1",
                "DELETE FROM attempts WHERE job_id = ?1",
                "DELETE FROM job_docs WHERE job_id = ?1",
                "DELETE FROM dependencies WHERE child = ?1",
                "DELETE FROM job_webhooks WHERE job_id = ?1",
                "DELETE FROM notifications WHERE job_id = ?1",
                "DELETE FROM kpi_lines WHERE job_id = ?1",
                "DELETE FROM pauses WHERE job_id = ?1",
                "DELETE FROM jobs WHERE job_id = ?1",
            ] {
                self.conn.execute(sql, params![job_id]).map_err(|e| self.err(e))?;
            }
            Ok(true)
        })
    }

    /// The current attempt reached Slurm as `slurm_job_id` (once: a job already submitted keeps its id).
    pub fn set_submitted(&self, job_id: &str, slurm_job_id: &str, host: &str, now: i64) -> Result<(), StoreError> {
        let changed = self
            .conn
            .execute(
                "UPDATE jobs SET slurm_job_id = ?2, login_host = ?3, message = 'submitted', updated_at = ?4,
                   submitted_at = ?4, unseen_since = NULL
                 WHERE job_id = ?1 AND slurm_job_id IS NULL",
                params![job_id, slurm_job_id, host, now],
            )
            .map_err(|e| self.err(e))?;
        if changed == 0 {
            return Ok(());
        }
        self.attempt_submitted(job_id, slurm_job_id, host, now)?;
        self.add_event(job_id, "submitted", &format!("Slurm job {slurm_job_id} via {host}"), now)
    }

    /// Store what a refresh found; an event is written when the status or Slurm state changes.
    /// Nothing is written when nothing changed (the common case for a refresh of many jobs).
    pub fn update_status(&self, job_id: &str, update: &StatusUpdate, now: i64) -> Result<(), StoreError> {
        self.update_status_of(job_id, None, update, now)
    }

    /// [`Store::update_status`], only while the job is as the caller read it before its round trip
    /// (when given): the same Slurm job name and the same status. What a refresh saw of one
    /// attempt's Slurm job never lands on the next attempt, submitted under a new name by a retry or
    /// a resume begun meanwhile (Slurm's restart of the same job keeps its name); and a status that
    /// changed meanwhile (a cancel, a pause, another replica's refresh) is not overwritten by what
    /// was seen before it: the next refresh reads the job as it now is.
    pub fn update_status_of(
        &self,
        job_id: &str,
        read: Option<AsRead<'_>>,
        update: &StatusUpdate,
        now: i64,
    ) -> Result<(), StoreError> {
        let (status, state, current): (String, Option<String>, String) = self
            .conn
            .query_row("SELECT status, slurm_state, attempt_name FROM jobs WHERE job_id = ?1", params![job_id], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .optional()
            .map_err(|e| self.err(e))?
            .ok_or_else(|| StoreError::NotFound(job_id.to_string()))?;
        if read.is_some_and(|r| r.attempt_name != current || r.status.as_str() != status) {
            return Ok(());
        }
        let changed = self.update_job_if_changed(
            &[
                ("status", "?2"),
                ("message", "?3"),
                ("slurm_state", "?4"),
                ("exit_code", "?5"),
                ("node_list", "COALESCE(node_list, ?6)"),
                ("progress", "COALESCE(?8, progress)"),
                ("pending_reason", "?9"),
            ],
            Some("updated_at = ?7"),
            params![
                job_id,
                update.status.as_str(),
                update.message,
                update.slurm_state,
                update.exit_code,
                update.node_list,
                now,
                update.progress,
                update.pending_reason
            ],
        )?;
        if !changed {
            return Ok(());
        }
        self.current_attempt_observed(job_id, update, now)?;
        if status != update.status.as_str() || state != update.slurm_state {
            let detail = crate::notify::status_detail(update.status, update.slurm_state.as_deref(), &update.message);
            self.add_event(job_id, "status", &detail, now)?;
        }
        Ok(())
    }

    /// The dependency a job's Slurm job was submitted or re-pointed with.
    pub fn set_gate(&self, job_id: &str, gate: &str) -> Result<(), StoreError> {
        self.update_job_if_changed(&[("gate", "?2")], None, params![job_id, gate])?;
        Ok(())
    }

    /// Since when the scheduler has not known the job's current attempt (None: it knows it), set on
    /// the first read that misses it and cleared by any read that finds it.
    pub fn set_unseen_since(&self, job_id: &str, since: Option<i64>) -> Result<(), StoreError> {
        self.update_job_if_changed(&[("unseen_since", "?2")], None, params![job_id, since])?;
        Ok(())
    }

    /// Remember the signature of a job's status.json as it was just read.
    pub fn set_status_sig(&self, job_id: &str, sig: &str) -> Result<(), StoreError> {
        self.update_job_if_changed(&[("status_sig", "?2")], None, params![job_id, sig])?;
        Ok(())
    }

    /// A job by its full id or an unambiguous prefix.
    pub fn get(&self, id_or_prefix: &str) -> Result<JobRecord, StoreError> {
        self.find(id_or_prefix)
    }

    /// A job's summary by its full id or an unambiguous prefix.
    pub fn summary(&self, id_or_prefix: &str) -> Result<JobSummary, StoreError> {
        self.find(id_or_prefix)
    }

    fn find<T: FromJobRow>(&self, id_or_prefix: &str) -> Result<T, StoreError> {
        let mut exact = self.rows::<T>(" WHERE job_id = ?1", params![id_or_prefix])?;
        if let Some(row) = exact.pop() {
            return Ok(row);
        }
        let pattern = format!("{}%", id_or_prefix.replace(['%', '_'], ""));
        let mut rows = self.rows::<T>(" WHERE job_id LIKE ?1 LIMIT 2", params![pattern])?;
        match rows.len() {
            0 => Err(StoreError::NotFound(id_or_prefix.to_string())),
            1 => Ok(rows.remove(0)),
            _ => Err(StoreError::Ambiguous(id_or_prefix.to_string())),
        }
    }

    /// Run `T`'s query with `tail` (WHERE, ORDER BY ...) and decode its rows.
    fn rows<T: FromJobRow>(&self, tail: &str, params: impl super::sql::Params) -> Result<Vec<T>, StoreError> {
        self.raw_rows::<T>(tail, params)?.into_iter().map(T::decode).collect()
    }

    /// `T`'s rows as read, not decoded yet.
    fn raw_rows<T: FromJobRow>(&self, tail: &str, params: impl super::sql::Params) -> Result<Vec<T::Raw>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!("{}{tail}", T::SELECT)).map_err(|e| self.err(e))?;
        let raws = stmt.query_map(params, T::raw).map_err(|e| self.err(e))?.collect::<Result<_, _>>();
        raws.map_err(|e| self.err(e))
    }

    /// Rows by full id, in the order given (ids not found are left out).
    fn many<T: FromJobRow>(&self, ids: &[&str]) -> Result<Vec<T>, StoreError> {
        let mut found: std::collections::HashMap<String, T> = std::collections::HashMap::new();
        // SQLite allows 32766 parameters; stay far below.
        for chunk in ids.chunks(500) {
            let marks = super::sql::in_marks(chunk.len());
            for row in
                self.rows::<T>(&format!(" WHERE job_id IN ({marks})"), super::sql::params_from_iter(chunk.iter()))?
            {
                found.insert(row.id().to_string(), row);
            }
        }
        Ok(ids.iter().filter_map(|id| found.remove(*id)).collect())
    }

    /// Jobs by full id, in the order given (ids not found are left out).
    pub fn get_many(&self, ids: &[&str]) -> Result<Vec<JobRecord>, StoreError> {
        self.many(ids)
    }

    /// Summaries by full id, in the order given (ids not found are left out).
    pub fn summaries(&self, ids: &[&str]) -> Result<Vec<JobSummary>, StoreError> {
        self.many(ids)
    }

    /// Active jobs whose current attempt has no Slurm job yet (a retry to submit or a submission to
    /// resume): usually none, so the retry engine never loads the whole active set.
    /// A record that cannot be decoded (a plan an earlier build wrote) is left out with a warning: it
    /// could not be submitted anyway, and must not stop every refresh.
    pub fn waiting_for_submission(&self) -> Result<Vec<JobRecord>, StoreError> {
        let raws = self.raw_rows::<JobRecord>(
            &format!(
                " WHERE {ACTIVE} AND slurm_job_id IS NULL AND cluster IS NOT DISTINCT FROM ?1 ORDER BY created_at"
            ),
            params![self.cluster],
        )?;
        Ok(raws
            .into_iter()
            .filter_map(|raw| match JobRecord::decode(raw) {
                Ok(job) => Some(job),
                Err(e) => {
                    tracing::warn!(error = %e, "skipping a job that cannot be resubmitted");
                    None
                }
            })
            .collect())
    }

    /// All jobs, newest first; `active_only` keeps those not in a terminal status.
    pub fn list(&self, active_only: bool) -> Result<Vec<JobRecord>, StoreError> {
        self.rows(&list_tail(active_only), [])
    }

    /// Summaries of all jobs, newest first; `active_only` keeps those not in a terminal status.
    pub fn list_summaries(&self, active_only: bool) -> Result<Vec<JobSummary>, StoreError> {
        self.rows(&list_tail(active_only), [])
    }
}
