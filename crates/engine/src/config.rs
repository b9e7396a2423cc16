//! Settings. Their parsing and precedence are the core's (`tao_slurm_core::config`, pure over maps of
//! values); gathering the values from the process environment and the env file happens here.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
pub use tao_slurm_core::config::*;

/// Process environment plus the env file (the explicit one, or `~/.config/tao/.env` when present).
/// A cluster profile named by `TAO_SLURM_CLUSTER` is laid over the environment ([`crate::profiles`]).
pub fn gather(mut flags: HashMap<String, String>, env_file: Option<&Path>) -> Result<SettingSources, ConfigError> {
    let env: HashMap<String, String> = std::env::vars().collect();
    let path = match env_file {
        Some(p) => Some(p.to_path_buf()),
        None => env
            .get("TAO_ENV_FILE")
            .map(PathBuf::from)
            .or_else(|| home_dir(&env).map(|h| h.join(".config/tao/.env")).filter(|p| p.is_file())),
    };
    let file = match &path {
        Some(p) => read_env_file(p)?,
        None => HashMap::new(),
    };
    crate::profiles::apply(&mut flags, &env, &file, env_file)?;
    Ok(SettingSources { flags, env, file, uid: Some(crate::private::current_uid()) })
}

/// The env file, refused when another user owns it or others can write it (it says where jobs run
/// and with which key).
fn read_env_file(path: &Path) -> Result<HashMap<String, String>, ConfigError> {
    crate::private::read_env_file(path, crate::private::Trust::NotWritableByOthers)
        .map(|m| m.into_iter().collect())
        .map_err(|message| ConfigError::EnvFile { path: path.to_path_buf(), message })
}
