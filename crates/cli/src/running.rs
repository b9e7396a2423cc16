//! `exec`, `shell`, `forward` and `tensorboard`: working with a running job.

use clap::Args;
use std::time::Duration;
use tao_slurm_engine::client::Where;
use tao_slurm_engine::config::Settings;
use tao_slurm_engine::error::Error;
use tao_slurm_engine::Client;

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
    /// Ignored (kept for old scripts): TensorBoard listens on a Unix socket in a private directory
    /// of the job's node, not on a port
    #[arg(long, hide = true)]
    pub port: Option<u16>,
    /// The local port on 127.0.0.1 (default: a free one, held from the start)
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
        // The local port is bound here first and held: no free port picked, closed, then raced for.
        let listener = std::net::TcpListener::bind(("127.0.0.1", self.local_port)).map_err(|e| {
            tao_slurm_engine::spec::SpecError::new(
                "local_port",
                format!("cannot listen on 127.0.0.1:{}: {e}", self.local_port),
            )
        })?;
        let local_port = listener.local_addr().map_err(|e| Error::RemoteCommand(e.to_string()))?.port();
        let client = Client::new(settings)?;
        let mut forward = client.tensorboard(&self.job_id, None)?;
        let socket = forward.local_socket.clone().unwrap_or_default();
        std::thread::spawn(move || relay(listener, std::path::PathBuf::from(socket)));
        forward.local_port = local_port;
        forward.url = format!("http://127.0.0.1:{local_port}/");
        hold(&client, &forward, limit, self.json)
    }
}

/// Each connection to `listener` passed on to the forward's local socket, both ways, until either
/// side closes.
fn relay(listener: std::net::TcpListener, socket: std::path::PathBuf) {
    for conn in listener.incoming() {
        let Ok(tcp) = conn else { continue };
        let unix = match std::os::unix::net::UnixStream::connect(&socket) {
            Ok(u) => u,
            Err(e) => {
                eprintln!("TensorBoard's forward did not answer: {e}");
                continue;
            }
        };
        let pair = tcp.try_clone().and_then(|t| unix.try_clone().map(|u| (t, u)));
        let Ok((mut tcp_out, mut unix_in)) = pair else { continue };
        let (mut tcp_in, mut unix_out) = (tcp, unix);
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut tcp_in, &mut unix_out);
            let _ = unix_out.shutdown(std::net::Shutdown::Write);
        });
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut unix_in, &mut tcp_out);
            let _ = tcp_out.shutdown(std::net::Shutdown::Write);
        });
    }
}

/// Keep a forward until Ctrl-C or the time limit, then cancel it.
fn hold(
    client: &Client,
    forward: &tao_slurm_engine::client::Forward,
    limit: Option<Duration>,
    json: bool,
) -> Result<i32, Error> {
    if json {
        super::output::emit_json(forward);
    } else {
        let remote = forward.remote_socket.clone().unwrap_or_else(|| forward.remote_port.to_string());
        println!("{} -> {}:{} of job {}", forward.url, forward.node, remote, forward.job_id);
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
    let bad = || tao_slurm_engine::spec::SpecError::new("ports", format!("{text:?} is not PORT or PORT:LOCAL")).into();
    let port = |t: &str| t.parse::<u16>().ok().filter(|p| *p > 0);
    match text.split_once(':') {
        None => port(text).map(|p| (p, p)).ok_or_else(bad),
        Some((r, l)) => Ok((port(r).ok_or_else(bad)?, port(l).ok_or_else(bad)?)),
    }
}

fn duration(text: &str, flag: &str) -> Result<Duration, Error> {
    humantime::parse_duration(text).map_err(|e| {
        tao_slurm_engine::spec::SpecError::new(flag.trim_start_matches('-'), format!("{text:?}: {e}")).into()
    })
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
