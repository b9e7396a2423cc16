//! Working with a running job: the `srun` that runs a command inside its allocation and container
//! (`exec`, `shell`, `tensorboard`), the bounded capture script, and the node a forward reaches.

use crate::cosmos::{CosmosPlan, Role};
use crate::exit_codes::TENSORBOARD_PORT_BUSY;
use crate::script::{container_name, shell};

/// Where and how a command runs in a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecTarget<'a> {
    /// The job's current Slurm job id (its current attempt's: after a retry, the new allocation).
    pub slurm_job_id: &'a str,
    /// The tao-slurm job id (names the container).
    pub job_id: &'a str,
    pub place: Place,
    /// A pseudo-terminal for the task (`shell`).
    pub pty: bool,
    /// The job's node list (Slurm's form) and results directory: where each node's container says
    /// it is up ([`crate::layout::container_up_file`]).
    pub node_list: &'a str,
    pub results_dir: &'a str,
}

/// Which of the job's nodes, and which container there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// Once on each node (a terminal: the first), in the job's container.
    EveryNode,
    /// One node, in the job's container.
    Node(String),
    /// The nodes of a Cosmos-RL role (a terminal: its first), in that role's container.
    Role(Role, Vec<String>),
}

/// Why a command cannot run in a job.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    #[error("give a command to run (after --)")]
    NoCommand,
    #[error("a command word contains a NUL byte")]
    Unquotable,
    #[error("{0:?} is not a node name")]
    BadNode(String),
    #[error("{0:?} is not a URL path prefix (`/` then letters, digits, `-`, `_`, `/`)")]
    BadPathPrefix(String),
    #[error("give a node or a role, not both")]
    NodeAndRole,
    #[error("this job is not a Cosmos-RL job: it has no roles; give a node (or neither)")]
    NoRoles,
    #[error("{0:?} is not a role of this job; its roles are {1}")]
    BadRole(String, String),
    #[error("this Cosmos-RL job runs one container per role: give a role ({0})")]
    NeedRole(String),
    #[error("node {0} is not one of this job's nodes ({1})")]
    NotItsNode(String, String),
    #[error("the job's node list {0:?} is not a Slurm host list")]
    BadNodeList(String),
}

/// Where `node` or `role` (at most one) is in a job running on `node_list`: for a Cosmos-RL job a
/// node means the role that runs there (the policy on the first node, which the controller shares)
/// and neither is refused, since each role has its own container.
pub fn resolve_place(
    node: Option<&str>,
    role: Option<&str>,
    cosmos: Option<&CosmosPlan>,
    node_list: &str,
) -> Result<Place, ExecError> {
    if let Some(n) = node {
        check_node(n)?;
    }
    let Some(cosmos) = cosmos else {
        return match (node, role) {
            (Some(_), Some(_)) => Err(ExecError::NodeAndRole),
            (_, Some(_)) => Err(ExecError::NoRoles),
            (Some(n), None) => Ok(Place::Node(n.to_string())),
            (None, None) => Ok(Place::EveryNode),
        };
    };
    let hosts = crate::slurm::hostlist::expand(node_list).ok_or_else(|| ExecError::BadNodeList(node_list.into()))?;
    let roles = cosmos.roles();
    let names = || roles.iter().map(|r| r.as_str()).collect::<Vec<_>>().join(", ");
    let role = match (node, role) {
        (Some(_), Some(_)) => return Err(ExecError::NodeAndRole),
        (None, None) => return Err(ExecError::NeedRole(names())),
        (None, Some(r)) => {
            Role::parse(r).filter(|r| roles.contains(r)).ok_or_else(|| ExecError::BadRole(r.into(), names()))?
        }
        (Some(n), None) => {
            let policy = cosmos.split.policy_nodes() as usize;
            match hosts.iter().position(|h| h == n) {
                Some(i) if i < policy => Role::Policy,
                Some(_) => Role::Rollout,
                None => return Err(ExecError::NotItsNode(n.into(), node_list.into())),
            }
        }
    };
    let nodes = role_nodes(cosmos, role, &hosts);
    Ok(match node {
        Some(n) => Place::Role(role, vec![n.to_string()]),
        None => Place::Role(role, nodes),
    })
}

