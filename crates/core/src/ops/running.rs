//! Working with a running job: the `srun` that runs a command inside its allocation and container
//! (`exec`, `shell`, `tensorboard`), the bounded capture script, and the node a forward reaches.

use crate::cosmos::{CosmosPlan, Role};
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
    /// The image as Pyxis was given it: a squashfs file's path (whose size bounds the wait for the
    /// container, [`wait_for_container`]) or a registry reference.
    pub image: &'a str,
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
    #[error("{0:?} cannot be a forwarded Unix socket (an absolute path without `:`)")]
    BadSocketPath(String),
    #[error("TensorBoard's socket {0} is {1} bytes long, more than the 107 a Unix socket path can have: use a shorter results directory")]
    SocketPathTooLong(String, usize),
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

/// Seconds a step joining the job's container waits for Pyxis to create it from a squashfs file:
/// this, plus [`CONTAINER_WAIT_SECS_PER_GIB`] for each GiB of the file (Enroot unpacks the whole
/// image on the node first), at most [`CONTAINER_WAIT_MAX_SECS`].
pub const CONTAINER_WAIT_SECS: u64 = 60;
pub const CONTAINER_WAIT_SECS_PER_GIB: u64 = 30;
pub const CONTAINER_WAIT_MAX_SECS: u64 = 900;
/// Seconds it waits for a container of a registry image (Pyxis pulls it first; its size is unknown
/// here).
pub const CONTAINER_WAIT_REGISTRY_SECS: u64 = 300;

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
    // The bound: from the squashfs file's size (a stat on shared storage, in the same round trip),
    // else a registry image's.
    let bound = if t.image.starts_with('/') {
        format!(
            "tao_gib=$(( $(stat -c %s -- {image} 2>/dev/null || echo 0) / 1073741824 ))\n\
             tao_wait=$(( {CONTAINER_WAIT_SECS} + tao_gib * {CONTAINER_WAIT_SECS_PER_GIB} ))\n\
             [ \"$tao_wait\" -le {CONTAINER_WAIT_MAX_SECS} ] || tao_wait={CONTAINER_WAIT_MAX_SECS}\n\
             tao_what=\"an image of $tao_gib GiB\"\n",
            image = shell::quote(t.image)
        )
    } else {
        format!("tao_wait={CONTAINER_WAIT_REGISTRY_SECS}\ntao_what='a registry image'\n")
    };
    Ok(format!(
        "{bound}tao_until=$((SECONDS + tao_wait))\n\
         for tao_up in {files}; do\n\
         \x20 until [ -e \"$tao_up\" ]; do\n\
         \x20   if [ $SECONDS -ge $tao_until ]; then\n\
         \x20     echo \"the job's container is not up after $tao_wait s, the bound for $tao_what (Pyxis may still be importing or unpacking it); try again in a minute\" >&2\n\
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

/// The longest path a Unix socket can have on Linux (`sun_path` is 108 bytes, its NUL among them).
pub const MAX_SOCKET_PATH: usize = 107;

/// The private directory of one TensorBoard start: `<results root>/.tb-<draw in hex>` (the root the
/// job's results directory is in, mounted in its container: a socket path must fit in
/// [`MAX_SOCKET_PATH`] bytes, and the job's own directory adds its id), a name drawn anew each start
/// (no one can make it first), made mode 700 by the start; its socket is [`tensorboard_socket`].
pub fn tensorboard_dir(results_root: &str, draw: [u8; 8]) -> String {
    let hex: String = draw.iter().map(|b| format!("{b:02x}")).collect();
    format!("{results_root}/.tb-{hex}")
}

/// The script that removes a TensorBoard's private directory (its forward ended: the socket goes,
/// TensorBoard itself ends with the job), given its socket; None for a path not of
/// [`tensorboard_dir`]'s form.
pub fn tensorboard_cleanup_script(socket: &str) -> Option<String> {
    let dir = socket.strip_suffix("/s")?;
    let (root, name) = dir.rsplit_once('/')?;
    let hex = name.strip_prefix(".tb-")?;
    let ok = hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()) && check_socket_path(socket).is_ok();
    (ok && !root.is_empty()).then(|| format!("rm -rf -- {}", shell::quote(dir)))
}

/// The Unix socket TensorBoard listens on, in its private directory.
pub fn tensorboard_socket(dir: &str) -> String {
    format!("{dir}/s")
}

/// The command the job's container runs: its image's `tensorboard`, on the Unix socket `socket`
/// (`--host unix://...`, no TCP port at all; `--load_fast=false`: no data server on a loopback port
/// either). TensorBoard's Werkzeug server binds such a socket but then fails to print its URL (it
/// formats the port as a number), so when the image's `tensorboard` is the Python package's script
/// it runs in-process with that one method replaced; any other `tensorboard` (the sandbox's
/// stand-in) runs as it is, given the same flags.
fn tensorboard_command(logdir: &str, socket: &str, path_prefix: Option<&str>) -> Vec<String> {
    const LAUNCH: &str = r#"tb=$(command -v tensorboard) || { echo "tensorboard is not on the container's PATH" >&2; exit 127; }
IFS= read -r first < "$tb" || first=
case $first in
'#!'*python*) exec ${first#'#!'} -c '
import sys
try:
    from tensorboard import main, program
except ImportError:
    import os
    os.execvp("tensorboard", ["tensorboard"] + sys.argv[1:])
program.WerkzeugServer.get_url = lambda self: "http://localhost:0%s/" % self._flags.path_prefix.rstrip("/")
sys.argv[0] = "tensorboard"
main.run_main()
' "$@" ;;
*) exec tensorboard "$@" ;;
esac"#;
    let mut command: Vec<String> = ["bash", "-c", LAUNCH, "tensorboard", "--logdir", logdir].map(String::from).to_vec();
    command.extend(["--host".to_string(), format!("unix://{socket}"), "--port".into(), "0".into()]);
    command.push("--load_fast=false".into());
    if let Some(prefix) = path_prefix {
        command.extend(["--path_prefix".to_string(), prefix.to_string()]);
    }
    command
}

