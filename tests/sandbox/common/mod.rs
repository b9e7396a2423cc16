//! Shared harness for the integration tests: they drive the real `tao-slurm` binary against the real
//! sandbox cluster (dev/sandbox) over real SSH. A missing sandbox is a failure, never a skip. `sandbox`
//! reads the cluster's settings, `wait` is the one way to wait for something.
#![allow(dead_code)]

pub mod cluster;
pub mod private_postgres;
pub mod pty;
pub mod sandbox;
pub mod wait;

use serde_json::Value;
use std::collections::HashMap;
use std::process::{Command, Output, Stdio};
use std::time::Duration;
use wait::{poll, wait_for, when};

/// The statuses a job never leaves.
pub const TERMINAL: [&str; 3] = ["Complete", "Error", "Canceled"];

/// Whether a job's JSON view (`status --json`, `list --json`) shows a terminal status.
pub fn is_terminal(job: &Value) -> bool {
    job["status"].as_str().is_some_and(|s| TERMINAL.contains(&s))
}

/// One isolated user of the CLI: its own HOME, state file and (unless shared) ControlMaster directory.
pub struct Env {
    pub dir: tempfile::TempDir,
    pub vars: HashMap<String, String>,
}

impl Drop for Env {
    /// A test that panics leaves none of its jobs running: they would hold the sandbox's nodes and
    /// starve the tests after it (a failed sweep test's variants, left sleeping 600 s on a node, kept
    /// a four-node job pending and every job queued behind it, until five other tests ran out of
    /// time). Never panics itself (a panic while panicking aborts): each step gives up quietly.
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let Ok(out) = self.command(&["list", "--json"]).output() else { return };
        let Ok(Value::Array(jobs)) = serde_json::from_slice::<Value>(&out.stdout) else { return };
        let open: Vec<&str> = jobs.iter().filter(|j| !is_terminal(j)).filter_map(|j| j["job_id"].as_str()).collect();
        if open.is_empty() {
            return;
        }
        let mut args = vec!["cancel"];
        args.extend(open.iter().copied());
        let Ok(mut child) = self.command(&args).stdout(Stdio::null()).stderr(Stdio::null()).spawn() else { return };
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while matches!(child.try_wait(), Ok(None)) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(200));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Env {
    /// Shares the ControlMaster directory with other tests (the normal case for a user).
    pub fn new() -> Env {
        let env = Env::isolated();
        let mut env = env;
        env.vars.insert("TAO_SLURM_CONTROL_DIR".into(), "/tmp/tao-slurm-test-cm".into());
        env
    }

    /// Its own ControlMaster directory: the first remote command opens a new login.
    pub fn isolated() -> Env {
        let dir = tempfile::tempdir().unwrap();
        let mut vars = sandbox::settings().clone();
        vars.insert("HOME".into(), dir.path().display().to_string());
        vars.insert("TAO_SLURM_STATE".into(), dir.path().join("state.db").display().to_string());
        vars.insert("TAO_SLURM_CONTROL_DIR".into(), dir.path().join("cm").display().to_string());
        // Short persistence: test masters must not outlive the run by much.
        vars.insert("TAO_SLURM_CONTROL_PERSIST".into(), "120".into());
        // The squashfs cache, as tao-slurm's default: each image is imported once per run (on the
        // CPU partition) and every step starts from its .sqsh (about 1 s) instead of importing from
        // the registry again (3-4 s of the two cores each step, hundreds of steps a run).
        vars.insert("TAO_SLURM_USE_SQSH".into(), "true".into());
        // Retries after 1 s, 2 s, 4 s... rather than the default 30 s, 60 s...
        vars.insert("TAO_SLURM_RETRY_BACKOFF_SECS".into(), "1".into());
        Env { dir, vars }
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tao-slurm"));
        cmd.args(args).env_clear();
        cmd.env("PATH", std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()));
        for (k, v) in &self.vars {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::null());
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// Run and require exit 0; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "tao-slurm {args:?} exited {:?}\nstdout: {}\nstderr: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    pub fn json(&self, args: &[&str]) -> Value {
        let text = self.ok(args);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
    }

    /// Submit and return (platform job id, slurm job id).
    pub fn submit(&self, args: &[&str]) -> (String, String) {
        let mut full = vec!["submit", "--json"];
        full.extend_from_slice(args);
        let v = self.json(&full);
        (v["job_id"].as_str().unwrap().to_string(), v["slurm_job_id"].as_str().unwrap().to_string())
    }

    /// `status ID --json` of one job (the command answers a list, here of one).
    pub fn status(&self, job_id: &str) -> Value {
        let v = self.json(&["status", job_id, "--json"]);
        let jobs = v.as_array().unwrap_or_else(|| panic!("status answers a list: {v}"));
        assert_eq!(jobs.len(), 1, "one job asked, one answered: {v}");
        jobs[0].clone()
    }

    /// Poll `status --json` until the job is terminal (bounded, so a broken job fails the test).
    pub fn wait_terminal(&self, job_id: &str, limit: Duration) -> Value {
        self.wait_terminal_with(&[], job_id, limit)
    }

    /// `wait_terminal` with global flags before `status` (e.g. `--local`).
    pub fn wait_terminal_with(&self, flags: &[&str], job_id: &str, limit: Duration) -> Value {
        let mut args = flags.to_vec();
        args.extend(["status", job_id, "--json"]);
        wait_for(&format!("job {job_id} terminal"), limit, Duration::from_millis(500), || {
            when(self.json(&args)[0].clone(), is_terminal)
        })
    }

    /// Poll `status JOB --json` every half second until `done` holds for the job's view; returns it.
    pub fn wait_job(&self, job_id: &str, what: &str, limit: Duration, done: impl Fn(&Value) -> bool) -> Value {
        wait_for(&format!("job {job_id} {what}"), limit, Duration::from_millis(500), || {
            when(self.status(job_id), &done)
        })
    }

    /// Poll `status ID --json` of a sweep or pipeline (its jobs) until `done` holds for them.
    pub fn wait_group(&self, id: &str, what: &str, limit: Duration, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        wait_for(&format!("{id}: {what}"), limit, Duration::from_millis(700), || {
            let v = self.json(&["status", id, "--json"]);
            let jobs = v.as_array().unwrap_or_else(|| panic!("a group's status is a list: {v}")).clone();
            when(jobs, |jobs| done(jobs)).map_err(|_| format!("{v:#}"))
        })
    }

    /// The library's settings for this user of the CLI.
    /// Ask Slurm to start a requeued job now (a requeue waits ~120 s for its BeginTime otherwise).
    /// Not within a second of the requeue: Slurm would ignore it (see the sandbox facts).
    pub fn nudge(&self, slurm: &str) {
        std::thread::sleep(std::time::Duration::from_millis(1500));
        let out = std::process::Command::new("ssh")
            .args(["-F", &self.vars["SSH_CONFIG"], "sandbox-login1", "scontrol", "update"])
            .arg(format!("JobId={slurm}"))
            .arg("StartTime=now")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }

    pub fn settings(&self) -> tao_slurm::config::Settings {
        let sources = tao_slurm::config::SettingSources {
            flags: Default::default(),
            env: self.vars.clone(),
            file: Default::default(),
            uid: Some(tao_slurm_engine::private::current_uid()),
        };
        tao_slurm::config::Settings::from_sources(&sources).unwrap()
    }

    /// Run a bash script as the sandbox user on the first login host, outside tao-slurm.
    pub fn ssh(&self, script: &str) -> String {
        use std::io::Write;
        let mut child = Command::new("ssh")
            .args(["-F", &self.vars["SSH_CONFIG"], "sandbox-login1", "bash", "-s"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }

    /// Record a job in the local state as if its submission's answer had been lost (nothing sent).
    pub fn record_unsubmitted(&self) -> tao_slurm::plan::Plan {
        let settings = self.settings();
        let spec = tao_slurm::JobSpec {
            image: "ubuntu:22.04".into(),
            command: vec!["true".into()],
            gpus: Some(0),
            ..Default::default()
        };
        let plan = tao_slurm::plan::resolve(&spec, &settings).unwrap();
        let store = tao_slurm_engine::store::Store::open(&settings.state_path).unwrap();
        let now = tao_slurm::clock::now();
        store.insert_job("{}", &plan, now).unwrap();
        // What the submitter records when the answer is lost (the refresh then looks for the job).
        let lost = tao_slurm_engine::store::StatusUpdate::bare(
            tao_slurm::PlatformStatus::Pending,
            "submission outcome unknown: the connection was lost during sbatch",
        );
        store.update_status(&plan.layout.job_id, &lost, now).unwrap();
        plan
    }

    /// Wait until `sdiag`'s DBD Agent queue (the records slurmctld has not yet handed to slurmdbd) is
    /// empty, as the refresh does before it takes a job's absence as evidence. It narrows the window
    /// but does not close it: a job that ended a moment ago was seen missing from `sacct` after it on
    /// a loaded machine (the fresh-machine runs of issue 55). Where a job must be in `sacct`, poll
    /// for it with [`Env::wait_ssh`]; [`Env::slurm_jobs_named`] also asks the controller.
    pub fn wait_for_accounting(&self) {
        let script = "sdiag | awk -F: '/DBD Agent queue size/ { gsub(/ /, \"\", $2); print $2 }'\n";
        wait_for(
            "slurmdbd to record what the controller did",
            Duration::from_secs(90),
            Duration::from_millis(250),
            || {
                let queued = self.ssh(script);
                when(queued.trim().to_string(), |q| q == "0").map_err(|q| format!("DBD Agent queue size {q:?}"))
            },
        );
    }

    /// Run `script` on the login host (as [`Env::ssh`]) every 300 ms until `done` holds for its
    /// output; returns it. For what Slurm shows only a moment after it happened (a job's state in
    /// `sacct` or `squeue` once it ended, say). Panics with the last output after `limit`.
    pub fn wait_ssh(&self, what: &str, script: &str, limit: Duration, done: impl Fn(&str) -> bool) -> String {
        wait_for(what, limit, Duration::from_millis(300), || {
            let out = self.ssh(script);
            when(out, |o| done(o)).map_err(|o| format!("{script:?} printed {o:?}"))
        })
    }

    /// Slurm jobs (any state) whose name starts with `prefix`, in sacct and in the controller, once
    /// accounting has caught up (a job that ended more than MinJobAge ago is in sacct alone). For an
    /// absence; to count jobs that ran, [`Env::slurm_jobs_counted`].
    pub fn slurm_jobs_named(&self, prefix: &str) -> Vec<String> {
        self.wait_for_accounting();
        self.slurm_jobs_now(prefix)
    }

    /// The Slurm jobs named `prefix...`, polled until there are `n` (a job that ended a moment ago
    /// reaches sacct a moment later; a job submitted twice makes `n + 1`, never `n`, and fails at the
    /// deadline with what was seen).
    pub fn slurm_jobs_counted(&self, prefix: &str, n: usize) -> Vec<String> {
        wait_for(
            &format!("{n} Slurm jobs named {prefix}*"),
            Duration::from_secs(120),
            Duration::from_millis(500),
            || when(self.slurm_jobs_now(prefix), |ids| ids.len() == n).map_err(|ids| format!("{ids:?}")),
        )
    }

    fn slurm_jobs_now(&self, prefix: &str) -> Vec<String> {
        let text = self.ssh(
            "sacct -X -P -n -S now-1days -E now -s PD,R,RQ,RS,S,CA,CD,F,TO,NF,PR,OOM,BF,DL -o JobIDRaw,JobName\n\
             squeue --me -t all -h -o '%i|%j'\n",
        );
        let mut ids: Vec<String> = text
            .lines()
            .filter_map(|l| l.split_once('|'))
            .filter(|(_, name)| name.starts_with(prefix))
            .map(|(id, _)| id.to_string())
            .collect();
        ids.sort();
        ids.dedup();
        ids
    }

    /// Run a command with a deadline; panics if it is still running then.
    pub fn run_with_deadline(&self, args: &[&str], limit: Duration) -> Output {
        let mut child = self.command(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let ended = poll(limit, Duration::from_millis(100), || child.try_wait().unwrap().is_some());
        if ended.is_err() {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "tao-slurm {args:?} still running after {limit:?}\nstdout: {}\nstderr: {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        child.wait_with_output().unwrap()
    }
}

impl Env {
    /// Log in with a key of this test's own (added to the sandbox user's authorized_keys), straight to
    /// host:port without the sandbox's ssh_config; returns the key's fingerprint, by which the sshd log
    /// tells this test's logins from everyone else's.
    pub fn use_own_key(&mut self) -> String {
        let key = self.dir.path().join("id_own");
        let st = Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", "", "-f"]).arg(&key).status().unwrap();
        assert!(st.success());
        let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
        let auth = sandbox::dir().join("home").join(sandbox::setting("SLURM_USER")).join(".ssh/authorized_keys");
        use std::io::Write;
        std::fs::OpenOptions::new().append(true).open(&auth).unwrap().write_all(public.as_bytes()).unwrap();
        let out = Command::new("ssh-keygen").arg("-lf").arg(key.with_extension("pub")).output().unwrap();
        let fingerprint = String::from_utf8(out.stdout).unwrap().split_whitespace().nth(1).unwrap().to_string();
        self.vars.insert("SSH_KEY_PATH".into(), key.display().to_string());
        self.vars.remove("SSH_CONFIG");
        let hosts: Vec<String> = sandbox::ssh_ports().iter().map(|p| format!("127.0.0.1:{p}")).collect();
        self.vars.insert("SLURM_HOSTNAME".into(), hosts.join(","));
        fingerprint
    }
}

/// Held by a test while it sets the sandbox nodes' GPU readings (`<sandbox>/gpu/<node>`) or asserts on
/// them: those tests run one at a time.
pub fn gpu_readings_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}
