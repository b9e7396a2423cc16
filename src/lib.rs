//! tao-slurm: run containerised GPU jobs (NVIDIA TAO, any Pyxis/Enroot image) on Slurm clusters over SSH.
//!
//! The pure core (the `tao-slurm-core` crate, re-exported here under the same module names: [`spec`],
//! [`plan`], [`script`], [`slurm`], [`status`], [`retry`], [`model`], [`protocol`], ...) turns a job
//! description into a batch script and maps Slurm's answers to statuses without any I/O. This crate is
//! the shell around it: [`remote`] runs scripts on a login host, [`store`] keeps state in SQLite,
//! [`engine`] runs each operation and records what it decided, [`client`] is the library API
//! ([`Client`]), and the front-ends ([`cli`], [`mcp`]) sit on the client. See docs/ARCHITECTURE.md.

pub use tao_slurm_core::{
    attempts, cosmos, filter, kpi, model, monitor, notify, ops, preflight, protocol, retry, script, slurm, spec, sqsh,
    status, tao_images,
};

pub mod cli;
pub mod client;
pub mod clock;
pub mod config;
pub mod engine;
pub mod error;
pub mod mcp;
pub mod private;
pub mod profiles;
pub mod remote;
pub mod service;
pub mod spec_file;
pub mod store;

/// Secret values kept out of logs: the engine's registry (see [`engine::redact`]).
pub use engine::redact;

#[cfg(test)]
mod test_remote;

/// Plans: the core's, plus [`plan::resolve`], which draws the new job's id.
pub mod plan {
    pub use tao_slurm_core::plan::*;

    /// Validate a spec and resolve it into the plan of a new job (a fresh random id).
    pub fn resolve(
        spec: &crate::spec::JobSpec,
        settings: &crate::config::Settings,
    ) -> Result<Plan, crate::spec::SpecError> {
        resolve_with_id(spec, settings, &uuid::Uuid::new_v4().to_string())
    }
}

pub use client::{Client, JobView};
pub use error::{Error, Result};
pub use spec::JobSpec;
pub use status::PlatformStatus;
