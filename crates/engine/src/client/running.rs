//! Working with a running job: run a command in its container (`exec`, `shell`), forward a port of
//! its node, start TensorBoard on its results. Each call looks the job up again first, so after a
//! retry it reaches the new allocation and node.

use super::Client;
use crate::error::{Error, Result};
use crate::ops::running::{self, ExecTarget, Place};
use crate::status::PlatformStatus;

/// What a bounded `exec` returns (the MCP tool, Python).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct ExecOutput {
    pub exit_code: i32,
    pub stdout: String,
    pub stderr: String,
    /// The streams' full sizes; more than was returned when `truncated`.
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub truncated: bool,
}

/// Where in a running job a command or forward goes: a node, a Cosmos-RL role, or neither (every
/// node; a terminal or forward: the first). At most one of the two.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Where {
    pub node: Option<String>,
    pub role: Option<String>,
}

impl Where {
    pub fn new(node: Option<&str>, role: Option<&str>) -> Where {
        Where { node: node.map(String::from), role: role.map(String::from) }
    }
}

/// A running job's place on the cluster: its current Slurm job id and nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningJob {
    pub job_id: String,
    pub slurm_job_id: String,
    pub node_list: String,
    pub results_dir: String,
}

/// A forward set up by [`Client::forward_port`] or [`Client::tensorboard`]; stop it with
/// [`Client::stop_forward`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Forward {
    pub job_id: String,
    pub node: String,
    /// The node's address as the login host reaches it (Slurm's NodeAddr).
    pub addr: String,
    /// The node's port; 0 for a socket (`remote_socket`).
    pub remote_port: u16,
    /// The local port; 0 for a socket (`local_socket`), or until the caller listens for it.
    pub local_port: u16,
    /// `http://127.0.0.1:<local_port>/`, or `unix:<local_socket>`.
    pub url: String,
    /// TensorBoard's Unix socket on the node, in its private directory (mode 700).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote_socket: Option<String>,
    /// The Unix socket this process listens on for it, in a directory of its own (mode 700) made
    /// for it; each connection to it is relayed by a step of the job on the node (`relay`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_socket: Option<String>,
    /// What relays each connection on the node (`python3` in the job's container, `socat`, `nc`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relay: Option<String>,
}

/// A place the job does not have, with the field at fault.
fn place_error(e: running::ExecError) -> Error {
    use running::ExecError::*;
    let field = match e {
        BadNode(_) | NotItsNode(..) => "node",
        NodeAndRole | NoRoles | BadRole(..) | NeedRole(_) => "role",
        _ => "job_id",
    };
    invalid(field, e.to_string())
}

fn invalid(field: &str, message: impl Into<String>) -> Error {
    crate::spec::SpecError::new(field, message.into()).into()
}

impl Client {
    /// The job, refreshed, if it runs now; else an error saying what it is doing.
    pub fn running_job(&self, id: &str) -> Result<RunningJob> {
        let _span = super::job_span(id).entered();
        let view = self.job_status(id)?;
        match (view.status, view.facts.slurm_job_id, view.facts.node_list) {
            (PlatformStatus::Running, Some(slurm_job_id), Some(node_list)) if !node_list.is_empty() => {
                Ok(RunningJob { job_id: view.facts.job_id, slurm_job_id, node_list, results_dir: view.results_dir })
            }
            (status, ..) => Err(invalid(
                "job_id",
                format!("job {} is {status:?}, not running: nothing to reach", view.facts.job_id),
            )),
        }
    }

    /// Where `at` is in the running job (a role needs the job's Cosmos-RL plan), and the image its
    /// containers are made from (as Pyxis was given it), from one read of the plan.
    fn place(&self, job: &RunningJob, at: &Where) -> Result<(Place, String)> {
        let plan = self.store.get(&job.job_id)?.plan;
        let place =
            running::resolve_place(at.node.as_deref(), at.role.as_deref(), plan.cosmos.as_ref(), &job.node_list)
                .map_err(place_error)?;
        Ok((place, plan.image.pyxis))
    }

    /// The step's argv, and the lines before it that wait for the job's container.
    fn exec_argv(&self, job: &RunningJob, at: &Where, pty: bool, command: &[String]) -> Result<(String, Vec<String>)> {
        let (place, image) = self.place(job, at)?;
        let target = ExecTarget {
            slurm_job_id: &job.slurm_job_id,
            job_id: &job.job_id,
            place,
            pty,
            node_list: &job.node_list,
            results_dir: &job.results_dir,
            image: &image,
        };
        let invalid = |e: running::ExecError| invalid("command", e.to_string());
        Ok((
            running::wait_for_container(&target).map_err(invalid)?,
            running::exec_argv(&target, command).map_err(invalid)?,
        ))
    }

