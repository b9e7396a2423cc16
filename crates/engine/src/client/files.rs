//! Files on shared storage: a directory's entries (the TAO SDK's `list_path`), a job's checkpoint
//! files (its `get_checkpoints`) and a finished job's results directory removed (its
//! `delete_job_artifacts`).

use super::Client;
use crate::error::Result;
use crate::ops::files::{CheckpointFile, Deletion, DirEntry, Listing};
use crate::spec::{InputLocation, SpecError};

impl Client {
    /// The entries of a shared-storage directory (`lustre:///path`), sorted by name; None
    /// when nothing is there. One round trip. A file, or a URI of another scheme, is an error naming
    /// the field `path`.
    pub fn list_path(&self, uri: &str) -> Result<Option<Vec<DirEntry>>> {
        let path = shared_path(uri)?;
        self.settings.require_remote()?;
        match crate::engine::files::list_dir(self.remote()?, &path)? {
            Listing::Entries(entries) => Ok(Some(entries)),
            Listing::Missing => Ok(None),
            Listing::NotADirectory => Err(SpecError::new("path", format!("{uri} is not a directory")).into()),
        }
    }

    /// The checkpoints in a job's results directory (the job's patterns, TAO's by default:
    /// `tao_slurm_core::checkpoint`), newest last, listed now (one round trip).
    pub fn checkpoint_files(&self, id: &str) -> Result<Vec<CheckpointFile>> {
        let job = self.store.get(id)?;
        self.on_this_cluster([&job.summary])?;
        crate::engine::files::checkpoints(self.remote()?, &job.layout.results_dir(), &job.plan.checkpoint_patterns)
    }

    /// Remove a finished job's results directory (`<base>/results/<id>`, never through a symlink).
    /// True when it was removed, false when it was already gone. A job that has not ended is refused
    /// (its container may still write there); the job's record, logs and staged files stay.
    pub fn delete_job_results(&self, id: &str) -> Result<bool> {
        let job = self.store.summary(id)?;
        self.on_this_cluster([&job])?;
        if !job.status.is_terminal() {
            return Err(SpecError::new(
                "job_id",
                format!("job {} is {}: cancel it or let it end before deleting its results", job.job_id, job.status),
            )
            .into());
        }
        let dir = job.layout.results_dir();
        match crate::engine::files::delete_dir(self.remote()?, &dir)? {
            Deletion::Deleted => {
                self.store.add_event(&job.job_id, "results_deleted", &dir, super::now_secs())?;
                Ok(true)
            }
            Deletion::Absent => Ok(false),
            _ => Err(SpecError::new("job_id", format!("{dir} is not a directory of the job's: left as it is")).into()),
        }
    }
}

/// The path of a shared-storage URI, or an error naming the field `path`.
fn shared_path(uri: &str) -> Result<String> {
    match crate::spec::parse_input("path", uri) {
        Ok(InputLocation::Shared { path }) => Ok(path),
        Ok(InputLocation::Remote { uri, .. }) => {
            Err(SpecError::new("path", format!("{uri} is not on shared storage (lustre:///path)")).into())
        }
        Err(e) => Err(e.into()),
    }
}
