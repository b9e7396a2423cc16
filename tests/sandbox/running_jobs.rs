//! Working with a running job (issue 26): `exec` runs in the job's allocation and container and
//! passes its exit status back, `shell` gives a terminal, `forward` reaches a server on the job's node
//! and stops when asked, `tensorboard` starts the stand-in on the job's results, on a Unix socket of
//! the job user's that no other user of the node reaches, and forwards it.

use crate::common::pty::PtyChild;
use crate::common::wait::{wait_for, when};
use crate::common::Env;
use std::io::{Read, Write};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(90);

/// A job that runs until cancelled; returns its id and its node once its command runs in its
/// container. (Running in Slurm is not enough: Pyxis imports the image and creates the container
/// after the job starts, and a step joining it by name before then finds no container.)
pub(crate) fn running_job(env: &Env, command: &str) -> (String, String) {
    let command = format!("echo in-its-container; {command}");
    let (job, _) = env.submit(&["--image", "ubuntu:22.04", "--gpus", "0", "--shell", "--", &command]);
    let v = env.wait_job(&job, "running", LIMIT, |v| v["status"] == "Running" && v["node_list"].is_string());
    wait_for("the job's command in its container", LIMIT, Duration::from_millis(300), || {
        let logs = env.json(&["logs", &job, "--json"]);
        when(logs["stdout"].as_str().unwrap_or("").to_string(), |o| o.contains("in-its-container"))
    });
    (job, v["node_list"].as_str().unwrap().to_string())
}

