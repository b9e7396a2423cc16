//! The `init` tool: `tao-slurm init` without prompts. A call without `write` shows what was found
//! and the file it would write; with `write` (the user agreed) it writes it and runs preflight on it.

use crate::args::InitArgs;
use crate::reply::{Reply, ToolError};
use crate::tools::cluster::CheckOut;
use schemars::JsonSchema;
use serde::Serialize;
use std::path::PathBuf;
use tao_slurm_engine::client::init::{self as init, ClusterFound, InitAnswers, InitProblem};

#[derive(Debug, Serialize, JsonSchema)]
pub struct InitOut {
    pub found: ClusterFound,
    pub env_file: String,
    /// The file's text (init writes no secret).
    pub text: String,
    pub written: bool,
    /// After writing: whether preflight with the file passed, and its failed checks with their fixes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preflight_ok: Option<bool>,
    pub missing: Vec<CheckOut>,
}

fn refused(p: InitProblem) -> ToolError {
    ToolError::invalid(&p.field, p.message).with_next(format!("nothing was written. Show the user the fix: {}", p.fix))
}

pub fn init(args: InitArgs) -> Result<Reply<InitOut>, ToolError> {
    let mut a = InitAnswers {
        host: args.host,
        user: args.user,
        key: args.key.map(PathBuf::from),
        ssh_config: args.ssh_config.map(PathBuf::from),
        known_hosts: args.known_hosts.map(PathBuf::from),
        partition: args.partition,
        account: args.account,
        base_dir: args.base_dir,
        accept_new_host_key: args.accept_new_host_key,
    }
    // What the environment and the env file already say, where the call says nothing.
    .or(init::defaults(args.env_file.as_deref().map(std::path::Path::new)).map_err(refused)?);
    let found = init::probe(&a).map_err(refused)?;
    if a.partition.is_none() {
        a.partition = found.partitions.iter().find(|p| p.is_default).map(|p| p.name.clone());
    }
    init::check_choices(&a, &found).map_err(refused)?;
    let env: std::collections::HashMap<String, String> = std::env::vars().collect();
    let path = args
        .env_file
        .map(PathBuf::from)
        .or_else(|| env.get("TAO_ENV_FILE").map(PathBuf::from))
        .or_else(|| tao_slurm_engine::config::home_dir(&env).map(|h| h.join(".config/tao/.env")))
        .ok_or_else(|| ToolError::invalid("env_file", "HOME is not set: give env_file"))?;
    let (text, exists) = init::env_file_text(&path, &a).map_err(refused)?;
    let shown = path.display().to_string();
    let mut out =
        InitOut { found, env_file: shown.clone(), text, written: false, preflight_ok: None, missing: Vec::new() };
    if !args.write || (exists && !args.overwrite) {
        let why = if exists { "it exists: call again with write and overwrite" } else { "call again with write" };
        return Ok(Reply::new(
            format!("nothing written yet; {shown} would hold the text shown"),
            format!("show the user what was found and the text; once they agree, {why}"),
            out,
        ));
    }
    init::write_env_file(&path, &out.text).map_err(refused)?;
    out.written = true;
    let settings = tao_slurm_engine::config::gather(Default::default(), Some(&path))
        .and_then(|s| tao_slurm_engine::config::Settings::from_sources(&s))
        .map_err(|e| ToolError::failed(e.to_string(), "fix the env file as the message says"))?;
    let report = tao_slurm_engine::client::preflight(&settings);
    out.preflight_ok = Some(report.ok);
    out.missing = report.checks.into_iter().filter(|c| !c.ok && c.required).collect();
    let (summary, next) = if out.preflight_ok == Some(true) {
        (format!("wrote {shown}; preflight passed"), "check_paths for the job's data, then submit".to_string())
    } else {
        (
            format!("wrote {shown}; preflight FAILED"),
            "show the user each missing check's remediation verbatim".to_string(),
        )
    };
    Ok(Reply::new(summary, next, out))
}
