//! Transport over the system's OpenSSH: one ControlMaster connection per login host, shared by every
//! command of this process and, through ControlPersist, by the CLI invocations that follow it.
//!
//! Why OpenSSH and not an SSH library: it reads the user's `~/.ssh/config` (aliases, ProxyJump,
//! certificates), their agent and known_hosts exactly as `ssh` does, and its ControlMaster lets separate
//! short-lived CLI processes share one authenticated connection, which no in-process library can.

use super::resolve::{Resolved, Target, TargetCache};
use super::session::{CallError, Pool, Session};
use super::{Idempotency, Remote, RemoteError, RemoteOutput};
use crate::config::{LoginHost, Settings};
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

pub struct OpenSsh {
    user: String,
    hosts: Vec<LoginHost>,
    ssh_config: Option<PathBuf>,
    known_hosts: Option<PathBuf>,
    key_path: Option<PathBuf>,
    auth_sock: Option<String>,
    /// Only `key_path`: no ssh_config file, no agent (see `Settings::ssh_key_only`).
    key_only: bool,
    connect_timeout_secs: u32,
    control_persist_secs: u32,
    control_dir: PathBuf,
    accept_new_host_keys: bool,
    remote_timeout: Duration,
    /// A hash of everything that decides how we authenticate (user, key, known_hosts, ssh_config,
    /// agent, host-key policy): part of every control socket's name, so that a run with other
    /// settings never rides a master that was authenticated under the old ones.
    profile: String,
    /// Per host, the path of its master's socket ([`socket_name`]).
    sockets: Vec<PathBuf>,
    /// Per host, what `ssh -G` resolves for it (on first use; see `target`).
    targets: Vec<Mutex<Option<Target>>>,
    counters: super::Counters,
    /// Index into `hosts` of the host whose master is up, once one is.
    active: Mutex<Option<usize>>,
    /// Idle persistent shells.
    sessions: Pool,
}

/// What a key-only ssh adds to its options: no agent, no token or smart-card identity, no local
/// command, no forwarding of either.
const KEY_ONLY_OPTIONS: &[&str] = &[
    "IdentityAgent=none",
    "PKCS11Provider=none",
    "PermitLocalCommand=no",
    "ForwardAgent=no",
    "ForwardX11=no",
    "ProxyJump=none",
];

/// A host that failed to connect is skipped for this long (by every process: the mark is a file in the
/// control directory), then tried again; the first host is preferred again as soon as it answers.
const RETRY_FAILED_HOST_AFTER: Duration = Duration::from_secs(60);

/// The contract's remediation when passwordless SSH fails.
pub fn ssh_remediation(user: &str, host: &str) -> String {
    format!(
        "SLURM is blocked on passwordless SSH. Please provide: SSH_KEY_PATH=/path/to/private_key\n\
         To set up a key:\n\
         1. ssh-keygen -t ed25519 -N \"\" -f ~/.ssh/id_ed25519\n\
         2. ssh-copy-id -i ~/.ssh/id_ed25519.pub {user}@{host}\n\
         3. ssh-keyscan -H {host} >> ~/.ssh/known_hosts\n\
         4. chmod 600 ~/.ssh/id_ed25519\n\
         5. ssh -o BatchMode=yes -i ~/.ssh/id_ed25519 {user}@{host} 'hostname'"
    )
}

impl OpenSsh {
    pub fn new(settings: &Settings, user: &str, hosts: &[LoginHost]) -> Result<OpenSsh, RemoteError> {
        if let Some(key) = &settings.ssh_key_path {
            check_key_file(key)?;
        }
        let key_only = settings.ssh_key_only;
        if key_only && settings.ssh_key_path.is_none() {
            return Err(RemoteError::KeyMissing {
                path: "SSH_KEY_PATH".into(),
                message: "a key-only login needs a key".into(),
            });
        }
        let profile = auth_profile(settings, user);
        let sockets: Vec<PathBuf> = hosts
            .iter()
            .map(|h| settings.control_dir.join(socket_name(&profile, user, h, settings.ssh_config.as_deref())))
            .collect();
        if let Some(socket) = sockets.first() {
            check_socket_path(socket)?;
        }
        Ok(OpenSsh {
            sockets,
            remote_timeout: Duration::from_secs(settings.remote_timeout_secs.into()),
            profile,
            targets: hosts.iter().map(|_| Mutex::new(None)).collect(),
            user: user.to_string(),
            hosts: hosts.to_vec(),
            // Key-only: the given config (the service's own) or none at all, never the user's or
            // the system's, so none of the operator's identities, agents, proxies, local commands
            // or includes.
            ssh_config: match &settings.ssh_config {
                None if key_only => Some(PathBuf::from("/dev/null")),
                other => other.clone(),
            },
            known_hosts: settings.ssh_known_hosts.clone(),
            key_path: settings.ssh_key_path.clone(),
            auth_sock: if key_only { None } else { settings.ssh_auth_sock.clone() },
            key_only,
            connect_timeout_secs: settings.connect_timeout_secs,
            control_persist_secs: settings.control_persist_secs,
            control_dir: settings.control_dir.clone(),
            accept_new_host_keys: settings.accept_new_host_keys,
            counters: super::Counters::default(),
            active: Mutex::new(None),
            sessions: Pool::default(),
        })
    }

    pub fn hosts(&self) -> &[LoginHost] {
        &self.hosts
    }

    /// The options that make every ssh we start as strict as the settings ask (host keys verified
    /// against the configured known_hosts, no prompts, bounded connect), for the login hosts and for
    /// every ProxyJump hop alike.
    fn strict_options(&self) -> Vec<String> {
        let mut args = Vec::new();
        if let Some(cfg) = &self.ssh_config {
            args.extend(["-F".to_string(), cfg.display().to_string()]);
        }
        // Host keys are always verified; a new host is trusted only by an explicit choice.
        let strict = if self.accept_new_host_keys { "accept-new" } else { "yes" };
        for opt in [
            "BatchMode=yes".to_string(),
            format!("StrictHostKeyChecking={strict}"),
            format!("ConnectTimeout={}", self.connect_timeout_secs),
            // A dead connection is noticed within about 45 s instead of hanging.
            "ServerAliveInterval=15".to_string(),
            "ServerAliveCountMax=3".to_string(),
            "LogLevel=ERROR".to_string(),
        ] {
            args.extend(["-o".to_string(), opt]);
        }
        if let Some(kh) = &self.known_hosts {
            args.extend(["-o".to_string(), format!("UserKnownHostsFile={}", kh.display())]);
        }
        if let Some(key) = &self.key_path {
            args.extend(["-i".to_string(), key.display().to_string(), "-o".to_string(), "IdentitiesOnly=yes".into()]);
        }
        if self.key_only {
            for opt in KEY_ONLY_OPTIONS {
                args.extend(["-o".to_string(), opt.to_string()]);
            }
        }
        args
    }