/// One HTTP GET on 127.0.0.1:port; the response body, or the error.
fn http_get(port: u16) -> Result<String, String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET / HTTP/1.0\r\nHost: localhost\r\n\r\n").map_err(|e| e.to_string())?;
    let mut text = String::new();
    s.read_to_string(&mut text).map_err(|e| e.to_string())?;
    match text.split_once("\r\n\r\n") {
        Some((head, body)) if head.starts_with("HTTP/1") => Ok(body.to_string()),
        _ => Err(format!("not an HTTP answer: {text:?}")),
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn exec_runs_in_the_job_on_its_node_and_passes_the_exit_status_back() {
    let env = Env::new();
    let (job, node) = running_job(&env, "echo in-the-job > /tmp/marker; sleep 300");
    let out = env.run(&["exec", &job, "--", "sh", "-c", "echo node=$SLURMD_NODENAME job=$SLURM_JOB_ID; hostname"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(0), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    let slurm = env.status(&job)["slurm_job_id"].as_str().unwrap().to_string();
    assert!(text.contains(&format!("node={node} job={slurm}")), "{text}");
    // The sandbox's nodes are slurmds on this machine: the job's node's host name is this machine's.
    let host = String::from_utf8(std::process::Command::new("hostname").output().unwrap().stdout).unwrap();
    assert!(text.lines().any(|l| l == host.trim()), "{text}");
    assert_eq!(env.run(&["exec", &job, "--", "false"]).status.code(), Some(1));
    assert_eq!(env.run(&["exec", &job, "--", "sh", "-c", "exit 7"]).status.code(), Some(7));
    // exec joined the job's own container (by its name): the file the job wrote in the container's
    // root filesystem is there.
    let marker = env.ok(&["exec", &job, "--node", &node, "--", "cat", "/tmp/marker"]);
    assert_eq!(marker.trim(), "in-the-job");
    // A word with shell syntax stays one word.
    let odd = env.ok(&["exec", &job, "--", "echo", "$(echo no); `x` 'q'"]);
    assert_eq!(odd.trim(), "$(echo no); `x` 'q'");
    env.ok(&["cancel", &job]);
}

#[test]
fn forward_reaches_a_server_on_the_job_node_and_stops_when_asked() {
    // A master of its own: a forward lives in its master, which other tests may stop.
    let env = Env::isolated();
    let port = free_port();
    let (job, _) = running_job(
        &env,
        &format!("cd \"$TAO_API_RESULTS_DIR\" && echo forwarded-page > index.html && exec python3 -m http.server {port} --bind 127.0.0.1"),
    );
    let local = free_port();
    let mut child = env.command(&["forward", &job, &format!("{port}:{local}"), "--for", "10min"]);
    child.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let mut child = child.spawn().unwrap();
    let body = wait_for("the forwarded page", LIMIT, Duration::from_millis(300), || {
        http_get(local).and_then(|b| if b.contains("forwarded-page") { Ok(b) } else { Err(b) })
    });
    assert!(body.contains("forwarded-page"), "{body}");
    // Ctrl-C stops it: the local port refuses connections afterwards.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(std::net::TcpStream::connect(("127.0.0.1", local)).is_err(), "the forward was cancelled");
    env.ok(&["cancel", &job]);
}

/// Run `code` (Python) as the Unix user `user` of this machine (the sandbox's nodes are slurmds on
/// it; root runs the tests) with `arg`; its exit status and stderr.
fn python_as(user: &str, code: &str, arg: &str) -> (bool, String) {
    let out =
        std::process::Command::new("runuser").args(["-u", user, "--", "python3", "-c", code, arg]).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

const CONNECT: &str = "import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); \
    s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n'); print(s.recv(100))";

/// The socket inodes of TCP listeners on this machine (`/proc/net/tcp{,6}`, state 0A).
fn tcp_listening_inodes() -> std::collections::HashSet<String> {
    let mut inodes = std::collections::HashSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        for line in std::fs::read_to_string(table).unwrap_or_default().lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() > 9 && f[3] == "0A" {
                inodes.insert(f[9].to_string());
            }
        }
    }
    inodes
}

/// The processes whose argv has `word`, but not `srun` (Slurm's own client listens for its
/// slurmd, munge-authenticated), and the socket inodes each holds open.
fn processes_with(word: &str) -> Vec<(u32, Vec<String>)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let argv = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let mut words = argv.split(|b| *b == 0);
        if words.next().is_some_and(|a| a.ends_with(b"srun")) || !words.any(|a| a == word.as_bytes()) {
            continue;
        }
        let sockets = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|fds| {
                fds.flatten()
                    .filter_map(|fd| std::fs::read_link(fd.path()).ok())
                    .filter_map(|l| l.to_str()?.strip_prefix("socket:[")?.strip_suffix(']').map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        found.push((pid, sockets));
    }
    found
}

/// Issue 50: TensorBoard listens on a Unix socket in a directory of the job user's (mode 700, its
/// name drawn per start) and no TCP port at all; another Unix user of the node can neither reach
/// it nor make its place first; the CLI's local port is held from the start.
#[test]
fn tensorboard_starts_in_the_job_container_on_its_results_and_is_forwarded() {
    let env = Env::isolated();
    let (job, _) =
        running_job(&env, "echo events > \"$TAO_API_RESULTS_DIR/$TAO_JOB_ID/events.out.tfevents.1\"; sleep 300");
    let results = env.status(&job)["results_dir"].as_str().unwrap().to_string();
    let neighbour = crate::common::sandbox::settings().get("SANDBOX_NEIGHBOUR").cloned().unwrap_or("neighbour".into());
    // The neighbour cannot make TensorBoard's place beside the job's results first.
    let root = results.rsplit_once('/').unwrap().0.to_string();
    let (planted, err) =
        python_as(&neighbour, "import os, sys; os.mkdir(sys.argv[1] + '/.tb-0000000000000000')", &root);
    assert!(!planted && err.contains("PermissionError"), "{err}");

    let local = free_port();
    let mut cmd = env.command(&["tensorboard", &job, "--local-port", &local.to_string(), "--for", "60s", "--json"]);
    cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    // The JSON object is printed first, then the forward holds until Ctrl-C.
    let mut text = String::new();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    while !text.ends_with("}\n") {
        if std::io::BufRead::read_line(&mut out, &mut text).unwrap() == 0 {
            let mut err = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
            panic!("stdout ended: {text:?}; stderr: {err}");
        }
    }
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
    assert_eq!(v["local_port"].as_u64(), Some(u64::from(local)), "{v}");
    assert_eq!(v["remote_port"].as_u64(), Some(0), "no port on the node: {v}");
    let remote = v["remote_socket"].as_str().unwrap().to_string();
    let local_socket = v["local_socket"].as_str().unwrap().to_string();
    let tb_dir = remote.strip_suffix("/s").unwrap();
    assert!(tb_dir.starts_with(&format!("{root}/.tb-")), "{remote}");
    // The job writes its events file as its step starts, maybe after TensorBoard does.
    let page = wait_for("the events file on the TensorBoard page", LIMIT, Duration::from_millis(300), || {
        http_get(local).and_then(|p| if p.contains("events.out.tfevents.1") { Ok(p) } else { Err(p) })
    });
    assert!(page.contains("TensorBoard stand-in"), "{page}");
    assert!(page.contains(&job), "TensorBoard reads the job's results directory: {page}");
    assert_eq!(v["relay"].as_str(), Some("python3"), "the job's container's python3 relays it: {v}");

    // A connection is a step of the job on its node (`srun --overlap`: what reaches a node that is
    // not the login host): one held open here is a running `python3` step of the job until it ends,
    // and the page comes through it.
    let slurm = env.status(&job)["slurm_job_id"].as_str().unwrap().to_string();
    let steps = || env.ssh(&format!("squeue -h -s -j {slurm} -o '%i %j %N'"));
    let mut held = std::os::unix::net::UnixStream::connect(&local_socket).unwrap();
    let step = wait_for("the relay's step of the job", LIMIT, Duration::from_millis(200), || {
        let s = steps();
        s.lines().find(|l| l.split_whitespace().nth(1) == Some("python3")).map(String::from).ok_or(s)
    });
    assert!(step.starts_with(&format!("{slurm}.")), "a step of the job: {step}");
    held.set_read_timeout(Some(LIMIT)).unwrap();
    held.write_all(b"GET / HTTP/1.0\r\nHost: localhost\r\n\r\n").unwrap();
    let mut through = String::new();
    held.read_to_string(&mut through).unwrap();
    assert!(through.contains("TensorBoard stand-in"), "{through}");
    let step_id = step.split_whitespace().next().unwrap().to_string();
    wait_for("the relay's step to end with its connection", LIMIT, Duration::from_millis(200), || {
        when(steps(), |s| !s.lines().any(|l| l.split_whitespace().next() == Some(step_id.as_str())))
    });
    // Another Unix user cannot run that relay in the job (Slurm runs no step of another user's job).
    let srun = format!(
        "SLURM_CONF={}/etc/slurm.conf srun --overlap --jobid={slurm} -N1 -n1 --quiet python3 -c \"$0\" {remote}",
        crate::common::sandbox::settings()["SANDBOX_DIR"]
    );
    let out = std::process::Command::new("runuser")
        .args(["-u", &neighbour, "--", "bash", "-c", &srun, CONNECT])
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success() && !stdout.contains("TensorBoard"), "the neighbour's step: {stdout} {stderr}");
    assert!(stderr.contains("denied") || stderr.contains("nvalid"), "refused by Slurm: {stderr}");

    // Both private directories are 700 and their owner's.
    use std::os::unix::fs::MetadataExt;
    let node_dir = std::fs::metadata(tb_dir).unwrap();
    assert_eq!(node_dir.mode() & 0o777, 0o700, "{tb_dir}");
    let owner = std::fs::metadata(&results).unwrap().uid();
    assert_eq!(node_dir.uid(), owner, "the job user's");
    let here = std::path::Path::new(&local_socket).parent().unwrap();
    assert_eq!(std::fs::metadata(here).unwrap().mode() & 0o777, 0o700, "{local_socket}");

    // TensorBoard holds no TCP listener (nothing on the node to connect to or take first): the
    // processes that have its socket in their argv (TensorBoard's, not the srun that started it)
    // hold sockets, none of them a TCP listener.
    let tb = processes_with(&format!("unix://{remote}"));
    assert!(tb.iter().any(|(_, sockets)| !sockets.is_empty()), "TensorBoard's processes and sockets: {tb:?}");
    // TensorBoard runs in the job's container (Enroot's root filesystem of the job's image), not on
    // the node: its root's /etc/os-release is the image's.
    let roots: Vec<String> = tb
        .iter()
        .filter_map(|(pid, _)| std::fs::read_to_string(format!("/proc/{pid}/root/etc/os-release")).ok())
        .collect();
    assert!(
        roots.iter().any(|r| r.lines().any(|l| l == "TAO_SLURM_SANDBOX_IMAGE=library/ubuntu:22.04")),
        "TensorBoard's processes' roots: {roots:?}"
    );
    let listening = tcp_listening_inodes();
    for (pid, sockets) in &tb {
        assert!(sockets.iter().all(|s| !listening.contains(s)), "process {pid} listens on TCP: {sockets:?}");
    }
    // Another Unix user of the node cannot connect to its socket; its own user can.
    let (reached, err) = python_as(&neighbour, CONNECT, &remote);
    assert!(!reached && err.contains("PermissionError"), "the neighbour reached TensorBoard: {err}");
    let user =
        String::from_utf8(std::process::Command::new("stat").args(["-c", "%U", &results]).output().unwrap().stdout)
            .unwrap();
    let (reached, err) = python_as(user.trim(), CONNECT, &remote);
    assert!(reached, "the job's user reaches it: {err}");

    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    assert_eq!(child.wait().unwrap().code(), Some(0));
    assert!(!here.exists(), "the local socket's directory goes with the forward");
    assert!(!std::path::Path::new(tb_dir).exists(), "and so does TensorBoard's on the node");
    env.ok(&["cancel", &job]);
}

/// `shell` opens a terminal in the job's own container on the real Pyxis and Enroot: the file the
/// job wrote in its container's root filesystem is there, and the image's own /etc/os-release.
#[test]
fn shell_through_a_pseudo_terminal_runs_a_command_and_exits() {
    let env = Env::new();
    let (job, _) = running_job(&env, "echo \"shell-$TAO_JOB_ID\" > /tmp/marker; sleep 300");
    let mut shell = PtyChild::spawn(env.command(&["shell", &job, "--", "sh"]));
    // The terminal echoes the line as typed: only the shell's answer has the expanded values.
    shell.type_in(
        "echo tty=$(test -t 0 && echo yes) sum=$((6*7)) marker=$(cat /tmp/marker) image=$(. /etc/os-release; echo $TAO_SLURM_SANDBOX_IMAGE)\r",
    );
    let want = format!("tty=yes sum=42 marker=shell-{job} image=library/ubuntu:22.04");
    wait_for("the shell's answer", LIMIT, Duration::from_millis(200), || when(shell.seen(), |s| s.contains(&want)));
    shell.type_in("exit 3\r");
    let code = wait_for("the shell to end", LIMIT, Duration::from_millis(200), || shell.child.try_wait().unwrap());
    assert_eq!(code.code(), Some(3), "{}", shell.seen());
    env.ok(&["cancel", &job]);
}
