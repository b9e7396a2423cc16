//! One refresh cycle, the only way any caller (status, watch, logs -f, the monitor, the library, the
//! MCP server) brings jobs up to date: observe them in one round trip, record what the core decided
//! (failures classified, retries scheduled, adopted submissions finished, statuses stored), submit
//! the retries that are due and resume interrupted submissions, and remove finished jobs' secrets.

use crate::config::Settings;
use crate::engine::refresh::{self};
use crate::engine::retry::{self};
use crate::error::Result;
use crate::ops::failure::{RetryPolicy, RESUME_SUBMISSION_AFTER_SECS};
use crate::ops::refresh::Observations;
use crate::remote::Remote;
use crate::status::PlatformStatus;
use crate::store::{JobRecord, JobSummary, Store};
use std::borrow::Cow;

/// What a cycle needs: the transport, the state, the retry policy, and the settings a recorded job's
/// staged files are regenerated with (for its retries and resumed submissions).
pub struct Cycle<'a> {
    pub remote: &'a dyn Remote,
    pub store: &'a Store,
    pub policy: RetryPolicy,
    pub settings: &'a Settings,
    /// Observe and record statuses only ([`refresh::record_observed`]): no scancel, release,
    /// resubmission, dependency action or secret removal (`mcp --read-only`).
    pub observe_only: bool,
    /// The door's rule on automatic restarts, asked before each is submitted (see
    /// [`retry::RestartGate`]).
    pub restart_gate: Option<&'a retry::RestartGate>,
}

impl Cycle<'_> {
    /// Observe `jobs` in one round trip and settle what that shows. Returns the ids of the jobs whose
    /// records changed.
    pub fn run(&self, jobs: &[JobSummary]) -> Result<Vec<String>> {
        let kept = without_submissions_under_way(self.without_paused(jobs)?);
        let jobs: &[JobSummary] = &kept;
        if jobs.is_empty() {
            // Secrets of jobs that ended while their removal could not run are still swept.
            if !self.observe_only && !self.store.secrets_to_remove()?.is_empty() {
                crate::engine::secrets::sweep_or_warn(self.remote, self.store);
            }
            return Ok(Vec::new());
        }
        // A job that runs after others moves on only when they do: they are refreshed with it.
        let ids: Vec<&str> = jobs.iter().map(|j| j.job_id.as_str()).collect();
        let parents = crate::engine::depend::active_parents(self.store, &ids)?;
        let with_parents: Vec<JobSummary>;
        let jobs = if parents.is_empty() {
            jobs
        } else {
            let parent_ids: Vec<&str> = parents.iter().map(String::as_str).collect();
            with_parents = jobs.iter().cloned().chain(self.store.summaries(&parent_ids)?).collect();
            &with_parents
        };
        let (obs, host) = refresh::observe(self.remote, jobs)?;
        self.settle(jobs, &obs, &host)
    }

    /// Everything after the observation (for callers whose round trip carried the refresh script
    /// along with something else, like `logs -f`).
    pub fn settle(&self, jobs: &[JobSummary], obs: &Observations, host: &str) -> Result<Vec<String>> {
        let kept = self.without_paused(jobs)?;
        let jobs: &[JobSummary] = &kept;
        if self.observe_only {
            return refresh::record_observed(self.store, jobs, obs, host);
        }
        // A store held to a lease (a service replica's monitor) that lost it while the round trip
        // was under way acts on nothing it saw: no scancel, release or submission either (its writes
        // would be refused anyway).
        self.store.lease_still_held()?;
        let mut touched = refresh::record(self.remote, self.store, &self.policy, jobs, obs, host)?;
        let ids: std::collections::HashSet<&str> = jobs.iter().map(|j| j.job_id.as_str()).collect();
        // A graceful pause whose bound passed: the job is cancelled now (Paused).
        touched.extend(crate::engine::pause::stop_overdue(self.remote, self.store, &ids)?);
        // Only jobs without a Slurm job can have a retry to submit or a submission to resume; a
        // paused (or pausing) job has none to submit until it is resumed.
        let waiting: Vec<JobRecord> = self
            .store
            .waiting_for_submission()?
            .into_iter()
            .filter(|j| ids.contains(j.job_id.as_str()))
            .filter(|j| !matches!(j.status, PlatformStatus::Paused | PlatformStatus::Pausing))
            .collect();
        retry::advance(self.remote, self.store, &waiting, self.settings, self.restart_gate)?;
        crate::engine::sweep::resume(self.remote, self.store, &waiting, self.settings)?;
        touched.extend(waiting.into_iter().map(|j| j.summary.facts.job_id));
        // After the retries: a parent resubmitted just now has its new Slurm job to be pointed at.
        touched.extend(crate::engine::depend::reconcile(self.remote, self.store)?);
        Ok(touched)
    }

    /// `jobs` without those tao-slurm paused (their Slurm job was cancelled by the pause: there is
    /// nothing to observe until they are resumed); borrowed as it is when there are none.
    fn without_paused<'j>(&self, jobs: &'j [JobSummary]) -> Result<Cow<'j, [JobSummary]>> {
        if !jobs.iter().any(|j| j.status == PlatformStatus::Paused) {
            return Ok(Cow::Borrowed(jobs));
        }
        let ours = self.store.paused_by_us_among(jobs.iter().map(|j| (j.job_id.as_str(), j.status)))?;
        Ok(Cow::Owned(jobs.iter().filter(|j| !ours.contains(&j.job_id)).cloned().collect()))
    }
}

/// `jobs` without the submissions under way: the attempts this process is submitting now
/// (`engine::in_flight`), whose own answer tells where they went, and the jobs recorded less than
/// [`RESUME_SUBMISSION_AFTER_SECS`] ago that nothing has been written of since (another process's
/// queue holds them, a replica's in a burst; past that, or once their submission's outcome is known
/// or lost, they are looked for, before being resumed). Observing one looks it up by its lock and by
/// name in sacct, the costliest part of a refresh, for each job of a burst.
fn without_submissions_under_way(jobs: Cow<'_, [JobSummary]>) -> Cow<'_, [JobSummary]> {
    let now = crate::clock::now();
    let under_way = |j: &JobSummary| {
        j.slurm_job_id.is_none()
            && (crate::engine::in_flight::is_in_flight(&j.attempt_name)
                || (j.message == Store::RECORDED && now - j.created_at <= RESUME_SUBMISSION_AFTER_SECS))
    };
    if !jobs.iter().any(under_way) {
        return jobs;
    }
    Cow::Owned(jobs.iter().filter(|j| !under_way(j)).cloned().collect())
}
