//! `retry`: a new attempt of a job that ended Error or Canceled, in the same results directory, so
//! its batch script resumes from the newest checkpoint there (`$TAO_RESUME_CHECKPOINT`).

use super::{Client, JobView};
use crate::error::Result;
use crate::spec::SpecError;
use crate::status::PlatformStatus;

impl Client {
    /// Retry a job that ended Error or Canceled: its next attempt is submitted now (one round trip
    /// with the refresh). Idempotent and safe under concurrent callers: the store reopens the job in
    /// one compare-and-set, and only the caller that wins submits; the others (and a retry of a job
    /// that is already running again) answer the job as it is.
    pub fn retry_job(&self, id: &str) -> Result<JobView> {
        let _span = super::job_span(id).entered();
        let job = self.store.get(id)?;
        self.on_this_cluster([&job.summary])?;
        match job.status {
            PlatformStatus::Error | PlatformStatus::Canceled => {}
            PlatformStatus::Complete => {
                return Err(SpecError::new(
                    "job_id",
                    format!("job {} completed: there is nothing to retry", job.job_id),
                )
                .into())
            }
            _ => return self.job_status(&job.job_id),
        }
        if !job.plan.secret_names.is_empty() {
            return Err(SpecError::new(
                "job_id",
                format!("job {} had secrets, removed from the cluster when it ended: submit it again", job.job_id),
            )
            .into());
        }
        if crate::engine::retry::reopen_ended(&self.store, &job, super::now_secs())? {
            let summary = self.store.summary(&job.job_id)?;
            self.refresh_and_advance(&[summary])?;
        }
        self.job_status(&job.job_id)
    }
}