/// The remote script that starts TensorBoard in the job's container on its first node, on
/// `logdir`, detached from the login shell, listening on a Unix socket in `dir` (made here, mode
/// 700, failing if anything is there: [`tensorboard_dir`]), and waits up to 30 s for the socket.
/// Exit 0 once the socket is there, is a socket owned by this user, in the directory this start
/// made, while the TensorBoard it started still runs. No TCP port is opened on the node, so another
/// user of the node has nothing to connect to and nothing to plant first: the directory is this
/// user's, 700, and its name is drawn per start. `path_prefix` serves it under that path (the
/// service's proxy: `/tensorboard/<job id>`).
///
/// Its log, `tensorboard.log` beside the results, is a file the job can plant a symlink as: it is
/// removed (a link itself, never its target) and created anew with `O_EXCL` by the one `dd` that
/// writes it (anything planted meanwhile makes the create fail, and TensorBoard with it); it is
/// read back through the job-file reader (no link followed, capped).
pub fn tensorboard_script(
    t: &ExecTarget<'_>,
    logdir: &str,
    dir: &str,
    path_prefix: Option<&str>,
) -> Result<String, ExecError> {
    let socket = tensorboard_socket(dir);
    check_socket_path(&socket)?;
    if let Some(prefix) = path_prefix {
        check_path_prefix(prefix)?;
    }
    let argv = exec_argv(t, &tensorboard_command(logdir, &socket, path_prefix))?;
    let wait = wait_for_container(t)?;
    // `dd bs=` copies each read as it comes; without it GNU dd holds the output until a 512-byte block
    // fills, and the log showed TensorBoard's first lines only when it ended.
    let script = format!(
        "log={log}\n\
         dir={dir}\n\
         sock={sock}\n\
         {wait}\
         mkdir -m 700 -- \"$dir\" || {{ echo \"could not make TensorBoard's private directory $dir\" >&2; exit 1; }}\n\
         me=$(id -u)\n\
         rm -f -- \"$log\"\n\
         setsid nohup {srun} </dev/null 2>&1 | setsid -w nohup dd of=\"$log\" bs=64K oflag=nofollow conv=excl status=none 2>/dev/null &\n\
         started=$!\n\
         ready=\n\
         for _ in $(seq 150); do\n\
         \x20 kill -0 \"$started\" 2>/dev/null || break\n\
         \x20 if [ -S \"$sock\" ] && [ ! -L \"$sock\" ] && [ \"$(stat -c %u:%a -- \"$dir\")\" = \"$me:700\" ] \\\n\
         \x20   && [ \"$(stat -c %u -- \"$sock\")\" = \"$me\" ] && kill -0 \"$started\" 2>/dev/null; then ready=1; break; fi\n\
         \x20 sleep 0.2\n\
         done\n\
         [ -n \"$ready\" ] && {{\n\
         {probes}\
         \x20 kill \"$started\" 2>/dev/null\n\
         \x20 echo {no_relay} >&2\n\
         \x20 exit 1\n\
         }}\n\
         echo \"TensorBoard did not listen on its socket within 30 s (or it ended); the end of its log:\" >&2\n\
         case $(tao_jf_stat \"$log\") in\n\
         \x20 regular*) size=$(tao_jf_stat \"$log\"); size=${{size#regular }}\n\
         \x20   tao_jf_read \"$log\" $(( size > {tail} ? size - {tail} : 0 )) {tail} | tail -n 20 >&2 ;;\n\
         \x20 *) echo \"(tensorboard.log is missing or not a regular file: not shown)\" >&2 ;;\n\
         esac\n\
         exit 1\n",
        srun = shell::join(&argv),
        log = shell::quote(&format!("{logdir}/tensorboard.log")),
        dir = shell::quote(dir),
        sock = shell::quote(&socket),
        tail = TENSORBOARD_LOG_TAIL,
        probes = relay_probes(t, &socket)?,
        no_relay = shell::quote(&format!(
            "TensorBoard listens on its socket, but nothing can relay a connection to it on node {}: \
             the job's image has no python3, and the node has neither socat nor an nc with -U (install one)",
            relay_node(t)?
        )),
    );
    Ok(super::job_file::with_functions(&script))
}

