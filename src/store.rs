//! Local state in SQLite (WAL, busy timeout, migrations by `user_version`). The only module that
//! touches the database.

use crate::plan::Plan;
use crate::status::PlatformStatus;
use rusqlite::{params, Connection, OptionalExtension, Row};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("state database {path}: {source}")]
    Sqlite { path: String, source: rusqlite::Error },
    #[error("cannot create the state directory {path}: {message}")]
    Dir { path: String, message: String },
    #[error("no job {0} in the local state; `tao-slurm list` shows the known jobs")]
    NotFound(String),
    #[error("job id prefix {0} matches more than one job; give more characters")]
    Ambiguous(String),
    #[error("corrupt record for job {job_id}: {message}")]
    Corrupt { job_id: String, message: String },
}

/// Migrations, in order; `user_version` records how many have run.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE jobs (
    job_id        TEXT PRIMARY KEY,
    name          TEXT,
    spec_json     TEXT NOT NULL,
    plan_json     TEXT NOT NULL,
    status        TEXT NOT NULL,
    message       TEXT NOT NULL DEFAULT '',
    slurm_job_id  TEXT,
    slurm_state   TEXT,
    exit_code     INTEGER,
    node_list     TEXT,
    login_host    TEXT,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
);
CREATE INDEX jobs_by_status ON jobs(status);
CREATE TABLE events (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id  TEXT NOT NULL REFERENCES jobs(job_id),
    at      INTEGER NOT NULL,
    kind    TEXT NOT NULL,
    detail  TEXT NOT NULL
);
CREATE INDEX events_by_job ON events(job_id, id);
"#,
    r#"
ALTER TABLE jobs ADD COLUMN progress TEXT;
"#,
];

#[derive(Debug, Clone, PartialEq)]
pub struct JobRecord {
    pub job_id: String,
    pub name: Option<String>,
    pub spec_json: String,
    pub plan: Plan,
    pub status: PlatformStatus,
    pub message: String,
    pub slurm_job_id: Option<String>,
    pub slurm_state: Option<String>,
    pub exit_code: Option<i32>,
    pub node_list: Option<String>,
    pub login_host: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    /// The last line of the container's status.json (JSON), when there is one.
    pub progress: Option<String>,
}

/// What a refresh learned about a job.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusUpdate {
    pub status: PlatformStatus,
    pub message: String,
    pub slurm_state: Option<String>,
    pub exit_code: Option<i32>,
    pub node_list: Option<String>,
    /// The last status.json line; None keeps what was stored.
    pub progress: Option<String>,
}

pub struct Store {
    conn: Connection,
    path: String,
}

pub fn now_secs() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

