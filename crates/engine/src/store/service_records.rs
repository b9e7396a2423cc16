//! The service's own records, in a SQLite file beside the state file (`<state>.service.db`): bearer
//! tokens (only their SHA-256, never the token) and the jobs created through the API with their org
//! and TAO fields. The engine's state file stays the engine's; the service never writes it directly.

use super::sql::{params, Conn};
use crate::batch::GroupCommit;
use rusqlite::Connection;
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS tokens (
    id          TEXT PRIMARY KEY,
    org         TEXT NOT NULL,
    name        TEXT NOT NULL,
    sha256      TEXT NOT NULL UNIQUE,
    created_at  INTEGER NOT NULL,
    revoked_at  INTEGER
);
CREATE TABLE IF NOT EXISTS api_jobs (
    job_id      TEXT PRIMARY KEY,
    org         TEXT NOT NULL,
    workspace   TEXT NOT NULL,
    action      TEXT,
    specs       TEXT,
    num_gpu     INTEGER,
    token_id    TEXT,
    created_at  INTEGER NOT NULL,
    deleted_at  INTEGER
);
CREATE INDEX IF NOT EXISTS api_jobs_by_org ON api_jobs(org) WHERE deleted_at IS NULL;
CREATE TABLE IF NOT EXISTS admin_tokens (
    id          TEXT PRIMARY KEY
);
CREATE TABLE IF NOT EXISTS org_secrets (
    org         TEXT NOT NULL,
    name        TEXT NOT NULL,
    nonce       BLOB NOT NULL,
    sealed      BLOB NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (org, name)
);
CREATE TABLE IF NOT EXISTS audit (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    at          INTEGER NOT NULL,
    org         TEXT NOT NULL,
    token_id    TEXT,
    token_name  TEXT,
    action      TEXT NOT NULL,
    method      TEXT NOT NULL,
    path        TEXT NOT NULL,
    target      TEXT,
    status      INTEGER NOT NULL,
    outcome     TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_by_org ON audit(org, id);
CREATE TABLE IF NOT EXISTS org_workspaces (
    id          TEXT PRIMARY KEY,
    org         TEXT NOT NULL,
    request     TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    deleted_at  INTEGER
);
"#;

/// The sign-in's tables (`sign_in_records`; SQLite's file checks for them at each open; PostgreSQL's schema gets them as one
/// numbered migration).
pub(super) const SIGN_IN_SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS people (
    issuer      TEXT NOT NULL,
    subject     TEXT NOT NULL,
    person      TEXT NOT NULL UNIQUE,
    first_at    INTEGER NOT NULL,
    last_at     INTEGER NOT NULL,
    PRIMARY KEY (issuer, subject)
);
CREATE TABLE IF NOT EXISTS device_sign_ins (
    code_sha256 TEXT PRIMARY KEY,
    user_code   TEXT NOT NULL UNIQUE,
    client      TEXT NOT NULL,
    org         TEXT,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    outcome     TEXT
);
CREATE INDEX IF NOT EXISTS device_sign_ins_by_client ON device_sign_ins(client);
CREATE TABLE IF NOT EXISTS service_keys (
    name        TEXT PRIMARY KEY,
    value       BLOB NOT NULL
);
"#;

/// Each signed-in person's grant at the provider, per org they signed in to (`sign_in_records`): the
/// provider's refresh token sealed by the service (never the token in clear), checked again every
/// few seconds; `generation` grows with each sign-in and each new refresh token (writes compare it), and
/// `ended_at` says the person's access to the org was ended (removed from its group, or refused).
pub(super) const GRANTS_SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS grants (
    issuer          TEXT NOT NULL,
    subject         TEXT NOT NULL,
    org             TEXT NOT NULL,
    person          TEXT NOT NULL,
    admin           INTEGER NOT NULL,
    refresh_sealed  TEXT,
    generation      INTEGER NOT NULL,
    signed_in_at    INTEGER NOT NULL,
    checked_at      INTEGER,
    ended_at        INTEGER,
    ended_why       TEXT,
    PRIMARY KEY (issuer, subject, org)
);
"#;

/// Columns added after the first schema, in order: (table, column, type). SQLite's file gets those it
/// lacks by a check; PostgreSQL's schema by its numbered migrations (`open_postgres`).
const LATER_COLUMNS: [(&str, &str, &str); 5] = [
    ("tokens", "expires_at", "INTEGER"),
    ("api_jobs", "tao", "TEXT"),
    // The person a token names (None: a machine's), a job's person, and who made an audit entry.
    ("tokens", "person", "TEXT"),
    ("api_jobs", "person", "TEXT"),
    ("audit", "person", "TEXT"),
];

/// An org's active jobs as places, counted by `service_caps` (SQLite's file makes the table if absent;
/// PostgreSQL's schema by its migration).
/// `attempt`: the job's attempt when the place was taken (0 at create, the next one at a restart): a
/// view of the job terminal at an attempt before it (another replica's, older) frees nothing.
const JOB_PLACES_SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS job_places (
    job_id      TEXT PRIMARY KEY,
    org         TEXT NOT NULL,
    attempt     INTEGER NOT NULL,
    taken_at    INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS job_places_by_org ON job_places(org);
"#;

/// Append-only: no connection may change or remove an audit entry (SQLite's triggers).
const AUDIT_APPEND_ONLY: &str = r#"
CREATE TRIGGER IF NOT EXISTS audit_no_update BEFORE UPDATE ON audit
    BEGIN SELECT RAISE(ABORT, 'the audit trail is append-only'); END;
CREATE TRIGGER IF NOT EXISTS audit_no_delete BEFORE DELETE ON audit
    BEGIN SELECT RAISE(ABORT, 'the audit trail is append-only'); END;
"#;

/// The same in PostgreSQL's dialect.
const AUDIT_APPEND_ONLY_PG: &str = r#"
CREATE FUNCTION audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN RAISE EXCEPTION 'the audit trail is append-only'; END $$;
CREATE TRIGGER audit_no_change BEFORE UPDATE OR DELETE ON audit FOR EACH ROW EXECUTE FUNCTION audit_append_only();
"#;

/// PostgreSQL's `TRUNCATE` fires no row trigger: a statement trigger refuses it (issue 35). (SQLite
/// has no `TRUNCATE`; its `DELETE` without a condition fires the row trigger.)
const AUDIT_NO_TRUNCATE_PG: &str = r#"
CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON audit FOR EACH STATEMENT EXECUTE FUNCTION audit_append_only();
"#;

/// The service database's path for a state file.
pub fn path_for(state_path: &Path) -> PathBuf {
    let mut p = state_path.as_os_str().to_owned();
    p.push(".service.db");
    PathBuf::from(p)
}

/// A token as listed (never the token itself).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct TokenRecord {
    pub id: String,
    pub org: String,
    pub name: String,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
    /// When it stops being accepted (Unix seconds); None: until revoked.
    pub expires_at: Option<i64>,
    /// The person it names (None: a machine's token: CI, an agent).
    pub person: Option<String>,
}

/// A token the service accepts: what a request carries on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidToken {
    pub sha256: String,
    pub id: String,
    pub org: String,
    pub name: String,
    pub expires_at: Option<i64>,
    pub person: Option<String>,
}

