//! Which ended jobs still have a secrets directory on the cluster (columns of `jobs`: `has_secrets`,
//! `secrets_cleared`).

use super::rows::ACTIVE;
use super::sql::params;
use super::{Store, StoreError};
use crate::plan::Layout;

impl Store {
    /// Terminal jobs whose secrets directory may still be on the cluster: (job id, directory).
    pub fn secrets_to_remove(&self) -> Result<Vec<(String, String)>, StoreError> {
        let mut st = self
            .conn
            .prepare_cached(&format!(
                "SELECT job_id, job_dir FROM jobs WHERE has_secrets = 1 AND secrets_cleared = 0 AND NOT ({ACTIVE})
                   AND cluster IS NOT DISTINCT FROM ?1"
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
    pub fn mark_secrets_cleared(&self, ids: &[String], now: i64) -> Result<(), StoreError> {
        self.in_transaction(|| {
            for id in ids {
                self.conn
                    .prepare_cached("UPDATE jobs SET secrets_cleared = 1 WHERE job_id = ?1")
                    .and_then(|mut st| st.execute(params![id]))
                    .map_err(|e| self.err(e))?;
                self.add_event(id, "secrets_removed", "the secrets directory was removed from shared storage", now)?;
            }
            Ok(())
        })
    }
}
