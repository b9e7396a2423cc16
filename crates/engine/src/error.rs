//! The library's error, its kind, and each front-end's word for each kind: the CLI's exit code, the
//! Python exception class (here), the HTTP status (`service::error::status_of`) and the MCP error's
//! advice (`mcp::reply`). Every door derives its mapping from [`Error::kind`], and the table test below
//! holds them together, so they cannot drift.

use crate::config::ConfigError;
pub use crate::remote::RemoteError;
use crate::spec::SpecError;
pub use crate::store::StoreError;

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
    /// A door's own refusal from a hook it gave the engine (`SubmitOptions::admit`: the service's
    /// policy), handed back to that door as it was, for it to answer in its own words.
    #[error("{0}")]
    Refused(Box<dyn std::error::Error + Send + Sync>),
}

/// What kind of failure an error is, whatever layer it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// A field of the request is invalid; nothing reached the cluster.
    Invalid,
    /// SLURM_USER or SLURM_HOSTNAME is not set.
    MissingSettings,
    /// A setting or a local file it names is invalid (a key readable by others, a missing key, ...).
    Config,
    /// No such job in the local state.
    NotFound,
    /// A job id prefix that matches more than one job.
    Ambiguous,
    /// No login host could be reached; nothing was sent.
    Unreachable,
    /// The connection broke or the call timed out mid-way: what it did on the cluster is unknown.
    OutcomeUnknown,
    /// A remote command ran and failed (sbatch refused the job, scancel failed, ...).
    RemoteCommand,
    /// The local state file is unusable.
    State,
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

impl ErrorKind {
    pub const ALL: [ErrorKind; 9] = [
        ErrorKind::Invalid,
        ErrorKind::MissingSettings,
        ErrorKind::Config,
        ErrorKind::NotFound,
        ErrorKind::Ambiguous,
        ErrorKind::Unreachable,
        ErrorKind::OutcomeUnknown,
        ErrorKind::RemoteCommand,
        ErrorKind::State,
    ];

    /// The CLI's exit code.
    pub fn exit_code(self) -> i32 {
        match self {
            ErrorKind::Invalid => exit_code::USAGE,
            ErrorKind::MissingSettings | ErrorKind::Config => exit_code::CONFIG,
            ErrorKind::Unreachable | ErrorKind::OutcomeUnknown => exit_code::CONNECTION,
            ErrorKind::RemoteCommand => exit_code::REMOTE_COMMAND,
            ErrorKind::NotFound | ErrorKind::Ambiguous | ErrorKind::State => exit_code::STATE,
        }
    }

    /// The Python package's exception class (python/tao_slurm/errors.py defines each, with this exit
    /// code; tests/python checks that they agree).
    pub fn python_exception(self) -> &'static str {
        match self {
            ErrorKind::Invalid => "JobSpecError",
            ErrorKind::MissingSettings => "CredentialError",
            ErrorKind::Config => "ConfigError",
            ErrorKind::NotFound | ErrorKind::Ambiguous => "JobNotFoundError",
            ErrorKind::Unreachable | ErrorKind::OutcomeUnknown => "RemoteError",
            ErrorKind::RemoteCommand => "RemoteCommandError",
            ErrorKind::State => "StateError",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Invalid => "invalid",
            ErrorKind::MissingSettings => "missing_settings",
            ErrorKind::Config => "config",
            ErrorKind::NotFound => "not_found",
            ErrorKind::Ambiguous => "ambiguous",
            ErrorKind::Unreachable => "unreachable",
            ErrorKind::OutcomeUnknown => "outcome_unknown",
            ErrorKind::RemoteCommand => "remote_command",
            ErrorKind::State => "state",
        }
    }
}

impl Error {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Config(ConfigError::Missing) | Error::Remote(RemoteError::Config(ConfigError::Missing)) => {
                ErrorKind::MissingSettings
            }
            Error::Config(_) | Error::Remote(RemoteError::Config(_)) => ErrorKind::Config,
            Error::Remote(RemoteError::KeyPermissions { .. } | RemoteError::KeyMissing { .. }) => ErrorKind::Config,
            Error::Remote(
                RemoteError::Lost { .. } | RemoteError::TimedOut { .. } | RemoteError::OutputTooLarge { .. },
            ) => ErrorKind::OutcomeUnknown,
            Error::Remote(_) => ErrorKind::Unreachable,
            Error::Spec(_) => ErrorKind::Invalid,
            Error::Store(StoreError::NotFound(_)) => ErrorKind::NotFound,
            Error::Store(StoreError::Ambiguous(_)) => ErrorKind::Ambiguous,
            Error::Store(_) => ErrorKind::State,
            Error::RemoteCommand(_) => ErrorKind::RemoteCommand,
            Error::Refused(_) => ErrorKind::Invalid,
        }
    }

    pub fn exit_code(&self) -> i32 {
        self.kind().exit_code()
    }
}

pub type Result<T> = std::result::Result<T, Error>;
