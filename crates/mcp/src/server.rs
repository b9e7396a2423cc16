//! The MCP server: tool definitions (names, descriptions, schemas, annotations) routed to the tools'
//! work, which runs on blocking threads. Arguments are parsed here, so a bad one is a tool error
//! naming the field; so is any failure, and the server keeps serving.

use super::args::{
    parse, schema, CancelArgs, CheckPathsArgs, EventsArgs, ExplainArgs, ImageImportArgs, InitArgs, ListArgs, LogsArgs,
    NoArgs, StatusArgs, SubmitArgs, WaitArgs,
};
use super::clients::{blocking, blocking_with_settings, Clients};
use super::reply::{Reply, ToolError};
use super::tools::{cluster, init, jobs, logs, long_training, running, submit};
use super::wait::{wait, Progress, WaitOut};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, JsonObject, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{tool, tool_handler, tool_router, ErrorData, RoleServer, ServerHandler};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::sync::Arc;
use std::time::Instant;
use tao_slurm_engine::Client;

/// Tools that change something (a job, the cluster's image cache): left out by `--read-only`.
pub const MUTATING_TOOLS: &[&str] = &["init", "submit", "cancel", "image_import", "exec", "retry", "pause", "resume"];

/// What the server tells an agent when it connects: the workflow in a few lines.
const INSTRUCTIONS: &str = "tao-slurm runs containerised GPU jobs (NVIDIA TAO or any image) on the user's Slurm cluster over SSH. \
Workflow: preflight (once; on failure show its remediation verbatim) -> check_paths for dataset paths -> submit (dry_run to review) \
-> wait, again and again, until the job is terminal -> logs. While a job is Pending or Running, keep calling wait: \
do not give a final answer unless the user asked to detach. Secrets are passed by variable NAME only (secret_env). \
Every result has a one-line summary and a next hint: follow the hint.";

/// The output schema of a tool answering `Reply<T>`.
fn output<T: schemars::JsonSchema + 'static>() -> Arc<JsonObject> {
    rmcp::handler::server::common::schema_for_output::<Reply<T>>()
}

#[derive(Clone)]
pub struct TaoSlurmServer {
    clients: Arc<Clients>,
    tool_router: ToolRouter<TaoSlurmServer>,
    read_only: bool,
}

impl TaoSlurmServer {
    pub fn new(clients: Clients, read_only: bool) -> TaoSlurmServer {
        let mut tool_router = Self::tool_router();
        if read_only {
            for name in MUTATING_TOOLS {
                tool_router.remove_route(name);
            }
        }
        TaoSlurmServer { clients: Arc::new(clients), tool_router, read_only }
    }

    /// The tools this server offers, with their definitions.
    pub fn tools(&self) -> Vec<rmcp::model::Tool> {
        self.tool_router.list_all()
    }

    /// Parse `arguments` as `A` and run `work` with a client on a blocking thread.
    async fn run<A, T>(
        &self,
        tool: &'static str,
        arguments: JsonObject,
        work: fn(&Client, A) -> Result<Reply<T>, ToolError>,
    ) -> CallToolResult
    where
        A: DeserializeOwned + schemars::JsonSchema + Send + 'static,
        T: Serialize + Send + 'static,
    {
        let started = Instant::now();
        let outcome = match parse::<A>(arguments) {
            Ok(args) => blocking(&self.clients, move |c| work(c, args)).await,
            Err(e) => Err(e),
        };
        finish(tool, started, outcome)
    }
}

/// The tool's answer as a result, and one log line (tool, time, outcome; never arguments or data).
fn finish<T: Serialize>(tool: &str, started: Instant, outcome: Result<Reply<T>, ToolError>) -> CallToolResult {
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    match outcome {
        Ok(reply) => {
            tracing::info!(tool, ms = format!("{ms:.1}"), "tool call");
            reply.into_result()
        }
        Err(e) => {
            tracing::info!(tool, ms = format!("{ms:.1}"), field = e.field.as_deref().unwrap_or(""), "tool call failed");
            e.into_result()
        }
    }
}

