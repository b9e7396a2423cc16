//! The `tao-slurm` package: the executable (a thin one over the command line's crate,
//! `tao-slurm-cli`, which starts the MCP server's and the service's crates) and, for the integration
//! tests in tests/, the engine's modules and the core's under the names the doors use. See
//! docs/ARCHITECTURE.md.

pub use tao_slurm_engine::{
    attempts, client, clock, config, cosmos, error, filter, gpu, kpi, model, monitor, notify, ops, plan, preflight,
    private, profiles, protocol, redact, retry, script, slurm, spec, spec_file, sqsh, status, tao_images,
};
pub use tao_slurm_engine::{Client, Error, JobSpec, JobView, PlatformStatus, Result};
