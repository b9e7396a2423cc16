//! Reading jobs from rows: the columns a summary has, and decoding them (a corrupt row names its job).

use super::sql::Row;
use super::StoreError;
use crate::plan::{Layout, Plan};
use crate::status::PlatformStatus;
use crate::model::JobFacts;
use crate::store::{JobRecord, JobSummary};

pub(super) const ACTIVE: &str = "status NOT IN ('Complete', 'Error', 'Canceled')";

/// Newest first: by insertion order, which a backwards scan of the table gives without sorting
/// (sorting by `created_at` copied every row once more: a third of a refresh's load at 5,000 jobs).
pub(super) fn list_tail(active_only: bool) -> String {
    let filter = if active_only { format!(" WHERE {ACTIVE}") } else { String::new() };
    format!("{filter} ORDER BY jobs.rowid DESC")
}

/// A summary's columns, in the order `summary_row` reads them (a macro, so that `concat!` can build
/// the queries).
macro_rules! summary_columns {
    () => {
        "job_id, name, status, message, slurm_job_id, slurm_state, exit_code, node_list, login_host,
         created_at, updated_at, progress, attempt, attempt_name, next_retry_at, excluded_nodes, status_sig,
         job_dir, image, nodes, gpus_per_node, partition, timeout_seconds, timeout_runs, has_secrets,
         submitted_at, unseen_since, cluster, sweep_id, sweep_index, gate, pending_reason, checkpoint,
         checkpoint_patterns, gpu"
    };
}

/// How many columns `summary_columns!` has: a record's documents follow.
const SUMMARY_COLUMNS: usize = 35;

/// A summary as read, its status still text (decoded afterwards, with the job named if corrupt).
pub(super) struct SummaryRow {
    status: String,
    summary: JobSummary,
}

fn summary_row(r: &Row) -> super::sql::Result<SummaryRow> {
    let job_id: String = r.get(0)?;
    let job_dir: String = r.get(17)?;
    let timeout_seconds: i64 = r.get(22)?;
    Ok(SummaryRow {
        status: r.get(2)?,
        summary: JobSummary {
            layout: Layout::new(&job_dir, &job_id),
            facts: JobFacts {
                job_id,
                name: r.get(1)?,
                // Set from `SummaryRow::status` when decoded.
                status: PlatformStatus::Pending,
                message: r.get(3)?,
                slurm_job_id: r.get(4)?,
                slurm_state: r.get(5)?,
                exit_code: r.get(6)?,
                node_list: r.get(7)?,
                login_host: r.get(8)?,
                created_at: r.get(9)?,
                updated_at: r.get(10)?,
                attempt: r.get(12)?,
                next_retry_at: r.get(14)?,
                excluded_nodes: r.get(15)?,
                image: r.get(18)?,
                nodes: r.get(19)?,
                gpus_per_node: r.get(20)?,
                partition: r.get(21)?,
                cluster: r.get(27)?,
                sweep_id: r.get(28)?,
                sweep_index: r.get(29)?,
                pending_reason: r.get(31)?,
                checkpoint: r.get(32)?,
                // A view this build cannot read (written by another) is shown as none.
                gpu: r.get::<_, Option<String>>(34)?.and_then(|t| serde_json::from_str(&t).ok()),
            },
            progress: r.get(11)?,
            attempt_name: r.get(13)?,
            status_sig: r.get(16)?,
            timeout_seconds: timeout_seconds.max(0) as u64,
            timeout_runs: r.get(23)?,
            has_secrets: r.get(24)?,
            submitted_at: r.get(25)?,
            unseen_since: r.get(26)?,
            gate: r.get(30)?,
            checkpoint_patterns: r
                .get::<_, Option<String>>(33)?
                .map(|p| p.split(',').map(String::from).collect())
                .unwrap_or_default(),
        },
    })
}

impl SummaryRow {
    fn decode(self) -> Result<JobSummary, StoreError> {
        let status = PlatformStatus::parse(&self.status).ok_or_else(|| StoreError::Corrupt {
            job_id: self.summary.job_id.clone(),
            message: format!("status {:?}", self.status),
        })?;
        let mut summary = self.summary;
        summary.status = status;
        Ok(summary)
    }
}

/// A kind of row that job queries decode: whole records or summaries. Rows are read raw first and
/// decoded afterwards, so a corrupt row gives a clear error naming the job.
pub(super) trait FromJobRow: Sized {
    const SELECT: &'static str;
    type Raw;
    fn raw(r: &Row) -> super::sql::Result<Self::Raw>;
    fn decode(raw: Self::Raw) -> Result<Self, StoreError>;
    fn id(&self) -> &str;
}

impl FromJobRow for JobSummary {
    const SELECT: &'static str = concat!("SELECT ", summary_columns!(), " FROM jobs");
    type Raw = SummaryRow;
    fn raw(r: &Row) -> super::sql::Result<SummaryRow> {
        summary_row(r)
    }
    fn decode(raw: SummaryRow) -> Result<Self, StoreError> {
        raw.decode()
    }
    fn id(&self) -> &str {
        &self.job_id
    }
}

impl FromJobRow for JobRecord {
    const SELECT: &'static str =
        concat!("SELECT ", summary_columns!(), ", spec_json, plan_json FROM jobs JOIN job_docs USING (job_id)");
    type Raw = (SummaryRow, String, String);
    fn raw(r: &Row) -> super::sql::Result<Self::Raw> {
        Ok((summary_row(r)?, r.get(SUMMARY_COLUMNS)?, r.get(SUMMARY_COLUMNS + 1)?))
    }
    fn decode((row, spec_json, plan_json): Self::Raw) -> Result<Self, StoreError> {
        let plan = Plan::from_stored_json(&plan_json)
            .map_err(|e| StoreError::Corrupt { job_id: row.summary.job_id.clone(), message: format!("plan: {e}") })?;
        Ok(JobRecord { summary: row.decode()?, spec_json, plan })
    }
    fn id(&self) -> &str {
        &self.job_id
    }
}