#[tool_router]
impl TaoSlurmServer {
    #[tool(
        description = "Check settings, SSH to each login host, Slurm commands, accounting, partitions, Pyxis, credentials and the results directory. On failure, `next` holds the remediation to show the user verbatim.",
        input_schema = schema::<NoArgs>(),
        output_schema = output::<cluster::PreflightOut>(),
        annotations(read_only_hint = true, idempotent_hint = true, open_world_hint = true)
    )]
    async fn preflight(&self, Parameters(arguments): Parameters<JsonObject>) -> CallToolResult {
        let started = Instant::now();
        let outcome = match parse::<NoArgs>(arguments) {
            Ok(_) => blocking_with_settings(&self.clients, cluster::preflight).await,
            Err(e) => Err(e),
        };
        finish("preflight", started, outcome)
    }

    #[tool(
        description = "Write the user's settings (~/.config/tao/.env, mode 600) from the login host, user and key: logs in, lists partitions with MaxTime, accounts and Pyxis. Without write: only shows what it found and the file's text; with write (after the user agreed): writes it and runs preflight. A wrong key mode, an unknown host key or a missing partition is an error with its fix, nothing written.",
        input_schema = schema::<InitArgs>(),
        output_schema = output::<init::InitOut>(),
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = true)
    )]
    async fn init(&self, Parameters(arguments): Parameters<JsonObject>) -> CallToolResult {
        let started = Instant::now();
        let outcome = match parse::<InitArgs>(arguments) {
            Ok(args) => tokio::task::spawn_blocking(move || init::init(args)).await.unwrap_or_else(|e| {
                Err(ToolError::failed(format!("internal error (a bug in tao-slurm): {e}"), "report this bug"))
            }),
            Err(e) => Err(e),
        };
        finish("init", started, outcome)
    }

    #[tool(
        description = "Check that dataset/input paths exist on the cluster's shared storage (test -e on a login host, one round trip). Do this before writing a job.",
        input_schema = schema::<CheckPathsArgs>(),
        output_schema = output::<cluster::CheckPathsOut>(),
        annotations(read_only_hint = true, idempotent_hint = true, open_world_hint = true)
    )]
    async fn check_paths(&self, Parameters(arguments): Parameters<JsonObject>) -> CallToolResult {
        self.run("check_paths", arguments, cluster::check_paths).await
    }

    #[tool(
        description = "Stage and submit a GPU job (image + command; resources default from the user's settings). dry_run: check everything with the cluster and return the batch script without submitting. Secrets: only variable NAMES in secret_env.",
        input_schema = schema::<SubmitArgs>(),
        output_schema = output::<submit::SubmitOut>(),
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = true)
    )]
    async fn submit(&self, Parameters(arguments): Parameters<JsonObject>) -> CallToolResult {
        self.run("submit", arguments, submit::submit).await
    }

    #[tool(
        description = "Current status of jobs (all active ones when no id is given), refreshed from Slurm in one round trip.",
        input_schema = schema::<StatusArgs>(),
        output_schema = output::<jobs::JobsOut>(),
        annotations(read_only_hint = true, idempotent_hint = true, open_world_hint = true)
    )]
    async fn status(&self, Parameters(arguments): Parameters<JsonObject>) -> CallToolResult {
        self.run("status", arguments, jobs::status).await
    }

    #[tool(
        description = "Block until any of the jobs changes status (or the timeout, at most 300 s, passes); returns the changes and a cursor for the next call. Call it again and again while jobs are Pending or Running.",
        input_schema = schema::<WaitArgs>(),
        output_schema = output::<WaitOut>(),
        annotations(read_only_hint = true, idempotent_hint = true, open_world_hint = true)
    )]
    async fn wait(
        &self,
        Parameters(arguments): Parameters<JsonObject>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let started = Instant::now();
        let outcome = match parse::<WaitArgs>(arguments) {
            Ok(args) => {
                let progress =
                    context.meta.get_progress_token().map(|token| Progress { peer: context.peer.clone(), token });
                wait(&self.clients, args, context.ct.clone(), progress).await
            }
            Err(e) => Err(e),
        };
        finish("wait", started, outcome)
    }

    #[tool(
        description = "Events of jobs (submitted, status changes, retries) after a cursor, oldest first; from the local state, no remote call.",
        input_schema = schema::<EventsArgs>(),
        output_schema = output::<jobs::EventsOut>(),
        annotations(read_only_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn events(&self, Parameters(arguments): Parameters<JsonObject>) -> CallToolResult {
        self.run("events", arguments, jobs::events).await
    }

    #[tool(
        description = "A job's output (main.out/main.err): the last N lines, or from a byte offset with the offset to continue from. Size-capped.",
        input_schema = schema::<LogsArgs>(),
        output_schema = output::<logs::LogsOut>(),
        annotations(read_only_hint = true, idempotent_hint = true, open_world_hint = true)
    )]
    async fn logs(&self, Parameters(arguments): Parameters<JsonObject>) -> CallToolResult {
        self.run("logs", arguments, logs::logs).await
    }

    #[tool(
        description = "Cancel jobs (scancel). Idempotent: a finished or unknown Slurm job counts as cancelled. Only when the user asks.",
        input_schema = schema::<CancelArgs>(),
        output_schema = output::<jobs::JobsOut>(),
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = true)
    )]
    async fn cancel(&self, Parameters(arguments): Parameters<JsonObject>) -> CallToolResult {
        self.run("cancel", arguments, jobs::cancel).await
    }

    #[tool(
        description = "Run a job that ended Error or Canceled again, in its results directory: the new attempt resumes from its newest checkpoint ($TAO_RESUME_CHECKPOINT). Idempotent: a job already running again is answered as it is.",
        input_schema = schema::<long_training::JobArgs>(),
        output_schema = output::<long_training::RetryOut>(),
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = true)
    )]
    async fn retry(&self, Parameters(arguments): Parameters<JsonObject>) -> CallToolResult {
        self.run("retry", arguments, long_training::retry).await
    }

    #[tool(
        description = "Pause a job: its Slurm job is cancelled and its allocation released (status Paused); graceful: it first gets the checkpoint signal (USR2) and is Pausing until it ends or its checkpoint grace passes. Its dependants wait. Idempotent. Only when the user asks.",
        input_schema = schema::<long_training::PauseArgs>(),
        output_schema = output::<long_training::RetryOut>(),
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = true)
    )]
    async fn pause(&self, Parameters(arguments): Parameters<JsonObject>) -> CallToolResult {
        self.run("pause", arguments, long_training::pause).await
    }

    #[tool(
        description = "Resume a paused job: a new attempt from its newest checkpoint ($TAO_RESUME_CHECKPOINT, and TAO's resume key in its specs), optionally with new specs; Resuming until Slurm runs it. Idempotent: concurrent resumes make one Slurm job.",
        input_schema = schema::<long_training::ResumeArgs>(),
        output_schema = output::<long_training::RetryOut>(),
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = true)
    )]
    async fn resume(&self, Parameters(arguments): Parameters<JsonObject>) -> CallToolResult {
        self.run("resume", arguments, long_training::resume).await
    }

    #[tool(
        description = "The checkpoints in a job's results directory, newest last (TAO's patterns by default); the newest is what its next attempt resumes from.",
        input_schema = schema::<long_training::JobArgs>(),
        output_schema = output::<long_training::CheckpointsOut>(),
        annotations(read_only_hint = true, idempotent_hint = true, open_world_hint = true)
    )]
    async fn checkpoints(&self, Parameters(arguments): Parameters<JsonObject>) -> CallToolResult {
        self.run("checkpoints", arguments, long_training::checkpoints).await
    }

    #[tool(
        description = "Run a command inside a RUNNING job's container, on its node(s) (srun --overlap): e.g. nvidia-smi, py-spy dump, ls of its results. Answers the exit status and at most max_bytes of stdout and stderr. The command is a list of words, never a shell line.",
        input_schema = schema::<running::ExecArgs>(),
        output_schema = output::<tao_slurm_engine::client::ExecOutput>(),
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = true)
    )]
    async fn exec(&self, Parameters(arguments): Parameters<JsonObject>) -> CallToolResult {
        self.run("exec", arguments, running::exec).await
    }

    #[tool(
        description = "Jobs in the local state, newest first, optionally filtered; no remote call.",
        input_schema = schema::<ListArgs>(),
        output_schema = output::<jobs::ListOut>(),
        annotations(read_only_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn list(&self, Parameters(arguments): Parameters<JsonObject>) -> CallToolResult {
        self.run("list", arguments, jobs::list).await
    }

    #[tool(
        description = "Why a job is pending, in plain words, with what to do and Slurm's start-time estimate when it has one.",
        input_schema = schema::<ExplainArgs>(),
        output_schema = output::<jobs::ExplainOut>(),
        annotations(read_only_hint = true, idempotent_hint = true, open_world_hint = true)
    )]
    async fn explain(&self, Parameters(arguments): Parameters<JsonObject>) -> CallToolResult {
        self.run("explain", arguments, jobs::explain).await
    }

    #[tool(
        description = "Convert a registry image once into the cluster's shared squashfs cache (submit does this itself; use it to prepare ahead). Can take many minutes.",
        input_schema = schema::<ImageImportArgs>(),
        output_schema = output::<cluster::ImageOut>(),
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = true)
    )]
    async fn image_import(&self, Parameters(arguments): Parameters<JsonObject>) -> CallToolResult {
        self.run("image_import", arguments, cluster::image_import).await
    }

    #[tool(
        description = "Whether enroot credentials for nvcr.io are installed on the cluster (needed for private nvcr.io images). Never returns the key; installing them is the user's step: `tao-slurm credentials enroot`.",
        input_schema = schema::<NoArgs>(),
        output_schema = output::<cluster::CredentialsOut>(),
        annotations(read_only_hint = true, idempotent_hint = true, open_world_hint = true)
    )]
    async fn credentials_status(&self, Parameters(arguments): Parameters<JsonObject>) -> CallToolResult {
        self.run("credentials_status", arguments, |c, _: NoArgs| cluster::credentials_status(c)).await
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for TaoSlurmServer {
    fn get_info(&self) -> ServerConfig {
        let mode = if self.read_only {
            " (read-only: submit, cancel, retry, pause, resume, image_import and exec are not offered)"
        } else {
            ""
        };
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("tao-slurm", env!("CARGO_PKG_VERSION")).with_title("tao-slurm: GPU jobs on Slurm"),
            )
            .with_instructions(format!("{INSTRUCTIONS}{mode}"))
    }

    /// An unknown tool (or one `--read-only` leaves out) is a tool error that lists the tools offered,
    /// not a protocol error.
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if !self.tool_router.has_route(&request.name) {
            let offered: Vec<String> = self.tools().into_iter().map(|t| t.name.to_string()).collect();
            let why = if self.read_only && MUTATING_TOOLS.contains(&request.name.as_ref()) {
                "this server runs with --read-only".to_string()
            } else {
                "there is no such tool".to_string()
            };
            let e = ToolError::failed(
                format!("{} is not offered: {why}", request.name),
                format!("use one of: {}", offered.join(", ")),
            );
            return Ok(e.into_result().into());
        }
        self.tool_router.call(ToolCallContext::new(self, request, context)).await
    }
}
