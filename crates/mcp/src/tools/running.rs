//! `exec`: a command in a running job's container, its output bounded (not offered by `--read-only`).

use crate::args::check_range;
use crate::reply::{Reply, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;
use tao_slurm_engine::client::{ExecOutput, Where};
use tao_slurm_engine::Client;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecArgs {
    /// The running job (id or unambiguous prefix).
    pub job_id: String,
    /// The command and its arguments, one word each (never a shell line: use ["sh", "-c", "..."] for one).
    pub command: Vec<String>,
    /// One node of the job (default: once on each of its nodes).
    pub node: Option<String>,
    /// A Cosmos-RL job's role (controller, policy, rollout): its nodes and container. Not with node.
    pub role: Option<String>,
    /// Stop the command after this many seconds (1 to 600, default 60).
    pub timeout_secs: Option<u64>,
    /// At most this many bytes of each of stdout and stderr (1 to 65536, default 16384).
    pub max_bytes: Option<u64>,
}

/// Run the command in the job's container and answer its exit status and (bounded) output.
pub fn exec(client: &Client, args: ExecArgs) -> Result<Reply<ExecOutput>, ToolError> {
    if args.command.is_empty() {
        return Err(ToolError::invalid("command", "give the command to run, one word per item"));
    }
    let secs = check_range("timeout_secs", args.timeout_secs.unwrap_or(60), 1, 600)?;
    let max = check_range("max_bytes", args.max_bytes.unwrap_or(16384), 1, 65536)?;
    let out = client
        .exec_capture(&args.job_id, &Where::new(args.node.as_deref(), args.role.as_deref()), &args.command, secs, max)
        .map_err(|e| ToolError::engine(e, "job_id"))?;
    let summary = format!(
        "{} exited {}{}",
        args.command[0],
        out.exit_code,
        if out.truncated { " (output truncated to max_bytes)" } else { "" }
    );
    let next = if out.exit_code == 124 {
        "the command reached timeout_secs and was stopped"
    } else {
        "exec again for more, or status/logs for the job itself"
    };
    Ok(Reply::new(summary, next, out))
}
