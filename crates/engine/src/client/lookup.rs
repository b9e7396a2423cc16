//! Finding jobs and groups in the local state: ids and prefixes, sweeps and pipelines, events.

use super::{Client, GroupView, JobFilter, JobList, JobView};
use crate::error::Result;
use crate::store::JobSummary;

impl Client {
    /// The ids given, with every sweep or pipeline id (or prefix) replaced by its members' job ids.
    /// A job id wins over a group id it also prefixes.
    pub fn expand_ids(&self, ids: &[String]) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for id in ids {
            match self.store.summary(id) {
                Ok(job) => out.push(job.facts.job_id),
                Err(crate::store::StoreError::NotFound(_)) => match self.store.group(id)? {
                    Some((_, members)) => out.extend(members),
                    None => return Err(crate::store::StoreError::NotFound(id.clone()).into()),
                },
                Err(e) => return Err(e.into()),
            }
        }
        Ok(out)
    }

    /// The jobs `ids` name, a sweep or pipeline id standing for its jobs (in index order): one lookup
    /// per id, a group looked for only when no job matches (whole ids read together:
    /// [`Client::known_jobs`]).
    pub(super) fn summaries_of(&self, ids: &[String]) -> Result<Vec<JobSummary>> {
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            match self.store.summary(id) {
                Ok(job) => out.push(job),
                Err(crate::store::StoreError::NotFound(_)) => match self.store.group(id)? {
                    Some((_, members)) => {
                        let mut jobs = self.store.summaries(&members.iter().map(String::as_str).collect::<Vec<_>>())?;
                        let order: std::collections::HashMap<&str, usize> =
                            members.iter().enumerate().map(|(i, m)| (m.as_str(), i)).collect();
                        jobs.sort_by_key(|j| order.get(j.job_id.as_str()).copied());
                        out.extend(jobs);
                    }
                    None => return Err(crate::store::StoreError::NotFound(id.clone()).into()),
                },
                Err(e) => return Err(e.into()),
            }
        }
        Ok(out)
    }

    /// Whether `id` names a sweep or pipeline (and not a job).
    pub fn is_group(&self, id: &str) -> Result<bool> {
        if self.store.summary(id).is_ok() {
            return Ok(false);
        }
        Ok(self.store.group(id)?.is_some())
    }

    /// Every sweep and pipeline, newest first, with its members' statuses counted.
    pub fn groups(&self) -> Result<Vec<GroupView>> {
        let mut out = Vec::new();
        for g in self.store.groups()? {
            let members = self.store.group(&g.sweep_id)?.map(|(_, m)| m).unwrap_or_default();
            let ids: Vec<&str> = members.iter().map(String::as_str).collect();
            let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
            for j in self.store.summaries(&ids)? {
                *counts.entry(j.status.to_string()).or_default() += 1;
            }
            out.push(GroupView { group: g, jobs: members.len(), statuses: counts });
        }
        Ok(out)
    }

    /// A job's attempts, first to last.
    pub fn attempts(&self, id: &str) -> Result<Vec<crate::store::AttemptRecord>> {
        let job = self.store.get(id)?;
        Ok(self.store.attempts(&job.job_id)?)
    }

    /// Retries so far on this client's cluster, by failure class. No remote call.
    pub fn retries_by_class(&self) -> Result<Vec<(String, u64)>> {
        Ok(self.store.retries_by_class()?)
    }

    pub fn events(&self, id: &str) -> Result<Vec<(i64, String, String)>> {
        let job = self.store.get(id)?;
        Ok(self.store.events(&job.job_id)?)
    }

    /// The id of the newest event in the state file: pass it to [`Client::events_since`] later to get
    /// only what happened after now.
    pub fn last_event_id(&self) -> Result<i64> {
        Ok(self.store.last_event_id()?)
    }

    /// Events after the cursor `after` (an event id), oldest first, at most `limit`, of the given jobs
    /// (ids or prefixes) or of every job when `ids` is empty. No remote call.
    pub fn events_since(&self, after: i64, ids: &[String], limit: usize) -> Result<Vec<crate::store::EventRecord>> {
        let full: Vec<String> =
            ids.iter().map(|i| Ok(self.store.summary(i)?.facts.job_id)).collect::<Result<Vec<String>>>()?;
        let full: Vec<&str> = full.iter().map(String::as_str).collect();
        Ok(self.store.events_since(after, &full, limit)?)
    }

    /// Jobs as the state file holds them (ids or prefixes), without asking the cluster.
    pub fn stored_jobs(&self, ids: &[String]) -> Result<Vec<JobView>> {
        // A sweep or pipeline id stands for its jobs.
        Ok(self.summaries_of(ids)?.iter().map(|j| JobView::at(j, super::now_secs())).collect())
    }

    /// The jobs of these whole job ids that the state has, in one query (ids it does not have, a
    /// job deleted meanwhile, are left out): what the service's cache reads for a batch of creates.
    pub fn known_jobs(&self, ids: &[String]) -> Result<Vec<JobView>> {
        let asked: Vec<&str> = ids.iter().map(String::as_str).collect();
        Ok(self.store.summaries(&asked)?.iter().map(|j| JobView::at(j, super::now_secs())).collect())
    }

    /// The plan a job was recorded with (what a retry or a resume submits again), from the state file.
    pub fn recorded_plan(&self, id: &str) -> Result<crate::plan::Plan> {
        Ok(self.store.get(id)?.plan)
    }

    /// The specs a job was staged with (its `$TAO_SPECS_FILE`, inputs laid over), from the state file.
    pub fn staged_specs(&self, id: &str) -> Result<serde_json::Value> {
        Ok(self.store.get(id)?.plan.specs_json())
    }

    /// The jobs of the local state that pass `filter`, newest first, and how many passed before its
    /// limit cut the list (no remote call).
    pub fn list(&self, filter: &JobFilter) -> Result<JobList> {
        let only: Option<std::collections::HashSet<String>> =
            if filter.groups.is_empty() { None } else { Some(self.expand_ids(&filter.groups)?.into_iter().collect()) };
        let now = super::now_secs();
        let matched: Vec<JobView> = self
            .store
            .list_summaries(filter.active_only)?
            .iter()
            .filter(|j| only.as_ref().is_none_or(|o| o.contains(&j.job_id)))
            .filter(|j| filter.matches(j.status, j.created_at, now))
            .map(|j| JobView::at(j, super::now_secs()))
            .collect();
        let total = matched.len();
        let jobs = match filter.limit {
            Some(n) => matched.into_iter().take(n).collect(),
            None => matched,
        };
        Ok(JobList { jobs, total })
    }

    /// Every job in the local state, newest first (no remote call).
    pub fn list_jobs(&self) -> Result<Vec<JobView>> {
        Ok(self.list(&JobFilter::default())?.jobs)
    }
}