/// A role's nodes in the allocation, as the batch script assigns them: the controller on the first
/// node, the policy on the first `policy_nodes`, the rollout on the rest.
fn role_nodes(cosmos: &CosmosPlan, role: Role, hosts: &[String]) -> Vec<String> {
    let policy = (cosmos.split.policy_nodes() as usize).min(hosts.len());
    match role {
        Role::Controller => hosts.iter().take(1).cloned().collect(),
        Role::Policy => hosts[..policy].to_vec(),
        Role::Rollout => hosts[policy..].to_vec(),
    }
}

/// The argv of the step that runs `command` in the job's running container: `--overlap` shares the
/// job's resources instead of waiting for free ones, and `--container-name` joins the container the
/// job's own step named (Pyxis named containers).
pub fn exec_argv(t: &ExecTarget<'_>, command: &[String]) -> Result<Vec<String>, ExecError> {
    if command.is_empty() {
        return Err(ExecError::NoCommand);
    }
    if command.iter().any(|w| shell::check_quotable(w).is_err()) {
        return Err(ExecError::Unquotable);
    }
    let mut argv =
        vec!["srun".to_string(), "--overlap".into(), format!("--jobid={}", t.slurm_job_id), "--quiet".into()];
    let one = |argv: &mut Vec<String>, node: &str| -> Result<(), ExecError> {
        check_node(node)?;
        argv.extend([format!("--nodelist={node}"), "--nodes=1".into(), "--ntasks=1".into()]);
        Ok(())
    };
    match &t.place {
        Place::Node(node) => one(&mut argv, node)?,
        Place::EveryNode => {
            if t.pty {
                argv.extend(["--nodes=1".to_string(), "--ntasks=1".into()]);
            } else {
                argv.push("--ntasks-per-node=1".into());
            }
        }
        Place::Role(role, nodes) => match nodes.as_slice() {
            [] => return Err(ExecError::BadRole(role.to_string(), "none with nodes".into())),
            [node] => one(&mut argv, node)?,
            [first, ..] if t.pty => one(&mut argv, first)?,
            many => {
                for n in many {
                    check_node(n)?;
                }
                let k = many.len();
                argv.extend([
                    format!("--nodelist={}", many.join(",")),
                    format!("--nodes={k}"),
                    format!("--ntasks={k}"),
                    "--ntasks-per-node=1".into(),
                ]);
            }
        },
    }
    if t.pty {
        argv.push("--pty".into());
    }
    argv.push(format!("--container-name={}", container_of(t)));
    argv.push("--".into());
    argv.extend(command.iter().cloned());
    Ok(argv)
}

/// The Pyxis name of the container `t` joins: the job's, or its Cosmos-RL role's.
fn container_of(t: &ExecTarget<'_>) -> String {
    match &t.place {
        Place::Role(role, _) => crate::script::role_container_name(t.job_id, *role),
        Place::Node(_) | Place::EveryNode => container_name(t.job_id),
    }
}

/// Seconds a step joining the job's container waits for Pyxis to create it.
pub const CONTAINER_WAIT_SECS: u64 = 60;

/// The shell lines that wait until the job's container is up on every node where `t` runs: each
/// task of the job's step says so in a file ([`crate::layout::container_up_file`]) once Pyxis has
/// made and started the container. Pyxis makes it after Slurm says RUNNING (it imports or unpacks the
/// image first, minutes for a large one); joining it before then fails ("a container with name ...
/// does not exist") or, while its filesystem is being unpacked, breaks the job's own step. A check of
/// files on shared storage: no step, no slurmctld RPC.
pub fn wait_for_container(t: &ExecTarget<'_>) -> Result<String, ExecError> {
    let nodes = match &t.place {
        Place::Node(node) => vec![node.clone()],
        Place::EveryNode => crate::slurm::hostlist::expand(t.node_list)
            .ok_or_else(|| ExecError::BadNodeList(t.node_list.to_string()))?,
        Place::Role(_, nodes) => nodes.clone(),
    };
    // A terminal runs on one node: the first.
    let nodes = if t.pty { nodes.into_iter().take(1).collect() } else { nodes };
    let container = container_of(t);
    let mut files = Vec::new();
    for node in &nodes {
        check_node(node)?;
        files.push(shell::quote(&crate::layout::container_up_file(t.results_dir, t.slurm_job_id, node, &container)));
    }
    Ok(format!(
        "tao_until=$((SECONDS + {CONTAINER_WAIT_SECS}))\n\
         for tao_up in {files}; do\n\
         \x20 until [ -e \"$tao_up\" ]; do\n\
         \x20   if [ $SECONDS -ge $tao_until ]; then\n\
         \x20     echo \"the job's container is not up after {CONTAINER_WAIT_SECS} s (Pyxis may still be importing its image); try again in a minute\" >&2\n\
         \x20     break 2\n\
         \x20   fi\n\
         \x20   sleep 0.5\n\
         \x20 done\n\
         done\n",
        files = files.join(" ")
    ))
}

