//! The Slurm dialect: job states, time formats, and parsers for `sbatch`, `squeue` and `sacct` output.
//! Pure functions over text; nothing here runs a command.

mod partition;
pub mod query;
mod reason;
mod state;
mod time;
mod usage;

pub use partition::{parse_partitions, PartitionInfo};
pub use query::{parse_sacct, parse_sbatch_parsable, parse_squeue, SacctRecord, SqueueRecord};
pub use reason::explain_pending;
pub use state::SlurmState;
pub use time::{format_duration_minutes, hours_to_minutes, parse_slurm_duration_minutes};
pub use usage::{parse_partition_usage, PartitionUsage, SINFO_NODES_ARGS};