/// What carries one connection between the login host and TensorBoard's socket on its node: a step
/// of the job (`srun --overlap`, the job's own user and allocation: Slurm lets no other user run
/// one) whose standard input and output are the connection. The login host's sshd cannot reach a
/// Unix socket on another machine, so the socket is reached from the node itself. Chosen once per
/// start ([`tensorboard_script`] tries each on the socket, in this order, and names the first that
/// worked on its last line: [`relay_choice`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relay {
    /// `python3` in the job's own container (its image's: TensorBoard is Python): nothing installed.
    Python,
    /// `socat` on the node, outside the container.
    Socat,
    /// `nc -U` on the node (OpenBSD's or Ncat), outside the container.
    Nc,
}

impl Relay {
    pub const ALL: [Relay; 3] = [Relay::Python, Relay::Socat, Relay::Nc];

    pub fn name(self) -> &'static str {
        match self {
            Relay::Python => "python3",
            Relay::Socat => "socat",
            Relay::Nc => "nc",
        }
    }

    pub fn parse(name: &str) -> Option<Relay> {
        Relay::ALL.into_iter().find(|r| r.name() == name)
    }
}

/// The relay in the container: connects to the socket (its argument), copies stdin to it (then
/// shuts its writing half) and it to stdout, and ends when TensorBoard closes the connection.
pub const PYTHON_RELAY: &str = "import os, socket, sys, threading
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
def up():
    try:
        while True:
            b = os.read(0, 65536)
            if not b:
                break
            s.sendall(b)
    except OSError:
        pass
    try:
        s.shutdown(socket.SHUT_WR)
    except OSError:
        pass
threading.Thread(target=up, daemon=True).start()
while True:
    b = s.recv(65536)
    if not b:
        break
    v = memoryview(b)
    while v:
        v = v[os.write(1, v):]
";

/// The one node of a TensorBoard start.
fn relay_node(t: &ExecTarget<'_>) -> Result<String, ExecError> {
    match &t.place {
        Place::Node(n) => Ok(n.clone()),
        Place::Role(_, nodes) if nodes.len() == 1 => Ok(nodes[0].clone()),
        _ => Err(ExecError::BadNode("a TensorBoard runs on one node".into())),
    }
}

