//! Local state in SQLite (WAL, busy timeout, migrations by `user_version`). The only module that
//! touches the database.

use crate::plan::{Layout, Plan};
use crate::status::PlatformStatus;
use rusqlite::{params, Connection, OptionalExtension};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("state database {path}: {source}")]
    Sqlite { path: String, source: rusqlite::Error },
    #[error("state file {path}: {message}")]
    Dir { path: String, message: String },
    #[error("no job {0} in the local state; `tao-slurm list` shows the known jobs")]
    NotFound(String),
    #[error("job id prefix {0} matches more than one job; give more characters")]
    Ambiguous(String),
    #[error("corrupt record for job {job_id}: {message}")]
    Corrupt { job_id: String, message: String },
}

mod rows;
mod schema;
pub mod service_records;

use rows::{list_tail, FromJobRow, ACTIVE};
use schema::MIGRATIONS;

// The job's domain types are the core's: a store of them, not their home.
use crate::model::timeout_runs;
pub use crate::model::{AttemptRecord, EventRecord, JobRecord, JobSummary, StatusUpdate};

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
}

/// A sweep or pipeline as recorded.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Group {
    pub sweep_id: String,
    /// `sweep` or `pipeline`.
    pub kind: String,
    pub name: Option<String>,
    pub array_name: Option<String>,
    pub max_concurrent: Option<u32>,
}

/// A group as read back, with its array's Slurm id once submitted.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct GroupRecord {
    pub sweep_id: String,
    pub kind: String,
    pub name: Option<String>,
    pub array_name: Option<String>,
    pub slurm_array_id: Option<String>,
    pub max_concurrent: Option<u32>,
    pub created_at: i64,
}

/// The columns [`group_row`] reads, in its order.
const GROUP_COLUMNS: &str = "sweep_id, kind, name, array_name, slurm_array_id, max_concurrent, created_at";

fn group_row(r: &rusqlite::Row) -> rusqlite::Result<GroupRecord> {
    Ok(GroupRecord {
        sweep_id: r.get(0)?,
        kind: r.get(1)?,
        name: r.get(2)?,
        array_name: r.get(3)?,
        slurm_array_id: r.get(4)?,
        max_concurrent: r.get(5)?,
        created_at: r.get(6)?,
    })
}

/// One dependency of an active job, with its parent as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct DependencyRow {
    pub child: String,
    pub parent: String,
    pub kind: String,
    pub parent_status: String,
    pub parent_slurm_id: Option<String>,
}

/// See [`Store::change_token`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangeToken {
    /// Changes when another connection commits.
    pub others: i64,
    /// Rows this connection has written.
    pub ours: u64,
}

const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(e.sqlite_error_code(), Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked))
}

pub struct Store {
    conn: Connection,
    path: String,
    /// The cluster profile of the client using this store: new jobs record it, and the queries that
    /// lead to remote work (submissions to resume, secrets to remove) keep to its jobs.
    cluster: Option<String>,
}

pub fn now_secs() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

