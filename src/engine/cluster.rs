//! Facts about the cluster that a submit checks against: its partitions and their limits.

use crate::error::{Error, Result};
use crate::remote::{Idempotency, Remote};
use crate::slurm::{parse_partitions, PartitionInfo};

pub const PARTITIONS_SCRIPT: &str = "scontrol show partition -o\n";

pub fn partitions(remote: &dyn Remote) -> Result<Vec<PartitionInfo>> {
    let out = remote.run_script(PARTITIONS_SCRIPT, Idempotency::Idempotent)?;
    if out.exit_code != 0 {
        return Err(Error::RemoteCommand(format!(
            "scontrol show partition failed on {}: {}",
            out.host,
            out.stderr.trim()
        )));
    }
    Ok(parse_partitions(&out.stdout))
}
