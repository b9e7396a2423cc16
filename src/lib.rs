//! tao-slurm: run containerised GPU jobs (NVIDIA TAO, any Pyxis/Enroot image) on Slurm clusters over SSH.
//!
//! The pure core ([`spec`], [`plan`], [`script`], [`slurm`], [`status`]) turns a job description into
//! a batch script and maps Slurm's answers to statuses without any I/O. The shell ([`remote`],
//! [`store`], [`engine`], [`client`], the CLI) runs commands and keeps state. [`Client`] is the API.

pub mod cli;
pub mod client;
pub mod config;
pub mod cosmos;
pub mod engine;
pub mod error;
pub mod mcp;
pub mod monitor;
pub mod plan;
pub mod preflight;
pub mod private;
pub mod profiles;
pub mod redact;
pub mod remote;
pub mod retry;
pub mod script;
pub mod service;
pub mod slurm;
pub mod spec;
pub mod sqsh;
pub mod status;
pub mod store;

pub use client::{Client, JobView};
pub use error::{Error, Result};
pub use spec::JobSpec;
pub use status::PlatformStatus;
