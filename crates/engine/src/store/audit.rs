//! The service's audit trail: one entry per state-changing request (who, which org, what, on what,
//! when, how it ended), in the service's database. Append-only: the schema's triggers refuse any
//! change or removal, and nothing here offers one.

use super::service_records::{sql_err, ServiceDb};
use super::sql::params;
use serde::Serialize;

/// One state-changing request, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditEntry {
    /// Its place in the trail (increasing).
    pub id: i64,
    /// Unix seconds when the request came in.
    pub at: i64,
    pub org: String,
    /// The token that made it (None: the operator, from the command line).
    pub token_id: Option<String>,
    pub token_name: Option<String>,
    /// The person the token names (None: a machine's token, or the operator).
    pub person: Option<String>,
    /// `jobs.create`, `jobs.cancel`, `secrets.put`, `tokens.revoke`...
    pub action: String,
    pub method: String,
    pub path: String,
    /// What it acted on: a job, workspace, secret or token id (a created one's new id).
    pub target: Option<String>,
    /// The HTTP status of the reply (0 for the command line's).
    pub status: u16,
    /// `ok`, or what went wrong.
    pub outcome: String,
}

impl ServiceDb {
    /// Add an entry (its `id` is given by the database); returns that id.
    pub(crate) fn append_audit(&self, e: &AuditEntry) -> Result<i64, String> {
        let e = e.clone();
        let path = self.path.clone();
        self.write_grouped(Box::new(move |conn| insert_audit_row(conn, &e).map_err(|err| sql_err(&path, err))))
    }

    /// Entries after `after` (an entry id), oldest first, at most `limit`; of `org`, or of all.
    pub(crate) fn audit(&self, org: Option<&str>, after: i64, limit: usize) -> Result<Vec<AuditEntry>, String> {
        let conn = self.conn();
        let mut st = conn
            .prepare(
                "SELECT id, at, org, token_id, token_name, action, method, path, target, status, outcome, person FROM audit
                 WHERE id > ?1 AND (CAST(?2 AS TEXT) IS NULL OR org = ?2) ORDER BY id LIMIT ?3",
            )
            .map_err(|e| sql_err(&self.path, e))?;
        let rows = st
            .query_map(params![after, org, limit as i64], |r| {
                Ok(AuditEntry {
                    id: r.get(0)?,
                    at: r.get(1)?,
                    org: r.get(2)?,
                    token_id: r.get(3)?,
                    token_name: r.get(4)?,
                    action: r.get(5)?,
                    method: r.get(6)?,
                    path: r.get(7)?,
                    target: r.get(8)?,
                    status: r.get(9)?,
                    outcome: r.get(10)?,
                    person: r.get(11)?,
                })
            })
            .map_err(|e| sql_err(&self.path, e))?;
        rows.collect::<Result<_, _>>().map_err(|e| sql_err(&self.path, e))
    }
}

/// An entry's row (its id the database's), in the caller's transaction.
pub(super) fn insert_audit_row(conn: &super::sql::Conn, e: &AuditEntry) -> Result<i64, super::sql::Error> {
    conn.query_row(
        "INSERT INTO audit (at, org, token_id, token_name, action, method, path, target, status, outcome, person)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) RETURNING id",
        params![e.at, e.org, e.token_id, e.token_name, e.action, e.method, e.path, e.target, e.status, e.outcome, e.person],
        |r| r.get(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(org: &str, action: &str) -> AuditEntry {
        AuditEntry {
            id: 0,
            at: 100,
            org: org.into(),
            token_id: Some("t1".into()),
            token_name: Some("ci".into()),
            person: Some("ada".into()),
            action: action.into(),
            method: "POST".into(),
            path: format!("/api/v2/orgs/{org}/jobs"),
            target: Some("job-1".into()),
            status: 201,
            outcome: "ok".into(),
        }
    }

    use crate::store::test_place::both;

    both! { fn entries_are_kept_in_order_by_org_and_cannot_be_changed_or_removed(place) {
        let db = place.service_db();
        let a = db.append_audit(&entry("team-a", "jobs.create")).unwrap();
        let b = db.append_audit(&entry("team-b", "jobs.create")).unwrap();
        let c = db.append_audit(&entry("team-a", "jobs.cancel")).unwrap();
        assert!(a < b && b < c);
        let mine = db.audit(Some("team-a"), 0, 100).unwrap();
        assert_eq!(mine.iter().map(|e| e.action.as_str()).collect::<Vec<_>>(), ["jobs.create", "jobs.cancel"]);
        assert_eq!(mine[0], AuditEntry { id: a, ..entry("team-a", "jobs.create") });
        assert_eq!(db.audit(None, a, 1).unwrap()[0].id, b, "paged after an id");
        // TRUNCATE is PostgreSQL's (SQLite has none: its DELETE without a condition is refused row by row).
        let truncate = if db.conn().is_postgres() { &["TRUNCATE audit", "TRUNCATE TABLE audit CASCADE"][..] } else { &[] };
        for sql in ["UPDATE audit SET outcome = 'x'", "DELETE FROM audit"].iter().chain(truncate) {
            let err = db.conn().execute(sql, []).unwrap_err().to_string();
            assert!(err.contains("append-only"), "{sql}: {err}");
        }
        assert_eq!(db.audit(None, 0, 100).unwrap().len(), 3);
    }}
}

