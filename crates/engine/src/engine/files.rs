//! Files on shared storage that are not a job's logs (the scripts and readers are the core's
//! `ops::files`), one round trip each: a directory's entries, a results directory removed.

use crate::error::{Error, Result};
use crate::remote::{Idempotency, Remote};
use tao_slurm_core::ops::files::*;

/// The entries of a directory on the login host.
pub fn list_dir(remote: &dyn Remote, path: &str) -> Result<Listing> {
    let out = remote.run_script(&list_dir_script(path), Idempotency::Idempotent)?;
    if out.exit_code != 0 {
        return Err(Error::RemoteCommand(format!("on {}: {}", out.host, out.stderr.trim())));
    }
    Ok(parse_listing(&out.stdout))
}

/// Remove a directory (never through a symlink). Removing twice finds it absent, so a retry is safe.
pub fn delete_dir(remote: &dyn Remote, path: &str) -> Result<Deletion> {
    let out = remote.run_script(&delete_dir_script(path), Idempotency::Idempotent)?;
    match parse_deletion(&out.stdout) {
        Deletion::Failed => {
            Err(Error::RemoteCommand(format!("on {}: cannot remove {path}: {}", out.host, out.stderr.trim())))
        }
        done => Ok(done),
    }
}

/// The checkpoint files under a results directory, newest last (none when it is not there).
pub fn checkpoints(remote: &dyn Remote, dir: &str, patterns: &[String]) -> Result<Vec<CheckpointFile>> {
    let out = remote.run_script(&checkpoints_script(dir, patterns), Idempotency::Idempotent)?;
    if out.exit_code != 0 {
        return Err(Error::RemoteCommand(format!("on {}: {}", out.host, out.stderr.trim())));
    }
    Ok(parse_checkpoints(&out.stdout))
}