    /// Run `command` in the job's container (at a node or role, else once per node) with this
    /// process's streams; its exit status. Stopped after `deadline_secs`.
    pub fn exec_stream(&self, id: &str, at: &Where, command: &[String], deadline_secs: u64) -> Result<i32> {
        let job = self.running_job(id)?;
        let (wait, argv) = self.exec_argv(&job, at, false, command)?;
        Ok(self.remote()?.attach(&format!("{wait}{}", running::exec_line(&argv, deadline_secs)), false)?)
    }

    /// A terminal in the job's container (`command`, default `bash`), at a node or role, or the first node.
    pub fn shell(&self, id: &str, at: &Where, command: &[String]) -> Result<i32> {
        let job = self.running_job(id)?;
        let command = if command.is_empty() { vec!["bash".to_string()] } else { command.to_vec() };
        let (wait, argv) = self.exec_argv(&job, at, true, &command)?;
        Ok(self.remote()?.attach(&format!("{wait}{}", crate::script::shell::join(&argv)), true)?)
    }

    /// Run `command` in the job's container and return at most `max_bytes` of each output stream.
    pub fn exec_capture(
        &self,
        id: &str,
        at: &Where,
        command: &[String],
        deadline_secs: u64,
        max_bytes: u64,
    ) -> Result<ExecOutput> {
        let job = self.running_job(id)?;
        let (wait, argv) = self.exec_argv(&job, at, false, command)?;
        let script = format!("{wait}{}", running::capture_script(&argv, deadline_secs, max_bytes));
        // Each stream is cut at `max_bytes` on the host; the transport keeps no more than that either.
        let out = self.remote()?.run_script_capped(
            &script,
            crate::remote::Idempotency::RunAtMostOnce,
            std::time::Duration::from_secs(deadline_secs + 30),
            max_bytes.saturating_add(1 << 16),
        )?;
        let (stderr, stdout_bytes, stderr_bytes) = running::parse_capture_stderr(&out.stderr);
        Ok(ExecOutput {
            exit_code: out.exit_code,
            truncated: stdout_bytes > max_bytes || stderr_bytes > max_bytes,
            stdout: out.stdout,
            stderr,
            stdout_bytes,
            stderr_bytes,
        })
    }

    /// Forward `local_port` on 127.0.0.1 (0: a free one) to `remote_port` on the job's `node` (default
    /// its first), through the login host's SSH master. It stays until [`Client::stop_forward`] or
    /// the master ends.
    pub fn forward_port(&self, id: &str, at: &Where, remote_port: u16, local_port: u16) -> Result<Forward> {
        let job = self.running_job(id)?;
        let node = match self.place(&job, at)?.0 {
            Place::Node(n) => n,
            Place::EveryNode => running::first_node(&job.node_list)
                .ok_or_else(|| invalid("node", format!("job {} has no node list", job.job_id)))?,
            Place::Role(role, nodes) => nodes
                .into_iter()
                .next()
                .ok_or_else(|| invalid("role", format!("the {role} role of job {} has no node", job.job_id)))?,
        };
        let addr = self.node_addr(&node)?;
        self.forward_to(job.job_id, node, addr, remote_port, local_port)
    }

    /// The forward itself, to a node whose address is known.
    fn forward_to(
        &self,
        job_id: String,
        node: String,
        addr: String,
        remote_port: u16,
        local_port: u16,
    ) -> Result<Forward> {
        self.remote()?.forward(&format!("127.0.0.1:{local_port}"), &format!("{addr}:{remote_port}"), false)?;
        Ok(Forward {
            job_id,
            node,
            addr,
            remote_port,
            local_port,
            url: format!("http://127.0.0.1:{local_port}/"),
            remote_socket: None,
            local_socket: None,
            relay: None,
        })
    }