    /// The agent an ssh we start may use: the configured one, none at all when key-only (the
    /// service's own `SSH_AUTH_SOCK` is taken out of its environment), else the inherited one.
    fn agent_env(&self, cmd: &mut Command) {
        if self.key_only {
            cmd.env_remove("SSH_AUTH_SOCK");
        } else if let Some(sock) = &self.auth_sock {
            cmd.env("SSH_AUTH_SOCK", sock);
        }
    }

    /// Options common to every ssh invocation for `host`, ending with the destination.
    fn base_command(&self, host: &LoginHost) -> Command {
        let mut cmd = Command::new("ssh");
        cmd.args(self.strict_options());
        cmd.arg("-o").arg(self.control_path_option(host));
        if let Some(proxy) = self.target(host).proxy {
            cmd.arg("-o").arg(format!("ProxyCommand={proxy}"));
        }
        self.agent_env(&mut cmd);
        cmd.arg("-l").arg(&self.user);
        if let Some(port) = host.port {
            cmd.arg("-p").arg(port.to_string());
        }
        cmd.arg(&host.host);
        cmd
    }

    fn control_path_option(&self, host: &LoginHost) -> String {
        let socket = self.hosts.iter().position(|h| h == host).map(|i| self.sockets[i].clone());
        // ssh expands `%` tokens in the path: a literal `%` is doubled.
        let socket = socket.unwrap_or_else(|| self.control_dir.join(socket_name(&self.profile, &self.user, host, None)));
        format!("ControlPath={}", socket.display().to_string().replace('%', "%%"))
    }

    /// What ssh_config makes of a login host: once per process, and across processes from the
    /// control directory's cache while its stamp holds (see `TargetCache`), so that a CLI command
    /// whose master is up starts no `ssh -G`.
    fn target(&self, host: &LoginHost) -> Target {
        let Some(i) = self.hosts.iter().position(|h| h == host) else { return Target::default() };
        let mut slot = self.targets[i].lock().unwrap();
        if slot.is_none() {
            *slot = Some(match self.target_cache(host).load() {
                Some(t) => t.cached(),
                None => self.resolve_target(host),
            });
        }
        slot.clone().unwrap_or_default()
    }

    /// `ssh -G` for a login host, remembered in the cache.
    fn resolve_target(&self, host: &LoginHost) -> Target {
        let control = self.control_path_option(host);
        let target = match self.resolve(&host.host, Some(&self.user), host.port, Some(&control)) {
            Some(r) => Target {
                proxy: self.proxy_chain(&r, &r.jumps, 0),
                control_path: r.control_path.as_ref().map(PathBuf::from),
                from_cache: false,
            },
            None => return Target::default(),
        };
        self.target_cache(host).store(&target);
        target
    }

    fn target_cache(&self, host: &LoginHost) -> TargetCache {
        TargetCache::new(self.control_file(host, "resolved"), self.ssh_config.as_deref())
    }

    /// What ssh_config resolves for a destination (`ssh -G`): its real host name, port,
    /// ProxyJump chain and (given our ControlPath option) its control socket. None when ssh cannot
    /// resolve it (ssh itself will then say why).
    fn resolve(
        &self,
        destination: &str,
        user: Option<&str>,
        port: Option<u16>,
        control: Option<&str>,
    ) -> Option<Resolved> {
        let mut cmd = Command::new("ssh");
        if let Some(cfg) = &self.ssh_config {
            cmd.arg("-F").arg(cfg);
        }
        if let Some(c) = control {
            cmd.arg("-o").arg(c);
        }
        if let Some(u) = user {
            cmd.arg("-l").arg(u);
        }
        if let Some(p) = port {
            cmd.arg("-p").arg(p.to_string());
        }
        cmd.arg("-G").arg("--").arg(destination);
        let out = run_bounded(cmd, Duration::from_secs(10)).ok()?;
        Some(Resolved::parse(&String::from_utf8_lossy(&out)))
    }

    /// An ssh command that reaches `dest` through the hops `via` (the last hop connects to it).
    fn proxy_chain(&self, dest: &Resolved, via: &[String], depth: usize) -> Option<String> {
        let (last, before) = via.split_last()?;
        if depth > 8 {
            tracing::warn!("ProxyJump chain deeper than 8 hops; not followed further");
            return None;
        }
        let hop = JumpHop::parse(last);
        let resolved = self.resolve(&hop.host, hop.user.as_deref(), hop.port, None)?;
        // Hops before this one come from the chain; else from this hop's own ssh_config entry.
        let inner = if before.is_empty() {
            self.proxy_chain(&resolved, &resolved.jumps, depth + 1)
        } else {
            self.proxy_chain(&resolved, before, depth + 1)
        };
        let mut argv = vec!["ssh".to_string()];
        argv.extend(self.strict_options());
        argv.extend(["-o".to_string(), "ControlMaster=no".to_string(), "-o".to_string(), "ControlPath=none".into()]);
        match inner {
            Some(cmd) => argv.extend(["-o".to_string(), format!("ProxyCommand={cmd}")]),
            None => argv.extend(["-o".to_string(), "ProxyJump=none".to_string()]),
        }
        argv.extend(["-W".to_string(), format!("[{}]:{}", dest.hostname, dest.port)]);
        if let Some(u) = &hop.user {
            argv.extend(["-l".to_string(), u.clone()]);
        }
        if let Some(p) = hop.port {
            argv.extend(["-p".to_string(), p.to_string()]);
        }
        argv.extend(["--".to_string(), hop.host.clone()]);
        // ssh runs a ProxyCommand with `sh -c` after expanding `%` tokens: quote every word, and
        // double any `%` so that it stays literal.
        Some(crate::script::shell::join(&argv).replace('%', "%%"))
    }

