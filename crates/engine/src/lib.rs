//! The engine of tao-slurm behind its library API, [`Client`].
//!
//! The pure core (the `tao-slurm-core` crate, re-exported here under the same module names: [`spec`],
//! [`plan`], [`script`], [`slurm`], [`status`], [`retry`], [`model`], [`protocol`], ...) turns a job
//! description into a batch script and maps Slurm's answers to statuses without any I/O. This crate is
//! the shell around it: `remote` runs scripts on a login host, `store` keeps state in SQLite or
//! PostgreSQL, `engine` runs each operation and records what it decided, and [`client`] is the library
//! API. The three are private: the doors (the `tao-slurm` package: CLI, MCP, service; the Python
//! extension) reach them through [`Client`] only, and the compiler holds them to it. See
//! docs/ARCHITECTURE.md.

pub use tao_slurm_core::{
    attempts, cosmos, filter, gpu, kpi, model, monitor, notify, ops, preflight, protocol, retry, script, slurm, spec,
    sqsh, status, tao_images,
};

/// A module the doors do not see; public only with the `internals` feature (for the sandbox tests
/// that drive the store or the transport directly).
macro_rules! internal_mod {
    ($(#[$attr:meta])* $name:ident) => {
        $(#[$attr])*
        #[cfg(feature = "internals")]
        pub mod $name;
        $(#[$attr])*
        #[cfg(not(feature = "internals"))]
        // What only the tests outside the crate use is not dead (with the feature it is public).
        #[allow(dead_code, unused_imports)]
        pub(crate) mod $name;
    };
}

mod batch;
pub mod client;
pub mod clock;
pub mod config;
internal_mod!(engine);
pub mod error;
mod off_runtime;
pub mod private;
pub mod profiles;
internal_mod!(remote);
pub mod spec_file;
internal_mod!(store);

/// Secret values kept out of logs: the engine's registry.
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
