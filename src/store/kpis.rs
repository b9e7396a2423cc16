//! A job's KPIs over time (issue 26): the progress lines of its status.json, each kept once, in the
//! order first read.

use super::sql::params;
use super::{Store, StoreError};

impl Store {
    /// Keep the progress lines a refresh read; lines already kept add nothing.
    pub fn add_kpi_lines(&self, job_id: &str, lines: &[&str], now: i64) -> Result<(), StoreError> {
        for line in lines {
            self.conn
                .prepare_cached("INSERT INTO kpi_lines (job_id, at, line) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING")
                .and_then(|mut st| st.execute(params![job_id, now, line]))
                .map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    /// A job's progress lines, oldest first: (at, line).
    pub fn kpi_lines(&self, job_id: &str) -> Result<Vec<(i64, String)>, StoreError> {
        let mut st = self
            .conn
            .prepare_cached("SELECT at, line FROM kpi_lines WHERE job_id = ?1 ORDER BY id")
            .map_err(|e| self.err(e))?;
        let rows = st.query_map(params![job_id], |r| Ok((r.get(0)?, r.get(1)?))).map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }
}