    fn master_alive(&self, host: &LoginHost) -> bool {
        // The master's socket, named as ssh names it: a master that listens accepts the connection
        // and a stale socket file refuses it, without starting an ssh to ask (every CLI command
        // checks once). A remembered name that no master answers is resolved again before a new
        // master is started, so that a stale cache never makes a second login.
        let target = self.target(host);
        if let Some(path) = &target.control_path {
            if UnixStream::connect(path).is_ok() {
                return true;
            }
            if !target.from_cache {
                return false;
            }
            self.target_cache(host).forget();
            let fresh = self.resolve_target(host);
            let alive = fresh.control_path.as_ref().is_some_and(|p| UnixStream::connect(p).is_ok());
            if let Some(i) = self.hosts.iter().position(|h| h == host) {
                *self.targets[i].lock().unwrap() = Some(fresh);
            }
            return alive;
        }
        let mut cmd = Command::new("ssh");
        cmd.args(["-O", "check"]).args(self.base_command(host).get_args());
        // A wedged master must not wedge us: the check talks to a local socket and is quick.
        run_bounded(cmd, Duration::from_secs(5)).is_ok()
    }

    fn control_file(&self, host: &LoginHost, suffix: &str) -> PathBuf {
        self.control_dir.join(format!(
            "{}-{}.{suffix}",
            self.profile,
            sanitize(&format!("{}@{}", self.user, host.label()))
        ))
    }

    fn marked_down(&self, host: &LoginHost) -> bool {
        fs::metadata(self.control_file(host, "down"))
            .and_then(|m| m.modified())
            .map(|t| t.elapsed().unwrap_or_default() < RETRY_FAILED_HOST_AFTER)
            .unwrap_or(false)
    }

