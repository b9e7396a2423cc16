//! tao-slurm's doors: the command line ([`cli`]), the MCP server ([`mcp`]) and the team HTTP service
//! ([`service`]), each built on the library API ([`Client`]) of the engine crate (`tao-slurm-engine`),
//! whose modules and the core's are re-exported here under the same names. The engine's store,
//! transport and operations are not among them: a door reaches them through `Client` only.
//! See docs/ARCHITECTURE.md.

pub use tao_slurm_engine::{
    attempts, client, clock, config, cosmos, error, filter, gpu, kpi, model, monitor, notify, ops, plan, preflight,
    private, profiles, protocol, redact, retry, script, slurm, spec, spec_file, sqsh, status, tao_images,
};
pub use tao_slurm_engine::{Client, Error, JobSpec, JobView, PlatformStatus, Result};

pub mod cli;
pub mod mcp;
pub mod service;

#[cfg(test)]
mod error_mapping;