impl Store {
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| StoreError::Dir { path: dir.display().to_string(), message: e.to_string() })?;
        }
        let p = path.display().to_string();
        let err = |source| StoreError::Sqlite { path: p.clone(), source };
        let conn = Connection::open(path).map_err(err)?;
        conn.busy_timeout(std::time::Duration::from_secs(10)).map_err(err)?;
        conn.pragma_update(None, "journal_mode", "WAL").map_err(err)?;
        conn.pragma_update(None, "synchronous", "NORMAL").map_err(err)?;
        conn.pragma_update(None, "foreign_keys", "ON").map_err(err)?;
        let mut store = Store { conn, path: p };
        store.migrate()?;
        Ok(store)
    }

    fn err(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Sqlite { path: self.path.clone(), source }
    }

    fn migrate(&mut self) -> Result<(), StoreError> {
        let version: usize =
            self.conn.pragma_query_value(None, "user_version", |r| r.get(0)).map_err(|e| self.err(e))?;
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version) {
            let tx = self.conn.transaction().map_err(|e| StoreError::Sqlite { path: self.path.clone(), source: e })?;
            tx.execute_batch(sql).map_err(|e| StoreError::Sqlite { path: self.path.clone(), source: e })?;
            tx.pragma_update(None, "user_version", i + 1)
                .map_err(|e| StoreError::Sqlite { path: self.path.clone(), source: e })?;
            tx.commit().map_err(|e| StoreError::Sqlite { path: self.path.clone(), source: e })?;
        }
        Ok(())
    }

    /// Record a job before it is submitted.
    pub fn insert_job(&self, spec_json: &str, plan: &Plan) -> Result<(), StoreError> {
        let now = now_secs();
        let plan_json = serde_json::to_string(plan).expect("a plan always serialises");
        self.conn
            .execute(
                "INSERT INTO jobs (job_id, name, spec_json, plan_json, status, message, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, 'staging', ?6, ?6)",
                params![plan.layout.job_id, plan.name, spec_json, plan_json, PlatformStatus::Pending.as_str(), now],
            )
            .map_err(|e| self.err(e))?;
        self.add_event(&plan.layout.job_id, "created", "job recorded before submission")
    }

    pub fn set_submitted(&self, job_id: &str, slurm_job_id: &str, host: &str) -> Result<(), StoreError> {
        self.conn
            .execute(
                "UPDATE jobs SET slurm_job_id = ?2, login_host = ?3, message = 'submitted', updated_at = ?4 WHERE job_id = ?1",
                params![job_id, slurm_job_id, host, now_secs()],
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
    pub fn in_transaction<T, E: From<StoreError>>(&self, f: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
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

    /// A job by its full id or an unambiguous prefix.
    pub fn get(&self, id_or_prefix: &str) -> Result<JobRecord, StoreError> {
        let exact = self
            .conn
            .query_row(&format!("{SELECT} WHERE job_id = ?1"), params![id_or_prefix], raw_row)
            .optional()
            .map_err(|e| self.err(e))?;
        if let Some(raw) = exact {
            return to_record(raw);
        }
        let pattern = format!("{}%", id_or_prefix.replace(['%', '_'], ""));
        let mut stmt = self.conn.prepare(&format!("{SELECT} WHERE job_id LIKE ?1 LIMIT 2")).map_err(|e| self.err(e))?;
        let mut rows: Vec<RawRow> = stmt
            .query_map(params![pattern], raw_row)
            .map_err(|e| self.err(e))?
            .collect::<Result<_, _>>()
            .map_err(|e| self.err(e))?;
        match rows.len() {
            0 => Err(StoreError::NotFound(id_or_prefix.to_string())),
            1 => to_record(rows.remove(0)),
            _ => Err(StoreError::Ambiguous(id_or_prefix.to_string())),
        }
    }

    /// Jobs by full id, in the order given (ids not found are left out).
    pub fn get_many(&self, ids: &[&str]) -> Result<Vec<JobRecord>, StoreError> {
        let mut found: std::collections::HashMap<String, JobRecord> = std::collections::HashMap::new();
        // SQLite allows 32766 parameters; stay far below.
        for chunk in ids.chunks(500) {
            let marks = vec!["?"; chunk.len()].join(",");
            let mut stmt =
                self.conn.prepare(&format!("{SELECT} WHERE job_id IN ({marks})")).map_err(|e| self.err(e))?;
            let rows: Vec<RawRow> = stmt
                .query_map(rusqlite::params_from_iter(chunk.iter()), raw_row)
                .map_err(|e| self.err(e))?
                .collect::<Result<_, _>>()
                .map_err(|e| self.err(e))?;
            for raw in rows {
                let rec = to_record(raw)?;
                found.insert(rec.job_id.clone(), rec);
            }
        }
        Ok(ids.iter().filter_map(|id| found.remove(*id)).collect())
    }

    /// All jobs, newest first; `active_only` keeps those not in a terminal status.
    pub fn list(&self, active_only: bool) -> Result<Vec<JobRecord>, StoreError> {
        let filter = if active_only { " WHERE status NOT IN ('Complete', 'Error', 'Canceled')" } else { "" };
        let mut stmt = self
            .conn
            .prepare(&format!("{SELECT}{filter} ORDER BY created_at DESC, job_id"))
            .map_err(|e| self.err(e))?;
        let raws: Vec<RawRow> =
            stmt.query_map([], raw_row).map_err(|e| self.err(e))?.collect::<Result<_, _>>().map_err(|e| self.err(e))?;
        raws.into_iter().map(to_record).collect()
    }
}

const SELECT: &str = "SELECT job_id, name, spec_json, plan_json, status, message, slurm_job_id, slurm_state,
    exit_code, node_list, login_host, created_at, updated_at, progress FROM jobs";

/// A row as stored; the plan and status are decoded afterwards so a corrupt row gives a clear error.
struct RawRow {
    job_id: String,
    name: Option<String>,
    spec_json: String,
    plan_json: String,
    status: String,
    message: String,
    slurm_job_id: Option<String>,
    slurm_state: Option<String>,
    exit_code: Option<i32>,
    node_list: Option<String>,
    login_host: Option<String>,
    created_at: i64,
    updated_at: i64,
    progress: Option<String>,
}

fn raw_row(r: &Row) -> rusqlite::Result<RawRow> {
    Ok(RawRow {
        job_id: r.get(0)?,
        name: r.get(1)?,
        spec_json: r.get(2)?,
        plan_json: r.get(3)?,
        status: r.get(4)?,
        message: r.get(5)?,
        slurm_job_id: r.get(6)?,
        slurm_state: r.get(7)?,
        exit_code: r.get(8)?,
        node_list: r.get(9)?,
        login_host: r.get(10)?,
        created_at: r.get(11)?,
        updated_at: r.get(12)?,
        progress: r.get(13)?,
    })
}

fn to_record(raw: RawRow) -> Result<JobRecord, StoreError> {
    let corrupt = |message: String| StoreError::Corrupt { job_id: raw.job_id.clone(), message };
    let plan = serde_json::from_str(&raw.plan_json).map_err(|e| corrupt(format!("plan: {e}")))?;
    let status = PlatformStatus::parse(&raw.status).ok_or_else(|| corrupt(format!("status {:?}", raw.status)))?;
    Ok(JobRecord {
        job_id: raw.job_id,
        name: raw.name,
        spec_json: raw.spec_json,
        plan,
        status,
        message: raw.message,
        slurm_job_id: raw.slurm_job_id,
        slurm_state: raw.slurm_state,
        exit_code: raw.exit_code,
        node_list: raw.node_list,
        login_host: raw.login_host,
        created_at: raw.created_at,
        updated_at: raw.updated_at,
        progress: raw.progress,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::tests::{settings, spec};

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
        let kinds: Vec<String> = store.events(&id).unwrap().into_iter().map(|e| e.1).collect();
        assert_eq!(kinds, vec!["created", "submitted", "status"]);
        assert!(matches!(store.get("zzzz"), Err(StoreError::NotFound(_))));
    }
}