    /// The lock (a file in the control directory) that serialises opening `host`'s master across
    /// processes, held until unlocked or dropped.
    fn lock_host(&self, host: &LoginHost) -> Result<File, String> {
        crate::private::ensure_private_dir(&self.control_dir).map_err(|e| {
            format!("the SSH control directory cannot be used: {e}; set TAO_SLURM_CONTROL_DIR to a short directory of your own")
        })?;
        let lock_path = self.control_file(host, "lock");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| format!("cannot open {}: {e}", lock_path.display()))?;
        lock.lock().map_err(|e| format!("cannot lock {}: {e}", lock_path.display()))?;
        Ok(lock)
    }

    /// Bring up the master for `host` unless one is already up. Serialised across processes by a lock
    /// file, so concurrent CLI invocations never open two logins to the same host.
    pub fn ensure_master(&self, host: &LoginHost) -> Result<(), MasterError> {
        let lock = self.lock_host(host).map_err(MasterError::Failed)?;
        let result = if self.master_alive(host) { Ok(()) } else { self.start_master(host) };
        let down = self.control_file(host, "down");
        match &result {
            Ok(()) => {
                let _ = fs::remove_file(&down);
            }
            Err(_) => {
                let _ = File::create(&down);
            }
        }
        let _ = File::unlock(&lock);
        result
    }

    /// Open the master of `host` with the person at the terminal answering ssh's prompts (a password,
    /// a second factor), unless one is up; it then serves every later command in batch mode until
    /// `persist` passes idle. True if a new master was opened.
    pub fn login_host(&self, index: usize, persist: Duration) -> Result<bool, RemoteError> {
        let host = &self.hosts[index];
        let failed =
            |message: String| RemoteError::Unreachable { hosts: host.label(), message, remediation: String::new() };
        let lock = self.lock_host(host).map_err(failed)?;
        if self.master_alive(host) {
            return Ok(false);
        }
        let mut cmd = Command::new("ssh");
        // The first value of an option wins: BatchMode=no before the strict options' BatchMode=yes.
        cmd.args(["-f", "-N", "-o", "BatchMode=no", "-o", "ControlMaster=yes", "-o"])
            .arg(format!("ControlPersist={}", persist.as_secs().max(1)));
        cmd.args(self.base_command(host).get_args());
        self.agent_env(&mut cmd);
        // The master must outlive the terminal: closing it right after `login` hangs up its
        // foreground group, which the master is still in until ssh's -f has detached it. ssh keeps an
        // inherited SIGHUP ignored (as rsh does), so it never quits on that hangup.
        // SAFETY: signal(2) is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                libc::signal(libc::SIGHUP, libc::SIG_IGN);
                Ok(())
            });
        }
        self.counters.login();
        let status = cmd.status().map_err(|e| RemoteError::Spawn { program: "ssh".into(), message: e.to_string() })?;
        let _ = File::unlock(&lock);
        if !status.success() {
            return Err(failed(format!("ssh exited with {status}")));
        }
        let _ = fs::remove_file(self.control_file(host, "down"));
        self.target_cache(host).forget();
        if let Some(slot) = self.targets.get(index) {
            *slot.lock().unwrap() = None;
        }
        Ok(true)
    }

    fn start_master(&self, host: &LoginHost) -> Result<(), MasterError> {
        // stderr goes to a file, not a pipe: the backgrounded master (-f) keeps its stderr open, and a
        // pipe would never reach EOF.
        let err_file = tempfile::NamedTempFile::new().map_err(|e| MasterError::Failed(e.to_string()))?;
        let mut cmd = Command::new("ssh");
        cmd.args(["-f", "-N", "-o", "ControlMaster=yes"])
            .arg("-o")
            .arg(format!("ControlPersist={}", self.control_persist_secs.max(1)));
        cmd.args(self.base_command(host).get_args());
        self.agent_env(&mut cmd);
        let stderr = err_file.reopen().map_err(|e| MasterError::Failed(e.to_string()))?;
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(stderr);
        // ssh's ConnectTimeout bounds the TCP connect and the protocol handshake; this bounds the
        // rest (a host that stalls during authentication), so a dead host costs about the connect
        // timeout before the next one is tried.
        let limit = Duration::from_secs(u64::from(self.connect_timeout_secs) + 5);
        let status = wait_bounded(cmd, limit).map_err(MasterError::Failed)?;
        self.counters.login();
        if status == Some(true) {
            return Ok(());
        }
        let text = fs::read_to_string(err_file.path()).unwrap_or_default();
        if status.is_none() {
            return Err(MasterError::Failed(format!(
                "no SSH session within {} s (the host accepted the connection but did not complete the handshake or authentication){}",
                limit.as_secs(),
                if text.trim().is_empty() { String::new() } else { format!(": {}", text.trim()) }
            )));
        }
        if host_key_changed(&text) {
            return Err(MasterError::HostKeyChanged(text.trim().to_string()));
        }
        Err(MasterError::Failed(describe_ssh_failure(host, text.trim())))
    }

    /// The first host, in the configured order, whose master is up or comes up. Hosts that failed
    /// recently are tried only when no other host answers.
    fn select_host(&self) -> Result<usize, RemoteError> {
        let mut failures = Vec::new();
        let (fresh, recently_failed): (Vec<usize>, Vec<usize>) =
            (0..self.hosts.len()).partition(|i| !self.marked_down(&self.hosts[*i]));
        for i in fresh.into_iter().chain(recently_failed) {
            let host = &self.hosts[i];
            match self.ensure_master(host) {
                Ok(()) => {
                    *self.active.lock().unwrap() = Some(i);
                    return Ok(i);
                }
                // Never fail over past a host whose key changed: the next host may be the same
                // machine behind the same attacker, and the user must look at this first.
                Err(MasterError::HostKeyChanged(message)) => {
                    return Err(RemoteError::HostKeyChanged {
                        host: host.label(),
                        known_hosts: self
                            .known_hosts
                            .as_ref()
                            .map(|p| p.display().to_string())
                            .unwrap_or_else(|| "~/.ssh/known_hosts".into()),
                        message,
                    });
                }
                Err(MasterError::Failed(message)) => {
                    tracing::warn!(host = %host.label(), %message, "login host unreachable; trying the next one");
                    failures.push(format!("{}: {message}", host.label()));
                }
            }
        }
        Err(self.unreachable(failures))
    }

    fn unreachable(&self, failures: Vec<String>) -> RemoteError {
        let first = self.hosts.first().map(|h| h.host.clone()).unwrap_or_default();
        let message = failures.join("; ");
        RemoteError::Unreachable {
            hosts: self.hosts.iter().map(LoginHost::label).collect::<Vec<_>>().join(", "),
            remediation: login_remediation(&self.user, &first, &message),
            message,
        }
    }

    fn start_session(&self, index: usize) -> Result<Session, RemoteError> {
        let host = &self.hosts[index];
        // The master's socket when we know its name: ask it directly. Else, or if it does not
        // answer (it may have just gone), an ssh client, which also reconnects.
        if let Some(control) = self.target(host).control_path {
            let limit = Duration::from_secs(u64::from(self.connect_timeout_secs));
            match super::mux::open(&control, super::session::SHELL, limit) {
                Ok(opened) => {
                    self.counters.session();
                    return Ok(Session::over_mux(opened, index));
                }
                Err(message) => tracing::debug!(host = %host.label(), %message, "no session from the master's socket"),
            }
        }
        let mut cmd = self.base_command(host);
        // `auto`: normally a client of the master; if the master died since, this command becomes the
        // new one (a transparent reconnect). A backgrounded master detaches from our pipes.
        cmd.args(["-o", "ControlMaster=auto", "-o"])
            .arg(format!("ControlPersist={}", self.control_persist_secs.max(1)))
            .arg("--")
            .arg(super::session::SHELL);
        self.counters.session();
        Session::start(cmd, index)
    }

    /// Run a script on one given host through its master (preflight checks every host this way).
    pub fn run_on(&self, index: usize, script: &str) -> Result<RemoteOutput, RemoteError> {
        self.run_on_within(index, script, self.remote_timeout, super::MAX_OUTPUT_BYTES)
    }

    fn run_on_within(
        &self,
        index: usize,
        script: &str,
        deadline: Duration,
        cap: u64,
    ) -> Result<RemoteOutput, RemoteError> {
        let host = &self.hosts[index];
        let started = std::time::Instant::now();
        let result = self.sessions.call(index, &|| self.start_session(index), script, deadline, cap)?;
        match result {
            Ok(reply) => {
                self.counters.round_trip(script.len(), reply.stdout.len() + reply.stderr.len());
                let ms = started.elapsed().as_secs_f64() * 1e3;
                tracing::debug!(host = %host.label(), ms, script_bytes = script.len(), "round trip done");
                // The log writer redacts secret values (the submit script carries them).
                tracing::trace!(host = %host.label(), %script, stdout = %reply.stdout, stderr = %reply.stderr, "round trip");
                Ok(RemoteOutput {
                    exit_code: reply.exit_code,
                    stdout: reply.stdout,
                    stderr: reply.stderr,
                    host: host.label(),
                })
            }
            // The status comes in-band; without it the connection dropped mid-script. Text in the
            // output ("Connection refused") or an exit code of 255 from the script mean nothing here.
            Err(CallError::NotDelivered(message) | CallError::Lost(message)) => {
                self.counters.round_trip(script.len(), 0);
                Err(RemoteError::Lost {
                    host: host.label(),
                    message: format!("ssh ended before the command finished: {message}"),
                })
            }
            Err(CallError::TimedOut(message)) => {
                self.counters.round_trip(script.len(), 0);
                Err(super::timed_out(&host.label(), deadline, &message))
            }
            Err(CallError::TooLarge(cap)) => {
                self.counters.round_trip(script.len(), 0);
                Err(RemoteError::OutputTooLarge { host: host.label(), cap })
            }
        }
    }

    /// The active host, after checking that no earlier (preferred) host has become eligible again.
    fn current_host(&self) -> Result<usize, RemoteError> {
        let current = *self.active.lock().unwrap();
        match current {
            Some(i) if (0..i).all(|j| self.marked_down(&self.hosts[j])) => Ok(i),
            _ => self.select_host(),
        }
    }
}

impl Remote for OpenSsh {
    fn describe(&self) -> String {
        self.hosts.iter().map(LoginHost::label).collect::<Vec<_>>().join(",")
    }

    fn stats(&self) -> super::TransportStats {
        self.counters.snapshot()
    }

    fn default_deadline(&self) -> Duration {
        self.remote_timeout
    }

    fn run_script_capped(
        &self,
        script: &str,
        idempotency: Idempotency,
        deadline: Duration,
        cap: u64,
    ) -> Result<RemoteOutput, RemoteError> {
        let index = self.current_host()?;
        match self.run_on_within(index, script, deadline, cap) {
            Err(RemoteError::Lost { host, message }) if idempotency == Idempotency::Idempotent => {
                // Reads may run again: reconnect (this host or the next) and retry once.
                tracing::warn!(%host, %message, "connection lost; reconnecting");
                *self.active.lock().unwrap() = None;
                let index = self.select_host()?;
                self.run_on_within(index, script, deadline, cap)
            }
            other => other,
        }
    }

