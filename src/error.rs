//! The library's error, and the CLI exit code for each class of failure.

use crate::config::ConfigError;
use crate::remote::RemoteError;
use crate::spec::SpecError;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error(transparent)]
    Remote(#[from] RemoteError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A remote command ran and failed (sbatch refused the job, a file could not be written, ...).
    #[error("{0}")]
    RemoteCommand(String),
}

/// Exit codes, one per class, so scripts and agents can tell them apart.
pub mod exit_code {
    pub const JOB_FAILED: i32 = 1;
    pub const USAGE: i32 = 2;
    pub const CONFIG: i32 = 3;
    pub const CONNECTION: i32 = 4;
    pub const REMOTE_COMMAND: i32 = 5;
    pub const STATE: i32 = 6;
}

impl Error {
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Config(_) => exit_code::CONFIG,
            Error::Spec(_) => exit_code::USAGE,
            Error::Remote(RemoteError::Config(_)) => exit_code::CONFIG,
            Error::Remote(RemoteError::KeyPermissions { .. } | RemoteError::KeyMissing { .. }) => exit_code::CONFIG,
            Error::Remote(_) => exit_code::CONNECTION,
            Error::Store(_) => exit_code::STATE,
            Error::RemoteCommand(_) => exit_code::REMOTE_COMMAND,
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
