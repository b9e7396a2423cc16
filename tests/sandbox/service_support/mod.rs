//! A running `tao-slurm serve` for the service's tests: two clusters (the sandbox's two login hosts
//! as workspaces `login1` and `login2`, plus `default`), a token for org `team-a`, a free port on
//! loopback. Dropping it stops the service.
#![allow(dead_code)]

use crate::common::wait::{wait_for_async, when};
use crate::common::Env;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::time::Duration;

pub const ORG: &str = "team-a";

pub struct Service {
    pub env: Env,
    child: Child,
    pub url: String,
    pub token: String,
    pub token_id: String,
    pub http: reqwest::Client,
    /// `/metrics` when started with `--metrics-addr`.
    pub metrics_url: Option<String>,
}

impl Drop for Service {
    /// Stop the service, and cancel what a failed test left running (by cluster, as each needs).
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let out = self.env.run(&["list", "--active", "--json"]);
        let Ok(Value::Array(jobs)) = serde_json::from_slice::<Value>(&out.stdout) else { return };
        let mut by_cluster: std::collections::BTreeMap<Option<String>, Vec<String>> = Default::default();
        for j in jobs {
            let cluster = j["cluster"].as_str().map(String::from);
            by_cluster.entry(cluster).or_default().push(j["job_id"].as_str().unwrap_or_default().to_string());
        }
        for (cluster, ids) in by_cluster {
            let mut args: Vec<&str> = Vec::new();
            if let Some(c) = &cluster {
                args.extend(["--cluster", c.as_str()]);
            }
            args.push("cancel");
            args.extend(ids.iter().map(String::as_str));
            let _ = self.env.run(&args);
        }
    }
}

/// A second `serve` process of a [`Service`] (same state, same tokens). Dropping it kills it.
pub struct Replica {
    pub child: Child,
    pub url: String,
    pub metrics_url: Option<String>,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start `serve` on a free port with `env`: the process, its URL and its metrics URL (when started
/// with `--metrics-addr`).
fn spawn_serve(env: &Env, serve_flags: &[&str], log: &str) -> (Child, String, Option<String>) {
    let mut serve = vec!["serve", "--port", "0"];
    serve.extend_from_slice(serve_flags);
    let mut child = env
        .command(&serve)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(env.dir.path().join(log)).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    stdout.read_line(&mut line).unwrap();
    let metrics_url = serve_flags.contains(&"--metrics-addr").then(|| {
        let mut m = String::new();
        stdout.read_line(&mut m).unwrap();
        m.strip_prefix("metrics on ").unwrap_or_else(|| panic!("no metrics address: {m:?}")).trim().to_string()
    });
    let url = line
        .strip_prefix("listening on ")
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("serve did not start: {line:?}"))
        .trim_end_matches('/')
        .to_string();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    (child, url, metrics_url)
}

/// Short wall times let the sandbox's backfill start test jobs while others' big jobs wait for nodes.
pub fn short(mut job: Value) -> Value {
    job["time_hours"] = serde_json::json!(0.25);
    job["timeout_hours"] = serde_json::json!(0.2);
    job
}

/// Every workspace granted to `team-a`, which may take `SERVICE_TEST_SECRET` from the environment.
const DEFAULT_CLUSTERS: &str =
    "[default]\norgs = [\"team-a\"]\n\n[login1]\nslurm_hostname = [\"sandbox-login1\"]\norgs = [\"team-a\"]\n\n\
     [login2]\nslurm_hostname = \"sandbox-login2\"\norgs = [\"team-a\"]\n\n\
     [orgs.team-a]\nsecret_env = { SERVICE_TEST_SECRET = \"SERVICE_TEST_SECRET\" }\n";

/// The tests poll in tight loops: they are not what the per-token limit is for (the parallel-requests
/// test starts its service with the default limit, and meets it).
const TESTS_RATE_LIMIT: &str = "200";

impl Service {
    /// Start a service over a fresh state file.
    pub fn start() -> Service {
        Service::start_with(&[])
    }

    /// The service's log (stderr).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.env.dir.path().join("serve.log")).unwrap_or_default()
    }

    /// Start with extra variables in the service's environment; every workspace is granted to `team-a`,
    /// which may take `SERVICE_TEST_SECRET` from the service's environment.
    pub fn start_with(vars: &[(&str, &str)]) -> Service {
        Service::start_with_rate_limit(vars, TESTS_RATE_LIMIT)
    }

    /// [`Service::start_with`] with this per-token limit (`serve --rate-limit`).
    pub fn start_with_rate_limit(vars: &[(&str, &str)], rate_limit: &str) -> Service {
        Service::launch(vars, DEFAULT_CLUSTERS, false, &["--rate-limit", rate_limit])
    }

    /// Start with extra variables and this clusters.toml (profiles and the operator's rules); the
    /// token for `team-a` is an org admin token when `admin`.
    pub fn start_configured(vars: &[(&str, &str)], clusters_toml: &str, admin: bool) -> Service {
        Service::launch(vars, clusters_toml, admin, &["--rate-limit", TESTS_RATE_LIMIT])
    }