/// What the service keeps of a job created through the API, beyond the engine's record.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiJob {
    pub job_id: String,
    pub org: String,
    pub workspace: String,
    pub action: Option<String>,
    pub specs: serde_json::Value,
    pub num_gpu: Option<i64>,
    pub token_id: Option<String>,
    pub created_at: i64,
    /// TAO's fields of a job made from TAO's create body (kind, network_arch, tags...), as JSON.
    pub tao: Option<serde_json::Value>,
    /// The person whose token created it (None: a machine's token).
    pub person: Option<String>,
}

/// An org's secret as stored: (name, nonce, sealed value).
pub type SealedSecret = (String, Vec<u8>, Vec<u8>);

pub struct ServiceDb {
    conn: Mutex<Conn>,
    pub(super) path: PathBuf,
    /// Writes that share a commit: see [`ServiceDb::write_grouped`].
    writes: GroupCommit<GroupedWrite, i64>,
}

/// A write of the records that may share its commit with others (its result: a new row's id, or 0).
pub(super) type GroupedWrite = Box<dyn Fn(&Conn) -> Result<i64, String> + Send>;

/// At most this many writes share one commit.
const WRITES_PER_COMMIT: usize = 256;

pub(super) fn sql_err(path: &Path, e: impl Into<super::sql::Error>) -> String {
    format!("service database {}: {}", path.display(), e.into())
}

