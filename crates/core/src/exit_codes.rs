//! The exit codes of tao-slurm's own scripts, named once: the remote scripts (submission, staging,
//! credentials) and the batch script exit with these, and the engine reads them from here.

/// A job, results or cache directory could not be created.
pub const CANNOT_CREATE_DIRS: i32 = 10;
/// A staged file (or its temporary) could not be written.
pub const CANNOT_STAGE: i32 = 11;
/// A secrets (or credentials) file could not be written.
pub const CANNOT_WRITE_SECRETS: i32 = 12;
/// A submission without the secret values found no secrets file of ours to run with.
pub const SECRETS_FILE_MISSING: i32 = 13;
/// Shared storage is not trustworthy (a directory of another user, writable by others, a symlink).
pub const UNTRUSTED_STORAGE: i32 = 14;
/// sbatch refused the job or the sweep.
pub const SBATCH_REFUSED: i32 = 20;
/// Submitted, but its log directory could not be made: the job was cancelled.
pub const NO_LOG_DIR: i32 = 21;
/// Submitted, but the hold could not be released.
pub const RELEASE_FAILED: i32 = 22;
/// Another run of the same submission holds its lock and has not submitted yet: nothing was done.
pub const SUBMISSION_IN_FLIGHT: i32 = 23;
/// A submission made with the checks' known facts found one no longer true (an input path missing,
/// the image's squashfs file gone): nothing was staged or submitted.
pub const CHECKS_FAILED: i32 = 24;
/// The image conversion failed (enroot import, or the cache file could not be replaced).
pub const CONVERSION_FAILED: i32 = 30;
/// Another conversion of the same image held its lock past the wait.
pub const CONVERSION_BUSY: i32 = 31;
/// The batch script: a file it needs (secrets, specs, a variant's script) is missing.
pub const MISSING_FILE: i32 = 85;
/// The batch script: an auxiliary input (s3, hf, ngc) could not be fetched.
pub const FETCH_FAILED: i32 = 86;
/// The batch script: an auxiliary input is larger than the cap.
pub const INPUT_TOO_LARGE: i32 = 87;
/// `timeout(1)`'s: the inner timeout ended the container (requeued, up to a cap).
pub const TIMED_OUT: i32 = 124;
