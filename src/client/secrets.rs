//! A job's secret values, found the one way every door finds them: a secrets file first (dotenv
//! form), then the submitting process's environment (the core's `SecretValues::resolve` decides).

use crate::error::Result;
use crate::spec::{SecretValues, SpecError};
use std::collections::BTreeMap;
use std::path::Path;

/// Values for `names`, from `file` (when given) and this process's environment.
pub fn secret_values(names: &[String], file: Option<&Path>) -> Result<SecretValues> {
    let from_file: BTreeMap<String, String> = match file {
        Some(p) => dotenvy::from_path_iter(p)
            .and_then(|it| it.collect::<std::result::Result<BTreeMap<_, _>, _>>())
            .map_err(|e| SpecError::new("secret_env_file", format!("cannot read {}: {e}", p.display())))?,
        None => BTreeMap::new(),
    };
    Ok(SecretValues::resolve(names, &from_file, &|n| std::env::var(n).ok())?)
}
