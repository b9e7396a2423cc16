//! Local state in SQLite (WAL, busy timeout, migrations by `user_version`). The only module that
//! touches the database. This file holds the connection (open, migrations, transactions, the change
//! token); each table's queries live in a file of their own (jobs, attempts, events, groups,
//! dependencies, secrets). The store never reads the clock: callers pass `now` (Unix seconds).

use rusqlite::Connection;
use sql::Conn;
use std::path::Path;

mod attempts;
// The service's records: compiled for the service (its crate turns the feature on), not the Python
// extension.
#[cfg(any(test, feature = "service-records"))]
mod audit;
mod dependencies;
mod events;
mod groups;
mod jobs;
mod kpis;
mod leases;
mod notify;
mod pause;
pub mod pg_links;
mod pg_tls;
mod postgres_schema;
mod reopen;
mod rows;
mod schema;
mod secrets;
#[cfg(any(test, feature = "service-records"))]
pub mod service_caps;
#[cfg(any(test, feature = "service-records"))]
pub mod service_records;
#[cfg(any(test, feature = "service-records"))]
pub mod sign_in_records;
pub(crate) mod sql;
mod writer_turns;
#[cfg(test)]
pub(crate) mod test_place;
#[cfg(test)]
mod tests;

pub use attempts::RetryPlan;
#[cfg(any(test, feature = "service-records"))]
pub use audit::AuditEntry;
pub use dependencies::DependencyRow;
pub use groups::{Group, GroupRecord};
pub use jobs::{AsRead, Member, NewJob};
pub use leases::Lease;
pub use notify::Outgoing;
pub use pause::{NewDocs, PauseAsk};
// The job's domain types are the core's: a store of them, not their home.
pub use crate::model::{AttemptRecord, EventRecord, JobRecord, JobSummary, StatusUpdate};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("state database {path}: {source}")]
    Sqlite { path: String, source: sql::Error },
    #[error("state file {path}: {message}")]
    Dir { path: String, message: String },
    /// A transaction that carried many callers' writes failed: each is told its message.
    #[error("state database {path}: {message}")]
    Failed { path: String, message: String },
    #[error("no job {0} in the local state; `tao-slurm list` shows the known jobs")]
    NotFound(String),
    #[error("job id prefix {0} matches more than one job; give more characters")]
    Ambiguous(String),
    #[error("corrupt record for job {job_id}: {message}")]
    Corrupt { job_id: String, message: String },
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

