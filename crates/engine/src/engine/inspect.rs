//! Read-only looks that agents need and the CLI does not (the scripts and readers are the core's
//! `ops::inspect`): one round trip each; nothing is written on the cluster or in the state file.

use crate::error::{Error, Result};
use crate::remote::{Idempotency, Remote};
use tao_slurm_core::ops::inspect::*;

/// Slurm's start estimate for a pending Slurm job (None: Slurm does not list it as pending).
pub fn start_estimate(remote: &dyn Remote, slurm_job_id: &str) -> Result<Option<StartEstimate>> {
    let out = remote.run_script(&start_estimate_script(slurm_job_id), Idempotency::Idempotent)?;
    Ok(parse_start_estimate(&out.stdout, &out.host))
}

/// Read up to `max_bytes` of the file at `path` from `offset`.
pub fn log_range(remote: &dyn Remote, path: &str, offset: u64, max_bytes: u64) -> Result<LogRange> {
    let out = remote.run_script(&log_range_script(path, offset, max_bytes), Idempotency::Idempotent)?;
    parse_log_range(&out.stdout, path, offset).map_err(Error::RemoteCommand)
}

pub fn credentials_status(remote: &dyn Remote) -> Result<CredentialsStatus> {
    let out = remote.run_script(&credentials_status_script(), Idempotency::Idempotent)?;
    Ok(parse_credentials_status(&out.stdout, &out.host))
}
