//! What a user asks for: [`JobSpec`], and the field-by-field validation that runs before any remote call.

mod image;
mod validate;

pub use image::ImageRef;
pub use validate::{check_env_name, check_slurm_word, check_text, SpecError};

use serde::{Deserialize, Serialize};

/// A job as the user describes it. Every field but `image` and `command` is optional and falls back to
/// the settings, then to the contract's defaults, when the plan is resolved.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JobSpec {
    pub image: String,
    /// The command as argv; with `shell = true` a single string run by `bash -c`.
    pub command: Vec<String>,
    pub shell: bool,
    /// GPUs on every node (always per node).
    pub gpus: Option<u32>,
    /// Total GPUs, packed into full nodes (alternative to `gpus`).
    pub total_gpus: Option<u32>,
    pub nodes: Option<u32>,
    pub cpus_per_task: Option<u32>,
    pub partition: Option<String>,
    pub account: Option<String>,
    pub time_hours: Option<f64>,
    pub timeout_hours: Option<f64>,
    pub requeue: Option<bool>,
    /// `NAME=VALUE` pairs exported to the container.
    pub env: Vec<(String, String)>,
    /// Mounts added to the default `/lustre` (`src[:dst[:flags]]`).
    pub mounts: Vec<String>,
    /// Replace the default mount instead of adding to it.
    pub replace_default_mounts: bool,
    pub container_workdir: Option<String>,
    pub no_container_mount_home: bool,
    /// A human label; the Slurm job name is always derived from the platform id.
    pub name: Option<String>,
    /// Timeout requeues allowed before the job ends as timed out.
    pub max_timeout_requeues: Option<u32>,
}

/// Parse `NAME=VALUE`.
pub fn parse_env_pair(text: &str) -> Result<(String, String), SpecError> {
    let (name, value) =
        text.split_once('=').ok_or_else(|| SpecError::new("env", format!("{text:?} is not NAME=VALUE")))?;
    check_env_name("env", name)?;
    check_text("env", value)?;
    Ok((name.to_string(), value.to_string()))
}
