//! The pure core of tao-slurm. It turns a job description into a plan and a batch script, speaks the
//! Slurm dialect (states, times, squeue/sacct/sbatch output), maps what Slurm says to platform
//! statuses, classifies failures, and defines the line protocol of remote scripts and the job's domain
//! types. No I/O: no database, no processes, no clock, no random ids (callers pass them in), so every
//! function here is tested with tables of cases and properties, without a cluster.

pub mod attempts;
pub mod checkpoint;
pub mod config;
pub mod container_errors;
pub mod cosmos;
pub mod exit_codes;
pub mod filter;
#[cfg(any(test, feature = "test-fixtures"))]
pub mod fixtures;
pub mod gpu;
pub mod kpi;
pub mod layout;
pub mod model;
pub mod monitor;
pub mod notify;
pub mod ops;
pub mod plan;
pub mod policy;
pub mod preflight;
pub mod protocol;
pub mod redact;
pub mod retry;
pub mod script;
pub mod slurm;
pub mod spec;
pub mod sqsh;
#[cfg(test)]
pub(crate) mod stand_ins;
pub mod status;
pub mod tao_images;
pub mod utc;
pub mod webhook;
