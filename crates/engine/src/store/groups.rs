//! The `sweeps` table: sweeps and pipelines, each a group of jobs under one id.

use super::jobs::Member;
use super::sql::params;
use super::{Store, StoreError};
use crate::plan::Plan;

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

fn group_row(r: &super::sql::Row) -> super::sql::Result<GroupRecord> {
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

impl Store {
    /// Record a sweep (or a pipeline: `array_name` None) and its members before anything is submitted,
    /// in one transaction.
    pub fn insert_group(&self, group: &Group, members: &[(String, &Plan, Member)], now: i64) -> Result<(), StoreError> {
        self.in_transaction(|| {
            self.conn
                .execute(
                    "INSERT INTO sweeps (sweep_id, kind, name, array_name, max_concurrent, created_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    params![group.sweep_id, group.kind, group.name, group.array_name, group.max_concurrent, now],
                )
                .map_err(|e| self.err(e))?;
            for (spec_json, plan, member) in members {
                self.insert_member(spec_json, plan, member, now)?;
            }
            Ok(())
        })
    }

    /// A sweep's array reached Slurm as `array_id`: each variant's first attempt is its task.
    pub fn set_array_submitted(&self, sweep_id: &str, array_id: &str, host: &str, now: i64) -> Result<(), StoreError> {
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
                self.set_submitted(&job_id, &crate::ops::sweep::task_id(array_id, index), host, now)?;
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
}
