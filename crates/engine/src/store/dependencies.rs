//! The `dependencies` table: which jobs run after which (kept apart from Slurm's own dependency so
//! that it survives the parents' retries).

use super::rows::ACTIVE;
use super::sql::params;
use super::{Store, StoreError};

/// One dependency of an active job, with its parent as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct DependencyRow {
    pub child: String,
    pub parent: String,
    pub kind: String,
    pub parent_status: String,
    pub parent_slurm_id: Option<String>,
}

impl Store {
    /// Record that `child` runs after `parent` (`kind`: ok, notok, any).
    pub fn add_dependency(&self, child: &str, parent: &str, kind: &str) -> Result<(), StoreError> {
        self.conn
            .execute(
                "INSERT INTO dependencies (child, parent, kind) VALUES (?1, ?2, ?3)
                 ON CONFLICT (child, parent) DO UPDATE SET kind = excluded.kind",
                params![child, parent, kind],
            )
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
                 WHERE (CAST(?1 AS TEXT) IS NULL OR d.child = ?1) AND c.{ACTIVE} AND c.cluster IS NOT DISTINCT FROM ?2 ORDER BY d.child, d.rowid"
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
}