    /// [`Service::start_configured`] with these `serve` flags too.
    pub fn start_configured_with_flags(
        vars: &[(&str, &str)],
        clusters_toml: &str,
        admin: bool,
        flags: &[&str],
    ) -> Service {
        let mut args = vec!["--rate-limit", TESTS_RATE_LIMIT];
        args.extend_from_slice(flags);
        Service::launch(vars, clusters_toml, admin, &args)
    }

    /// Start with extra variables in its environment and these `serve` flags (usual clusters).
    pub fn start_with_flags(vars: &[(&str, &str)], flags: &[&str]) -> Service {
        let mut args = vec!["--rate-limit", TESTS_RATE_LIMIT];
        args.extend_from_slice(flags);
        Service::launch(vars, DEFAULT_CLUSTERS, false, &args)
    }

    /// Start with the usual clusters, an org admin token when `admin`, and these `serve` flags.
    pub fn start_flags(flags: &[&str], admin: bool) -> Service {
        let mut args = vec!["--rate-limit", TESTS_RATE_LIMIT];
        args.extend_from_slice(flags);
        Service::launch(&[], DEFAULT_CLUSTERS, admin, &args)
    }

    /// The service's process id (to signal it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Wait for the service to exit (bounded); its exit status.
    pub fn wait_exit(&mut self, limit: Duration) -> std::process::ExitStatus {
        let start = std::time::Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(start.elapsed() < limit, "the service did not exit within {limit:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn launch(vars: &[(&str, &str)], clusters_toml: &str, admin: bool, serve_flags: &[&str]) -> Service {
        let mut env = Env::new();
        for (k, v) in vars {
            env.vars.insert(k.to_string(), v.to_string());
        }
        let clusters = env.dir.path().join("clusters.toml");
        std::fs::write(&clusters, clusters_toml).unwrap();
        env.vars.insert("TAO_SLURM_CLUSTERS_FILE".into(), clusters.display().to_string());
        let mut args = vec!["token", "create", "--org", ORG, "--name", "tests", "--json"];
        if admin {
            args.push("--admin");
        }
        let created = env.json(&args);
        let token = created["token"].as_str().unwrap().to_string();
        let token_id = created["id"].as_str().unwrap().to_string();
        let (child, url, metrics_url) = spawn_serve(&env, serve_flags, "serve.log");
        Service { env, child, url, token, token_id, http: reqwest::Client::new(), metrics_url }
    }

    pub fn api(&self, path: &str) -> String {
        format!("{}/api/v2/orgs/{ORG}{path}", self.url)
    }

    /// Another `serve` on the same state and database (a replica), with these flags; its log is
    /// `<name>.log` in the test's directory.
    pub fn replica(&self, name: &str, serve_flags: &[&str]) -> Replica {
        let mut flags = vec!["--rate-limit", TESTS_RATE_LIMIT];
        flags.extend_from_slice(serve_flags);
        let (child, url, metrics_url) = spawn_serve(&self.env, &flags, &format!("{name}.log"));
        Replica { child, url, metrics_url }
    }

    pub fn get(&self, url: &str) -> reqwest::RequestBuilder {
        self.http.get(url).bearer_auth(&self.token)
    }

    pub async fn json(&self, url: &str) -> Value {
        let r = self.get(url).send().await.unwrap();
        let status = r.status();
        let text = r.text().await.unwrap();
        assert!(status.is_success(), "GET {url}: {status} {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{url}: not JSON ({e}): {text}"))
    }

    /// POST a job; returns (status, body).
    pub async fn create(&self, body: &Value) -> (u16, Value) {
        let body = short(body.clone());
        let r = self.http.post(self.api("/jobs")).bearer_auth(&self.token).json(&body).send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// Poll a job until `pred` holds (bounded).
    pub async fn wait_job(&self, id: &str, limit: Duration, pred: impl Fn(&Value) -> bool) -> Value {
        let url = self.api(&format!("/jobs/{id}"));
        wait_for_async(&format!("job {id} as expected"), limit, Duration::from_millis(300), || async {
            when(self.json(&url).await, &pred)
        })
        .await
    }
}

/// Read server-sent events from a response until `stop` says so or `limit` passes: (event, data).
pub async fn read_events(
    mut resp: reqwest::Response,
    limit: Duration,
    mut stop: impl FnMut(&str, &Value) -> bool,
) -> Vec<(String, Value)> {
    let mut buf = String::new();
    let mut events = Vec::new();
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let chunk = match tokio::time::timeout_at(deadline, resp.chunk()).await {
            Ok(Ok(Some(c))) => c,
            _ => return events,
        };
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(i) = buf.find("\n\n") {
            let block: String = buf.drain(..i + 2).collect();
            let mut name = "message".to_string();
            let mut data = String::new();
            for line in block.lines() {
                if let Some(n) = line.strip_prefix("event:") {
                    name = n.trim().to_string();
                } else if let Some(d) = line.strip_prefix("data:") {
                    data.push_str(d.strip_prefix(' ').unwrap_or(d));
                }
            }
            if data.is_empty() {
                continue;
            }
            let value: Value = serde_json::from_str(&data).unwrap_or(Value::String(data));
            let done = stop(&name, &value);
            events.push((name, value));
            if done {
                return events;
            }
        }
    }
}

