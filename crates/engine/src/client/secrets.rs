//! A job's secret values, found the one way every door finds them: a secrets file first (dotenv
//! form), then the submitting process's environment (the core's `SecretValues::resolve` decides).

use crate::error::Result;
use crate::spec::{SecretValues, SpecError};
use std::collections::BTreeMap;
use std::path::Path;

/// Values for `names`, from `file` (when given; it must be private) and this process's environment.
pub fn secret_values(names: &[String], file: Option<&Path>) -> Result<SecretValues> {
    let from_file: BTreeMap<String, String> = match file {
        // Private (600, ours), and a bad line named by its number, never its text.
        Some(p) => crate::private::read_env_file(p, crate::private::Trust::Private)
            .map_err(|m| SpecError::new("secret_env_file", m))?,
        None => BTreeMap::new(),
    };
    Ok(SecretValues::resolve(names, &from_file, &|n| std::env::var(n).ok())?)
}
