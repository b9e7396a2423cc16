//! The one place that reads the wall clock. The core and the store are handed `now` (Unix seconds)
//! by their callers, so what they decide and record can be tested at any moment.

use std::time::{SystemTime, UNIX_EPOCH};

/// Unix seconds now (0 if the system clock is before 1970).
pub fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

/// RFC 3339 (UTC, seconds) for Unix seconds: the core's one formatter.
pub use tao_slurm_core::utc::rfc3339;
