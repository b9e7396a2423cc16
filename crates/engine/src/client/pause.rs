//! `pause` and `resume`: a job's allocation released and taken up again later, from its newest
//! checkpoint (the states and decisions: core `ops::pause`). Both are idempotent and safe under
//! concurrent callers: each change of status is a compare-and-set in the store (store/pause.rs).

use super::{Client, JobView};
use crate::engine::pause;
use crate::error::{Error, Result};
use crate::ops::pause::{pause_step, resume_step, PauseStep, ResumeStep};
use crate::spec::SpecError;

impl Client {
    /// Pause a job. `graceful`: a running job gets the checkpoint signal (USR2, as before a time
    /// limit) and is Pausing until it ends or its checkpoint grace passes (then it is cancelled: any
    /// refresh does it); otherwise (or for a job not running yet) it is cancelled now. Either way it
    /// ends Paused, its allocation released; its dependants wait. A paused or pausing job is
    /// answered as it is; a job that ended is an error.
    pub fn pause_job(&self, id: &str, graceful: bool) -> Result<JobView> {
        let _span = super::job_span(id).entered();
        let job = self.store.get(id)?;
        self.on_this_cluster([&job.summary])?;
        // Whether it runs (and so can save a checkpoint) is what Slurm says now: refreshed first.
        let job = if graceful && !job.status.is_terminal() {
            self.job_status(&job.job_id)?;
            self.store.get(&job.job_id)?
        } else {
            job
        };
        let step = pause_step(&job, graceful).map_err(|m| SpecError::new("job_id", m))?;
        if step == PauseStep::Nothing {
            return self.job_status(&job.job_id);
        }
        let now = super::now_secs();
        if !pause::begin(&self.store, &job, &step, graceful, now)? {
            // Another caller changed it first (a pause, or a refresh): answered as it now is.
            return self.job_status(&job.job_id);
        }
        let remote = self.remote()?;
        if let PauseStep::Signal { slurm_job_id } = &step {
            if let Err(why) = pause::signal(remote, slurm_job_id)? {
                // Nothing to save a checkpoint with (it may have just ended): stopped now instead.
                self.store.add_event(&job.job_id, "pause_signal_failed", &why, now)?;
            } else {
                return self.job_status(&job.job_id);
            }
        }
        let job = self.store.get(&job.job_id)?;
        pause::stop(remote, &self.store, std::slice::from_ref(&job))?;
        let view = self.job_status(&job.job_id)?;
        if view.status == crate::status::PlatformStatus::Pausing {
            return Err(Error::RemoteCommand(format!(
                "job {} is Pausing: its Slurm job could not be cancelled yet (the next refresh tries again)",
                job.job_id
            )));
        }
        Ok(view)
    }

    /// Resume a paused job: a new attempt, due now, from its newest checkpoint
    /// (`$TAO_RESUME_CHECKPOINT`, and TAO's resume key in its specs), with `specs` replacing its
    /// specs when given and not empty (TAO's resume body). It is Resuming until Slurm runs it. Of
    /// concurrent callers one reopens it (one Slurm job); the others, and a resume of a job that is
    /// not paused but going, answer it as it is. A job that ended, or is still pausing, is an error.
    pub fn resume_job(&self, id: &str, specs: Option<&serde_json::Value>) -> Result<JobView> {
        let _span = super::job_span(id).entered();
        let job = self.store.get(id)?;
        self.on_this_cluster([&job.summary])?;
        let step = resume_step(&job.job_id, job.status).map_err(|m| SpecError::new("job_id", m))?;
        if step == ResumeStep::Nothing {
            return self.job_status(&job.job_id);
        }
        // The compare-and-set reopens only a job tao-slurm paused. When it does not, either another
        // caller reopened it after our read (answered as it now is) or Slurm suspended it.
        if pause::reopen(&self.store, &job, specs, super::now_secs())? {
            let summary = self.store.summary(&job.job_id)?;
            self.refresh_and_advance(&[summary])?;
        } else if self.store.get(&job.job_id).map(|now| (now.attempt, now.status))? == (job.attempt, job.status)
            && self.store.paused_by_us(&[job.job_id.as_str()])?.is_empty()
        {
            return Err(SpecError::new(
                "job_id",
                format!(
                    "job {} is suspended by Slurm, not paused by tao-slurm: `scontrol resume` takes it up",
                    job.job_id
                ),
            )
            .into());
        }
        self.job_status(&job.job_id)
    }
}