/// A node name as Slurm writes one (letters, digits, `-`, `_`, `.`): never a list or an option.
pub fn check_node(node: &str) -> Result<(), ExecError> {
    let ok = !node.is_empty()
        && !node.starts_with('-')
        && node.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(ExecError::BadNode(node.to_string()))
    }
}

/// The shell line that runs `argv` in the foreground under a deadline (`timeout`), with its own
/// exit status.
pub fn exec_line(argv: &[String], deadline_secs: u64) -> String {
    format!("timeout --signal=TERM --kill-after=10 {deadline_secs}s {}", shell::join(argv))
}

/// The remote script that runs `argv` and returns at most `max_bytes` of each of its output streams
/// (the MCP tool and the Python call are answered in one message). Its exit status is the command's.
/// Each stream is cut as it is written (`dd` passes the first `max_bytes`, `wc` counts the rest):
/// nothing of it is stored on the login node, and the full sizes follow on stderr
/// (`tao-exec-sizes OUT ERR`, [`parse_capture_stderr`]).
pub fn capture_script(argv: &[String], deadline_secs: u64, max_bytes: u64) -> String {
    format!(
        "exec 3>&1 4>&2\n\
         tao_cut() {{ local n r; n=$(LC_ALL=C dd bs=65536 count={max_bytes} iflag=count_bytes,fullblock 2>&1 >&\"$1\" | tail -n 1); r=$(wc -c); echo \"$2 $(( ${{n%% *}} + r ))\"; }}\n\
         s=$( {{ {{ {line} </dev/null 2>&5 3>&- 4>&- 5>&- 6>&- | tao_cut 3 out; echo \"rc ${{PIPESTATUS[0]}}\"; }} 5>&1 >&6 | tao_cut 4 err; }} 6>&1 )\n\
         o=0 e=0 rc=1\n\
         while read -r k v; do case \"$k\" in out) o=$v ;; err) e=$v ;; rc) rc=$v ;; esac; done <<<\"$s\"\n\
         echo \"tao-exec-sizes $o $e\" >&2\n\
         exit \"$rc\"\n",
        line = exec_line(argv, deadline_secs)
    )
}

/// The script that prints a node's line of `scontrol show node` (its address is [`node_addr`]).
pub fn node_addr_script(node: &str) -> Result<String, ExecError> {
    check_node(node)?;
    Ok(format!("scontrol show node --oneliner -- {}", shell::quote(node)))
}

/// The address the login host reaches a node at: its `NodeAddr` (a name or an IP; the node's name
/// when Slurm gives none).
pub fn node_addr(node: &str, scontrol_line: &str) -> String {
    scontrol_line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("NodeAddr="))
        .filter(|a| !a.is_empty() && check_node(a).is_ok())
        .unwrap_or(node)
        .to_string()
}

/// What a TensorBoard start makes of something already answering on its port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnBusy {
    /// Take it for the TensorBoard asked for (the CLI: the user's own forward, run again).
    Reuse,
    /// Trust nothing found there: start nothing, exit [`TENSORBOARD_PORT_BUSY`] (the service: the
    /// job, or a neighbour on its node, may be listening there with a page of its own).
    Refuse,
}