    fn attach(&self, command_line: &str, tty: bool) -> Result<i32, RemoteError> {
        let index = self.current_host()?;
        let mut cmd = Command::new("ssh");
        cmd.arg(if tty { "-tt" } else { "-T" });
        cmd.args(self.base_command(&self.hosts[index]).get_args()).arg("--").arg(command_line);
        self.agent_env(&mut cmd);
        self.counters.session();
        let status = cmd.status().map_err(|e| RemoteError::Spawn { program: "ssh".into(), message: e.to_string() })?;
        match status.code() {
            // 255 is ssh's own failure; a command's 255 cannot be told apart, so it is reported as lost.
            Some(255) => {
                Err(RemoteError::Lost { host: self.hosts[index].label(), message: "ssh exited with status 255".into() })
            }
            Some(code) => Ok(code),
            None => Ok(128 + std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0)),
        }
    }

    fn open_stream(&self, command_line: &str) -> Result<super::RemoteStream, RemoteError> {
        let index = self.current_host()?;
        let host = &self.hosts[index];
        self.counters.session();
        // A session of the master, asked over its socket; else (it does not answer: it may have just
        // gone) an ssh client, which is the master's client or, with `auto`, a new master.
        if let Some(control) = self.target(host).control_path {
            let limit = Duration::from_secs(u64::from(self.connect_timeout_secs));
            match super::mux::open(&control, command_line, limit) {
                Ok(o) => {
                    return Ok(super::RemoteStream {
                        stdin: Box::new(o.stdin),
                        stdout: Box::new(o.stdout),
                        stderr: Box::new(o.stderr),
                        keep: Box::new(o.link),
                    });
                }
                Err(message) => tracing::debug!(host = %host.label(), %message, "no stream from the master's socket"),
            }
        }
        let mut cmd = self.base_command(host);
        cmd.args(["-T", "-o", "ControlMaster=auto", "-o"])
            .arg(format!("ControlPersist={}", self.control_persist_secs.max(1)))
            .arg("--")
            .arg(command_line);
        super::child_stream(cmd, "ssh")
    }

    fn login(&self, host: Option<&str>, persist: Duration) -> Result<Vec<(String, bool)>, RemoteError> {
        let mut out = Vec::new();
        for (i, h) in self.hosts.iter().enumerate() {
            if host.is_none_or(|name| name == h.host || name == h.label()) {
                out.push((h.label(), self.login_host(i, persist)?));
            }
        }
        if out.is_empty() {
            return Err(RemoteError::Unreachable {
                hosts: self.describe(),
                message: format!("{} is not one of the login hosts", host.unwrap_or_default()),
                remediation: "name one of SLURM_HOSTNAME's hosts, or none for all".into(),
            });
        }
        Ok(out)
    }

    fn retire_connections(&self) {
        self.sessions.retire();
        for host in &self.hosts {
            // `stop`: the master takes no new session and exits once its last one ends (a call in
            // flight finishes on it). One not running answers at once.
            let mut cmd = Command::new("ssh");
            cmd.args(["-O", "stop"]).args(self.base_command(host).get_args());
            let _ = run_bounded(cmd, Duration::from_secs(5));
        }
    }

    fn end_connections(&self) {
        self.sessions.retire();
        for host in &self.hosts {
            let mut cmd = Command::new("ssh");
            cmd.args(["-O", "exit"]).args(self.base_command(host).get_args());
            let _ = run_bounded(cmd, Duration::from_secs(5));
        }
    }

    fn forward(&self, listen: &str, to: &str, cancel: bool) -> Result<(), RemoteError> {
        let index = self.current_host()?;
        // A forward lives in the master: one that went away (stopped, its socket removed) while the
        // calls' session outlived it is started again first (a cancel has nothing to cancel then).
        if !cancel {
            if let Err(e) = self.ensure_master(&self.hosts[index]) {
                return Err(RemoteError::Spawn { program: "ssh -O forward".into(), message: e.to_string() });
            }
        }
        let mut cmd = Command::new("ssh");
        cmd.args(["-O", if cancel { "cancel" } else { "forward" }, "-L"]).arg(format!("{listen}:{to}"));
        cmd.args(self.base_command(&self.hosts[index]).get_args());
        let err =
            tempfile::tempfile().map_err(|e| RemoteError::Spawn { program: "ssh".into(), message: e.to_string() })?;
        cmd.stderr(err.try_clone().map_err(|e| RemoteError::Spawn { program: "ssh".into(), message: e.to_string() })?);
        cmd.stdin(Stdio::null()).stdout(Stdio::null());
        // The master answers on a local socket at once.
        match wait_bounded(cmd, Duration::from_secs(10)) {
            Ok(Some(true)) => Ok(()),
            other => {
                use std::io::{Read, Seek};
                let mut text = String::new();
                let mut err = err;
                let _ = err.seek(std::io::SeekFrom::Start(0));
                let _ = err.read_to_string(&mut text);
                let why = match other {
                    Err(e) => e,
                    Ok(None) => "the SSH master did not answer within 10 s".into(),
                    _ => text.trim().to_string(),
                };
                Err(RemoteError::Spawn { program: "ssh -O forward".into(), message: why })
            }
        }
    }
}

/// ssh's refusal when the host offered only methods that need a person (a password, a second factor).
fn asks_for_a_prompt(message: &str) -> bool {
    message.lines().any(|l| {
        l.contains("Permission denied (")
            && (l.contains("keyboard-interactive") || l.contains("password"))
            && !l.contains("publickey")
    })
}

/// ssh's words when the host refused every key it was offered (or ssh had no usable key to offer).
fn key_refused(message: &str) -> bool {
    message.lines().any(|l| {
        (l.contains("Permission denied (") && l.contains("publickey"))
            || l.contains("no such identity")
            || l.contains("Too many authentication failures")
    })
}

/// What to do after a failed login, from what ssh said, one rule for every door: `tao-slurm login`
/// when the host wants a prompt answered; the key set-up steps only when the host refused the key;
/// for an unknown host key, checking it (the message holds the `ssh-keyscan` line); for anything
/// else (no route, a refused connection, a local problem of ssh's), ssh's own error stands and no key
/// is asked for.
pub fn login_remediation(user: &str, host: &str, message: &str) -> String {
    if asks_for_a_prompt(message) {
        login_advice()
    } else if key_refused(message) {
        ssh_remediation(user, host)
    } else if message.contains("host key") {
        "check the host key's fingerprint with the site, then add it as the message says (or run init with --accept-new-host-key)".to_string()
    } else {
        format!(
            "no key was refused, so no key set-up helps: fix what the message above says. Check SLURM_HOSTNAME (and SSH_CONFIG if you use aliases) and that the login host is reachable from this machine: ssh -o BatchMode=yes {user}@{host} hostname"
        )
    }
}

