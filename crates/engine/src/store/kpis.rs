//! A job's KPIs over time (issue 26): the progress lines of its status.json, each kept once, in the
//! order first read; at most [`crate::kpi::MAX_POINTS_PER_JOB`] a job, thinned on write
//! ([`crate::kpi::to_drop`]): a job's unique lines cannot grow the shared database without end.

use super::sql::params;
use super::{Store, StoreError};

impl Store {
    /// Keep the progress lines a refresh read (lines already kept add nothing), then thin the
    /// job's lines to the cap, in one transaction.
    pub fn add_kpi_lines(&self, job_id: &str, lines: &[&str], now: i64) -> Result<(), StoreError> {
        let cap = crate::kpi::MAX_POINTS_PER_JOB;
        self.in_transaction(|| {
            for line in lines {
                self.conn
                    .prepare_cached(
                        "INSERT INTO kpi_lines (job_id, at, line) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING",
                    )
                    .and_then(|mut st| st.execute(params![job_id, now, line]))
                    .map_err(|e| self.err(e))?;
            }
            let count: i64 = self
                .conn
                .query_row("SELECT COUNT(*) FROM kpi_lines WHERE job_id = ?1", params![job_id], |r| r.get(0))
                .map_err(|e| self.err(e))?;
            if count as usize <= cap {
                return Ok(());
            }
            let ids: Vec<i64> = {
                let mut st = self
                    .conn
                    .prepare_cached("SELECT id FROM kpi_lines WHERE job_id = ?1 ORDER BY id")
                    .map_err(|e| self.err(e))?;
                let rows = st.query_map(params![job_id], |r| r.get(0)).map_err(|e| self.err(e))?;
                rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))?
            };
            for id in crate::kpi::to_drop(&ids, cap) {
                self.conn
                    .prepare_cached("DELETE FROM kpi_lines WHERE id = ?1")
                    .and_then(|mut st| st.execute(params![id]))
                    .map_err(|e| self.err(e))?;
            }
            Ok(())
        })
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
