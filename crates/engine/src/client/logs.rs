//! A job's logs: whole, tail, a byte range, followed; of a Cosmos-RL role; of any attempt.

use super::{Client, FollowPoll, JobLogs, JobView};
use crate::engine::logs;
use crate::error::Result;
use crate::store::JobRecord;

impl Client {
    /// The logs of the current attempt, or of attempt `attempt` (1-based) when given.
    pub fn job_logs(&self, id: &str, tail_lines: Option<u32>, attempt: Option<u32>) -> Result<JobLogs> {
        let _span = super::job_span(id).entered();
        let job = self.job_at_attempt(id, attempt)?;
        logs::read_logs(self.remote()?, &job, tail_lines)
    }

    /// The logs of a Cosmos-RL role: every task (one per node), or only `task`, of the current
    /// attempt or of attempt `attempt`.
    pub fn job_role_logs(
        &self,
        id: &str,
        role: crate::cosmos::Role,
        task: Option<u32>,
        tail_lines: Option<u32>,
        attempt: Option<u32>,
    ) -> Result<logs::RoleLogs> {
        let job = self.job_at_attempt(id, attempt)?;
        // Checked before connecting: a wrong role or task needs no round trip to be refused.
        crate::ops::logs::role_tasks(&job, role, task)?;
        logs::read_role_logs(self.remote()?, &job, role, task, tail_lines)
    }

    /// The job as seen from its current attempt, or from attempt `attempt` (1-based).
    pub(super) fn job_at_attempt(&self, id: &str, attempt: Option<u32>) -> Result<JobRecord> {
        let job = self.store.get(id)?;
        self.on_this_cluster([&job.summary])?;
        let Some(n) = attempt else { return Ok(job) };
        let attempts = self.store.attempts(&job.job_id)?;
        let a = attempts.iter().find(|a| a.number == n).ok_or_else(|| {
            crate::spec::SpecError::new("attempt", format!("job {} has attempts 1 to {}", job.job_id, attempts.len()))
        })?;
        Ok(logs::as_attempt(&job, a))
    }

    /// Follow a job's logs until it is terminal and every byte has been read, calling `on_chunk` with
    /// each new piece. One round trip per poll (status refresh included); never re-reads a byte.
    pub fn follow_logs(
        &self,
        id: &str,
        streams: &[crate::ops::logs::Stream],
        interval: std::time::Duration,
        on_chunk: &mut dyn FnMut(&crate::ops::logs::Chunk),
    ) -> Result<JobView> {
        let main = |job: &JobRecord| logs::log_paths(job).map(|(_, out, err)| (out, err));
        self.follow_files(id, &main, streams, interval, on_chunk)
    }

    /// One poll of [`Client::follow_logs`] for callers that drive the loop themselves (the Python
    /// package's iterator): one round trip that refreshes the job and reads what its main.out and
    /// main.err gained since `cursor`. `finished` once the job was terminal before the poll and every
    /// byte has been read; `caught_up` when nothing more is waiting (poll again after a pause).
    pub fn follow_logs_poll(
        &self,
        id: &str,
        streams: &[crate::ops::logs::Stream],
        cursor: &mut crate::ops::logs::FollowCursor,
    ) -> Result<FollowPoll> {
        let job = self.store.get(id)?;
        let was_terminal = job.status.is_terminal();
        let chunks = if job.slurm_job_id.is_none() {
            // Not on Slurm yet (or outcome unknown): only a refresh, which may find or submit it.
            self.refresh_and_advance(std::slice::from_ref(&job.summary))?;
            Vec::new()
        } else {
            let (_, out, err) = logs::log_paths(&job)?;
            logs::follow_files_once(&self.cycle()?, &job, (&out, &err), streams, cursor)?
        };
        let caught_up = chunks.iter().all(|c| c.len < crate::ops::logs::MAX_CHUNK_BYTES);
        let job = JobView::at(&self.store.summary(&job.job_id)?, super::now_secs());
        Ok(FollowPoll { job, chunks, finished: was_terminal && caught_up, caught_up })
    }

    /// [`Client::follow_logs`] for one task of a Cosmos-RL role.
    pub fn follow_role_logs(
        &self,
        id: &str,
        role: crate::cosmos::Role,
        task: u32,
        streams: &[crate::ops::logs::Stream],
        interval: std::time::Duration,
        on_chunk: &mut dyn FnMut(&crate::ops::logs::Chunk),
    ) -> Result<JobView> {
        crate::ops::logs::role_tasks(&self.store.get(id)?, role, Some(task))?;
        let files = |job: &JobRecord| logs::role_log_paths(job, role, task).map(|(_, out, err)| (out, err));
        self.follow_files(id, &files, streams, interval, on_chunk)
    }

    /// Follow the files `paths_of` names for the job's current attempt (they change with a retry).
    pub(super) fn follow_files(
        &self,
        id: &str,
        paths_of: &dyn Fn(&JobRecord) -> Result<(String, String)>,
        streams: &[crate::ops::logs::Stream],
        interval: std::time::Duration,
        on_chunk: &mut dyn FnMut(&crate::ops::logs::Chunk),
    ) -> Result<JobView> {
        let mut cursor = crate::ops::logs::FollowCursor::default();
        let job = self.store.summary(id)?;
        self.on_this_cluster([&job])?;
        let job_id = job.facts.job_id;
        loop {
            let job = self.store.get(&job_id)?;
            let was_terminal = job.status.is_terminal();
            if job.slurm_job_id.is_none() {
                // Not on Slurm yet (or outcome unknown): refresh until it has an id.
                self.refresh_and_advance(std::slice::from_ref(&job.summary))?;
                if was_terminal {
                    return Ok(JobView::at(&job.summary, super::now_secs()));
                }
                std::thread::sleep(interval);
                continue;
            }
            let (out, err) = paths_of(&job)?;
            let chunks = logs::follow_files_once(&self.cycle()?, &job, (&out, &err), streams, &mut cursor)?;
            for c in &chunks {
                on_chunk(c);
            }
            let caught_up = chunks.iter().all(|c| c.len < crate::ops::logs::MAX_CHUNK_BYTES);
            if was_terminal && caught_up {
                return Ok(JobView::at(&job.summary, super::now_secs()));
            }
            if caught_up {
                std::thread::sleep(interval);
            }
        }
    }

    /// Up to `max_bytes` of a job's main.out or main.err from byte `offset` (current attempt, or
    /// attempt `attempt`), cut after the last whole line; the result says where to continue.
    pub fn log_range(
        &self,
        id: &str,
        stream: crate::ops::logs::Stream,
        offset: u64,
        max_bytes: u64,
        attempt: Option<u32>,
    ) -> Result<crate::ops::inspect::LogRange> {
        let mut job = self.store.get(id)?;
        self.on_this_cluster([&job.summary])?;
        if let Some(n) = attempt {
            let attempts = self.store.attempts(&job.job_id)?;
            let a = attempts.iter().find(|a| a.number == n).ok_or_else(|| {
                crate::spec::SpecError::new(
                    "attempt",
                    format!("job {} has attempts 1 to {}", job.job_id, attempts.len()),
                )
            })?;
            job = logs::as_attempt(&job, a);
        }
        let (_, out_path, err_path) = logs::log_paths(&job)?;
        let path = if stream == crate::ops::logs::Stream::Stdout { out_path } else { err_path };
        crate::engine::inspect::log_range(self.remote()?, &path, offset, max_bytes)
    }
}