/// The remote script that starts TensorBoard in the job's container on `node` (its address `addr`),
/// on `logdir`, detached from the login shell, and waits up to 30 s for it to answer on `addr:port`.
/// Exit 0 once it answers while the TensorBoard it started still runs. Something already answering
/// there is taken or refused as `on_busy` says. `path_prefix` serves it under that path (the
/// service's proxy: `/tensorboard/<job id>`).
///
/// Its log, `tensorboard.log` beside the results, is a file the job can plant a symlink as: it is
/// removed (a link itself, never its target) and created anew with `O_EXCL` by the one `dd` that
/// writes it (anything planted meanwhile makes the create fail, and TensorBoard with it); it is
/// read back through the job-file reader (no link followed, capped).
pub fn tensorboard_script(
    t: &ExecTarget<'_>,
    addr: &str,
    logdir: &str,
    port: u16,
    path_prefix: Option<&str>,
    on_busy: OnBusy,
) -> Result<String, ExecError> {
    check_node(addr)?;
    let mut command: Vec<String> =
        ["tensorboard", "--logdir", logdir, "--port", &port.to_string(), "--bind_all"].map(String::from).to_vec();
    if let Some(prefix) = path_prefix {
        check_path_prefix(prefix)?;
        command.extend(["--path_prefix".to_string(), prefix.to_string()]);
    }
    let argv = exec_argv(t, &command)?;
    let wait = wait_for_container(t)?;
    let probe = format!("(exec 3<>/dev/tcp/{addr}/{port}) 2>/dev/null");
    let busy = match on_busy {
        OnBusy::Reuse => format!("if {probe}; then exit 0; fi\n"),
        OnBusy::Refuse => format!(
            "if {probe}; then\n\
             \x20 echo \"something already answers on {addr}:{port}; it is not trusted as TensorBoard\" >&2\n\
             \x20 exit {code}\n\
             fi\n",
            code = TENSORBOARD_PORT_BUSY
        ),
    };
    let script = format!(
        "log={log}\n\
         {busy}\
         {wait}\
         rm -f -- \"$log\"\n\
         setsid nohup {srun} </dev/null 2>&1 | setsid -w nohup dd of=\"$log\" oflag=nofollow conv=excl status=none 2>/dev/null &\n\
         started=$!\n\
         for _ in $(seq 150); do\n\
         \x20 kill -0 \"$started\" 2>/dev/null || break\n\
         \x20 {probe} && kill -0 \"$started\" 2>/dev/null && exit 0\n\
         \x20 sleep 0.2\n\
         done\n\
         echo \"TensorBoard did not answer on {addr}:{port} within 30 s (or it ended); the end of its log:\" >&2\n\
         case $(tao_jf_stat \"$log\") in\n\
         \x20 regular*) size=$(tao_jf_stat \"$log\"); size=${{size#regular }}\n\
         \x20   tao_jf_read \"$log\" $(( size > {tail} ? size - {tail} : 0 )) {tail} | tail -n 20 >&2 ;;\n\
         \x20 *) echo \"(tensorboard.log is missing or not a regular file: not shown)\" >&2 ;;\n\
         esac\n\
         exit 1\n",
        srun = shell::join(&argv),
        log = shell::quote(&format!("{logdir}/tensorboard.log")),
        tail = TENSORBOARD_LOG_TAIL,
    );
    Ok(super::job_file::with_functions(&script))
}

/// Most bytes of `tensorboard.log` a failed start shows (its last 20 lines within them).
pub const TENSORBOARD_LOG_TAIL: u64 = 8192;

fn check_path_prefix(prefix: &str) -> Result<(), ExecError> {
    let ok = prefix.starts_with('/')
        && !prefix.contains("//")
        && prefix.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'/'));
    if ok {
        Ok(())
    } else {
        Err(ExecError::BadPathPrefix(prefix.to_string()))
    }
}

/// The node ports the service draws a TensorBoard's port from (below Linux's ephemeral range).
pub const SERVICE_TENSORBOARD_PORTS: std::ops::RangeInclusive<u16> = 20000..=32767;

/// The node port of one start of a job's TensorBoard by the service, from a random draw: a new one
/// each start, so no job can know it before the start, and none is taken from the job id.
pub fn service_tensorboard_port(draw: u32) -> u16 {
    let (low, high) = (*SERVICE_TENSORBOARD_PORTS.start(), *SERVICE_TENSORBOARD_PORTS.end());
    low + (draw % (u32::from(high - low) + 1)) as u16
}

/// Splits a capture's stderr into the command's own stderr and the full sizes of both streams.
pub fn parse_capture_stderr(stderr: &str) -> (String, u64, u64) {
    let (text, marker) = match stderr.rfind("tao-exec-sizes ") {
        Some(i) => (&stderr[..i], &stderr[i..]),
        None => (stderr, ""),
    };
    let mut sizes = marker.split_whitespace().skip(1).map(|w| w.parse::<u64>().unwrap_or(0));
    (text.to_string(), sizes.next().unwrap_or(0), sizes.next().unwrap_or(0))
}