impl Store {
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        // Mode 600 before SQLite opens it: its WAL and SHM files copy the database file's mode.
        crate::private::ensure_private_file(path)
            .map_err(|message| StoreError::Dir { path: path.display().to_string(), message })?;
        let p = path.display().to_string();
        // Switching a new file to WAL upgrades a read lock to a write lock; when two processes do it at
        // once SQLite answers "locked" at once instead of waiting (its deadlock rule), so that step is
        // retried for as long as the busy timeout would have waited.
        let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
        loop {
            match Self::open_once(path, &p) {
                Err(StoreError::Sqlite { source, .. }) if is_busy(&source) && std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                other => return other,
            }
        }
    }

    fn open_once(path: &Path, p: &str) -> Result<Store, StoreError> {
        let err = |source| StoreError::Sqlite { path: p.to_string(), source };
        let conn = Connection::open(path).map_err(err)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(err)?;
        conn.pragma_update(None, "journal_mode", "WAL").map_err(err)?;
        conn.pragma_update(None, "synchronous", "NORMAL").map_err(err)?;
        conn.pragma_update(None, "foreign_keys", "ON").map_err(err)?;
        let mut store = Store { conn, path: p.to_string(), cluster: None };
        store.migrate()?;
        Ok(store)
    }

    fn err(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Sqlite { path: self.path.clone(), source }
    }

    fn migrate(&mut self) -> Result<(), StoreError> {
        // Processes that open a new state file at the same moment (a submit and a `list`, two Python
        // processes) must not both run the migrations: the version is read and the migrations run
        // under one write lock, so the second waits (busy timeout) and then finds them done.
        let path = self.path.clone();
        let err = |source| StoreError::Sqlite { path: path.clone(), source };
        let tx = self.conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(err)?;
        let version: usize = tx.pragma_query_value(None, "user_version", |r| r.get(0)).map_err(err)?;
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version) {
            tx.execute_batch(sql).map_err(err)?;
            tx.pragma_update(None, "user_version", i + 1).map_err(err)?;
        }
        let undone: i64 = tx.query_row(schema::NEEDS_DOCS_REPAIR, [], |r| r.get(0)).map_err(err)?;
        if undone > 0 {
            tx.execute_batch(schema::REPAIR_DOCS_OF_MIGRATION_4).map_err(err)?;
        }
        tx.commit().map_err(err)
    }

    /// Work for the cluster profile `cluster` (None: the settings without a profile).
    pub fn set_cluster(&mut self, cluster: Option<String>) {
        self.cluster = cluster;
    }

    /// Record a job before it is submitted (on this store's cluster).
    pub fn insert_job(&self, spec_json: &str, plan: &Plan) -> Result<(), StoreError> {
        self.in_transaction(|| self.insert_member(spec_json, plan, &Member::default()))
    }

    /// Record a sweep (or a pipeline: `array_name` None) and its members before anything is submitted,
    /// in one transaction.
    pub fn insert_group(&self, group: &Group, members: &[(String, &Plan, Member)]) -> Result<(), StoreError> {
        self.in_transaction(|| {
            self.conn
                .execute(
                    "INSERT INTO sweeps (sweep_id, kind, name, array_name, max_concurrent, created_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    params![group.sweep_id, group.kind, group.name, group.array_name, group.max_concurrent, now_secs()],
                )
                .map_err(|e| self.err(e))?;
            for (spec_json, plan, member) in members {
                self.insert_member(spec_json, plan, member)?;
            }
            Ok(())
        })
    }

    /// A sweep's array reached Slurm as `array_id`: each variant's first attempt is its task.
    pub fn set_array_submitted(&self, sweep_id: &str, array_id: &str, host: &str) -> Result<(), StoreError> {
        self.in_transaction(|| {
            self.conn
                .execute("UPDATE sweeps SET slurm_array_id = ?2 WHERE sweep_id = ?1", params![sweep_id, array_id])
                .map_err(|e| self.err(e))?;
            let members: Vec<(String, u32)> = {
                let mut stmt = self
                    .conn
                    .prepare("SELECT job_id, sweep_index FROM jobs WHERE sweep_id = ?1 AND sweep_index IS NOT NULL AND attempt = 1")
                    .map_err(|e| self.err(e))?;
                let rows = stmt
                    .query_map(params![sweep_id], |r| Ok((r.get(0)?, r.get(1)?)))
                    .map_err(|e| self.err(e))?;
                rows.collect::<Result<_, _>>().map_err(|e| self.err(e))?
            };
            for (job_id, index) in members {
                self.set_submitted(&job_id, &crate::ops::sweep::task_id(array_id, index), host)?;
            }
            Ok(())
        })
    }

    /// The group (sweep or pipeline) with this id or unambiguous id prefix, and its members' job ids
    /// in order; None when no group matches.
    pub fn group(&self, id_or_prefix: &str) -> Result<Option<(GroupRecord, Vec<String>)>, StoreError> {
        let pattern = format!("{}%", id_or_prefix.replace(['%', '_'], ""));
        let mut stmt = self
            .conn
            .prepare(
                &format!("SELECT {GROUP_COLUMNS} FROM sweeps WHERE sweep_id = ?1 OR sweep_id LIKE ?2 ORDER BY sweep_id = ?1 DESC LIMIT 2"),
            )
            .map_err(|e| self.err(e))?;
        let found: Vec<GroupRecord> = stmt
            .query_map(params![id_or_prefix, pattern], group_row)
            .map_err(|e| self.err(e))?
            .collect::<Result<_, _>>()
            .map_err(|e| self.err(e))?;
        let group = match found.as_slice() {
            [] => return Ok(None),
            [one] => one.clone(),
            [first, ..] if first.sweep_id == id_or_prefix => first.clone(),
            _ => return Err(StoreError::Ambiguous(id_or_prefix.to_string())),
        };
        let mut stmt = self
            .conn
            .prepare("SELECT job_id FROM jobs WHERE sweep_id = ?1 ORDER BY sweep_index, rowid")
            .map_err(|e| self.err(e))?;
        let ids: Vec<String> = stmt
            .query_map(params![group.sweep_id], |r| r.get(0))
            .map_err(|e| self.err(e))?
            .collect::<Result<_, _>>()
            .map_err(|e| self.err(e))?;
        Ok(Some((group, ids)))
    }

    /// Every group, newest first.
    pub fn groups(&self) -> Result<Vec<GroupRecord>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(&format!("SELECT {GROUP_COLUMNS} FROM sweeps ORDER BY rowid DESC"))
            .map_err(|e| self.err(e))?;
        let rows = stmt.query_map([], group_row).map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// Record that `child` runs after `parent` (`kind`: ok, notok, any).
    pub fn add_dependency(&self, child: &str, parent: &str, kind: &str) -> Result<(), StoreError> {
        self.conn
            .execute(
                "INSERT OR REPLACE INTO dependencies (child, parent, kind) VALUES (?1, ?2, ?3)",
                params![child, parent, kind],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// The dependency a job's Slurm job was submitted or re-pointed with.
    pub fn set_gate(&self, job_id: &str, gate: &str) -> Result<(), StoreError> {
        self.conn
            .execute("UPDATE jobs SET gate = ?2 WHERE job_id = ?1", params![job_id, gate])
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// The dependencies of `child` (all of them when None) whose child is not terminal, each with its
    /// parent as stored now: (child, parent, kind, parent status, parent's Slurm job id).
    pub fn open_dependencies(&self, child: Option<&str>) -> Result<Vec<DependencyRow>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "SELECT d.child, d.parent, d.kind, p.status, p.slurm_job_id FROM dependencies d
                   JOIN jobs c ON c.job_id = d.child JOIN jobs p ON p.job_id = d.parent
                 WHERE (?1 IS NULL OR d.child = ?1) AND c.{ACTIVE} AND c.cluster IS ?2 ORDER BY d.child, d.rowid"
            ))
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![child, self.cluster], |r| {
                Ok(DependencyRow {
                    child: r.get(0)?,
                    parent: r.get(1)?,
                    kind: r.get(2)?,
                    parent_status: r.get(3)?,
                    parent_slurm_id: r.get(4)?,
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// Record one job (in the caller's transaction).
    pub fn insert_member(&self, spec_json: &str, plan: &Plan, member: &Member) -> Result<(), StoreError> {
        let now = now_secs();
        let plan_json = serde_json::to_string(plan).expect("a plan always serialises");
        let job_id = &plan.layout.job_id;
        let attempt_name = member.attempt_name.clone().unwrap_or_else(|| plan.layout.job_name.clone());
        {
            self.conn
                .execute(
                    "INSERT INTO jobs (job_id, name, status, message, created_at, updated_at, attempt, attempt_name,
                       job_dir, image, nodes, gpus_per_node, partition, timeout_seconds, timeout_runs, has_secrets, cluster,
                       sweep_id, sweep_index, gate)
                     VALUES (?1, ?2, ?3, 'staging', ?4, ?4, 1, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
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
                        member.gate
                    ],
                )
                .map_err(|e| self.err(e))?;
            self.conn
                .execute(
                    "INSERT INTO job_docs (job_id, spec_json, plan_json) VALUES (?1, ?2, ?3)",
                    params![job_id, spec_json, plan_json],
                )
                .map_err(|e| self.err(e))?;
            self.conn
                .execute(
                    "INSERT INTO attempts (job_id, number, slurm_job_name, recorded_at) VALUES (?1, 1, ?2, ?3)",
                    params![job_id, attempt_name, now],
                )
                .map_err(|e| self.err(e))?;
            for (parent, kind) in &member.after {
                self.add_dependency(job_id, parent, kind)?;
            }
            self.add_event(job_id, "created", &format!("job recorded before submission as {attempt_name}"))
        }
    }

    /// The attempts of a job, first to last.
    pub fn attempts(&self, job_id: &str) -> Result<Vec<AttemptRecord>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT number, slurm_job_name, slurm_job_id, login_host, state, exit_code, node_list, failure_class,
                        evidence, excluded_nodes, recorded_at, submitted_at, ended_at
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
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }

    /// Close the current attempt with its failure class and evidence, and schedule the next one, in
    /// one transaction and only if `attempt` is still the current one (compare-and-set): of several
    /// processes that saw the same failure, exactly one schedules the retry. Returns whether this call
    /// did.
    #[allow(clippy::too_many_arguments)]
    pub fn schedule_retry(
        &self,
        job_id: &str,
        attempt: u32,
        class: &str,
        evidence: &[String],
        next_name: &str,
        excluded_nodes: &str,
        not_before: i64,
        message: &str,
    ) -> Result<bool, StoreError> {
        let now = now_secs();
        self.in_transaction(|| {
            let won = self
                .conn
                .execute(
                    "UPDATE jobs SET attempt = ?3, attempt_name = ?4, slurm_job_id = NULL, slurm_state = NULL, exit_code = NULL,
                       submitted_at = NULL, unseen_since = NULL,
                       node_list = NULL, login_host = NULL, status = 'Pending', message = ?5, next_retry_at = ?6,
                       excluded_nodes = ?7, updated_at = ?8
                     WHERE job_id = ?1 AND attempt = ?2 AND status NOT IN ('Complete', 'Error', 'Canceled')",
                    params![job_id, attempt, attempt + 1, next_name, message, not_before, excluded_nodes, now],
                )
                .map_err(|e| self.err(e))?;
            if won == 0 {
                return Ok(false);
            }
            self.conn
                .execute(
                    "UPDATE attempts SET failure_class = ?3, evidence = ?4, ended_at = ?5 WHERE job_id = ?1 AND number = ?2",
                    params![job_id, attempt, class, serde_json::to_string(evidence).unwrap(), now],
                )
                .map_err(|e| self.err(e))?;
            self.conn
                .execute(
                    "INSERT INTO attempts (job_id, number, slurm_job_name, excluded_nodes, recorded_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![job_id, attempt + 1, next_name, excluded_nodes, now],
                )
                .map_err(|e| self.err(e))?;
            self.add_event(job_id, "retry", message)?;
            Ok(true)
        })
    }

    /// Record how an attempt ended (its Slurm state, exit code and nodes).
    pub fn record_attempt_end(&self, job_id: &str, attempt: u32, update: &StatusUpdate) -> Result<(), StoreError> {
        self.conn
            .execute(
                "UPDATE attempts SET state = ?3, exit_code = ?4, node_list = COALESCE(node_list, ?5), ended_at = ?6
                 WHERE job_id = ?1 AND number = ?2",
                params![job_id, attempt, update.slurm_state, update.exit_code, update.node_list, now_secs()],
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
    ) -> Result<(), StoreError> {
        self.conn
            .execute(
                "UPDATE attempts SET failure_class = ?3, evidence = ?4, ended_at = COALESCE(ended_at, ?5)
                 WHERE job_id = ?1 AND number = ?2",
                params![job_id, attempt, class, serde_json::to_string(evidence).unwrap(), now_secs()],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Take the due retry of `attempt` for submission (compare-and-set on `next_retry_at`).
    pub fn claim_due_retry(&self, job_id: &str, attempt: u32) -> Result<bool, StoreError> {
        let n = self
            .conn
            .execute(
                "UPDATE jobs SET next_retry_at = NULL WHERE job_id = ?1 AND attempt = ?2 AND next_retry_at IS NOT NULL
                   AND next_retry_at <= ?3",
                params![job_id, attempt, now_secs()],
            )
            .map_err(|e| self.err(e))?;
        Ok(n == 1)
    }

    /// The current attempt reached Slurm as `slurm_job_id`.
    pub fn set_submitted(&self, job_id: &str, slurm_job_id: &str, host: &str) -> Result<(), StoreError> {
        let now = now_secs();
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
        self.conn
            .execute(
                "UPDATE attempts SET slurm_job_id = ?2, login_host = ?3, submitted_at = ?4
                 WHERE job_id = ?1 AND number = (SELECT attempt FROM jobs WHERE job_id = ?1)",
                params![job_id, slurm_job_id, host, now],
            )
            .map_err(|e| self.err(e))?;
        self.add_event(job_id, "submitted", &format!("Slurm job {slurm_job_id} via {host}"))
    }

    /// Store what a refresh found; an event is written when the status or Slurm state changes.
    /// Nothing is written when nothing changed (the common case for a refresh of many jobs).
    pub fn update_status(&self, job_id: &str, update: &StatusUpdate) -> Result<(), StoreError> {
        let (status, state): (String, Option<String>) = self
            .conn
            .query_row("SELECT status, slurm_state FROM jobs WHERE job_id = ?1", params![job_id], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()
            .map_err(|e| self.err(e))?
            .ok_or_else(|| StoreError::NotFound(job_id.to_string()))?;
        let changed = self
            .conn
            .execute(
                "UPDATE jobs SET status = ?2, message = ?3, slurm_state = ?4, exit_code = ?5,
                   node_list = COALESCE(node_list, ?6), updated_at = ?7, progress = COALESCE(?8, progress)
                 WHERE job_id = ?1 AND (status IS NOT ?2 OR message IS NOT ?3 OR slurm_state IS NOT ?4
                   OR exit_code IS NOT ?5 OR (node_list IS NULL AND ?6 IS NOT NULL)
                   OR (?8 IS NOT NULL AND progress IS NOT ?8))",
                params![
                    job_id,
                    update.status.as_str(),
                    update.message,
                    update.slurm_state,
                    update.exit_code,
                    update.node_list,
                    now_secs(),
                    update.progress
                ],
            )
            .map_err(|e| self.err(e))?;
        if changed > 0 {
            self.conn
                .execute(
                    "UPDATE attempts SET state = ?2, exit_code = ?3, node_list = COALESCE(node_list, ?4),
                       ended_at = CASE WHEN ?5 THEN COALESCE(ended_at, ?6) ELSE ended_at END
                     WHERE job_id = ?1 AND number = (SELECT attempt FROM jobs WHERE job_id = ?1)",
                    params![
                        job_id,
                        update.slurm_state,
                        update.exit_code,
                        update.node_list,
                        update.status.is_terminal(),
                        now_secs()
                    ],
                )
                .map_err(|e| self.err(e))?;
        }
        if changed > 0 && (status != update.status.as_str() || state != update.slurm_state) {
            self.add_event(
                job_id,
                "status",
                &format!(
                    "{} (Slurm {}): {}",
                    update.status,
                    update.slurm_state.as_deref().unwrap_or("-"),
                    update.message
                ),
            )?;
        }
        Ok(())
    }

    /// Run `f` in one transaction: many small writes cost one commit.
    /// Nested calls join the outer transaction.
    pub fn in_transaction<T, E: From<StoreError>>(&self, f: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
        if !self.conn.is_autocommit() {
            return f();
        }
        self.conn.execute_batch("BEGIN IMMEDIATE").map_err(|e| E::from(self.err(e)))?;
        match f() {
            Ok(v) => {
                self.conn.execute_batch("COMMIT").map_err(|e| E::from(self.err(e)))?;
                Ok(v)
            }
            Err(e) => {
                let _ = self.conn.execute_batch("ROLLBACK");
                Err(e)
            }
        }
    }

    pub fn add_event(&self, job_id: &str, kind: &str, detail: &str) -> Result<(), StoreError> {
        self.conn
            .execute(
                "INSERT INTO events (job_id, at, kind, detail) VALUES (?1, ?2, ?3, ?4)",
                params![job_id, now_secs(), kind, detail],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    pub fn events(&self, job_id: &str) -> Result<Vec<(i64, String, String)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT at, kind, detail FROM events WHERE job_id = ?1 ORDER BY id")
            .map_err(|e| self.err(e))?;
        let rows =
            stmt.query_map(params![job_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }

    /// The id of the newest event (0 when there is none): a cursor that `events_since` continues from.
    pub fn last_event_id(&self) -> Result<i64, StoreError> {
        self.conn.query_row("SELECT COALESCE(MAX(id), 0) FROM events", [], |r| r.get(0)).map_err(|e| self.err(e))
    }

    /// Events with an id above `after`, oldest first, at most `limit`; of the jobs `job_ids` (full ids)
    /// or, when it is empty, of every job. Ids only grow, so the last id returned is the next cursor.
    pub fn events_since(&self, after: i64, job_ids: &[&str], limit: usize) -> Result<Vec<EventRecord>, StoreError> {
        let filter = if job_ids.is_empty() {
            String::new()
        } else {
            format!(" AND job_id IN ({})", vec!["?"; job_ids.len()].join(","))
        };
        let sql = format!("SELECT id, job_id, at, kind, detail FROM events WHERE id > ?{filter} ORDER BY id LIMIT ?");
        let mut values: Vec<rusqlite::types::Value> = vec![after.into()];
        values.extend(job_ids.iter().map(|id| rusqlite::types::Value::from(id.to_string())));
        values.push((limit.min(i64::MAX as usize) as i64).into());
        let mut stmt = self.conn.prepare(&sql).map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(rusqlite::params_from_iter(values), |r| {
                Ok(EventRecord { id: r.get(0)?, job_id: r.get(1)?, at: r.get(2)?, kind: r.get(3)?, detail: r.get(4)? })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
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
    fn rows<T: FromJobRow>(&self, tail: &str, params: impl rusqlite::Params) -> Result<Vec<T>, StoreError> {
        self.raw_rows::<T>(tail, params)?.into_iter().map(T::decode).collect()
    }

    /// `T`'s rows as read, not decoded yet.
    fn raw_rows<T: FromJobRow>(&self, tail: &str, params: impl rusqlite::Params) -> Result<Vec<T::Raw>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!("{}{tail}", T::SELECT)).map_err(|e| self.err(e))?;
        let raws = stmt.query_map(params, T::raw).map_err(|e| self.err(e))?.collect::<Result<_, _>>();
        raws.map_err(|e| self.err(e))
    }

    /// Rows by full id, in the order given (ids not found are left out).
    fn many<T: FromJobRow>(&self, ids: &[&str]) -> Result<Vec<T>, StoreError> {
        let mut found: std::collections::HashMap<String, T> = std::collections::HashMap::new();
        // SQLite allows 32766 parameters; stay far below.
        for chunk in ids.chunks(500) {
            let marks = vec!["?"; chunk.len()].join(",");
            for row in
                self.rows::<T>(&format!(" WHERE job_id IN ({marks})"), rusqlite::params_from_iter(chunk.iter()))?
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
            &format!(" WHERE {ACTIVE} AND slurm_job_id IS NULL AND cluster IS ?1 ORDER BY created_at"),
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

    /// A value that differs whenever the state may have changed since it was last taken: a commit by
    /// any other connection (`PRAGMA data_version`, other processes included) or a write by this one.
    pub fn change_token(&self) -> Result<ChangeToken, StoreError> {
        let others: i64 = self.conn.pragma_query_value(None, "data_version", |r| r.get(0)).map_err(|e| self.err(e))?;
        Ok(ChangeToken { others, ours: self.conn.total_changes() })
    }

    /// Terminal jobs whose secrets directory may still be on the cluster: (job id, directory).
    pub fn secrets_to_remove(&self) -> Result<Vec<(String, String)>, StoreError> {
        let mut st = self
            .conn
            .prepare_cached(&format!(
                "SELECT job_id, job_dir FROM jobs WHERE has_secrets = 1 AND secrets_cleared = 0 AND NOT ({ACTIVE})
                   AND cluster IS ?1"
            ))
            .map_err(|e| self.err(e))?;
        let rows = st
            .query_map(params![self.cluster], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .map_err(|e| self.err(e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.err(e))?;
        Ok(rows.into_iter().map(|(id, dir)| (id.clone(), Layout::new(&dir, &id).secrets_dir())).collect())
    }

    /// The secrets directory of these jobs is gone from the cluster.
    pub fn mark_secrets_cleared(&self, ids: &[String]) -> Result<(), StoreError> {
        self.in_transaction(|| {
            for id in ids {
                self.conn
                    .prepare_cached("UPDATE jobs SET secrets_cleared = 1 WHERE job_id = ?1")
                    .and_then(|mut st| st.execute(params![id]))
                    .map_err(|e| self.err(e))?;
                self.add_event(id, "secrets_removed", "the secrets directory was removed from shared storage")?;
            }
            Ok(())
        })
    }

    /// Since when the scheduler has not known the job's current attempt (None: it knows it), set on
    /// the first read that misses it and cleared by any read that finds it.
    pub fn set_unseen_since(&self, job_id: &str, since: Option<i64>) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("UPDATE jobs SET unseen_since = ?2 WHERE job_id = ?1")
            .and_then(|mut st| st.execute(params![job_id, since]))
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Remember the signature of a job's status.json as it was just read.
    pub fn set_status_sig(&self, job_id: &str, sig: &str) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("UPDATE jobs SET status_sig = ?2 WHERE job_id = ?1")
            .and_then(|mut st| st.execute(params![job_id, sig]))
            .map_err(|e| self.err(e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tao_slurm_core::fixtures::{settings, spec};

    #[test]
    fn processes_opening_a_new_state_file_at_once_migrate_it_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(8));
        let opened: Vec<_> = (0..8)
            .map(|_| {
                let (path, barrier) = (path.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    Store::open(&path).map(|_| ()).map_err(|e| e.to_string())
                })
            })
            .collect();
        for t in opened {
            t.join().unwrap().unwrap();
        }
        let store = Store::open(&path).unwrap();
        store.insert_job("{}", &crate::plan::resolve(&spec(), &settings()).unwrap()).unwrap();
    }

    #[test]
    fn jobs_record_their_cluster_and_remote_work_keeps_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let mut a = Store::open(&path).unwrap();
        a.set_cluster(Some("a".into()));
        let plain = Store::open(&path).unwrap();
        let pa = crate::plan::resolve(&spec(), &settings()).unwrap();
        let p0 = crate::plan::resolve(&spec(), &settings()).unwrap();
        a.insert_job("{}", &pa).unwrap();
        plain.insert_job("{}", &p0).unwrap();
        assert_eq!(plain.summary(&pa.layout.job_id).unwrap().cluster.as_deref(), Some("a"));
        assert_eq!(a.summary(&p0.layout.job_id).unwrap().cluster, None);
        let ids = |s: &Store| -> Vec<String> {
            s.waiting_for_submission().unwrap().into_iter().map(|j| j.summary.job_id).collect()
        };
        assert_eq!(ids(&a), vec![pa.layout.job_id.clone()]);
        assert_eq!(ids(&plain), vec![p0.layout.job_id.clone()]);
        assert_eq!(plain.list_summaries(true).unwrap().len(), 2, "listing shows every cluster's jobs");
    }

    #[test]
    fn a_sweep_is_recorded_at_once_found_by_its_id_and_its_dependencies_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.db")).unwrap();
        let plans: Vec<_> = (0..3).map(|_| crate::plan::resolve(&spec(), &settings()).unwrap()).collect();
        let members: Vec<(String, &Plan, Member)> = plans
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let m = Member {
                    attempt_name: Some("tao-sweep-abc".into()),
                    sweep_id: Some("abc-123".into()),
                    sweep_index: Some(i as u32),
                    ..Default::default()
                };
                ("{}".to_string(), p, m)
            })
            .collect();
        let group = Group {
            sweep_id: "abc-123".into(),
            kind: "sweep".into(),
            array_name: Some("tao-sweep-abc".into()),
            ..Default::default()
        };
        store.insert_group(&group, &members).unwrap();
        store.set_array_submitted("abc-123", "77", "login1").unwrap();
        let (g, ids) = store.group("abc").unwrap().unwrap();
        assert_eq!(g.slurm_array_id.as_deref(), Some("77"));
        assert_eq!(ids, plans.iter().map(|p| p.layout.job_id.clone()).collect::<Vec<_>>(), "in index order");
        let second = store.summary(&ids[1]).unwrap();
        assert_eq!(second.slurm_job_id.as_deref(), Some("77_1"));
        assert_eq!((second.sweep_index, second.array_index()), (Some(1), Some(1)));
        assert_eq!(store.attempts(&ids[1]).unwrap()[0].slurm_job_name, "tao-sweep-abc");
        assert!(store.group("zzz").unwrap().is_none());
        // A job that runs after the first variant.
        let child = crate::plan::resolve(&spec(), &settings()).unwrap();
        let m = Member {
            after: vec![(ids[0].clone(), "ok".into())],
            gate: Some("afterok:77_0".into()),
            ..Default::default()
        };
        store.in_transaction(|| store.insert_member("{}", &child, &m)).unwrap();
        let deps = store.open_dependencies(Some(&child.layout.job_id)).unwrap();
        assert_eq!(deps.len(), 1);
        assert_eq!((deps[0].parent.as_str(), deps[0].kind.as_str()), (ids[0].as_str(), "ok"));
        assert_eq!(deps[0].parent_slurm_id.as_deref(), Some("77_0"));
        assert_eq!(store.summary(&child.layout.job_id).unwrap().gate.as_deref(), Some("afterok:77_0"));
    }

    #[test]
    fn jobs_survive_reopen_and_prefixes_resolve() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let plan = crate::plan::resolve(&spec(), &settings()).unwrap();
        let id = plan.layout.job_id.clone();
        {
            let store = Store::open(&path).unwrap();
            store.insert_job("{}", &plan).unwrap();
            store.set_submitted(&id, "42", "login1").unwrap();
            store
                .update_status(
                    &id,
                    &StatusUpdate {
                        status: PlatformStatus::Error,
                        message: "exit code 3".into(),
                        slurm_state: Some("FAILED".into()),
                        exit_code: Some(3),
                        node_list: Some("node1".into()),
                        progress: None,
                    },
                )
                .unwrap();
        }
        let store = Store::open(&path).unwrap();
        let rec = store.get(&id[..8]).unwrap();
        assert_eq!(rec.plan, plan);
        assert_eq!(rec.status, PlatformStatus::Error);
        assert_eq!(rec.exit_code, Some(3));
        assert_eq!(rec.slurm_job_id.as_deref(), Some("42"));
        assert!(store.list(true).unwrap().is_empty());
        assert_eq!(store.list(false).unwrap().len(), 1);
        let attempts = store.attempts(&id).unwrap();
        assert_eq!(attempts.len(), 1);
        assert_eq!((attempts[0].state.as_deref(), attempts[0].exit_code), (Some("FAILED"), Some(3)));
        assert!(attempts[0].ended_at.is_some(), "a terminal status ends the attempt");
        let kinds: Vec<String> = store.events(&id).unwrap().into_iter().map(|e| e.1).collect();
        assert_eq!(kinds, vec!["created", "submitted", "status"]);
        assert!(matches!(store.get("zzzz"), Err(StoreError::NotFound(_))));
    }

    #[test]
    fn summaries_agree_with_records_and_old_state_files_are_filled_in() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let mut spec = spec();
        spec.secret_env = vec!["HF_TOKEN".into()];
        let plan = crate::plan::resolve(&spec, &settings()).unwrap();
        let id = plan.layout.job_id.clone();
        {
            // A state file as version 3 wrote it: no summary columns yet.
            let conn = Connection::open(&path).unwrap();
            for sql in &MIGRATIONS[..3] {
                conn.execute_batch(sql).unwrap();
            }
            conn.pragma_update(None, "user_version", 3).unwrap();
            conn.execute(
                "INSERT INTO jobs (job_id, spec_json, plan_json, status, created_at, updated_at, attempt_name)
                 VALUES (?1, '{}', ?2, 'Running', 1, 1, ?3)",
                params![id, serde_json::to_string(&plan).unwrap(), plan.layout.job_name],
            )
            .unwrap();
            // And one an earlier build wrote: `timeout_minutes`, no `secret_names`.
            let mut old: serde_json::Value = serde_json::to_value(&plan).unwrap();
            let o = old.as_object_mut().unwrap();
            o.remove("timeout_seconds");
            o.remove("secret_names");
            o.insert("timeout_minutes".into(), 228.into());
            conn.execute(
                "INSERT INTO jobs (job_id, spec_json, plan_json, status, created_at, updated_at, attempt_name)
                 VALUES ('old-build-job', '{}', ?1, 'Complete', 1, 1, 'tao-job-old-build-job')",
                params![old.to_string()],
            )
            .unwrap();
            conn.execute(
                "INSERT INTO jobs (job_id, spec_json, plan_json, status, created_at, updated_at, attempt_name)
                 VALUES ('old-build-pending', '{}', ?1, 'Pending', 1, 1, 'tao-job-old-build-pending')",
                params![old.to_string()],
            )
            .unwrap();
        }
        let store = Store::open(&path).unwrap();
        let legacy = store.summary("old-build-job").unwrap();
        assert_eq!((legacy.timeout_seconds, legacy.has_secrets), (228 * 60, false));
        assert_eq!(legacy.layout.base_dir, plan.layout.base_dir);
        let summary = store.summary(&id).unwrap();
        assert_eq!(summary, store.get(&id).unwrap().summary);
        assert!(summary.has_secrets);
        assert_eq!(summary.gpus_per_node, plan.resources.gpus_per_node);
        assert_eq!(summary.layout, plan.layout);
        // A job recorded now fills them at insert.
        let other = crate::plan::resolve(&tao_slurm_core::fixtures::spec(), &settings()).unwrap();
        store.insert_job("{}", &other).unwrap();
        let s = store.summary(&other.layout.job_id).unwrap();
        assert_eq!(s, store.get(&other.layout.job_id).unwrap().summary);
        assert!(!s.has_secrets);
        assert_eq!(store.list_summaries(true).unwrap().len(), 3);
        assert_eq!(store.list_summaries(false).unwrap().len(), 4);
        // The old active row's plan decodes with what that build behaved by, so it can be resumed.
        let waiting = store.waiting_for_submission().unwrap();
        let ids: Vec<&str> = waiting.iter().map(|j| j.summary.job_id.as_str()).collect();
        assert!(ids.contains(&id.as_str()) && ids.contains(&"old-build-pending"), "{ids:?}");
        let old = waiting.iter().find(|j| j.summary.job_id == "old-build-pending").unwrap();
        assert_eq!((old.plan.timeout_seconds, old.plan.secret_names.len()), (228 * 60, 0));
        store.set_status_sig(&id, "12:34").unwrap();
        assert_eq!(store.summary(&id).unwrap().status_sig.as_deref(), Some("12:34"));
    }

    #[test]
    fn the_change_token_moves_with_any_write_by_this_or_another_connection() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let ours = Store::open(&path).unwrap();
        let other = Store::open(&path).unwrap();
        let t0 = ours.change_token().unwrap();
        assert_eq!(ours.change_token().unwrap(), t0, "nothing changed");
        let plan = crate::plan::resolve(&spec(), &settings()).unwrap();
        other.insert_job("{}", &plan).unwrap();
        let t1 = ours.change_token().unwrap();
        assert_ne!(t1.others, t0.others, "another connection committed");
        ours.set_status_sig(&plan.layout.job_id, "1:2").unwrap();
        let t2 = ours.change_token().unwrap();
        assert_eq!(t2.others, t1.others);
        assert_ne!(t2.ours, t1.ours, "this connection wrote");
    }

    #[test]
    fn events_since_a_cursor_by_job() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.db")).unwrap();
        assert_eq!(store.last_event_id().unwrap(), 0);
        let plans: Vec<Plan> = (0..2).map(|_| crate::plan::resolve(&spec(), &settings()).unwrap()).collect();
        for p in &plans {
            store.insert_job("{}", p).unwrap();
        }
        let (a, b) = (plans[0].layout.job_id.as_str(), plans[1].layout.job_id.as_str());
        let cursor = store.last_event_id().unwrap();
        store.set_submitted(a, "41", "login1").unwrap();
        store.set_submitted(b, "42", "login1").unwrap();
        let all = store.events_since(cursor, &[], 10).unwrap();
        assert_eq!(all.iter().map(|e| e.job_id.as_str()).collect::<Vec<_>>(), vec![a, b]);
        assert!(all.iter().all(|e| e.kind == "submitted" && e.id > cursor));
        let only_b = store.events_since(cursor, &[b], 10).unwrap();
        assert_eq!(only_b.len(), 1);
        assert_eq!(only_b[0].detail, "Slurm job 42 via login1");
        assert_eq!(store.events_since(cursor, &[], 1).unwrap().len(), 1, "limit");
        assert!(store.events_since(store.last_event_id().unwrap(), &[], 10).unwrap().is_empty());
    }
}