    /// Start TensorBoard in the job's container on its results directory (on its first node), on a
    /// Unix socket in a private directory drawn for this start (no TCP port on the node: nothing
    /// another user of the node can reach or take first), and listen here on a socket in a private
    /// directory made for it ([`Forward::local_socket`]: nothing to race for, unlike a free port
    /// picked then handed to ssh), each connection to which is relayed to TensorBoard's socket by a
    /// step of the job on its node (`srun --overlap`, through the login host's SSH master: the
    /// login host's sshd cannot reach a socket on another machine). `path_prefix`: TensorBoard's
    /// `--path_prefix`. Each call starts a TensorBoard of its own (it ends with the job).
    pub fn tensorboard(&self, id: &str, path_prefix: Option<&str>) -> Result<Forward> {
        let job = self.running_job(id)?;
        let node = running::first_node(&job.node_list)
            .ok_or_else(|| invalid("node", format!("job {} has no node list", job.job_id)))?;
        let addr = self.node_addr(&node)?;
        // The first node's container (a Cosmos-RL job's: the policy's there).
        let (place, image) = self.place(&job, &Where::new(Some(&node), None))?;
        let target = ExecTarget {
            slurm_job_id: &job.slurm_job_id,
            job_id: &job.job_id,
            place,
            pty: false,
            node_list: &job.node_list,
            results_dir: &job.results_dir,
            image: &image,
        };
        let mut draw = [0u8; 8];
        getrandom::fill(&mut draw)
            .map_err(|e| Error::RemoteCommand(format!("the system's random generator failed: {e}")))?;
        let root = job.results_dir.rsplit_once('/').map_or("", |(root, _)| root);
        let dir = running::tensorboard_dir(root, draw);
        let script = running::tensorboard_script(&target, &job.results_dir, &dir, path_prefix).map_err(|e| {
            let field = match e {
                running::ExecError::BadPathPrefix(_) => "path_prefix",
                running::ExecError::SocketPathTooLong(..) | running::ExecError::BadSocketPath(_) => "job_id",
                _ => "node",
            };
            invalid(field, e.to_string())
        })?;
        // Run at most once: a start run again would fail on the directory the first one made.
        let once = crate::remote::Idempotency::RunAtMostOnce;
        let out = self.remote()?.run_script_within(&script, once, std::time::Duration::from_secs(60))?;
        if out.exit_code != 0 {
            return Err(Error::RemoteCommand(out.stderr.trim().to_string()));
        }
        let remote_socket = running::tensorboard_socket(&dir);
        let relay = running::relay_choice(&out.stdout)
            .ok_or_else(|| Error::RemoteCommand("TensorBoard's start named no relay for its connections".into()))?;
        let line = running::relay_line(&target, relay, &remote_socket).map_err(|e| invalid("node", e.to_string()))?;
        // The relays' own transport (the same login hosts and master): they outlive this client.
        let remote = crate::remote::connect(&self.settings)?;
        let local_socket = super::tensorboard_relay::start(remote, line, job.job_id.clone())
            .map_err(|e| Error::RemoteCommand(format!("no private socket here for TensorBoard: {e}")))?;
        if let Err(e) = running::check_socket_path(&local_socket) {
            super::tensorboard_relay::stop(&local_socket);
            return Err(Error::RemoteCommand(e.to_string()));
        }
        Ok(Forward {
            job_id: job.job_id,
            node,
            addr,
            remote_port: 0,
            local_port: 0,
            url: format!("unix:{local_socket}"),
            remote_socket: Some(remote_socket),
            local_socket: Some(local_socket),
            relay: Some(relay.name().to_string()),
        })
    }

    /// A node's address as the login host reaches it.
    fn node_addr(&self, node: &str) -> Result<String> {
        let script = running::node_addr_script(node).map_err(|e| invalid("node", e.to_string()))?;
        let out = self.remote()?.run_script(&script, crate::remote::Idempotency::Idempotent)?;
        if out.exit_code != 0 {
            return Err(Error::RemoteCommand(format!("scontrol show node {node}: {}", out.stderr.trim())));
        }
        Ok(running::node_addr(node, &out.stdout))
    }

    /// Stop a forward made by [`Client::forward_port`] or [`Client::tensorboard`] (the latter: its
    /// relay's socket and connections here, and TensorBoard's directory on the node).
    pub fn stop_forward(&self, f: &Forward) -> Result<()> {
        if let (Some(local), Some(remote)) = (&f.local_socket, &f.remote_socket) {
            super::tensorboard_relay::stop(local);
            if let Some(script) = running::tensorboard_cleanup_script(remote) {
                let removed = self.remote()?.run_script(&script, crate::remote::Idempotency::Idempotent);
                if let Err(e) = removed {
                    tracing::warn!(job = %f.job_id, error = %e, "could not remove TensorBoard's directory");
                }
            }
            return Ok(());
        }
        let to = format!("{}:{}", f.addr, f.remote_port);
        Ok(self.remote()?.forward(&format!("127.0.0.1:{}", f.local_port), &to, true)?)
    }
}