/// The first node of a Slurm node list (`node[1-2],gpu3` → `node1`): where the batch step (and rank
/// 0) runs, the node `forward` and `tensorboard` reach unless told another.
pub fn first_node(node_list: &str) -> Option<String> {
    let first = node_list.split(',').next()?.trim();
    if first.is_empty() {
        return None;
    }
    match first.split_once('[') {
        None => Some(first.to_string()),
        Some((prefix, range)) => {
            let start = range.split(['-', ',', ']']).next()?;
            Some(format!("{prefix}{start}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(node: Option<&str>, pty: bool) -> ExecTarget<'_> {
        let place = node.map_or(Place::EveryNode, |n| Place::Node(n.to_string()));
        ExecTarget { slurm_job_id: "42", job_id: "abc", place, pty, node_list: "node[1-2]", results_dir: "/r/abc" }
    }

    #[test]
    fn tensorboard_takes_a_path_prefix_only_when_it_is_a_plain_path() {
        let t = target(Some("node1"), false);
        let plain = tensorboard_script(&t, "10.0.0.1", "/r/abc", 6006, None, OnBusy::Reuse).unwrap();
        assert!(plain.contains("--port 6006 --bind_all </dev/null 2>&1 |"), "{plain}");
        assert!(!plain.contains("--path_prefix"), "{plain}");
        let prefixed =
            tensorboard_script(&t, "10.0.0.1", "/r/abc", 6006, Some("/tensorboard/abc"), OnBusy::Refuse).unwrap();
        assert!(prefixed.contains("--bind_all --path_prefix /tensorboard/abc </dev/null 2>&1 |"), "{prefixed}");
        for bad in ["tensorboard/abc", "/a b", "/a;rm", "//x", "/a/../b", "/x'y", ""] {
            let e = tensorboard_script(&t, "10.0.0.1", "/r/abc", 6006, Some(bad), OnBusy::Refuse);
            assert!(matches!(e, Err(ExecError::BadPathPrefix(_))), "{bad:?}: {e:?}");
        }
    }

    #[test]
    fn the_service_tensorboard_port_comes_from_the_draw_and_stays_in_its_range() {
        for draw in [0, 1, 12767, 12768, u32::MAX, 0x5f0c_2b9e] {
            assert!(SERVICE_TENSORBOARD_PORTS.contains(&service_tensorboard_port(draw)), "{draw}");
        }
        assert_eq!(service_tensorboard_port(0), 20000);
        assert_eq!(service_tensorboard_port(12767), 32767);
        assert_eq!(service_tensorboard_port(12768), 20000);
    }

    /// The start script under bash, with `srun` a stand-in (`fake_srun`, a bash body run as the job
    /// would: in its results directory) on PATH; its exit status and stderr.
    fn run_start(dir: &std::path::Path, fake_srun: &str, port: u16, on_busy: OnBusy) -> (i32, String) {
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let srun = bin.join("srun");
        let body = format!("#!/bin/bash\ncd {}\n{fake_srun}\n", dir.join("results").display());
        std::fs::write(&srun, body).unwrap();
        std::fs::set_permissions(&srun, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let results = dir.join("results").display().to_string();
        // The job's container is up on its node (else the start waits CONTAINER_WAIT_SECS for it).
        let t = ExecTarget { results_dir: &results, ..target(Some("node1"), false) };
        let up = crate::layout::container_up_file(&results, t.slurm_job_id, "node1", &container_of(&t));
        std::fs::create_dir_all(std::path::Path::new(&up).parent().unwrap()).unwrap();
        std::fs::write(&up, "").unwrap();
        let script = tensorboard_script(&t, "127.0.0.1", &results, port, None, on_busy).unwrap();
        let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
        let out = std::process::Command::new("bash").arg("-c").arg(&script).env("PATH", path).output().unwrap();
        (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
    }

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
    }

    /// A stand-in TensorBoard: says a line, then answers on the port for a few seconds.
    fn listening(port: u16) -> String {
        format!(
            "echo started here\nexec python3 -c 'import socket,time; s=socket.socket(); \
             s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((\"127.0.0.1\", {port})); s.listen(); time.sleep(5)'"
        )
    }

    #[test]
    fn a_planted_tensorboard_log_symlink_is_neither_written_through_nor_read_back() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("results")).unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "the user's own file\n").unwrap();
        let log = dir.path().join("results/tensorboard.log");

        // Planted before the start: the link is replaced by our own log, its target untouched.
        std::os::unix::fs::symlink(&victim, &log).unwrap();
        let port = free_port();
        let (rc, err) = run_start(dir.path(), &listening(port), port, OnBusy::Refuse);
        assert_eq!(rc, 0, "{err}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "the user's own file\n");
        let meta = std::fs::symlink_metadata(&log).unwrap();
        assert!(meta.file_type().is_file(), "our log is a regular file of its own");
        let written = (0..50).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(100));
            std::fs::read_to_string(&log).unwrap_or_default().contains("started here")
        });
        assert!(written, "TensorBoard's output reaches its log");

        // Planted while it runs, then the start fails: the log's tail is not read through the link.
        std::fs::remove_file(&log).unwrap();
        // Once the script's own log exists (its writer made it), swap it for a link; swapped before
        // the writer made it, the writer's create would win and there would be no link to test.
        let swap = format!(
            "for _ in $(seq 100); do [ -e tensorboard.log ] && break; sleep 0.05; done\n\
             rm -f tensorboard.log; ln -s {} tensorboard.log; exit 1",
            victim.display()
        );
        let (rc, err) = run_start(dir.path(), &swap, free_port(), OnBusy::Refuse);
        assert_eq!(rc, 1, "{err}");
        assert!(err.contains("not a regular file: not shown"), "{err}");
        assert!(!err.contains("the user's own file"), "{err}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "the user's own file\n");
    }

    #[test]
    fn the_service_trusts_no_listener_it_did_not_start_and_the_cli_reuses_one() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("results")).unwrap();
        let squatter = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = squatter.local_addr().unwrap().port();
        let marker = "touch ../srun-ran";
        let (rc, err) = run_start(dir.path(), marker, port, OnBusy::Refuse);
        assert_eq!(rc, TENSORBOARD_PORT_BUSY, "{err}");
        assert!(err.contains("not trusted as TensorBoard"), "{err}");
        let (rc, err) = run_start(dir.path(), marker, port, OnBusy::Reuse);
        assert_eq!(rc, 0, "{err}");
        assert!(!dir.path().join("srun-ran").exists(), "nothing was started either way");
        drop(squatter);
        // A TensorBoard that ends before it answers (its port taken meanwhile, say) is no success.
        let (rc, err) = run_start(dir.path(), "echo cannot bind >&2; exit 1", free_port(), OnBusy::Refuse);
        assert_eq!(rc, 1, "{err}");
        assert!(err.contains("cannot bind"), "the log's end is shown: {err}");
    }

    #[test]
    fn exec_joins_the_named_container_of_the_running_job() {
        let argv = exec_argv(&target(Some("node2"), false), &["hostname".into()]).unwrap();
        assert_eq!(
            argv.join(" "),
            "srun --overlap --jobid=42 --quiet --nodelist=node2 --nodes=1 --ntasks=1 --container-name=tao-abc -- hostname"
        );
        let all = exec_argv(&target(None, false), &["nvidia-smi".into()]).unwrap();
        assert!(all.contains(&"--ntasks-per-node=1".to_string()));
        let pty = exec_argv(&target(None, true), &["bash".into()]).unwrap();
        assert!(pty.contains(&"--pty".to_string()) && pty.contains(&"--nodes=1".to_string()));
    }

    /// The wait before a step joins the container: until each node's task says its container is up
    /// (the file the job's own step makes), for this Slurm job only (a retry's new allocation has a
    /// new container); a terminal waits for its one node.
    #[test]
    fn a_step_waits_until_the_jobs_container_is_up_on_each_of_its_nodes() {
        let dir = tempfile::tempdir().unwrap();
        let results = dir.path().display().to_string();
        std::fs::create_dir(dir.path().join(crate::layout::BOOKKEEPING_DIR)).unwrap();
        let up = |node: &str| crate::layout::container_up_file(&results, "42", node, "tao-abc");
        let target = |pty: bool| ExecTarget {
            slurm_job_id: "42",
            job_id: "abc",
            place: Place::EveryNode,
            pty,
            node_list: "node[1-2]",
            results_dir: &results,
        };
        let run = |t: &ExecTarget<'_>| {
            let script = format!("{}echo joined", wait_for_container(t).unwrap());
            std::process::Command::new("bash").arg("-c").arg(script).spawn().unwrap()
        };
        // A previous Slurm job's container says nothing about this one's.
        std::fs::write(crate::layout::container_up_file(&results, "41", "node1", "tao-abc"), "").unwrap();
        let mut every = run(&target(false));
        let mut shell = run(&target(true));
        std::fs::write(up("node1"), "").unwrap();
        // The terminal's node is up: it goes on; every node's waits for node2 still.
        assert!(shell.wait().unwrap().success());
        assert!(every.try_wait().unwrap().is_none(), "the step on every node waits for node2");
        std::fs::write(up("node2"), "").unwrap();
        assert!(every.wait().unwrap().success());
        // The prelude of the job's own step makes the file, in its container, on each node.
        let plan = crate::plan::tests::resolve(&crate::plan::tests::spec(), &crate::plan::tests::settings()).unwrap();
        let argv = crate::script::srun_argv(&plan).join(" ");
        let made = format!(
            ": > \"{}\"",
            crate::layout::container_up_file(&plan.layout.results_dir(), "$SLURM_JOB_ID", "$SLURMD_NODENAME", "tao-")
        );
        assert!(argv.contains(made.trim_end_matches('"')), "{argv}");
        assert_eq!(
            wait_for_container(&ExecTarget { node_list: "node[", ..target(false) }),
            Err(ExecError::BadNodeList("node[".into()))
        );
    }

    #[test]
    fn user_words_stay_words() {
        let argv = exec_argv(&target(None, false), &["echo".into(), "$(rm -rf ~); `x`".into()]).unwrap();
        let line = exec_line(&argv, 60);
        assert!(line.ends_with("-- echo '$(rm -rf ~); `x`'"), "{line}");
        assert_eq!(exec_argv(&target(Some("-x"), false), &["true".into()]), Err(ExecError::BadNode("-x".into())));
        assert_eq!(exec_argv(&target(Some("a,b"), false), &["true".into()]), Err(ExecError::BadNode("a,b".into())));
        assert_eq!(exec_argv(&target(None, false), &[]), Err(ExecError::NoCommand));
        assert_eq!(exec_argv(&target(None, false), &["a\0b".into()]), Err(ExecError::Unquotable));
    }

    /// Both streams are cut while they are written (no file holds them), their full sizes and the
    /// command's status come back.
    #[test]
    fn a_capture_cuts_both_streams_and_keeps_the_status() {
        let argv: Vec<String> =
            ["bash", "-c", "head -c 300000 /dev/zero | tr '\\0' o; printf 'e%.0s' $(seq 5000) >&2; exit 3"]
                .map(String::from)
                .to_vec();
        let script = capture_script(&argv, 30, 1000);
        assert!(!script.contains("mktemp") && !script.contains("/tmp"), "{script}");
        let out = std::process::Command::new("bash").arg("-c").arg(&script).output().unwrap();
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(out.stdout, vec![b'o'; 1000]);
        let (err, o, e) = parse_capture_stderr(&String::from_utf8_lossy(&out.stderr));
        assert_eq!((err.as_str(), o, e), ("e".repeat(1000).as_str(), 300_000, 5000));
        let small: Vec<String> = ["echo", "hi"].map(String::from).to_vec();
        let out = std::process::Command::new("bash").arg("-c").arg(capture_script(&small, 30, 1000)).output().unwrap();
        assert_eq!((out.status.code(), out.stdout.as_slice()), (Some(0), &b"hi\n"[..]));
        assert_eq!(parse_capture_stderr(&String::from_utf8_lossy(&out.stderr)), (String::new(), 3, 0));
    }

    #[test]
    fn capture_sizes_are_read_back() {
        assert_eq!(parse_capture_stderr("warn\ntao-exec-sizes 10 5\n"), ("warn\n".to_string(), 10, 5));
        assert_eq!(parse_capture_stderr("lost"), ("lost".to_string(), 0, 0));
    }

    #[test]
    fn node_address_from_scontrol() {
        let line = "NodeName=node1 Arch=x86_64 CoresPerSocket=1 NodeAddr=127.0.0.1 NodeHostName=vm Version=22.05.8";
        assert_eq!(node_addr("node1", line), "127.0.0.1");
        assert_eq!(node_addr("node1", "NodeName=node1 State=IDLE"), "node1");
        assert_eq!(node_addr("node1", "NodeAddr=a;b"), "node1");
    }

    #[test]
    fn first_node_of_a_list() {
        assert_eq!(first_node("node[3-4]").as_deref(), Some("node3"));
        assert_eq!(first_node("gpu7,gpu9").as_deref(), Some("gpu7"));
        assert_eq!(first_node("n[01,05]").as_deref(), Some("n01"));
        assert_eq!(first_node(""), None);
    }
}