/// The argv of one connection's relay (`srun --overlap --unbuffered` on TensorBoard's node, in the
/// job: [`Relay`]). `socat` takes its address as one word with `:` and `,` in it: a socket path with
/// anything but letters, digits, `/`, `.`, `_`, `-` is refused for it.
pub fn relay_argv(t: &ExecTarget<'_>, relay: Relay, socket: &str) -> Result<Vec<String>, ExecError> {
    check_socket_path(socket)?;
    let mut argv = match relay {
        Relay::Python => exec_argv(t, &["python3", "-c", PYTHON_RELAY, socket].map(String::from))?,
        Relay::Socat | Relay::Nc => {
            let node = relay_node(t)?;
            check_node(&node)?;
            let mut argv: Vec<String> = ["srun", "--overlap"].map(String::from).to_vec();
            argv.extend([
                format!("--jobid={}", t.slurm_job_id),
                "--quiet".into(),
                format!("--nodelist={node}"),
                "--nodes=1".into(),
                "--ntasks=1".into(),
                "--".into(),
            ]);
            if relay == Relay::Socat {
                let plain = socket.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'.' | b'_' | b'-'));
                if !plain {
                    return Err(ExecError::BadSocketPath(socket.to_string()));
                }
                argv.extend(["socat".to_string(), "-".into(), format!("UNIX-CONNECT:{socket}")]);
            } else {
                argv.extend(["nc".to_string(), "-U".into(), socket.to_string()]);
            }
            argv
        }
    };
    // Each byte passed on as it comes, not held for a line's end.
    argv.insert(1, "--unbuffered".into());
    Ok(argv)
}

/// The command line (for the login host) of one connection's relay: [`relay_argv`], quoted.
pub fn relay_line(t: &ExecTarget<'_>, relay: Relay, socket: &str) -> Result<String, ExecError> {
    Ok(shell::join(&relay_argv(t, relay, socket)?))
}

/// The start script's lines that try each relay once on the socket (input at its end at once:
/// the relay connects, passes the end on, and TensorBoard closes), the first that works named on
/// stdout and the script ends. `nc` without `-N` holds the connection open after its input ends:
/// stopped by `timeout` (124), it had connected.
fn relay_probes(t: &ExecTarget<'_>, socket: &str) -> Result<String, ExecError> {
    let mut lines = String::new();
    for relay in Relay::ALL {
        let argv = match relay_argv(t, relay, socket) {
            Ok(argv) => argv,
            Err(ExecError::BadSocketPath(_)) if relay == Relay::Socat => continue,
            Err(e) => return Err(e),
        };
        let ok = if relay == Relay::Nc { "[ $rc -eq 0 ] || [ $rc -eq 124 ]" } else { "[ $rc -eq 0 ]" };
        lines.push_str(&format!(
            "\x20 timeout {secs} {srun} </dev/null >/dev/null 2>&1; rc=$?\n\x20 if {ok}; then echo {token}; exit 0; fi\n",
            srun = shell::join(&argv),
            secs = if relay == Relay::Nc { 20 } else { 60 },
            token = shell::quote(&format!("{RELAY_TOKEN}{}", relay.name())),
        ));
    }
    Ok(lines)
}

/// What the start script's last line of stdout begins with, the relay's name after it.
pub const RELAY_TOKEN: &str = "tao-slurm-relay=";

