//! The command line: one file per command, all thin over [`tao_slurm_engine::Client`].

mod audit;
mod cancel;
mod check_path;
mod checkpoints;
mod credentials;
mod gen_docs;
mod image;
mod init;
mod job_args;
mod jobs;
mod login;
mod logs;
mod mcp;
pub(crate) mod monitor;
pub(crate) mod output;
mod pause;
mod preflight;
mod progress;
mod render;
mod retry;
mod running;
mod schema;
mod serve;
mod service_login;
mod status;
mod submit;
mod token;
mod watch;

// One error of each kind mapped by every door (the exit code here, MCP's flag, the HTTP status).
#[cfg(test)]
mod error_mapping;

use clap::{Parser, Subcommand};
use std::collections::HashMap;
use std::path::PathBuf;
use tao_slurm_engine::config::Settings;
use tao_slurm_engine::error::{exit_code, Error};

#[derive(Parser, Debug)]
#[command(name = "tao-slurm", version, about = "Run containerised GPU jobs on Slurm clusters over SSH")]
pub struct Cli {
    /// Env file with settings (default: ~/.config/tao/.env)
    #[arg(long, global = true, value_name = "PATH")]
    env_file: Option<PathBuf>,
    /// Local state database (setting TAO_SLURM_STATE)
    #[arg(long, global = true, value_name = "PATH")]
    state: Option<PathBuf>,
    /// Run Slurm commands on this machine (we are on the login node) instead of over SSH
    #[arg(long, global = true)]
    local: bool,
    /// Trust and record the host key of a login host seen for the first time (like ssh's accept-new)
    #[arg(long, global = true)]
    accept_new_host_key: bool,
    /// Cluster profile from clusters.toml beside the env file (setting TAO_SLURM_CLUSTER)
    #[arg(long, global = true, value_name = "NAME")]
    cluster: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Stage and submit a job
    Submit(submit::SubmitCmd),
    /// Print the batch script and staged files of a job, with no network access
    Render(render::RenderCmd),
    /// Show job status (all active jobs when no id is given), refreshed from the cluster
    Status(status::StatusCmd),
    /// List the jobs in the local state
    List(jobs::ListCmd),
    /// Show a job's history of events
    Events(jobs::EventsCmd),
    /// Show a job's main.out and main.err
    Logs(logs::LogsCmd),
    /// List the checkpoints in a job's results directory, newest last
    Checkpoints(checkpoints::CheckpointsCmd),
    /// Follow jobs until they reach a terminal status
    Watch(watch::WatchCmd),
    /// Cancel jobs
    Cancel(cancel::CancelCmd),
    /// Run a job that ended Error or Canceled again, from its newest checkpoint
    Retry(retry::RetryCmd),
    /// Pause a job: its allocation released (--graceful: after it saves a checkpoint)
    Pause(pause::PauseCmd),
    /// Resume a paused job from its newest checkpoint, optionally with new specs
    Resume(pause::ResumeCmd),
    /// Manage the squashfs image cache on shared storage
    Image(image::ImageCmd),
    /// Check that input paths exist on the cluster's shared storage
    CheckPath(check_path::CheckPathCmd),
    /// Follow every active job and perform retries (one per state file)
    Monitor(monitor::MonitorCmd),
    /// Write the env file: asks for (or takes) the login host, user and key, finds the rest, runs preflight
    Init(init::InitCmd),
    /// Check settings, SSH, Slurm, accounting, partitions, Pyxis, credentials and storage
    Preflight(preflight::PreflightCmd),
    /// Install credentials on the cluster
    Credentials(credentials::CredentialsCmd),
    /// Serve the tools to AI agents over the Model Context Protocol (stdio)
    Mcp(mcp::McpCmd),
    /// Serve the HTTP API (TAO service shape), the dashboard and the monitor of every cluster
    Serve(serve::ServeCmd),
    /// Make, list and revoke the service's bearer tokens
    Token(token::TokenCmd),
    /// Show the service's audit trail: who changed what, when, and how it ended
    Audit(audit::AuditCmd),
    /// Log in to the login host(s) once, answering its password or second-factor prompts here
    Login(login::LoginCmd),
    /// Run a command in a running job's container, on its node(s); its exit status is passed back
    Exec(running::ExecCmd),
    /// A terminal in a running job's container
    Shell(running::ShellCmd),
    /// Forward a local port to a port on a running job's node (until Ctrl-C or --for)
    Forward(running::ForwardCmd),
    /// Start TensorBoard on a running job's results in its container and forward it here
    Tensorboard(running::TensorboardCmd),
    /// Print the JSON schema of a command's --json output (of every command's without one)
    Schema(schema::SchemaCmd),
    #[command(hide = true)]
    GenDocs(gen_docs::GenDocsCmd),
}

