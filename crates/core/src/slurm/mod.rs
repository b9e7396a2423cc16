//! The Slurm dialect: job states, time formats, and parsers for `sbatch`, `squeue` and `sacct` output.
//! Pure functions over text; nothing here runs a command.

pub mod hostlist;
mod partition;
pub mod query;
mod reason;
#[cfg(test)]
pub(crate) mod recorded;
mod state;
mod time;
mod usage;
mod version;

pub use partition::{parse_partitions, PartitionInfo};
pub use query::{parse_exit_status, parse_sacct, parse_sbatch_parsable, parse_squeue, SacctRecord, SqueueRecord};
pub use reason::explain_pending;
pub use state::{SlurmState, FINISHED_STATES};
pub use time::{format_duration_minutes, hours_to_minutes, parse_slurm_duration_minutes};
pub use usage::{parse_partition_usage, PartitionUsage, SINFO_NODES_ARGS};
pub use version::{tested_releases, SlurmVersion, TESTED_RELEASES};

/// A Slurm job id as tao-slurm records it: digits, or `<array id>_<task index>` for an array task.
/// Anything else (read from a file a job could write) is refused.
pub fn is_slurm_job_id(id: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit());
    match id.split_once('_') {
        Some((array, task)) => digits(array) && digits(task),
        None => digits(id),
    }
}

#[cfg(test)]
mod id_tests {
    #[test]
    fn job_ids_and_array_task_ids() {
        for ok in ["1", "4242", "4242_0", "4242_999"] {
            assert!(super::is_slurm_job_id(ok), "{ok}");
        }
        for bad in ["", "_", "12_", "_3", "12_3_4", "1a", "12 3", "$(x)", "4242_[0-3]", "123456789012345678901"] {
            assert!(!super::is_slurm_job_id(bad), "{bad}");
        }
    }
}
