//! Shared helpers: isolated users of the sandbox, held jobs, and the counters the benchmarks read
//! (slurmctld RPCs from `sdiag`, SSH logins from the sshd logs, attributed by TCP port).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tao_slurm::config::{SettingSources, Settings};
use tao_slurm::JobSpec;

pub fn sandbox_dir() -> String {
    std::env::var("SANDBOX_DIR").unwrap_or_else(|_| "/var/lib/tao-slurm-sandbox".into())
}

/// The settings the sandbox's start script wrote.
pub fn sandbox_env() -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(format!("{}/settings.env", sandbox_dir()))
        .expect("start the sandbox: bash dev/sandbox/up.sh");
    text.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.trim().into(), v.trim().into())).collect()
}

pub fn slurm_conf() -> String {
    format!("{}/etc/slurm.conf", sandbox_dir())
}

/// A Slurm command run locally on the login node, as root.
pub fn local_slurm(program: &str) -> Command {
    let mut cmd = Command::new(program);
    cmd.env("SLURM_CONF", slurm_conf());
    cmd
}

/// Put `md` between its `begin` and `end` markers in bench/report.md (at its end the first time).
#[allow(dead_code)] // the benches with a section of their own (sweep_bench, gpu_bench); not the main one
pub fn splice_report(begin: &str, end: &str, md: &str) {
    let path = "bench/report.md";
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let spliced = match (text.find(begin), text.find(end)) {
        (Some(b), Some(e)) => format!("{}{}{}", &text[..b], md.trim_end(), &text[e + end.len()..]),
        _ => format!("{}\n\n{}\n", text.trim_end(), md.trim_end()),
    };
    std::fs::write(path, spliced).unwrap();
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

pub fn median(mut v: Vec<f64>) -> f64 {
    assert!(!v.is_empty());
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// The release binary next to this example.
pub fn cli_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/release/examples/bench -> target/release/tao-slurm
    exe.parent().and_then(Path::parent).unwrap().join("tao-slurm")
}

/// One isolated user: its own HOME, state file and ControlMaster directory.
pub struct User {
    pub dir: tempfile::TempDir,
    pub vars: BTreeMap<String, String>,
}

impl User {
    /// `persist`: TAO_SLURM_CONTROL_PERSIST (None: the default).
    pub fn new(persist: Option<u32>) -> User {
        let dir = tempfile::tempdir().unwrap();
        let mut vars = sandbox_env();
        vars.insert("HOME".into(), dir.path().display().to_string());
        vars.insert("TAO_SLURM_STATE".into(), dir.path().join("state.db").display().to_string());
        vars.insert("TAO_SLURM_CONTROL_DIR".into(), dir.path().join("cm").display().to_string());
        if let Some(p) = persist {
            vars.insert("TAO_SLURM_CONTROL_PERSIST".into(), p.to_string());
        }
        User { dir, vars }
    }

    pub fn settings(&self) -> Settings {
        let sources = SettingSources {
            flags: Default::default(),
            env: self.vars.clone().into_iter().collect(),
            file: Default::default(),
            uid: None,
        };
        Settings::from_sources(&sources).unwrap()
    }

    pub fn control_dir(&self) -> PathBuf {
        self.dir.path().join("cm")
    }

    /// The CLI binary with only this user's environment.
    pub fn cli(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(cli_binary());
        cmd.args(args).env_clear();
        cmd.env("PATH", std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()));
        for (k, v) in &self.vars {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::null());
        cmd
    }

    /// Stop the SSH masters of this user's control directory (only ours, by socket).
    pub fn close_masters(&self) {
        use std::os::unix::fs::FileTypeExt;
        let Ok(entries) = std::fs::read_dir(self.control_dir()) else { return };
        for e in entries.flatten() {
            if e.file_type().map(|t| t.is_socket()).unwrap_or(false) {
                let _ = Command::new("ssh")
                    .arg("-S")
                    .arg(e.path())
                    .args(["-O", "exit", "bench-master"])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
        }
    }
}

impl Drop for User {
    fn drop(&mut self) {
        self.close_masters();
    }
}

/// A small CPU-only job; `begin` keeps it pending after submit releases its hold.
pub fn small_spec() -> JobSpec {
    JobSpec {
        image: "ubuntu:22.04".into(),
        command: vec!["true".into()],
        gpus: Some(0),
        sbatch_options: [("begin".to_string(), "now+2hours".to_string())].into(),
        ..Default::default()
    }
}

/// A plain `ssh` to login1 through this user's ControlMaster (the one the transport opened).
/// The socket of the transport's master in the user's control directory (its name carries a hash of
/// the settings the transport was made with, so it is found rather than computed).
fn master_socket(user: &User) -> std::path::PathBuf {
    use std::os::unix::fs::FileTypeExt;
    std::fs::read_dir(user.control_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| e.file_type().is_ok_and(|t| t.is_socket()))
        .map(|e| e.path())
        .expect("the submits left a master running in the control directory")
}

pub fn master_ssh(user: &User) -> Command {
    let v = &user.vars;
    let mut cmd = Command::new("ssh");
    cmd.arg("-F")
        .arg(&v["SSH_CONFIG"])
        .args(["-o", "BatchMode=yes", "-o", "ControlMaster=no", "-o"])
        .arg(format!("ControlPath={}", master_socket(user).display()))
        .arg("-o")
        .arg(format!("UserKnownHostsFile={}", v["SSH_KNOWN_HOSTS"]))
        .arg("-i")
        .arg(&v["SSH_KEY_PATH"])
        .args(["-l", &v["SLURM_USER"], "-p", "2222", "127.0.0.1"]);
    cmd.stdin(Stdio::null());
    cmd
}

/// Run a script as the sandbox user on login1 over plain ssh (outside the transport under test).
pub fn ssh_script(settings: &Settings, script: &str) -> String {
    let mut child = Command::new("ssh")
        .arg("-F")
        .arg(settings.ssh_config.as_ref().unwrap())
        .args(["-o", "ControlMaster=no", "-o", "ControlPath=none", "sandbox-login1", "bash", "-s"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let script = script.to_string();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(script.as_bytes());
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    String::from_utf8(out.stdout).unwrap()
}

/// Submit `n` held CPU-only jobs as the sandbox user; their Slurm ids.
pub fn held_jobs(settings: &Settings, n: usize) -> Vec<String> {
    let script = format!(
        "for i in $(seq {n}); do sbatch --parsable --hold -o /dev/null -J tao-bench-held --wrap true || echo FAILED; done\n"
    );
    let ids: Vec<String> =
        ssh_script(settings, &script).lines().map(|l| l.trim().split(';').next().unwrap().to_string()).collect();
    assert_eq!(ids.len(), n, "held job submission");
    assert!(ids.iter().all(|i| i.parse::<u64>().is_ok()), "sbatch failed: {ids:?}");
    ids
}

/// Record jobs with these Slurm ids in the user's state file (one transaction); platform ids.
pub fn record_jobs(settings: &Settings, slurm_ids: &[String]) -> Vec<String> {
    let spec = JobSpec { sbatch_options: Default::default(), ..small_spec() };
    let spec_json = serde_json::to_string(&spec).unwrap();
    let store = tao_slurm_engine::store::Store::open(&settings.state_path).unwrap();
    let mut ids = Vec::new();
    store
        .in_transaction(|| {
            for sid in slurm_ids {
                let plan = tao_slurm::plan::resolve(&spec, settings).unwrap();
                store.insert_job(&spec_json, &plan, tao_slurm::clock::now())?;
                store.set_submitted(&plan.layout.job_id, sid, "sandbox-login1", tao_slurm::clock::now())?;
                ids.push(plan.layout.job_id.clone());
            }
            Ok::<(), tao_slurm_engine::store::StoreError>(())
        })
        .unwrap();
    ids
}

/// Wait (up to `limit`) until the controller lists no job of the sandbox user, finished ones included:
/// cancelled jobs of an earlier section linger for a while and would be counted by every `squeue`.
/// Returns how many were still listed at the end.
pub fn wait_for_empty_queue(settings: &Settings, limit: Duration) -> usize {
    let user = settings.slurm_user.clone().unwrap();
    let start = std::time::Instant::now();
    loop {
        let out = local_slurm("squeue").args(["-h", "-u", &user, "-t", "all", "-o", "%i"]).output().unwrap();
        let n = String::from_utf8_lossy(&out.stdout).lines().count();
        if n == 0 || start.elapsed() > limit {
            if n > 0 {
                eprintln!("bench: {n} jobs of {user} still listed after {} s", limit.as_secs());
            }
            return n;
        }
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// Wait (up to `limit`) until slurmctld has no agent work queued (records of new jobs on their way to
/// slurmdbd, RPCs to the nodes): until then every query of the controller is slower.
pub fn wait_for_idle_controller(limit: Duration) {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        let out = local_slurm("sdiag").output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let queued = |name: &str| {
            text.lines().find(|l| l.starts_with(name)).and_then(|l| l.split(':').nth(1)).map(|v| v.trim() != "0")
        };
        if queued("Agent queue size") != Some(true) && queued("DBD Agent queue size") != Some(true) {
            return;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// One `scancel` of these jobs, as the sandbox user.
pub fn scancel_remote(settings: &Settings, ids: &[String]) {
    if !ids.is_empty() {
        ssh_script(settings, &format!("scancel {} 2>/dev/null; true\n", ids.join(" ")));
    }
}

/// One `scancel` of these jobs, locally as root.
pub fn scancel_local(ids: &[String]) {
    if !ids.is_empty() {
        let _ = local_slurm("scancel").args(ids).output();
    }
}

/// slurmctld RPC counts by message type, from `sdiag` (locally, as root).
pub fn sdiag_counts() -> BTreeMap<String, u64> {
    let out = local_slurm("sdiag").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut counts = BTreeMap::new();
    let mut in_types = false;
    for line in text.lines() {
        if line.starts_with("Remote Procedure Call statistics by message type") {
            in_types = true;
            continue;
        }
        if line.starts_with("Remote Procedure Call statistics by user") {
            break;
        }
        if in_types {
            if let (Some(name), Some(count)) = (line.split_whitespace().next(), line.split("count:").nth(1)) {
                if let Ok(c) = count.split_whitespace().next().unwrap_or("").parse() {
                    counts.insert(name.to_string(), c);
                }
            }
        }
    }
    counts
}

pub fn sdiag_reset() {
    let _ = local_slurm("sdiag").arg("--reset").output();
}

/// RPCs by type between two sdiag reads, divided by `per` (sdiag's own REQUEST_STATS_INFO left out).
pub fn rpc_delta(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>, per: f64) -> BTreeMap<String, f64> {
    after
        .iter()
        .filter(|(k, _)| k.as_str() != "REQUEST_STATS_INFO")
        .map(|(k, v)| (k.clone(), (*v as f64 - *before.get(k).unwrap_or(&0) as f64) / per))
        .filter(|(_, v)| *v > 0.0)
        .collect()
}

pub fn rpc_total(rpcs: &BTreeMap<String, f64>) -> f64 {
    rpcs.values().sum()
}

/// Where the sshd logs ended at some moment; lines after it are new logins.
pub struct SshdMark(Vec<(String, PathBuf, u64)>);

impl SshdMark {
    pub fn now() -> SshdMark {
        let env = sandbox_env();
        SshdMark(
            env["SANDBOX_SSHD_LOGS"]
                .split(',')
                .map(|p| {
                    let path = PathBuf::from(p);
                    let port = path
                        .file_stem()
                        .and_then(|s| s.to_str())
                        .and_then(|s| s.rsplit('-').next())
                        .unwrap_or("")
                        .to_string();
                    let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                    (port, path, len)
                })
                .collect(),
        )
    }

    /// Accepted logins since the mark: (sshd port, client port).
    pub fn accepted(&self) -> Vec<(u16, u16)> {
        let mut out = Vec::new();
        for (port, path, offset) in &self.0 {
            let bytes = std::fs::read(path).unwrap_or_default();
            let text = String::from_utf8_lossy(&bytes[(*offset as usize).min(bytes.len())..]).to_string();
            for line in text.lines().filter(|l| l.contains("Accepted publickey")) {
                let client = line.split(" port ").nth(1).and_then(|r| r.split_whitespace().next()?.parse().ok());
                if let (Ok(p), Some(c)) = (port.parse(), client) {
                    out.push((p, c));
                }
            }
        }
        out
    }
}

/// Watches the TCP connections to the sshd ports of ssh processes that use one control directory, so
/// that logins can be attributed to the process under test while other tests use the cluster.
pub struct SshWatch {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<BTreeSet<(u16, u16)>>>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl SshWatch {
    pub fn start(control_dir: &Path) -> SshWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(BTreeSet::new()));
        let ports: Vec<u16> =
            sandbox_env()["SANDBOX_SSH_PORTS"].split(',').filter_map(|p| p.trim().parse().ok()).collect();
        let needle = control_dir.display().to_string();
        let (s, v) = (stop.clone(), seen.clone());
        let handle = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                for conn in ssh_connections(&ports, &needle) {
                    v.lock().unwrap().insert(conn);
                }
                std::thread::sleep(Duration::from_millis(250));
            }
        });
        SshWatch { stop, seen, handle: Some(handle) }
    }

    /// (sshd port, client port) of every connection seen.
    pub fn finish(mut self) -> BTreeSet<(u16, u16)> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        // One last look.
        self.seen.lock().unwrap().clone()
    }
}

fn ssh_connections(ports: &[u16], needle: &str) -> Vec<(u16, u16)> {
    let Ok(out) = Command::new("ss").args(["-tnpH", "state", "established"]).output() else { return vec![] };
    let mut found = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 5 {
            continue;
        }
        let port_of = |a: &str| a.rsplit(':').next().and_then(|p| p.parse::<u16>().ok());
        let (Some(local), Some(peer)) = (port_of(f[2]), port_of(f[3])) else { continue };
        if !ports.contains(&peer) {
            continue;
        }
        let ours = line.split("pid=").skip(1).filter_map(|r| r.split(',').next()?.parse::<u32>().ok()).any(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(needle))
                .unwrap_or(false)
        });
        if ours {
            found.push((peer, local));
        }
    }
    found
}

/// Logins accepted since `mark` whose client port belongs to the watched process.
pub fn attributed_logins(mark: &SshdMark, watched: &BTreeSet<(u16, u16)>) -> (usize, usize) {
    let all = mark.accepted();
    let ours = all.iter().filter(|c| watched.contains(c)).count();
    (ours, all.len())
}