/// What to do when a login host wants a prompt answered.
pub fn login_advice() -> String {
    "This login host asks for a password or a second factor, which tao-slurm never answers in a command. \
     Run `tao-slurm login` once in a terminal: it opens the connection with your answers, and every later \
     command, the monitor, the MCP server and Python reuse it while it lasts."
        .to_string()
}

/// Why a master could not be brought up.
#[derive(Debug)]
pub enum MasterError {
    Failed(String),
    /// The host presented a key other than the one recorded: no failover, a loud error.
    HostKeyChanged(String),
}

impl std::fmt::Display for MasterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MasterError::Failed(m) => f.write_str(m),
            MasterError::HostKeyChanged(m) => write!(f, "the host key has changed (possible man-in-the-middle): {m}"),
        }
    }
}

fn host_key_changed(stderr: &str) -> bool {
    stderr.contains("REMOTE HOST IDENTIFICATION HAS CHANGED")
        || (stderr.contains("Host key for") && stderr.contains("has changed"))
}

/// Where an ssh_config alias leads, as the `ssh_config` file (the user's and the system's when None)
/// resolves it with `ssh -G` (nothing is contacted): its real host name and port only, nothing of its
/// identities, agent or proxies. None when ssh cannot resolve it.
pub fn alias_destination(ssh_config: Option<&Path>, alias: &str) -> Option<(String, u16)> {
    let mut cmd = Command::new("ssh");
    if let Some(cfg) = ssh_config {
        cmd.arg("-F").arg(cfg);
    }
    cmd.arg("-G").arg("--").arg(alias);
    let out = run_bounded(cmd, Duration::from_secs(10)).ok()?;
    let r = Resolved::parse(&String::from_utf8_lossy(&out));
    (!r.hostname.is_empty()).then_some((r.hostname, r.port))
}

/// A hash of the settings that decide how ssh authenticates and which host keys it trusts.
fn auth_profile(settings: &Settings, user: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
    for part in [
        user.to_string(),
        path(&settings.ssh_key_path),
        path(&settings.ssh_known_hosts),
        path(&settings.ssh_config),
        settings.ssh_auth_sock.clone().unwrap_or_default(),
        settings.accept_new_host_keys.to_string(),
        settings.ssh_key_only.to_string(),
    ] {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    h.finalize().iter().take(6).map(|b| format!("{b:02x}")).collect()
}

/// The longest path a Unix socket can have on Linux (`sun_path` is 108 bytes with its NUL).
const MAX_SOCKET_PATH: usize = 107;
/// What ssh adds to the ControlPath while it binds the master's socket: `.` and 16 random characters
/// (the socket is then renamed to the path given).
const SSH_BIND_SUFFIX: usize = 17;
/// The length of a socket's name in the control directory (hex characters of [`socket_name`]).
pub const SOCKET_NAME_LEN: usize = 16;

/// The name of a login host's master socket: a hash of everything that decides which master may serve
/// a command (how we authenticate, the user, the host as given, this machine, and the ssh_config files'
/// stamp, so an edited alias gets a new master), 16 hex characters, so that the path stays short: ssh's
/// own `%C` is 40 and a socket's path holds 107 bytes in all.
fn socket_name(profile: &str, user: &str, host: &LoginHost, ssh_config: Option<&Path>) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for part in [profile, user, &host.label(), &local_hostname(), &super::resolve::config_stamp(ssh_config)] {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    h.finalize().iter().take(SOCKET_NAME_LEN / 2).map(|b| format!("{b:02x}")).collect()
}

/// This machine's name (ssh's `%l`, part of its `%C`): a control directory shared by several machines
/// (a home on NFS) never mixes their masters.
fn local_hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer and its length are valid; gethostname writes at most that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::new();
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// A master's socket must fit a Unix socket's path while ssh binds it (with its suffix): else every
/// connection would fail with ssh's "too long for Unix domain socket". Refused before any ssh runs,
/// naming the path, its length and the setting to change.
fn check_socket_path(socket: &Path) -> Result<(), RemoteError> {
    let len = socket.as_os_str().len();
    if len + SSH_BIND_SUFFIX <= MAX_SOCKET_PATH {
        return Ok(());
    }
    let dir = socket.parent().unwrap_or(socket);
    Err(RemoteError::Config(crate::config::ConfigError::Invalid {
        name: "TAO_SLURM_CONTROL_DIR",
        message: format!(
            "the SSH control socket {} would be {len} characters, and ssh adds {SSH_BIND_SUFFIX} while it creates it: over the {MAX_SOCKET_PATH} a Unix socket's path can hold. Set TAO_SLURM_CONTROL_DIR to a directory of your own of at most {} characters (now {}: {}), or unset it for the default ($XDG_RUNTIME_DIR/tao-slurm or /tmp/tao-slurm-<uid>)",
            socket.display(),
            MAX_SOCKET_PATH - SSH_BIND_SUFFIX - SOCKET_NAME_LEN - 1,
            dir.as_os_str().len(),
            dir.display(),
        ),
    }))
}

/// One ProxyJump hop: `[user@]host[:port]` (or `ssh://[user@]host[:port]`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct JumpHop {
    user: Option<String>,
    host: String,
    port: Option<u16>,
}

impl JumpHop {
    fn parse(text: &str) -> JumpHop {
        let text = text.strip_prefix("ssh://").unwrap_or(text);
        let (user, rest) = match text.rsplit_once('@') {
            Some((u, r)) => (Some(u.to_string()), r),
            None => (None, text),
        };
        let (host, port) = if let Some(inner) = rest.strip_prefix('[') {
            match inner.split_once(']') {
                Some((h, p)) => (h.to_string(), p.strip_prefix(':').and_then(|p| p.parse().ok())),
                None => (rest.to_string(), None),
            }
        } else {
            match rest.rsplit_once(':') {
                Some((h, p)) if !h.contains(':') => (h.to_string(), p.parse().ok()),
                _ => (rest.to_string(), None),
            }
        };
        JumpHop { user, host, port }
    }
}