pub struct Store {
    conn: Conn,
    path: String,
    /// The cluster profile of the client using this store: new jobs record it, and the queries that
    /// lead to remote work (submissions to resume, secrets to remove) keep to its jobs.
    cluster: Option<String>,
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
                Err(StoreError::Sqlite { source, .. }) if source.is_busy() && std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                other => return other,
            }
        }
    }

    fn open_once(path: &Path, p: &str) -> Result<Store, StoreError> {
        let err = |e: rusqlite::Error| StoreError::Sqlite { path: p.to_string(), source: e.into() };
        let conn = Connection::open(path).map_err(err)?;
        sql::wait_while_busy(&conn).map_err(err)?;
        conn.pragma_update(None, "journal_mode", "WAL").map_err(err)?;
        conn.pragma_update(None, "synchronous", "NORMAL").map_err(err)?;
        conn.pragma_update(None, "foreign_keys", "ON").map_err(err)?;
        let mut store = Store { conn: Conn::sqlite(conn), path: p.to_string(), cluster: None };
        store.migrate()?;
        Ok(store)
    }

    /// The state the settings name: the PostgreSQL database of `TAO_SLURM_DATABASE_URL` (its schema
    /// `TAO_SLURM_DATABASE_SCHEMA`, shared by every cluster profile as the state file is), else the
    /// state file.
    pub fn open_for(settings: &crate::config::Settings) -> Result<Store, StoreError> {
        match postgres_schema::Target::of(settings) {
            Some(target) => Store::open_postgres_with(target, &settings.database_schema),
            None => Store::open(&settings.state_path),
        }
    }

    /// The store in PostgreSQL's schema `schema` (made and migrated if new) of the database at `url`.
    pub fn open_postgres(url: &str, schema: &str) -> Result<Store, StoreError> {
        Store::open_postgres_with(postgres_schema::Target { url, password: None, ca_file: None }, schema)
    }

    fn open_postgres_with(target: postgres_schema::Target<'_>, schema: &str) -> Result<Store, StoreError> {
        let path = format!("{} (schema {schema})", sql::redact_url(target.url));
        let conn = postgres_schema::open(target, schema, schema::MIGRATIONS)
            .map_err(|source| StoreError::Sqlite { path: path.clone(), source })?;
        Ok(Store { conn, path, cluster: None })
    }

    fn err(&self, source: impl Into<sql::Error>) -> StoreError {
        StoreError::Sqlite { path: self.path.clone(), source: source.into() }
    }

    fn migrate(&mut self) -> Result<(), StoreError> {
        let sql::Db::Sqlite(conn) = &mut self.conn.db else { return Ok(()) };
        // Processes that open a new state file at the same moment (a submit and a `list`, two Python
        // processes) must not both run the migrations: the version is read and the migrations run
        // under one write lock, so the second waits (busy timeout) and then finds them done.
        let path = self.path.clone();
        let err = |e: rusqlite::Error| StoreError::Sqlite { path: path.clone(), source: e.into() };
        // Almost every open finds the schema current: two reads say so without the write lock, which
        // a service's burst of new connections would otherwise queue for behind the writers.
        let version: usize = conn.pragma_query_value(None, "user_version", |r| r.get(0)).map_err(err)?;
        if version == schema::MIGRATIONS.len() {
            let undone: i64 = conn.query_row(schema::NEEDS_DOCS_REPAIR, [], |r| r.get(0)).map_err(err)?;
            if undone == 0 {
                return Ok(());
            }
        }
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(err)?;
        let version: usize = tx.pragma_query_value(None, "user_version", |r| r.get(0)).map_err(err)?;
        for (i, sql) in schema::MIGRATIONS.iter().enumerate().skip(version) {
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

    /// Run `f` in one transaction: many small writes cost one commit.
    /// Nested calls join the outer transaction.
    pub fn in_transaction<T, E: From<StoreError>>(&self, f: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
        if !self.conn.is_autocommit() {
            return f();
        }
        self.conn.begin().map_err(|e| E::from(self.err(e)))?;
        match f() {
            Ok(v) => {
                self.conn.commit().map_err(|e| E::from(self.err(e)))?;
                Ok(v)
            }
            Err(e) => {
                self.conn.rollback();
                Err(e)
            }
        }
    }

    /// `items` written in one transaction by `write`, each in a savepoint of its own (see
    /// [`sql::Conn::each_in_savepoint`]): each item's result once it committed; when the transaction
    /// itself failed, its error for each ([`StoreError::Failed`]).
    pub fn each_in_savepoint<I, T, E: From<StoreError>>(
        &self,
        items: Vec<I>,
        write: impl FnMut(&I) -> Result<T, E>,
    ) -> Vec<Result<T, E>> {
        let n = items.len();
        self.conn.each_in_savepoint(items, write).unwrap_or_else(|e| {
            let message = e.to_string();
            (0..n).map(|_| Err(StoreError::Failed { path: self.path.clone(), message: message.clone() }.into())).collect()
        })
    }

    /// A value that differs whenever the state may have changed since it was last taken: a commit by
    /// any other connection (`PRAGMA data_version`, other processes included; on PostgreSQL the
    /// schema's change counter, which every writing transaction bumps) or a write by this one.
    pub fn change_token(&self) -> Result<ChangeToken, StoreError> {
        let others: i64 = self.conn.data_version().map_err(|e| self.err(e))?;
        Ok(ChangeToken { others, ours: self.conn.total_changes() })
    }

    /// The one rule for "nothing changed": set `sets` (column, new value as SQL over the
    /// parameters) on the job row `?1` only where at least one column would differ from its new
    /// value (`IS DISTINCT FROM`, so NULLs compare). A write that changes nothing then matches no row: nothing
    /// is written, the change token stays, and no event follows. `touch` (like `updated_at = ?4`) is
    /// set along with a change but never counts as one. Returns whether the row changed.
    fn update_job_if_changed(
        &self,
        sets: &[(&str, &str)],
        touch: Option<&str>,
        params: impl sql::Params,
    ) -> Result<bool, StoreError> {
        let mut assignments: Vec<String> = sets.iter().map(|(column, value)| format!("{column} = {value}")).collect();
        assignments.extend(touch.map(str::to_string));
        let differs: Vec<String> =
            sets.iter().map(|(column, value)| format!("{column} IS DISTINCT FROM {value}")).collect();
        let sql =
            format!("UPDATE jobs SET {} WHERE job_id = ?1 AND ({})", assignments.join(", "), differs.join(" OR "));
        let changed = self.conn.execute(&sql, params).map_err(|e| self.err(e))?;
        Ok(changed > 0)
    }
}
