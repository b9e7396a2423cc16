//! Refreshing jobs from the cluster (one round trip for any number), cancelling.

use super::{Client, JobView};
use crate::engine::cancel;
use crate::error::{Error, Result};
use crate::store::{JobRecord, JobSummary};

impl Client {
    /// A job's status, refreshed from the cluster unless it is already terminal.
    pub fn job_status(&self, id: &str) -> Result<JobView> {
        let _span = super::job_span(id).entered();
        let job = self.store.summary(id)?;
        if job.status.is_terminal() {
            return Ok(
                JobView::at(&job, super::now_secs()).with_attempts(self.store.attempts(&job.job_id)?, job.timeout_runs)
            );
        }
        self.refresh_and_advance(std::slice::from_ref(&job))?;
        let job = self.store.summary(&job.job_id)?;
        Ok(JobView::at(&job, super::now_secs()).with_attempts(self.store.attempts(&job.job_id)?, job.timeout_runs))
    }

    /// Refresh every given job (all active ones when `ids` is empty) in one round trip.
    pub fn refresh(&self, ids: &[String]) -> Result<Vec<JobView>> {
        if ids.is_empty() {
            return self.refresh_active(|jobs| jobs.iter().map(|j| JobView::at(j, super::now_secs())).collect());
        }
        Ok(self.refresh_summaries(ids)?.iter().map(|j| JobView::at(j, super::now_secs())).collect())
    }

    /// [`Client::refresh`], returning the jobs' summaries (the monitor follows thousands this way).
    pub fn refresh_summaries(&self, ids: &[String]) -> Result<Vec<JobSummary>> {
        if ids.is_empty() {
            return self.refresh_active(<[JobSummary]>::to_vec);
        }
        // A sweep or pipeline id stands for its jobs.
        let mut jobs = self.summaries_of(ids)?;
        let touched = if jobs.iter().all(|j| !j.status.is_terminal()) {
            self.refresh_and_advance(&jobs)?
        } else {
            let active: Vec<JobSummary> = jobs.iter().filter(|j| !j.status.is_terminal()).cloned().collect();
            self.refresh_and_advance(&active)?
        };
        self.reread(&mut jobs, &touched)?;
        Ok(jobs)
    }

    /// Replace the jobs a refresh changed by their stored summaries: only these are read again
    /// (usually none of thousands).
    pub(super) fn reread(&self, jobs: &mut [JobSummary], touched: &[String]) -> Result<()> {
        if touched.is_empty() {
            return Ok(());
        }
        let ids: Vec<&str> = touched.iter().map(String::as_str).collect();
        let fresh: std::collections::HashMap<String, JobSummary> =
            self.store.summaries(&ids)?.into_iter().map(|j| (j.job_id.clone(), j)).collect();
        // (An id given twice is replaced at both places.)
        for job in jobs {
            if let Some(f) = fresh.get(&job.job_id) {
                *job = f.clone();
            }
        }
        Ok(())
    }

    /// Refresh every active job and hand the result (those that just ended included) to `f`. The
    /// jobs come from the cache when the state file has not changed since it was filled.
    pub(super) fn refresh_active<R>(&self, f: impl FnOnce(&[JobSummary]) -> R) -> Result<R> {
        let mut cache = self.active.lock().unwrap_or_else(|e| e.into_inner());
        let before = self.store.change_token()?;
        let mut jobs = match cache.take() {
            Some((token, jobs)) if token == before => jobs,
            // Only this cluster's jobs: the others are another client's to refresh.
            _ => self.store.list_summaries(true)?.into_iter().filter(|j| j.cluster == self.settings.cluster).collect(),
        };
        let touched = self.refresh_and_advance(&jobs)?;
        self.reread(&mut jobs, &touched)?;
        let result = f(&jobs);
        // Kept only if no other connection committed meanwhile (its change could be missing here);
        // this client's own writes are in `jobs` already.
        let after = self.store.change_token()?;
        if after.others == before.others {
            jobs.retain(|j| !j.status.is_terminal());
            *cache = Some((after, jobs));
        }
        Ok(result)
    }

    /// Cancel one job (idempotent).
    pub fn cancel_job(&self, id: &str) -> Result<JobView> {
        let _span = super::job_span(id).entered();
        Ok(self.cancel_jobs(&[id.to_string()])?.remove(0))
    }

    /// Cancel jobs (idempotent: a terminal job stays as it is). Returns every job as it now is; a job
    /// whose cancel could not be confirmed keeps its status, and the error names it and the reason.
    pub fn cancel_jobs(&self, ids: &[String]) -> Result<Vec<JobView>> {
        // A sweep or pipeline id stands for its jobs; they are refreshed first, so that only those
        // that have not finished are cancelled (a variant that just completed stays Complete).
        let expanded;
        let ids = if ids.iter().any(|i| self.is_group(i).unwrap_or(false)) {
            expanded = self.expand_ids(ids)?;
            let active: Vec<JobSummary> = self
                .store
                .summaries(&expanded.iter().map(String::as_str).collect::<Vec<_>>())?
                .into_iter()
                .filter(|j| !j.status.is_terminal())
                .collect();
            self.refresh_and_advance(&active)?;
            expanded.as_slice()
        } else {
            ids
        };
        let jobs: Vec<JobRecord> = ids.iter().map(|i| self.store.get(i)).collect::<std::result::Result<_, _>>()?;
        self.on_this_cluster(jobs.iter().filter(|j| !j.status.is_terminal()).map(|j| &j.summary))?;
        if jobs.iter().any(|j| !j.status.is_terminal()) {
            let outcome = cancel::cancel(self.remote()?, &self.store, &jobs)?;
            for id in &outcome.cancelled {
                let _span = super::job_span(id).entered();
                tracing::info!("cancelled on Slurm");
            }
            if !outcome.failed.is_empty() {
                let list: Vec<String> = outcome.failed.iter().map(|(id, why)| format!("{id}: {why}")).collect();
                return Err(Error::RemoteCommand(format!(
                    "not cancelled (left as they were; try again when the controller answers): {}{}",
                    list.join("; "),
                    if outcome.cancelled.is_empty() {
                        String::new()
                    } else {
                        format!("; cancelled: {}", outcome.cancelled.join(", "))
                    }
                )));
            }
        }
        jobs.iter().map(|j| Ok(JobView::at(&self.store.summary(&j.job_id)?, super::now_secs()))).collect()
    }
}
