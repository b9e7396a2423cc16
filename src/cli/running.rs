//! `exec`, `shell`, `forward` and `tensorboard`: working with a running job.

use crate::client::Where;
use crate::config::Settings;
use crate::error::Error;
use crate::Client;
use clap::Args;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct ExecCmd {
    /// Job id (or prefix)
    pub job_id: String,
    /// Run on this node of the job only (default: once on each of its nodes)
    #[arg(long, conflicts_with = "role")]
    pub node: Option<String>,
    /// A Cosmos-RL job: run on this role's nodes, in its container (controller, policy, rollout)
    #[arg(long)]
    pub role: Option<String>,
    /// Stop the command after this long (e.g. 30s, 10min)
    #[arg(long, default_value = "1h")]
    pub timeout: String,
    /// The command and its arguments, after `--`
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

impl ExecCmd {
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        let secs = duration(&self.timeout, "--timeout")?.as_secs().max(1);
        let at = Where::new(self.node.as_deref(), self.role.as_deref());
        Client::new(settings)?.exec_stream(&self.job_id, &at, &self.command, secs)
    }
}

#[derive(Args, Debug)]
pub struct ShellCmd {
    /// Job id (or prefix)
    pub job_id: String,
    /// The node of the job to open it on (default: its first)
    #[arg(long, conflicts_with = "role")]
    pub node: Option<String>,
    /// A Cosmos-RL job: open it in this role's container, on its first node
    #[arg(long)]
    pub role: Option<String>,
    /// What to run instead of bash, after `--`
    #[arg(last = true)]
    pub command: Vec<String>,
}

impl ShellCmd {
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        let at = Where::new(self.node.as_deref(), self.role.as_deref());
        Client::new(settings)?.shell(&self.job_id, &at, &self.command)
    }
}

#[derive(Args, Debug)]
pub struct ForwardCmd {
    /// Job id (or prefix)
    pub job_id: String,
    /// PORT on the job's node, or PORT:LOCAL to listen on LOCAL here (default: the same port)
    pub ports: String,
    /// The node of the job (default: its first)
    #[arg(long, conflicts_with = "role")]
    pub node: Option<String>,
    /// A Cosmos-RL job: the first node of this role
    #[arg(long)]
    pub role: Option<String>,
    /// Stop after this long (e.g. 2h) instead of at Ctrl-C
    #[arg(long = "for", value_name = "DURATION")]
    pub for_: Option<String>,
    #[arg(long)]
    pub json: bool,
}

impl ForwardCmd {
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        let (remote, local) = parse_ports(&self.ports)?;
        let limit = self.for_.as_deref().map(|t| duration(t, "--for")).transpose()?;
        let client = Client::new(settings)?;
        let at = Where::new(self.node.as_deref(), self.role.as_deref());
        let forward = client.forward_port(&self.job_id, &at, remote, local)?;
        hold(&client, &forward, limit, self.json)
    }
}

#[derive(Args, Debug)]
pub struct TensorboardCmd {
    /// Job id (or prefix)
    pub job_id: String,
    /// The port TensorBoard listens on, on the job's node
    #[arg(long, default_value_t = 6006)]
    pub port: u16,
    /// The local port (default: a free one)
    #[arg(long, default_value_t = 0)]
    pub local_port: u16,
    /// Stop after this long (e.g. 2h) instead of at Ctrl-C
    #[arg(long = "for", value_name = "DURATION")]
    pub for_: Option<String>,
    #[arg(long)]
    pub json: bool,
}

impl TensorboardCmd {
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        let limit = self.for_.as_deref().map(|t| duration(t, "--for")).transpose()?;
        let client = Client::new(settings)?;
        let forward = client.tensorboard(&self.job_id, self.port, self.local_port, None)?;
        hold(&client, &forward, limit, self.json)
    }
}

/// Keep a forward until Ctrl-C or the time limit, then cancel it.
fn hold(client: &Client, forward: &crate::client::Forward, limit: Option<Duration>, json: bool) -> Result<i32, Error> {
    if json {
        super::output::emit_json(forward);
    } else {
        println!("{} -> {}:{} of job {}", forward.url, forward.node, forward.remote_port, forward.job_id);
    }
    eprintln!("Forwarding; Ctrl-C stops it.");
    let (tx, rx) = std::sync::mpsc::channel();
    let _ = ctrlc::set_handler(move || {
        let _ = tx.send(());
    });
    let _ = rx.recv_timeout(limit.unwrap_or(Duration::MAX / 4));
    client.stop_forward(forward)?;
    eprintln!("Forward stopped.");
    Ok(0)
}

fn parse_ports(text: &str) -> Result<(u16, u16), Error> {
    let bad = || crate::spec::SpecError::new("ports", format!("{text:?} is not PORT or PORT:LOCAL")).into();
    let port = |t: &str| t.parse::<u16>().ok().filter(|p| *p > 0);
    match text.split_once(':') {
        None => port(text).map(|p| (p, p)).ok_or_else(bad),
        Some((r, l)) => Ok((port(r).ok_or_else(bad)?, port(l).ok_or_else(bad)?)),
    }
}

fn duration(text: &str, flag: &str) -> Result<Duration, Error> {
    humantime::parse_duration(text)
        .map_err(|e| crate::spec::SpecError::new(flag.trim_start_matches('-'), format!("{text:?}: {e}")).into())
}

#[cfg(test)]
mod tests {
    #[test]
    fn ports_parse() {
        assert_eq!(super::parse_ports("8080").unwrap(), (8080, 8080));
        assert_eq!(super::parse_ports("6006:16006").unwrap(), (6006, 16006));
        assert!(super::parse_ports("0").is_err() && super::parse_ports("a:1").is_err());
    }
}
