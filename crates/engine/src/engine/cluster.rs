//! Facts about the cluster (the scripts and readers are the core's `ops::cluster`), one round trip
//! each: what a submit checks against, each partition's free GPUs, which paths exist.

use crate::error::{Error, Result};
use crate::remote::{Idempotency, Remote};
use tao_slurm_core::ops::cluster::*;

/// `extra` is appended to the script (the squashfs cache probe).
pub fn submit_facts(remote: &dyn Remote, required_paths: &[String], extra: &str) -> Result<SubmitFacts> {
    let out = remote.run_script(&submit_facts_script(required_paths, extra), Idempotency::Idempotent)?;
    if out.exit_code != 0 {
        return Err(Error::RemoteCommand(format!("on {}: {}", out.host, out.stderr.trim())));
    }
    Ok(parse_submit_facts(&out.stdout, &out.host))
}

/// Each partition's limits and what its nodes have free now (one round trip; no job is involved).
pub fn partition_usage(remote: &dyn Remote) -> Result<(Vec<crate::slurm::PartitionUsage>, String)> {
    let out = remote.run_script(&partition_usage_script(), Idempotency::Idempotent)?;
    if out.exit_code != 0 {
        return Err(Error::RemoteCommand(format!("on {}: {}", out.host, out.stderr.trim())));
    }
    Ok((parse_partition_usage_output(&out.stdout), out.host))
}

/// `check-path`: which of the paths exist on the login host (one round trip).
pub fn missing_paths(remote: &dyn Remote, paths: &[String]) -> Result<(Vec<String>, String)> {
    let out = remote.run_script(&paths_script(paths), Idempotency::Idempotent)?;
    Ok((missing_from(&out.stdout), out.host))
}