/// Run `cmd` to its end within `limit`; its standard output if it succeeded.
fn run_bounded(mut cmd: Command, limit: Duration) -> Result<Vec<u8>, String> {
    let out = tempfile::tempfile().map_err(|e| e.to_string())?;
    cmd.stdin(Stdio::null()).stdout(out.try_clone().map_err(|e| e.to_string())?).stderr(Stdio::null());
    match wait_bounded(cmd, limit)? {
        Some(true) => {
            use std::io::{Read, Seek};
            let mut out = out;
            let mut buf = Vec::new();
            out.seek(std::io::SeekFrom::Start(0)).map_err(|e| e.to_string())?;
            out.read_to_end(&mut buf).map_err(|e| e.to_string())?;
            Ok(buf)
        }
        Some(false) => Err("failed".into()),
        None => Err(format!("no answer within {} s", limit.as_secs())),
    }
}

/// Spawn `cmd` and wait for it at most `limit`: Some(success), or None when it was killed at the limit.
fn wait_bounded(mut cmd: Command, limit: Duration) -> Result<Option<bool>, String> {
    let mut child = cmd.spawn().map_err(|e| format!("cannot run ssh: {e}"))?;
    let started = std::time::Instant::now();
    // Most of these end within a few milliseconds (`ssh -G` runs in every CLI command), so the
    // first 20 ms are watched closely and the pause grows from there; a fixed 10 ms pause cost each
    // of them most of that.
    let mut pause = Duration::from_micros(500);
    let mut looks = 0u32;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(Some(status.success())),
            Ok(None) if started.elapsed() >= limit => {
                let _ = child.kill();
                let _ = child.wait();
                return Ok(None);
            }
            Ok(None) => {
                std::thread::sleep(pause);
                looks += 1;
                if looks > 40 {
                    pause = (pause * 2).min(Duration::from_millis(10));
                }
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

fn describe_ssh_failure(host: &LoginHost, stderr: &str) -> String {
    if stderr.contains("Host key verification failed")
        || stderr.contains("No ED25519 host key is known")
        || stderr.contains("host key for") && stderr.contains("is not known")
    {
        let scan = match host.port {
            Some(p) => format!("ssh-keyscan -p {p} -H {}", host.host),
            None => format!("ssh-keyscan -H {}", host.host),
        };
        return format!(
            "the host key of {} is unknown or does not match ({stderr}); after checking its fingerprint with the site, add it: {scan} >> ~/.ssh/known_hosts",
            host.label()
        );
    }
    if stderr.is_empty() {
        "ssh exited with status 255 and no message".to_string()
    } else {
        stderr.to_string()
    }
}

fn sanitize(text: &str) -> String {
    text.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' }).collect()
}

/// ssh refuses private keys readable by others; say so (and how to fix it) before ssh does, without
/// touching the user's file.
fn check_key_file(path: &Path) -> Result<(), RemoteError> {
    let meta = fs::metadata(path)
        .map_err(|e| RemoteError::KeyMissing { path: path.display().to_string(), message: e.to_string() })?;
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(RemoteError::KeyPermissions { path: path.display().to_string() });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_with_open_permissions_is_refused_and_left_alone() {
        let f = tempfile::NamedTempFile::new().unwrap();
        fs::set_permissions(f.path(), fs::Permissions::from_mode(0o644)).unwrap();
        let err = check_key_file(f.path()).unwrap_err();
        assert!(err.to_string().contains(&format!("chmod 600 {}", f.path().display())));
        assert_eq!(fs::metadata(f.path()).unwrap().permissions().mode() & 0o777, 0o644);
        fs::set_permissions(f.path(), fs::Permissions::from_mode(0o600)).unwrap();
        assert!(check_key_file(f.path()).is_ok());
    }

    #[test]
    fn proxy_jump_hops_and_ssh_g_output_parse() {
        let r = Resolved::parse("user slurmuser\nhostname 127.0.0.1\nport 2222\nproxyjump a@bastion:2200,hop2\n");
        assert_eq!((r.hostname.as_str(), r.port), ("127.0.0.1", 2222));
        assert_eq!(r.jumps, ["a@bastion:2200", "hop2"]);
        assert!(Resolved::parse("proxyjump none\n").jumps.is_empty());
        for (text, user, host, port) in [
            ("bastion", None, "bastion", None),
            ("me@bastion:2200", Some("me"), "bastion", Some(2200)),
            ("ssh://me@[::1]:2201", Some("me"), "::1", Some(2201)),
            ("[fe80::1]", None, "fe80::1", None),
        ] {
            let h = JumpHop::parse(text);
            assert_eq!((h.user.as_deref(), h.host.as_str(), h.port), (user, host, port), "{text}");
        }
    }

    #[test]
    fn a_key_only_ssh_reads_no_config_of_the_users_and_uses_no_agent() {
        let key = tempfile::NamedTempFile::new().unwrap();
        fs::set_permissions(key.path(), fs::Permissions::from_mode(0o600)).unwrap();
        let mut settings = tao_slurm_core::fixtures::settings();
        settings.ssh_key_path = Some(key.path().to_path_buf());
        settings.ssh_auth_sock = Some("/operator/agent.sock".into());
        settings.ssh_key_only = true;
        let hosts = settings.login_hosts.clone();
        let ssh = OpenSsh::new(&settings, "alice", &hosts).unwrap();
        let args = ssh.strict_options();
        let pairs: Vec<(&str, &str)> = args.windows(2).map(|w| (w[0].as_str(), w[1].as_str())).collect();
        assert!(pairs.contains(&("-F", "/dev/null")), "no config file at all: {args:?}");
        for opt in ["IdentityAgent=none", "IdentitiesOnly=yes", "ProxyJump=none", "PermitLocalCommand=no"] {
            assert!(pairs.contains(&("-o", opt)), "{opt}: {args:?}");
        }
        let mut cmd = Command::new("ssh");
        ssh.agent_env(&mut cmd);
        let agent: Vec<_> = cmd.get_envs().filter(|(k, _)| *k == "SSH_AUTH_SOCK").collect();
        assert_eq!(agent, vec![(std::ffi::OsStr::new("SSH_AUTH_SOCK"), None)], "the agent is taken out");
        // With a config of the service's own, that one (and the same options).
        settings.ssh_config = Some("/service/own.ssh_config".into());
        let args = OpenSsh::new(&settings, "alice", &hosts).unwrap().strict_options();
        assert!(args.windows(2).any(|w| w[0] == "-F" && w[1] == "/service/own.ssh_config"), "{args:?}");
        // Key-only without a key is refused.
        settings.ssh_key_path = None;
        assert!(OpenSsh::new(&settings, "alice", &hosts).is_err());
    }

    #[test]
    fn a_changed_host_key_is_recognised() {
        let text =
            "@@@@@@@@@@@\n@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\nHost key verification failed.";
        assert!(host_key_changed(text));
        assert!(!host_key_changed("Host key verification failed."));
    }

    #[test]
    fn a_host_that_wants_a_password_is_told_apart() {
        assert!(asks_for_a_prompt("slurmuser@127.0.0.1: Permission denied (keyboard-interactive)."));
        assert!(asks_for_a_prompt("u@h: Permission denied (password)."));
        assert!(!asks_for_a_prompt("u@h: Permission denied (publickey,password)."));
        assert!(!asks_for_a_prompt("Connection refused"));
    }

    /// Settings of a user whose home is `home`, with the control directory at its default.
    fn settings_with_home(home: &str, control_dir: Option<&str>) -> Settings {
        let mut env: std::collections::HashMap<String, String> =
            [("SLURM_USER", "alice"), ("SLURM_HOSTNAME", "login.example.org:2222"), ("HOME", home)]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        if let Some(d) = control_dir {
            env.insert("TAO_SLURM_CONTROL_DIR".into(), d.into());
        }
        let sources = crate::config::SettingSources {
            flags: Default::default(),
            env,
            file: Default::default(),
            uid: Some(4_294_967_294),
        };
        Settings::from_sources(&sources).unwrap()
    }

    #[test]
    fn any_home_gives_a_socket_path_that_fits_and_a_long_control_dir_is_named_with_its_fix() {
        // The home (39 characters) and one of 200: the socket path does not grow with it.
        for home in ["/home/users/jean-baptiste.delacroix".to_string(), format!("/home/{}", "h".repeat(194))] {
            let settings = settings_with_home(&home, None);
            let ssh = OpenSsh::new(&settings, "alice", &settings.login_hosts).unwrap();
            let socket = &ssh.sockets[0];
            assert!(!socket.starts_with(&home), "{}", socket.display());
            // The largest uid there is: the default's longest form.
            assert_eq!(socket.parent().unwrap(), Path::new("/tmp/tao-slurm-4294967294"));
            assert!(socket.as_os_str().len() + SSH_BIND_SUFFIX <= MAX_SOCKET_PATH, "{}", socket.display());
            let option = ssh.control_path_option(&settings.login_hosts[0]);
            assert_eq!(option, format!("ControlPath={}", socket.display()));
        }
        // Another host, user or key: another master.
        let settings = settings_with_home("/home/a", None);
        let a = OpenSsh::new(&settings, "alice", &settings.login_hosts).unwrap();
        let b = OpenSsh::new(&settings, "bob", &settings.login_hosts).unwrap();
        assert_ne!(a.sockets[0], b.sockets[0]);
        assert_eq!(a.sockets[0].file_name().unwrap().len(), SOCKET_NAME_LEN);

        // The longest control directory that fits (73 characters), and one more.
        let fits = format!("/{}", "d".repeat(MAX_SOCKET_PATH - SSH_BIND_SUFFIX - SOCKET_NAME_LEN - 2));
        assert_eq!(fits.len(), 73);
        let settings = settings_with_home("/home/a", Some(&fits));
        assert!(OpenSsh::new(&settings, "alice", &settings.login_hosts).is_ok());
        let long = format!("{fits}e");
        let settings = settings_with_home("/home/a", Some(&long));
        let err = OpenSsh::new(&settings, "alice", &settings.login_hosts).err().expect("a path too long is refused");
        let text = err.to_string();
        assert!(matches!(err, RemoteError::Config(_)), "a settings error: {text}");
        for part in ["TAO_SLURM_CONTROL_DIR", &long, "would be 91 characters", "at most 73 characters (now 74"] {
            assert!(text.contains(part), "{part:?} in: {text}");
        }
        assert!(!text.contains("passwordless"), "{text}");
    }

    #[test]
    fn the_key_steps_are_given_only_when_the_host_refused_the_key() {
        let refused = [
            "alice@login: Permission denied (publickey).",
            "alice@login: Permission denied (publickey,gssapi-with-mic,password).",
            "Received disconnect from 10.0.0.1 port 22:2: Too many authentication failures",
        ];
        for message in refused {
            let r = login_remediation("alice", "login", message);
            assert!(r.starts_with("SLURM is blocked on passwordless SSH. Please provide: SSH_KEY_PATH"), "{message}: {r}");
        }
        // ssh's own failures (the socket path, no route, a refused connection): its error stands.
        let own = [
            "unix_listener: path \"/home/users/jean-baptiste.delacroix/.cache/tao-slurm/cm/0123456789ab-0123456789012345678901234567890123456789.AbCdEfGhIjKlMnOp\" too long for Unix domain socket",
            "ssh: connect to host login port 22: Connection refused",
            "ssh: Could not resolve hostname login: Name or service not known",
            "ssh exited with status 255 and no message",
        ];
        for message in own {
            let r = login_remediation("alice", "login", message);
            assert!(!r.contains("passwordless") && !r.contains("ssh-keygen"), "{message}: {r}");
            assert!(r.contains("fix what the message above says"), "{message}: {r}");
        }
        // The same rule when every host failed.
        let settings = settings_with_home("/home/a", None);
        let ssh = OpenSsh::new(&settings, "alice", &settings.login_hosts).unwrap();
        let err = ssh.unreachable(vec![format!("login: {}", own[0])]).to_string();
        assert!(err.contains("too long for Unix domain socket") && !err.contains("passwordless"), "{err}");
        let err = ssh.unreachable(vec![format!("login: {}", refused[0])]).to_string();
        assert!(err.contains("passwordless"), "{err}");
    }

    #[test]
    fn unknown_host_key_gives_keyscan_remediation() {
        let h = LoginHost { host: "login1".into(), port: Some(2222) };
        let msg = describe_ssh_failure(&h, "Host key verification failed.");
        assert!(msg.contains("ssh-keyscan -p 2222 -H login1 >> ~/.ssh/known_hosts"), "{msg}");
    }
}