/// The sandbox's second Unix user, an org's own identity on the cluster.
pub fn tenant() -> String {
    crate::common::sandbox::settings().get("SANDBOX_TENANT").cloned().unwrap_or_else(|| "tenant2".into())
}

/// A key line in the tenant's authorized_keys, taken out again however the test ends.
pub struct Authorised {
    file: std::path::PathBuf,
    line: String,
}

impl Authorised {
    pub fn add(line: &str) -> Authorised {
        let home = crate::common::sandbox::settings()["SANDBOX_DIR"].clone() + "/home/" + &tenant();
        let file = std::path::PathBuf::from(home).join(".ssh/authorized_keys");
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(&file).unwrap_or_else(|e| {
            panic!("{}: {e}; run bash dev/sandbox/up.sh (it makes the tenant user)", file.display())
        });
        writeln!(f, "{line}").unwrap();
        Authorised { file, line: line.to_string() }
    }
}

impl Drop for Authorised {
    fn drop(&mut self) {
        if let Ok(text) = std::fs::read_to_string(&self.file) {
            let kept: String = text.lines().filter(|l| *l != self.line).map(|l| format!("{l}\n")).collect();
            let _ = std::fs::write(&self.file, kept);
        }
    }
}

/// One request with `token`: the status and the body as JSON (or as a string when it is not JSON).
pub async fn send(svc: &Service, token: &str, method: reqwest::Method, url: &str, body: Option<Value>) -> (u16, Value) {
    let mut r = svc.http.request(method, url).bearer_auth(token);
    if let Some(b) = body {
        r = r.json(&b);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// The test CA's public key in the login hosts' TrustedUserCAKeys file, taken out however the test ends.
pub struct TrustedCa {
    file: std::path::PathBuf,
    line: String,
}

impl TrustedCa {
    /// A CA key made in `dir` (ssh-keygen, ed25519), trusted until the guard drops: (its private key, guard).
    pub fn make(dir: &std::path::Path) -> (std::path::PathBuf, TrustedCa) {
        let ca = dir.join("ca");
        let made = std::process::Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", "tao-slurm-test-ca", "-f"])
            .arg(&ca)
            .output()
            .unwrap();
        assert!(made.status.success(), "{made:?}");
        let line = std::fs::read_to_string(ca.with_extension("pub")).unwrap();
        (ca, TrustedCa::add(line.trim()))
    }

    fn add(line: &str) -> TrustedCa {
        let _one = TRUSTED_CA_FILE.lock().unwrap_or_else(|e| e.into_inner());
        let file = std::path::PathBuf::from(&crate::common::sandbox::settings()["SANDBOX_TRUSTED_USER_CA_KEYS"]);
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .unwrap_or_else(|e| panic!("{}: {e}; run bash dev/sandbox/up.sh (it makes the file)", file.display()));
        writeln!(f, "{line}").unwrap();
        TrustedCa { file, line: line.to_string() }
    }
}

/// Tests add and take out their CA lines one at a time (a take-out rewrites the file).
static TRUSTED_CA_FILE: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Drop for TrustedCa {
    fn drop(&mut self) {
        let _one = TRUSTED_CA_FILE.lock().unwrap_or_else(|e| e.into_inner());
        if let Ok(text) = std::fs::read_to_string(&self.file) {
            let kept: String = text.lines().filter(|l| *l != self.line).map(|l| format!("{l}\n")).collect();
            let _ = std::fs::write(&self.file, kept);
        }
    }
}

/// Wait until `sacct` shows each of these Slurm jobs under its Unix user (slurmdbd shows a job that
/// just ended as root's until its records are all in).
pub fn wait_for_sacct_users(jobs: &[(&str, &str)]) {
    let conf = format!("{}/etc/slurm.conf", crate::common::sandbox::settings()["SANDBOX_DIR"]);
    let ids: Vec<&str> = jobs.iter().map(|(id, _)| *id).collect();
    let mut want: Vec<String> = jobs.iter().map(|(id, user)| format!("{id}|{user}")).collect();
    want.sort();
    crate::common::wait::wait_for(
        "sacct to name each job's user",
        // (a deadline only: slurmdbd on a loaded two-core machine can lag the controller by many seconds)
        Duration::from_secs(90),
        Duration::from_millis(500),
        || {
            let out = std::process::Command::new("sacct")
                .args(["-a", "-X", "-n", "-P", "-o", "JobID,User", "-j", &ids.join(",")])
                .env("SLURM_CONF", &conf)
                .output()
                .unwrap();
            let mut rows: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(String::from).collect();
            rows.sort();
            rows == want
        },
    );
}