/// The relay a start chose, from its stdout's last line (the script's own, not the job's: every
/// step's output goes elsewhere).
pub fn relay_choice(stdout: &str) -> Option<Relay> {
    Relay::parse(stdout.lines().last()?.trim().strip_prefix(RELAY_TOKEN)?)
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

/// A socket path ssh can forward (`-L local:remote`: no `:`) and Linux can bind (at most
/// [`MAX_SOCKET_PATH`] bytes, absolute).
pub fn check_socket_path(path: &str) -> Result<(), ExecError> {
    if !path.starts_with('/') || path.contains(':') || path.bytes().any(|b| b.is_ascii_control()) {
        return Err(ExecError::BadSocketPath(path.to_string()));
    }
    if path.len() > MAX_SOCKET_PATH {
        return Err(ExecError::SocketPathTooLong(path.to_string(), path.len()));
    }
    Ok(())
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
        ExecTarget {
            slurm_job_id: "42",
            job_id: "abc",
            place,
            pty,
            node_list: "node[1-2]",
            results_dir: "/r/abc",
            image: "nvcr.io#nvidia/tao/tao-toolkit:6.0.0-pyt",
        }
    }

    #[test]
    fn tensorboard_listens_on_a_socket_in_its_private_directory_never_on_a_port() {
        let t = target(Some("node1"), false);
        let dir = tensorboard_dir("/r", [0xab; 8]);
        assert_eq!(dir, "/r/.tb-abababababababab");
        assert_ne!(tensorboard_dir("/r", [1; 8]), dir, "a new draw, a new directory");
        let socket = tensorboard_socket(&dir);
        assert_eq!(tensorboard_cleanup_script(&socket).as_deref(), Some("rm -rf -- /r/.tb-abababababababab"));
        for other in [
            "/r/x/s",
            "/r/.tb-abab/s",
            "/r/.tb-abababababababab",
            "/.tb-abababababababab/s",
            "/r/.tb-abababababababaz/s",
        ] {
            assert_eq!(tensorboard_cleanup_script(other), None, "{other}");
        }
        let plain = tensorboard_script(&t, "/r/abc", &dir, None).unwrap();
        assert!(
            plain.contains(
                "--logdir /r/abc --host unix:///r/.tb-abababababababab/s --port 0 --load_fast=false </dev/null"
            ),
            "{plain}"
        );
        assert!(plain.contains("mkdir -m 700 -- \"$dir\""), "{plain}");
        assert!(!plain.contains("--bind_all") && !plain.contains("/dev/tcp"), "no TCP port anywhere: {plain}");
        assert!(!plain.contains("--path_prefix"), "{plain}");
        let prefixed = tensorboard_script(&t, "/r/abc", &dir, Some("/tensorboard/abc")).unwrap();
        assert!(prefixed.contains("--load_fast=false --path_prefix /tensorboard/abc </dev/null 2>&1 |"), "{prefixed}");
        for bad in ["tensorboard/abc", "/a b", "/a;rm", "//x", "/a/../b", "/x'y", ""] {
            let e = tensorboard_script(&t, "/r/abc", &dir, Some(bad));
            assert!(matches!(e, Err(ExecError::BadPathPrefix(_))), "{bad:?}: {e:?}");
        }
        let long = tensorboard_dir(&format!("/{}", "r".repeat(90)), [0; 8]);
        let e = tensorboard_script(&t, "/r/abc", &long, None);
        assert!(matches!(e, Err(ExecError::SocketPathTooLong(_, 114))), "{e:?}");
        for bad in ["/r/a:b", "relative", "/r/a\nb"] {
            assert!(matches!(check_socket_path(bad), Err(ExecError::BadSocketPath(_))), "{bad:?}");
        }
    }

    #[test]
    fn a_connection_is_relayed_by_a_step_of_the_job_on_tensorboards_node() {
        let t = target(Some("node2"), false);
        let sock = "/r/.tb-abababababababab/s";
        let py = relay_argv(&t, Relay::Python, sock).unwrap();
        assert_eq!(
            py[..8].join(" "),
            "srun --unbuffered --overlap --jobid=42 --quiet --nodelist=node2 --nodes=1 --ntasks=1",
            "{py:?}"
        );
        assert_eq!(py[8..11], ["--container-name=tao-abc", "--", "python3"], "in the job's own container: {py:?}");
        assert_eq!(py.last().map(String::as_str), Some(sock));
        let line = relay_line(&t, Relay::Socat, sock).unwrap();
        assert_eq!(
            line,
            "srun --unbuffered --overlap --jobid=42 --quiet --nodelist=node2 --nodes=1 --ntasks=1 -- socat - \
             UNIX-CONNECT:/r/.tb-abababababababab/s"
        );
        let nc = relay_argv(&t, Relay::Nc, sock).unwrap();
        assert_eq!(nc[nc.len() - 4..], ["--", "nc", "-U", sock]);
        // socat reads `,` and `:` in its address as its own syntax: such a path is not given to it.
        for odd in ["/r,fork/s", "/r x/s", "/r/'$(id)'/s"] {
            assert!(matches!(relay_argv(&t, Relay::Socat, odd), Err(ExecError::BadSocketPath(_))), "{odd}");
            let nc = relay_line(&t, Relay::Nc, odd).unwrap();
            assert!(nc.ends_with(&shell::quote(odd)), "quoted whole: {nc}");
        }
        assert!(relay_argv(&t, Relay::Python, "relative/s").is_err());
        // The script's own last line names the relay; anything else names none.
        assert_eq!(relay_choice("x\ntao-slurm-relay=socat\n"), Some(Relay::Socat));
        assert_eq!(relay_choice("tao-slurm-relay=python3"), Some(Relay::Python));
        for other in ["", "tao-slurm-relay=sh", "tao-slurm-relay=nc\nmore", "relay=nc"] {
            assert_eq!(relay_choice(other), None, "{other:?}");
        }
        let script = tensorboard_script(&t, "/r/abc", "/r/.tb-abababababababab", None).unwrap();
        let (p, s, n) = (script.find("python3 -c"), script.find("socat -"), script.find("nc -U"));
        assert!(p < s && s < n && p.is_some(), "tried in order: python3, socat, nc: {script}");
    }

    #[test]
    fn a_start_without_a_relay_fails_naming_what_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("results")).unwrap();
        // Every relay's step fails (no python3 in the image, neither socat nor nc on the node).
        std::fs::write(dir.path().join("no-relay"), "").unwrap();
        let (rc, err) = run_start(dir.path(), LISTENING, &tb_dir(dir.path(), 7));
        assert_eq!(rc, 1, "{err}");
        assert!(err.contains("no python3") && err.contains("socat") && err.contains("node node1"), "{err}");
        assert_eq!(relay_choice(&std::fs::read_to_string(dir.path().join("stdout")).unwrap()), None);
    }

    /// The start script under bash, with `srun` a stand-in (`fake_srun`, a bash body run as the job
    /// would: in its results directory, with `$sock` the socket it was asked to listen on) on PATH;
    /// its exit status and stderr.
    fn run_start(dir: &std::path::Path, fake_srun: &str, tb_dir: &str) -> (i32, String) {
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let srun = bin.join("srun");
        let body = format!(
            "#!/bin/bash\nif [[ \" $* \" == *\" --unbuffered \"* ]]; then [ -e {}/no-relay ] && exit 127\n\
             while [ \"$1\" != -- ]; do shift; done; shift; exec \"$@\"; fi\n\
             cd {}\nfor a; do case $a in unix://*) sock=${{a#unix://}};; esac; done\n{fake_srun}\n",
            dir.display(),
            dir.join("results").display()
        );
        std::fs::write(&srun, body).unwrap();
        std::fs::set_permissions(&srun, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let results = dir.join("results").display().to_string();
        // The job's container is up on its node (else the start waits CONTAINER_WAIT_SECS for it).
        let t = ExecTarget { results_dir: &results, ..target(Some("node1"), false) };
        let up = crate::layout::container_up_file(&results, t.slurm_job_id, "node1", &container_of(&t));
        std::fs::create_dir_all(std::path::Path::new(&up).parent().unwrap()).unwrap();
        std::fs::write(&up, "").unwrap();
        let script = tensorboard_script(&t, &results, tb_dir, None).unwrap();
        let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
        let out = std::process::Command::new("bash").arg("-c").arg(&script).env("PATH", path).output().unwrap();
        std::fs::write(dir.join("stdout"), &out.stdout).unwrap();
        (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
    }

    /// A stand-in TensorBoard: says a line, then listens on `$sock`, closing each connection it takes,
    /// until its socket is gone (the test's directory removed) or two minutes pass. Not a few seconds:
    /// the log must show its line while it runs, and on a loaded machine a 5 s listener can end before
    /// the start's probes reach it.
    const LISTENING: &str = "echo started here\nexec python3 -c 'import os,select,socket,sys,time; \
         s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(); end=time.time()+120\n\
         while time.time()<end and os.path.exists(sys.argv[1]):\n\
         \x20 if select.select([s],[],[],0.5)[0]: s.accept()[0].close()' \"$sock\"";

    fn tb_dir(dir: &std::path::Path, n: u8) -> String {
        tensorboard_dir(&dir.display().to_string(), [n; 8])
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
        let (rc, err) = run_start(dir.path(), LISTENING, &tb_dir(dir.path(), 1));
        assert_eq!(rc, 0, "{err}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "the user's own file\n");
        let meta = std::fs::symlink_metadata(&log).unwrap();
        assert!(meta.file_type().is_file(), "our log is a regular file of its own");
        let written = (0..300).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(100));
            std::fs::read_to_string(&log).unwrap_or_default().contains("started here")
        });
        assert!(
            written,
            "TensorBoard's output reaches its log: {:?} {:?}",
            std::fs::read_to_string(&log),
            std::fs::read_dir(dir.path().join("results")).unwrap().map(|e| e.unwrap().path()).collect::<Vec<_>>()
        );

        // Planted while it runs, then the start fails: the log's tail is not read through the link.
        std::fs::remove_file(&log).unwrap();
        // Once the script's own log exists (its writer made it), swap it for a link; swapped before
        // the writer made it, the writer's create would win and there would be no link to test.
        let swap = format!(
            "for _ in $(seq 100); do [ -e tensorboard.log ] && break; sleep 0.05; done\n\
             rm -f tensorboard.log; ln -s {} tensorboard.log; exit 1",
            victim.display()
        );
        let (rc, err) = run_start(dir.path(), &swap, &tb_dir(dir.path(), 2));
        assert_eq!(rc, 1, "{err}");
        assert!(err.contains("not a regular file: not shown"), "{err}");
        assert!(!err.contains("the user's own file"), "{err}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "the user's own file\n");
    }

    #[test]
    fn a_start_succeeds_only_on_a_socket_of_its_own_in_the_directory_it_made() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("results")).unwrap();
        let marker = format!("touch {}/srun-ran; {LISTENING}", dir.path().display());
        // Its directory there already (made first by anyone, a link or a directory): nothing starts.
        let planted = tb_dir(dir.path(), 3);
        std::fs::create_dir(&planted).unwrap();
        std::os::unix::net::UnixListener::bind(tensorboard_socket(&planted)).unwrap();
        let (rc, err) = run_start(dir.path(), &marker, &planted);
        assert_eq!(rc, 1, "{err}");
        assert!(err.contains("private directory"), "{err}");
        let linked = tb_dir(dir.path(), 4);
        std::os::unix::fs::symlink(&planted, &linked).unwrap();
        let (rc, err) = run_start(dir.path(), &marker, &linked);
        assert_eq!(rc, 1, "{err}");
        assert!(!dir.path().join("srun-ran").exists(), "nothing was started");
        // Something not a socket at its path, then its end: no success.
        let not_socket = "echo not a socket > \"$sock\"; sleep 1; echo gave up >&2; exit 3";
        let (rc, err) = run_start(dir.path(), not_socket, &tb_dir(dir.path(), 5));
        assert_eq!(rc, 1, "{err}");
        assert!(err.contains("gave up"), "the log's end is shown: {err}");
        // Its own listener, in a directory only this user can enter.
        let own = tb_dir(dir.path(), 6);
        let (rc, err) = run_start(dir.path(), &marker, &own);
        assert_eq!(rc, 0, "{err}");
        let out = std::fs::read_to_string(dir.path().join("stdout")).unwrap();
        assert_eq!(relay_choice(&out), Some(Relay::Python), "the relay that reached the socket: {out:?}");
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&own).unwrap().permissions());
        assert_eq!(mode & 0o777, 0o700);
        assert!(std::os::unix::net::UnixStream::connect(tensorboard_socket(&own)).is_ok());
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
            image: "nvcr.io#nvidia/tao/tao-toolkit:6.0.0-pyt",
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

    /// The wait's bound grows with the squashfs file the container is unpacked from (a GiB: 30 s
    /// more), up to 15 minutes; a registry image's is 5 minutes; the message says which it was.
    #[test]
    fn the_wait_for_the_container_scales_with_its_image_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("big.sqsh");
        let file = std::fs::File::create(&image).unwrap();
        let image = image.display().to_string();
        let bound = |size: u64, image: &str| {
            file.set_len(size).unwrap();
            let t = ExecTarget { image, ..target(Some("node1"), false) };
            let script = wait_for_container(&t).unwrap();
            let script = script.split("tao_until=").next().unwrap().to_string();
            let out = std::process::Command::new("bash")
                .arg("-c")
                .arg(format!("{script}echo \"$tao_wait $tao_what\""))
                .output()
                .unwrap();
            String::from_utf8(out.stdout).unwrap().trim().to_string()
        };
        assert_eq!(bound(100 << 20, &image), "60 an image of 0 GiB");
        assert_eq!(bound(12 << 30, &image), "420 an image of 12 GiB", "a sparse 12 GiB file");
        assert_eq!(bound(200 << 30, &image), "900 an image of 200 GiB", "at most 15 minutes");
        assert_eq!(bound(0, "/no/such.sqsh"), "60 an image of 0 GiB");
        assert_eq!(bound(0, "nvcr.io#nvidia/x:1"), "300 a registry image");
        // The message when the bound runs out names it.
        let t = ExecTarget { image: "nvcr.io#nvidia/x:1", ..target(Some("node1"), false) };
        let script = wait_for_container(&t).unwrap().replace("tao_wait=300", "tao_wait=0");
        let out = std::process::Command::new("bash").arg("-c").arg(script).output().unwrap();
        let said = String::from_utf8(out.stderr).unwrap();
        assert!(said.contains("not up after 0 s, the bound for a registry image"), "{said}");
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