/// `sha256(token)` in hex: what is stored and looked up.
pub fn token_hash(token: &str) -> String {
    Sha256::digest(token.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// `n` bytes from the operating system's generator, in hex.
fn random_hex(n: usize) -> Result<String, String> {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes).map_err(|e| format!("the system's random generator failed: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Bytes of a token's secret part: 256 random bits.
const SECRET_BYTES: usize = 32;
/// Bytes of a token's id, drawn separately (the id is shown and logged; it says nothing of the secret).
const ID_BYTES: usize = 8;

/// Whether `org` can name an org: letters, digits, `.`, `_`, `-`, at most 63.
pub fn check_org(org: &str) -> Result<(), String> {
    let ok = !org.is_empty() && org.len() <= 63 && org.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    if ok {
        Ok(())
    } else {
        Err(format!("{org:?} is not an org name (letters, digits, . _ -, at most 63)"))
    }
}

/// Whether `person` can name a person: one line of at most 200 characters, no control characters
/// (an identity provider's user name or e-mail; it is shown, never run).
pub fn check_person(person: &str) -> Result<(), String> {
    if person.trim().is_empty() || person.len() > 200 || person.chars().any(char::is_control) {
        return Err(format!("{person:?} is not a person's name (one line of at most 200 characters)"));
    }
    Ok(())
}

impl ServiceDb {
    pub(crate) fn open(path: &Path) -> Result<ServiceDb, String> {
        crate::private::ensure_private_file(path)?;
        let conn = Connection::open(path).map_err(|e| sql_err(path, e))?;
        super::sql::wait_while_busy(&conn).map_err(|e| sql_err(path, e))?;
        conn.pragma_update(None, "journal_mode", "WAL").map_err(|e| sql_err(path, e))?;
        conn.execute_batch(SCHEMA).map_err(|e| sql_err(path, e))?;
        conn.execute_batch(AUDIT_APPEND_ONLY).map_err(|e| sql_err(path, e))?;
        conn.execute_batch(JOB_PLACES_SCHEMA).map_err(|e| sql_err(path, e))?;
        conn.execute_batch(SIGN_IN_SCHEMA).map_err(|e| sql_err(path, e))?;
        conn.execute_batch(GRANTS_SCHEMA).map_err(|e| sql_err(path, e))?;
        // Columns that came later: databases made before them get them.
        for (table, column, decl) in LATER_COLUMNS {
            let has: bool = conn
                .query_row(
                    &format!("SELECT COUNT(*) FROM pragma_table_info('{table}') WHERE name = '{column}'"),
                    [],
                    |r| r.get(0),
                )
                .map(|n: i64| n > 0)
                .map_err(|e| sql_err(path, e))?;
            if !has {
                conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {decl}"))
                    .map_err(|e| sql_err(path, e))?;
            }
        }
        Ok(ServiceDb { conn: Mutex::new(Conn::sqlite(conn)), path: path.to_path_buf(), writes: GroupCommit::default() })
    }

    /// The service database the settings name: PostgreSQL's schema `<TAO_SLURM_DATABASE_SCHEMA>_service`
    /// (`tao_state_service`) when `TAO_SLURM_DATABASE_URL` is set, else `<state>.service.db`.
    pub(crate) fn open_for(settings: &crate::config::Settings) -> Result<ServiceDb, String> {
        let Some(target) = super::postgres_schema::Target::of(settings) else {
            return ServiceDb::open(&path_for(&settings.state_path));
        };
        ServiceDb::open_postgres(target, &format!("{}_service", settings.database_schema))
    }

    /// The service database in PostgreSQL's schema `schema` of the database `target`.
    pub(super) fn open_postgres(target: super::postgres_schema::Target<'_>, schema: &str) -> Result<ServiceDb, String> {
        let shown = PathBuf::from(format!("{} (schema {schema})", super::sql::redact_url(target.url)));
        // The same numbered list as SQLite's file reaches by its checks: the tables, the two columns
        // added later, the append-only rule (rows, then TRUNCATE).
        let [(t1, c1, d1), (t2, c2, d2), later @ ..] = LATER_COLUMNS;
        let mut migrations = vec![
            SCHEMA.to_string(),
            format!("ALTER TABLE {t1} ADD COLUMN {c1} {d1};"),
            format!("ALTER TABLE {t2} ADD COLUMN {c2} {d2};"),
            AUDIT_APPEND_ONLY_PG.to_string(),
            AUDIT_NO_TRUNCATE_PG.to_string(),
        ];
        migrations.extend(later.iter().map(|(t, c, d)| format!("ALTER TABLE {t} ADD COLUMN {c} {d};")));
        // Later tables, each appended at the end (never reordered): the places of active jobs, then
        // the sign-in's tables, the persons' grants at the provider.
        migrations.push(JOB_PLACES_SCHEMA.to_string());
        migrations.push(SIGN_IN_SCHEMA.to_string());
        migrations.push(GRANTS_SCHEMA.to_string());
        let migrations: Vec<&str> = migrations.iter().map(String::as_str).collect();
        let conn = super::postgres_schema::open(target, schema, &migrations).map_err(|e| sql_err(&shown, e))?;
        Ok(ServiceDb { conn: Mutex::new(conn), path: shown, writes: GroupCommit::default() })
    }

    pub(super) fn conn(&self) -> std::sync::MutexGuard<'_, Conn> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Run `write` in a commit it shares with the writes that arrive while the commit before is
    /// under way (group commit, as the engine's submissions): a burst of creates, each with its
    /// record and its audit entry, pays a few commits (each a sync to disk) instead of one each.
    /// Returned once its commit is durable.
    pub(super) fn write_grouped(&self, write: GroupedWrite) -> Result<i64, String> {
        self.writes
            .run(write, WRITES_PER_COMMIT, std::time::Duration::ZERO, |batch| self.commit_together(batch))
            .map_err(|e| e.to_string())
    }

    /// The writes of `batch` in one transaction, each in a savepoint of its own (see
    /// [`Conn::each_in_savepoint`]). A failed commit fails every one.
    fn commit_together(&self, batch: Vec<GroupedWrite>) -> Vec<crate::error::Result<i64>> {
        let n = batch.len();
        let conn = self.conn();
        // The group commit carries errors as the engine's; only their message is read.
        let failed = |m: String| crate::error::Error::RemoteCommand(m);
        match conn.each_in_savepoint(batch, |write| write(&conn)) {
            Ok(results) => results.into_iter().map(|r| r.map_err(failed)).collect(),
            Err(e) => {
                let m = sql_err(&self.path, e);
                (0..n).map(|_| Err(failed(m.clone()))).collect()
            }
        }
    }

    /// Create a token for `org`, valid until revoked or for `lifetime_secs` from `now`; returns its
    /// record and the token, which is shown once and stored only as its SHA-256.
    pub(crate) fn create_token(
        &self,
        org: &str,
        name: &str,
        person: Option<&str>,
        lifetime_secs: Option<u64>,
        now: i64,
    ) -> Result<(TokenRecord, String), String> {
        check_org(org)?;
        if name.chars().any(char::is_control) || name.len() > 200 {
            return Err("the token's name must be one line of at most 200 characters".into());
        }
        if let Some(p) = person {
            check_person(p)?;
        }
        let id = random_hex(ID_BYTES)?;
        let token = format!("tsk_{}", random_hex(SECRET_BYTES)?);
        let expires_at = lifetime_secs.map(|s| now.saturating_add(i64::try_from(s).unwrap_or(i64::MAX)));
        self.conn()
            .execute(
                "INSERT INTO tokens (id, org, name, sha256, created_at, expires_at, person) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![id, org, name, token_hash(&token), now, expires_at, person],
            )
            .map_err(|e| sql_err(&self.path, e))?;
        let record = TokenRecord {
            id,
            org: org.into(),
            name: name.into(),
            created_at: now,
            revoked_at: None,
            expires_at,
            person: person.map(str::to_string),
        };
        Ok((record, token))
    }

    /// Revoke a token by id; false when there is no such token (or it was revoked already).
    pub(crate) fn revoke_token(&self, id: &str, now: i64) -> Result<bool, String> {
        let n = self
            .conn()
            .execute("UPDATE tokens SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL", params![id, now])
            .map_err(|e| sql_err(&self.path, e))?;
        Ok(n == 1)
    }

    pub(crate) fn tokens(&self) -> Result<Vec<TokenRecord>, String> {
        let conn = self.conn();
        let mut st = conn
            .prepare("SELECT id, org, name, created_at, revoked_at, expires_at, person FROM tokens ORDER BY created_at, id")
            .map_err(|e| sql_err(&self.path, e))?;
        let rows = st
            .query_map([], |r| {
                Ok(TokenRecord {
                    id: r.get(0)?,
                    org: r.get(1)?,
                    name: r.get(2)?,
                    created_at: r.get(3)?,
                    revoked_at: r.get(4)?,
                    expires_at: r.get(5)?,
                    person: r.get(6)?,
                })
            })
            .map_err(|e| sql_err(&self.path, e))?;
        rows.collect::<Result<_, _>>().map_err(|e| sql_err(&self.path, e))
    }

    /// The tokens not revoked (an expired one is refused by its `expires_at`, checked on each use).
    pub(crate) fn valid_tokens(&self) -> Result<Vec<ValidToken>, String> {
        let conn = self.conn();
        let mut st = conn
            .prepare("SELECT sha256, id, org, expires_at, name, person FROM tokens WHERE revoked_at IS NULL")
            .map_err(|e| sql_err(&self.path, e))?;
        let rows = st
            .query_map([], |r| {
                Ok(ValidToken {
                    sha256: r.get(0)?,
                    id: r.get(1)?,
                    org: r.get(2)?,
                    expires_at: r.get(3)?,
                    name: r.get(4)?,
                    person: r.get(5)?,
                })
            })
            .map_err(|e| sql_err(&self.path, e))?;
        rows.collect::<Result<_, _>>().map_err(|e| sql_err(&self.path, e))
    }

    /// Make a token an org admin token (it may also change the org's workspaces and secrets).
    pub(crate) fn make_admin(&self, id: &str) -> Result<(), String> {
        self.conn()
            .execute("INSERT INTO admin_tokens (id) VALUES (?1) ON CONFLICT DO NOTHING", params![id])
            .map_err(|e| sql_err(&self.path, e))?;
        Ok(())
    }

    /// The ids of the org admin tokens.
    pub(crate) fn admin_token_ids(&self) -> Result<Vec<String>, String> {
        let conn = self.conn();
        let mut st = conn.prepare("SELECT id FROM admin_tokens").map_err(|e| sql_err(&self.path, e))?;
        let rows = st.query_map([], |r| r.get(0)).map_err(|e| sql_err(&self.path, e))?;
        rows.collect::<Result<_, _>>().map_err(|e| sql_err(&self.path, e))
    }

    /// Whether the database takes writes now: a write transaction begun and rolled back, waiting at
    /// most `wait` for another writer (readiness).
    pub(crate) fn probe_write(&self, wait: std::time::Duration) -> Result<(), String> {
        let conn = self.conn();
        let super::sql::Db::Sqlite(conn) = &conn.db else {
            conn.begin().map_err(|e| sql_err(&self.path, e))?;
            conn.rollback();
            return Ok(());
        };
        conn.busy_timeout(wait).map_err(|e| sql_err(&self.path, e))?;
        let probed = conn.execute_batch("BEGIN IMMEDIATE; ROLLBACK;").map_err(|e| sql_err(&self.path, e));
        if probed.is_err() {
            let _ = conn.execute_batch("ROLLBACK;");
        }
        super::sql::wait_while_busy(conn).map_err(|e| sql_err(&self.path, e))?;
        probed
    }

    /// A number that changes whenever another connection (`tao-slurm token ...`) commits.
    pub(crate) fn data_version(&self) -> Result<i64, String> {
        self.conn().data_version().map_err(|e| sql_err(&self.path, e))
    }

    pub(crate) fn insert_job(&self, job: &ApiJob) -> Result<(), String> {
        let job = job.clone();
        let path = self.path.clone();
        self.write_grouped(Box::new(move |conn| insert_job_row(conn, &job).map(|_| 0).map_err(|e| sql_err(&path, e))))?;
        Ok(())
    }

    /// Mark a job deleted (it leaves the org's listings; the state file keeps its history).
    pub(crate) fn delete_job(&self, job_id: &str, now: i64) -> Result<bool, String> {
        let n = self
            .conn()
            .execute(
                "UPDATE api_jobs SET deleted_at = ?2 WHERE job_id = ?1 AND deleted_at IS NULL",
                params![job_id, now],
            )
            .map_err(|e| sql_err(&self.path, e))?;
        Ok(n == 1)
    }

    /// Every job not deleted.
    pub(crate) fn jobs(&self) -> Result<Vec<ApiJob>, String> {
        let conn = self.conn();
        let mut st = conn
            .prepare(
                "SELECT job_id, org, workspace, action, specs, num_gpu, token_id, created_at, tao, person FROM api_jobs
                 WHERE deleted_at IS NULL",
            )
            .map_err(|e| sql_err(&self.path, e))?;
        let rows = st
            .query_map([], |r| {
                let specs: Option<String> = r.get(4)?;
                let tao: Option<String> = r.get(8)?;
                Ok(ApiJob {
                    job_id: r.get(0)?,
                    org: r.get(1)?,
                    workspace: r.get(2)?,
                    action: r.get(3)?,
                    specs: specs.and_then(|s| serde_json::from_str(&s).ok()).unwrap_or(serde_json::json!({})),
                    num_gpu: r.get(5)?,
                    token_id: r.get(6)?,
                    created_at: r.get(7)?,
                    tao: tao.and_then(|t| serde_json::from_str(&t).ok()),
                    person: r.get(9)?,
                })
            })
            .map_err(|e| sql_err(&self.path, e))?;
        rows.collect::<Result<_, _>>().map_err(|e| sql_err(&self.path, e))
    }

    /// Store (or replace) an org's sealed secret.
    pub(crate) fn put_org_secret(&self, org: &str, name: &str, nonce: &[u8], sealed: &[u8], now: i64) -> Result<(), String> {
        self.conn()
            .execute(
                "INSERT INTO org_secrets (org, name, nonce, sealed, updated_at) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (org, name) DO UPDATE SET nonce = ?3, sealed = ?4, updated_at = ?5",
                params![org, name, nonce, sealed, now],
            )
            .map_err(|e| sql_err(&self.path, e))?;
        Ok(())
    }

    /// Remove an org's secret; false when it had none of that name.
    pub(crate) fn delete_org_secret(&self, org: &str, name: &str) -> Result<bool, String> {
        let n = self
            .conn()
            .execute("DELETE FROM org_secrets WHERE org = ?1 AND name = ?2", params![org, name])
            .map_err(|e| sql_err(&self.path, e))?;
        Ok(n == 1)
    }

    /// An org's sealed secrets, by name.
    pub(crate) fn org_secrets(&self, org: &str) -> Result<Vec<SealedSecret>, String> {
        let conn = self.conn();
        let mut st = conn
            .prepare("SELECT name, nonce, sealed FROM org_secrets WHERE org = ?1 ORDER BY name")
            .map_err(|e| sql_err(&self.path, e))?;
        let rows = st
            .query_map(params![org], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .map_err(|e| sql_err(&self.path, e))?;
        rows.collect::<Result<_, _>>().map_err(|e| sql_err(&self.path, e))
    }

    /// Record an org's workspace (its create request as JSON).
    pub(crate) fn insert_workspace(&self, id: &str, org: &str, request: &str, now: i64) -> Result<(), String> {
        self.conn()
            .execute(
                "INSERT INTO org_workspaces (id, org, request, created_at) VALUES (?1, ?2, ?3, ?4)",
                params![id, org, request, now],
            )
            .map_err(|e| sql_err(&self.path, e))?;
        Ok(())
    }

    pub(crate) fn delete_workspace(&self, id: &str, now: i64) -> Result<bool, String> {
        let n = self
            .conn()
            .execute("UPDATE org_workspaces SET deleted_at = ?2 WHERE id = ?1 AND deleted_at IS NULL", params![id, now])
            .map_err(|e| sql_err(&self.path, e))?;
        Ok(n == 1)
    }

    /// The orgs' workspaces not deleted: (id, org, request, created_at).
    pub(crate) fn workspaces(&self) -> Result<Vec<(String, String, String, i64)>, String> {
        let conn = self.conn();
        let mut st = conn
            .prepare("SELECT id, org, request, created_at FROM org_workspaces WHERE deleted_at IS NULL ORDER BY created_at, id")
            .map_err(|e| sql_err(&self.path, e))?;
        let rows = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .map_err(|e| sql_err(&self.path, e))?;
        rows.collect::<Result<_, _>>().map_err(|e| sql_err(&self.path, e))
    }

}

/// A job's row in `api_jobs` (its place, if counted, is `service_caps`'s).
pub(super) fn insert_job_row(conn: &Conn, job: &ApiJob) -> Result<usize, super::sql::Error> {
    conn.execute(
        "INSERT INTO api_jobs (job_id, org, workspace, action, specs, num_gpu, token_id, created_at, tao, person)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        params![
            job.job_id,
            job.org,
            job.workspace,
            job.action,
            job.specs.to_string(),
            job.num_gpu,
            job.token_id,
            job.created_at,
            job.tao.as_ref().map(|t| t.to_string()),
            job.person
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_place::both;

    fn job(id: &str) -> ApiJob {
        ApiJob {
            job_id: id.into(),
            org: "team-a".into(),
            workspace: "w".into(),
            action: Some("train".into()),
            specs: serde_json::json!({}),
            num_gpu: Some(1),
            token_id: None,
            created_at: 100,
            tao: None,
            person: None,
        }
    }

    both! { fn writes_that_share_a_commit_keep_their_own_results(place) {
        let db = place.service_db();
        let row = |id: &'static str| -> GroupedWrite {
            Box::new(move |conn| {
                conn.execute("INSERT INTO api_jobs (job_id, org, workspace, action, specs, num_gpu, created_at)
                              VALUES (?1, 'team-a', 'w', 'train', '{}', 1, 100)", params![id])
                    .map(|_| 0)
                    .map_err(|e| e.to_string())
            })
        };
        // The second is refused (the same job again): undone alone, in the same commit.
        let results = db.commit_together(vec![row("j1"), row("j1"), row("j2")]);
        assert!(results[0].is_ok() && results[1].is_err() && results[2].is_ok(), "{results:?}");
        let mut ids: Vec<String> = db.jobs().unwrap().into_iter().map(|j| j.job_id).collect();
        ids.sort();
        assert_eq!(ids, ["j1", "j2"]);

        // Writers at once: each one's row, once.
        let db = std::sync::Arc::new(db);
        let threads: Vec<_> = (0..16)
            .map(|i| {
                let db = std::sync::Arc::clone(&db);
                std::thread::spawn(move || db.insert_job(&job(&format!("t{i}"))))
            })
            .collect();
        for t in threads {
            t.join().unwrap().unwrap();
        }
        assert_eq!(db.jobs().unwrap().len(), 18);
    }}

    #[test]
    fn tokens_are_stored_hashed_and_revoked() {
        let dir = tempfile::tempdir().unwrap();
        let db = ServiceDb::open(&dir.path().join("s.db")).unwrap();
        let (rec, token) = db.create_token("team-a", "ci", None, None, 1_700_000_000).unwrap();
        assert!(token.starts_with("tsk_") && token.len() == 4 + 64, "{token}");
        let raw = std::fs::read(dir.path().join("s.db")).unwrap_or_default();
        let wal = std::fs::read(dir.path().join("s.db-wal")).unwrap_or_default();
        let needle = &token.as_bytes()[4..];
        for bytes in [raw, wal] {
            assert!(!bytes.windows(needle.len()).any(|w| w == needle), "the token itself is never stored");
        }
        assert!(!token.contains(&rec.id), "the id is drawn apart from the secret");
        let valid = db.valid_tokens().unwrap();
        let expected = ValidToken {
            sha256: token_hash(&token),
            id: rec.id.clone(),
            org: "team-a".into(),
            name: rec.name.clone(),
            expires_at: None,
            person: None,
        };
        assert_eq!(valid, vec![expected]);
        assert!(db.revoke_token(&rec.id, 1_700_000_000).unwrap());
        assert!(!db.revoke_token(&rec.id, 1_700_000_000).unwrap(), "once");
        assert!(db.valid_tokens().unwrap().is_empty());
        assert!(db.tokens().unwrap()[0].revoked_at.is_some());
        assert!(db.create_token("a b", "x", None, None, 1_700_000_000).is_err());
        let (rec, _) = db.create_token("team-a", "short", None, Some(3600), 1_700_000_000).unwrap();
        assert_eq!(rec.expires_at, Some(1_700_000_000 + 3600));
        assert_eq!(db.valid_tokens().unwrap()[0].expires_at, rec.expires_at);
        // A person's token names them; a machine's none.
        let (ada, _) = db.create_token("team-a", "laptop", Some("ada@example.org"), None, 1_700_000_000).unwrap();
        assert_eq!(ada.person.as_deref(), Some("ada@example.org"));
        let listed = db.tokens().unwrap();
        assert_eq!(listed.iter().find(|t| t.id == ada.id).unwrap().person.as_deref(), Some("ada@example.org"));
        assert!(listed.iter().filter(|t| t.id != ada.id).all(|t| t.person.is_none()));
        assert!(db.create_token("team-a", "x", Some("two\nlines"), None, 1_700_000_000).is_err());
    }

    #[test]
    fn secrets_are_256_random_bits_and_ids_independent() {
        let dir = tempfile::tempdir().unwrap();
        let db = ServiceDb::open(&dir.path().join("s.db")).unwrap();
        let made: Vec<(TokenRecord, String)> =
            (0..64).map(|_| db.create_token("o", "", None, None, 1_700_000_000).unwrap()).collect();
        for (rec, token) in &made {
            let hex = token.strip_prefix("tsk_").unwrap();
            assert_eq!(hex.len(), 64);
            assert!(!hex.contains(&rec.id), "the id is drawn apart from the secret");
        }
        // No position of the secret is fixed (a UUID's version nibble would be): over 64 tokens each
        // of the 64 hex digits takes several values.
        for i in 0..64 {
            let values: std::collections::HashSet<u8> = made.iter().map(|(_, t)| t.as_bytes()[4 + i]).collect();
            assert!(values.len() > 1, "digit {i} is always {values:?}");
        }
        let ids: std::collections::HashSet<_> = made.iter().map(|(r, _)| r.id.clone()).collect();
        assert_eq!(ids.len(), made.len());
    }
}