/// Run the CLI and return the process exit code.
pub fn run() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { exit_code::USAGE } else { 0 };
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TAO_SLURM_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(tao_slurm_engine::config::DEFAULT_LOG_FILTER)),
        )
        .with_writer(|| tao_slurm_engine::redact::RedactingWriter(std::io::stderr()))
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
    match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            e.exit_code()
        }
    }
}

fn load_settings(cli: &Cli) -> Result<Settings, Error> {
    settings_from(&GlobalFlags::of(cli))
}

/// The global flags that make the settings, for commands that read them again later (mcp, serve).
#[derive(Debug, Clone, Default)]
pub(crate) struct GlobalFlags {
    pub env_file: Option<PathBuf>,
    pub state: Option<PathBuf>,
    pub local: bool,
    pub accept_new_host_key: bool,
    pub cluster: Option<String>,
}

impl GlobalFlags {
    fn of(cli: &Cli) -> GlobalFlags {
        GlobalFlags {
            env_file: cli.env_file.clone(),
            state: cli.state.clone(),
            local: cli.local,
            accept_new_host_key: cli.accept_new_host_key,
            cluster: cli.cluster.clone(),
        }
    }
}

/// The settings, with the global flags laid over the cluster profile, the environment and the env file.
pub(crate) fn settings_from(g: &GlobalFlags) -> Result<Settings, Error> {
    let (env_file, state, local, accept_new_host_key) =
        (g.env_file.as_deref(), g.state.as_deref(), g.local, g.accept_new_host_key);
    let mut flags = HashMap::new();
    if let Some(c) = &g.cluster {
        flags.insert(tao_slurm_engine::profiles::CLUSTER_SETTING.to_string(), c.clone());
    }
    if let Some(s) = state {
        flags.insert("TAO_SLURM_STATE".to_string(), s.display().to_string());
    }
    if local {
        flags.insert("TAO_SLURM_LOCAL".to_string(), "true".to_string());
    }
    if accept_new_host_key {
        flags.insert("SSH_ACCEPT_NEW_HOST_KEYS".to_string(), "true".to_string());
    }
    let sources = tao_slurm_engine::config::gather(flags, env_file)?;
    Ok(Settings::from_sources(&sources)?)
}

fn dispatch(cli: Cli) -> Result<i32, Error> {
    let globals = GlobalFlags::of(&cli);
    if let Command::Mcp(c) = cli.command {
        // The server reads the settings again for every tool call (a fixed env file needs no restart).
        return c.run(Box::new(move || settings_from(&globals)));
    }
    if let Command::Serve(c) = cli.command {
        return c.run(globals);
    }
    if let Command::Init(c) = cli.command {
        return c.run(globals);
    }
    if let Command::Schema(c) = cli.command {
        return c.run();
    }
    if let Command::GenDocs(c) = cli.command {
        return c.run();
    }
    if let Command::Login(c @ login::LoginCmd { service: Some(_), .. }) = cli.command {
        return c.sign_in();
    }
    let settings = load_settings(&cli)?;
    match cli.command {
        Command::Submit(c) => c.run(settings),
        Command::Render(c) => c.run(settings),
        Command::Status(c) => c.run(settings),
        Command::List(c) => c.run(settings),
        Command::Events(c) => c.run(settings),
        Command::Logs(c) => c.run(settings),
        Command::Checkpoints(c) => c.run(settings),
        Command::Watch(c) => c.run(settings),
        Command::Cancel(c) => c.run(settings),
        Command::Retry(c) => c.run(settings),
        Command::Pause(c) => c.run(settings),
        Command::Resume(c) => c.run(settings),
        Command::Preflight(c) => c.run(settings),
        Command::Monitor(c) => c.run(settings),
        Command::CheckPath(c) => c.run(settings),
        Command::Image(c) => c.run(settings),
        Command::Credentials(c) => c.run(settings),
        Command::Login(c) => c.run(settings),
        Command::Token(c) => c.run(settings),
        Command::Audit(c) => c.run(settings),
        Command::Exec(c) => c.run(settings),
        Command::Shell(c) => c.run(settings),
        Command::Forward(c) => c.run(settings),
        Command::Tensorboard(c) => c.run(settings),
        Command::Mcp(_) | Command::Serve(_) | Command::Schema(_) | Command::GenDocs(_) | Command::Init(_) => {
            unreachable!("run above")
        }
    }
}

/// Remote text (job names, pending reasons, status.json messages, node lists) for a terminal: control
/// characters are shown escaped, so no job can move the cursor, clear the screen or fake a row.
pub(crate) fn clean(text: &str) -> String {
    if !text.chars().any(char::is_control) {
        return text.to_string();
    }
    text.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(super::clean("epoch 3\x1b[2J\r\nfake row\x07"), "epoch 3\\u{1b}[2J\\r\\nfake row\\u{7}");
        assert_eq!(super::clean("plain words, ünïcode"), "plain words, ünïcode");
    }
}
