//! The `events` table: a job's history, and a cursor over every job's for followers.

use super::sql::params;
use super::{Store, StoreError};
use crate::model::EventRecord;

impl Store {
    pub fn add_event(&self, job_id: &str, kind: &str, detail: &str, now: i64) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("INSERT INTO events (job_id, at, kind, detail) VALUES (?1, ?2, ?3, ?4)")
            .and_then(|mut st| st.execute(params![job_id, now, kind, detail]))
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// A job's events, oldest first: (at, kind, detail).
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
            format!(" AND job_id IN ({})", super::sql::in_marks(job_ids.len()))
        };
        let sql = format!("SELECT id, job_id, at, kind, detail FROM events WHERE id > ?{filter} ORDER BY id LIMIT ?");
        let mut values: Vec<super::sql::Value> = vec![after.into()];
        values.extend(job_ids.iter().map(|id| super::sql::Value::from(id.to_string())));
        values.push((limit.min(i64::MAX as usize) as i64).into());
        let mut stmt = self.conn.prepare(&sql).map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(super::sql::params_from_iter(values), |r| {
                Ok(EventRecord { id: r.get(0)?, job_id: r.get(1)?, at: r.get(2)?, kind: r.get(3)?, detail: r.get(4)? })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }
}
