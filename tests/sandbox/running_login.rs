//! `login` (issue 26) against a login host that asks for a password by keyboard-interactive: a
//! third sshd owned by this test. Without `login` commands fail at once with the advice; after it
//! (answered through a pseudo-terminal) submit, status and logs run without a prompt, over the one
//! login.

use crate::common::pty::PtyChild;
use crate::common::wait::{wait_for, when};
use crate::common::{sandbox, Env};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// An sshd on 127.0.0.1:`port` that takes the sandbox user's password by keyboard-interactive only.
struct PasswordSshd {
    child: Child,
    log: std::path::PathBuf,
    port: u16,
}

impl PasswordSshd {
    fn start(dir: &std::path::Path) -> PasswordSshd {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let conf = dir.join("sshd_config");
        let sd = sandbox::dir();
        let sd = sd.display();
        let user = sandbox::setting("SLURM_USER");
        std::fs::write(
            &conf,
            format!(
                "ListenAddress 127.0.0.1\nPort {port}\nHostKey {sd}/ssh/ssh_host_ed25519_key\nPidFile none\n\
                 PubkeyAuthentication no\nPasswordAuthentication no\nKbdInteractiveAuthentication yes\nUsePAM yes\n\
                 AuthenticationMethods keyboard-interactive\nAllowUsers {user}\nMaxSessions 64\nPrintMotd no\n\
                 AllowTcpForwarding yes\nAllowStreamLocalForwarding yes\n\
                 SetEnv SLURM_CONF={sd}/etc/slurm.conf PATH={sd}/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin\n"
            ),
        )
        .unwrap();
        let log = dir.join("sshd.log");
        let child = Command::new("/usr/sbin/sshd")
            .args(["-D", "-f"])
            .arg(&conf)
            .arg("-E")
            .arg(&log)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        wait_for("the password sshd to listen", Duration::from_secs(10), Duration::from_millis(50), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        PasswordSshd { child, log, port }
    }

    fn accepted_logins(&self) -> usize {
        std::fs::read_to_string(&self.log).unwrap_or_default().matches("Accepted keyboard-interactive").count()
    }
}

impl Drop for PasswordSshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `tao-slurm login` in a pseudo-terminal, answering the password prompt; its exit code and output.
fn login_through_a_pty(env: &Env, password: &str) -> (i32, String) {
    let mut login = PtyChild::spawn(env.command(&["login", "--persist", "5min"]));
    wait_for("the password prompt", Duration::from_secs(20), Duration::from_millis(50), || {
        when(login.seen(), |s| s.contains("Password:"))
    });
    login.type_in(&format!("{password}\n"));
    let status = wait_for("login to end", Duration::from_secs(30), Duration::from_millis(50), || {
        login.child.try_wait().unwrap()
    });
    // The child can be seen to end before the reader has taken its last line from the terminal (CI
    // met it): its outcome line is waited for a moment; the caller's assertions judge the text.
    let until = Instant::now() + Duration::from_secs(5);
    while !login.seen().contains("logged in") && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    let text = login.seen();
    (status.code().unwrap_or(-1), text)
}

/// The pids of the SSH masters whose control sockets are in `control_dir` (by their command line,
/// or the title `ssh: <socket> [mux]` some builds give a master).
fn master_pids(control_dir: &std::path::Path) -> Vec<i32> {
    let dir = control_dir.display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline);
            (cmdline.contains("[mux]") || cmdline.contains("ControlMaster=yes")) && cmdline.contains(&dir)
        })
        .collect()
}

#[test]
fn login_answers_the_password_once_and_every_later_command_reuses_it() {
    let password = std::fs::read_to_string(sandbox::dir().join("login-password")).expect("up.sh writes the password");
    let mut env = Env::isolated();
    let sshd = PasswordSshd::start(env.dir.path());
    // Its own known_hosts: the new port's key is recorded there, not in the sandbox's.
    let known = env.dir.path().join("known_hosts");
    std::fs::copy(sandbox::dir().join("ssh/known_hosts"), &known).unwrap();
    env.vars.insert("SLURM_HOSTNAME".into(), format!("127.0.0.1:{}", sshd.port));
    env.vars.insert("SSH_KNOWN_HOSTS".into(), known.display().to_string());
    env.vars.insert("SSH_ACCEPT_NEW_HOST_KEYS".into(), "true".into());

    // Without login: at once, with the advice, never a hidden prompt.
    let started = Instant::now();
    let out = env.run(&["submit", "--image", "ubuntu:22.04", "--gpus", "0", "--", "true"]);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("Run `tao-slurm login`"), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(10), "failed at once: {:?}", started.elapsed());
    let preflight = env.run(&["preflight"]);
    let report = String::from_utf8_lossy(&preflight.stdout).to_string() + &String::from_utf8_lossy(&preflight.stderr);
    assert!(
        !preflight.status.success() && report.contains("tao-slurm login"),
        "preflight names the host's need: {report}"
    );
    assert_eq!(sshd.accepted_logins(), 0);

    let (code, text) = login_through_a_pty(&env, password.trim());
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("logged in") && !text.contains(password.trim()), "{text}");

    // The master outlives the terminal it was opened in: it ignores the hangup of closing it (a
    // race CI met once, the master quitting on the PTY's close before ssh -f had detached it).
    let masters = master_pids(&env.dir.path().join("cm"));
    let ps = Command::new("ps").args(["-eo", "pid,sid,args"]).output().unwrap();
    assert_eq!(masters.len(), 1, "one master: {masters:?}\n{}", String::from_utf8_lossy(&ps.stdout));
    let status = std::fs::read_to_string(format!("/proc/{}/status", masters[0])).unwrap();
    let ignored =
        status.lines().find_map(|l| l.strip_prefix("SigIgn:")).map(|m| u64::from_str_radix(m.trim(), 16).unwrap());
    assert_eq!(ignored.map(|m| m & 1), Some(1), "the master ignores SIGHUP: {status}");
    // SAFETY: a signal to a process of this test's.
    assert_eq!(unsafe { libc::kill(masters[0], libc::SIGHUP) }, 0);

    let (job, _) = env.submit(&["--image", "ubuntu:22.04", "--gpus", "0", "--shell", "--", "echo over-the-login"]);
    let v = env.wait_terminal(&job, Duration::from_secs(300));
    assert_eq!(v["status"], "Complete", "{v}");
    let logs = env.json(&["logs", &job, "--json"]);
    assert!(logs["stdout"].as_str().unwrap().contains("over-the-login"), "{logs}");
    // A second login finds the connection up and asks nothing.
    assert!(env.ok(&["login"]).contains("already logged in"));
    assert_eq!(sshd.accepted_logins(), 1, "one password answered for every command");
}
