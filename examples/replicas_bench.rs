//! The service on one and on two replicas (dev/bench-replicas, issue 25): 200 concurrent clients each
//! create a held job through the API (spread over the replicas), then list the org's jobs; the
//! latency of both, and what the monitors cost meanwhile (refreshes and round trips summed over the
//! replicas: one replica holds the workspace's lease, so the cluster sees one monitor however many
//! replicas run). Backends: SQLite (the state file) and, when BENCH_DATABASE_URL names one,
//! PostgreSQL (`serve --database`). Rewrites its section of bench/report.md.
//! Issue 38: each row twice, with the group commit of submits (the default) and without it
//! (`TAO_SLURM_SUBMIT_BATCH=1`, the old path), beside the floor measured in the same run: one script
//! on the login host making the same number of `sbatch` submissions. The burst's round trips and the
//! controller's RPCs (`sdiag`, by message type) are counted.
//! Env: BENCH_CLIENTS (200), BENCH_QUIET_SECS (30), BENCH_DATABASE_URL, BENCH_BACKENDS, BENCH_REPLICAS,
//! BENCH_MODES (`batched,single`), BENCH_SERVE_LOG (a file for the services' logs, with TAO_SLURM_LOG
//! as their filter), BENCH_SCHEMA (a PostgreSQL schema to run in and keep, instead of a fresh one per
//! run, which is dropped after it).

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

struct Row {
    backend: String,
    replicas: usize,
    /// `batched` (group commit), `async` (the same, each create asking `Prefer: respond-async`:
    /// answered once recorded) or `single` (TAO_SLURM_SUBMIT_BATCH=1).
    mode: String,
    /// From the first create sent to the last one answered, in ms.
    burst_ms: f64,
    /// From the first create sent until every job was seen with its Slurm job id (the answers of
    /// `batched` and `single` carry it; `async` is polled for it every 50 ms), in ms.
    submitted_ms: f64,
    /// Remote scripts the replicas ran for the burst (the monitors' refreshes not counted).
    burst_round_trips: u64,
    /// The controller's RPCs during the burst, by message type.
    rpcs: Rpcs,
    create: Vec<f64>,
    list: Vec<f64>,
    errors: usize,
    /// 503s (pool full) waited out and asked again.
    waits: usize,
    quiet_secs: f64,
    refreshes: u64,
    refresh_round_trips: u64,
    holders: usize,
}

/// A bench environment: the sandbox's settings over a fresh state directory.
struct Bench {
    exe: String,
    vars: Vec<(String, String)>,
    _dir: tempfile::TempDir,
    /// On PostgreSQL, the run's own schema (and its `_service` one), dropped when the run ends: each
    /// run starts as empty as SQLite's fresh state file, not over every earlier run's jobs.
    schema: Option<(String, String)>,
}

impl Drop for Bench {
    fn drop(&mut self) {
        if let Some((url, schema)) = &self.schema {
            // On a thread of its own: the sync client drives a runtime, and the bench runs in one.
            let drop_schemas = || {
                postgres::Client::connect(url, postgres::NoTls).and_then(|mut c| {
                    c.batch_execute(&format!(
                        "DROP SCHEMA IF EXISTS {schema} CASCADE; DROP SCHEMA IF EXISTS {schema}_service CASCADE"
                    ))
                })
            };
            let dropped = std::thread::scope(|s| s.spawn(drop_schemas).join().expect("the schema's drop"));
            if let Err(e) = dropped {
                eprintln!("replicas_bench: cannot drop the run's schema {schema}: {e}");
            }
        }
    }
}

/// The controller's RPC counts by message type (`sdiag`), those a submission makes.
#[derive(Clone, Copy, Default)]
struct Rpcs {
    submit: u64,
    update: u64,
    partition_info: u64,
    job_info: u64,
}

impl Rpcs {
    fn since(self, before: Rpcs) -> Rpcs {
        Rpcs {
            submit: self.submit - before.submit,
            update: self.update - before.update,
            partition_info: self.partition_info - before.partition_info,
            job_info: self.job_info - before.job_info,
        }
    }
}

impl Bench {
    /// Run a script on the first login host over the sandbox's ssh config (not through tao-slurm).
    fn ssh(&self, script: &str) -> String {
        use std::io::Write;
        let config = self.vars.iter().find(|(k, _)| k == "SSH_CONFIG").map(|(_, v)| v.clone()).expect("SSH_CONFIG");
        let mut child = Command::new("ssh")
            .args(["-F", &config, "sandbox-login1", "bash", "-s"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
        String::from_utf8_lossy(&child.wait_with_output().unwrap().stdout).into_owned()
    }

    fn rpcs(&self) -> Rpcs {
        let text = self.ssh("sdiag");
        let count = |name: &str| {
            text.lines()
                .find(|l| l.trim_start().starts_with(name))
                .and_then(|l| l.split("count:").nth(1))
                .and_then(|c| c.split_whitespace().next())
                .and_then(|c| c.parse().ok())
                .unwrap_or(0)
        };
        Rpcs {
            submit: count("REQUEST_SUBMIT_BATCH_JOB "),
            update: count("REQUEST_UPDATE_JOB "),
            partition_info: count("REQUEST_PARTITION_INFO "),
            job_info: count("REQUEST_JOB_USER_INFO ") + count("REQUEST_JOB_INFO "),
        }
    }

    /// The floor: `n` held submissions made by one script on the login host (one ssh, then sbatch
    /// after sbatch), timed on the host; its jobs cancelled afterwards. Milliseconds.
    fn floor_ms(&self, n: usize) -> f64 {
        let out = self.ssh(&format!(
            "d=$(mktemp -d); t0=$(date +%s%N)\n\
             for i in $(seq {n}); do sbatch --parsable --hold --begin=now+1day --job-name=bench-floor -o /dev/null --wrap true >> $d/ids || exit 1; done\n\
             t1=$(date +%s%N); echo \"ms $(( (t1 - t0) / 1000000 ))\"; scancel --name=bench-floor; rm -rf $d\n"
        ));
        out.lines().find_map(|l| l.strip_prefix("ms ")).and_then(|v| v.trim().parse().ok()).unwrap_or(f64::NAN)
    }

    fn new(database: Option<&str>) -> Bench {
        let exe = std::env::var("TAO_SLURM_BIN").unwrap_or_else(|_| "target/release/tao-slurm".into());
        let dir = tempfile::tempdir().unwrap();
        let sandbox = std::env::var("SANDBOX_DIR").unwrap_or_else(|_| "/var/lib/tao-slurm-sandbox".into());
        let settings = std::fs::read_to_string(format!("{sandbox}/settings.env")).expect("bash dev/sandbox/up.sh");
        let mut vars: Vec<(String, String)> = settings
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.trim().into(), v.trim().into()))
            .collect();
        let d = dir.path().display().to_string();
        vars.extend([
            ("HOME".to_string(), d.clone()),
            ("TAO_SLURM_STATE".to_string(), format!("{d}/state.db")),
            ("TAO_SLURM_CONTROL_DIR".to_string(), format!("{d}/cm")),
            ("TAO_SLURM_USE_SQSH".to_string(), "false".to_string()),
            ("TAO_SLURM_CLUSTERS_FILE".to_string(), format!("{d}/clusters.toml")),
        ]);
        // BENCH_SCHEMA names a schema to run in and keep (one with earlier runs' jobs: a service
        // with a history).
        let kept = std::env::var("BENCH_SCHEMA").ok().filter(|s| !s.is_empty());
        let schema = database.map(|url| (url.to_string(), format!("bench_{}", uuid::Uuid::new_v4().simple())));
        if let Some((url, fresh)) = &schema {
            vars.push(("TAO_SLURM_DATABASE_URL".to_string(), url.to_string()));
            vars.push(("TAO_SLURM_DATABASE_SCHEMA".to_string(), kept.clone().unwrap_or_else(|| fresh.clone())));
        }
        let schema = schema.filter(|_| kept.is_none());
        std::fs::write(dir.path().join("clusters.toml"), "[default]\norgs = [\"bench\"]\n").unwrap();
        Bench { exe, vars, _dir: dir, schema }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.exe);
        c.args(args).env_clear().env("PATH", std::env::var("PATH").unwrap_or_default());
        if let Ok(filter) = std::env::var("TAO_SLURM_LOG") {
            c.env("TAO_SLURM_LOG", filter);
        }
        for (k, v) in &self.vars {
            c.env(k, v);
        }
        c
    }

    /// A `serve` process: it and its URL.
    fn serve(&self) -> (Child, String) {
        let mut server = self
            .cmd(&["serve", "--port", "0", "--rate-limit", "100000"])
            .stdout(Stdio::piped())
            .stderr(match std::env::var("BENCH_SERVE_LOG") {
                Ok(path) => Stdio::from(std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap()),
                Err(_) => Stdio::null(),
            })
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(server.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let url = line.split_whitespace().nth(2).unwrap().trim_end_matches('/').to_string();
        (server, url)
    }
}

/// GET `path` of the bench org's API, as JSON.
async fn get_json(http: &reqwest::Client, url: &str, token: &str, path: &str) -> Value {
    http.get(format!("{url}/api/v2/orgs/bench/{path}")).bearer_auth(token).send().await.unwrap().json().await.unwrap()
}

async fn stats(http: &reqwest::Client, url: &str, token: &str) -> Value {
    get_json(http, url, token, "stats").await
}

/// (refreshes, refresh round trips) summed over the replicas.
async fn monitor_counts(http: &reqwest::Client, urls: &[String], token: &str) -> (u64, u64) {
    let mut sum = (0, 0);
    for u in urls {
        let s = stats(http, u, token).await;
        let w = &s["workspaces"][0];
        sum.0 += w["refreshes"].as_u64().unwrap_or(0);
        sum.1 += w["refresh_round_trips"].as_u64().unwrap_or(0);
    }
    sum
}

/// Remote scripts the replicas ran, the monitors' refreshes not counted.
async fn round_trips(http: &reqwest::Client, urls: &[String], token: &str) -> u64 {
    let mut sum = 0;
    for u in urls {
        let s = stats(http, u, token).await;
        let w = &s["workspaces"][0];
        // The monitor's refreshes are counted in both.
        sum += w["round_trips"].as_u64().unwrap_or(0) - w["refresh_round_trips"].as_u64().unwrap_or(0);
    }
    sum
}

/// Wait until the burst's jobs (`ids`) all have their Slurm job id (asked every 50 ms, at most 10 min).
/// Every replica is asked: each brings its own creates up to date at once, and the others' at its
/// monitor's pace.
async fn all_submitted(http: &reqwest::Client, urls: &[String], token: &str, ids: &[String]) {
    let n = ids.len();
    let burst: std::collections::HashSet<&str> = ids.iter().map(String::as_str).collect();
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut sent = std::collections::HashSet::new();
    loop {
        for url in urls {
            let list = get_json(http, url, token, "jobs?size=1000").await;
            for j in list["jobs"].as_array().into_iter().flatten() {
                let id = j["id"].as_str().unwrap_or_default();
                // The warm-up creates' jobs are not the burst's.
                if burst.contains(id) && j["backend_details"]["slurm_metadata"]["slurm_job_id"].is_string() {
                    sent.insert(id.to_string());
                }
            }
        }
        if sent.len() >= n {
            return;
        }
        assert!(Instant::now() < deadline, "{} of {n} jobs submitted after 10 min", sent.len());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A create's body: one held job (`begin=now+1day`) named `name`.
fn create_body(name: &str) -> Value {
    json!({"image": "ubuntu:22.04", "command": ["true"], "gpus": 0, "name": name, "sbatch_options": {"begin": "now+1day"}})
}

async fn run(backend: &str, database: Option<&str>, mode: &str, replicas: usize, clients: usize, quiet: u64) -> Row {
    let mut bench = Bench::new(database);
    let respond_async = mode == "async";
    if mode == "single" {
        bench.vars.push(("TAO_SLURM_SUBMIT_BATCH".to_string(), "1".to_string()));
    }
    let out = bench.cmd(&["token", "create", "--org", "bench", "--json"]).output().unwrap();
    let token: Value = serde_json::from_slice(&out.stdout).expect("token create");
    let token = token["token"].as_str().unwrap().to_string();
    let servers: Vec<(Child, String)> = (0..replicas).map(|_| bench.serve()).collect();
    let urls: Vec<String> = servers.iter().map(|(_, u)| u.clone()).collect();
    let http = reqwest::Client::builder().pool_max_idle_per_host(clients + 8).build().unwrap();
    // Let the replicas settle on a lease holder.
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The warm-up's jobs are cancelled with the burst's at the end.
    let mut warm_ids = Vec::new();
    if std::env::var("BENCH_WARM").map_or(true, |v| v != "0") {
        for url in &urls {
            let r = http
                .post(format!("{url}/api/v2/orgs/bench/jobs"))
                .bearer_auth(&token)
                .json(&create_body("bench-warm"))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 201, "warm-up create");
            let job: Value = r.json().await.unwrap();
            warm_ids.push(job["id"].as_str().expect("the created job's id").to_string());
        }
    }
    let trips_before = round_trips(&http, &urls, &token).await;
    let rpcs_before = bench.rpcs();
    let burst_start = Instant::now();

    let mut tasks = Vec::new();
    for c in 0..clients {
        let (http, url, token) = (http.clone(), urls[c % urls.len()].clone(), token.clone());
        tasks.push(tokio::spawn(async move {
            // A client as TAO's waits out a 503 (the service's pool of cluster work is full) for its
            // Retry-After and asks again; the time counts in its create's latency.
            let t = Instant::now();
            let mut turned_away = 0;
            let id = loop {
                let mut req = http.post(format!("{url}/api/v2/orgs/bench/jobs")).bearer_auth(&token);
                if respond_async {
                    req = req.header("prefer", "respond-async");
                }
                let r = req.json(&create_body("bench-replicas")).send().await;
                match r {
                    Ok(r) if r.status() == 201 || (respond_async && r.status() == 202) => {
                        break r.json::<Value>().await.ok().and_then(|v| v["id"].as_str().map(String::from))
                    }
                    Ok(r) if r.status() == 503 && turned_away < 100 => {
                        turned_away += 1;
                        let wait = r
                            .headers()
                            .get("retry-after")
                            .and_then(|v| v.to_str().ok())
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(1u64);
                        tokio::time::sleep(Duration::from_secs(wait)).await;
                    }
                    _ => break None,
                }
            };
            let create = t.elapsed().as_secs_f64() * 1000.0;
            let answered = Instant::now();
            let t = Instant::now();
            let listed = http.get(format!("{url}/api/v2/orgs/bench/jobs?size=50")).bearer_auth(&token).send().await;
            let list = t.elapsed().as_secs_f64() * 1000.0;
            let listed = matches!(listed, Ok(r) if r.status() == 200);
            (id, create, listed.then_some(list), turned_away, answered)
        }));
    }
    let (mut ids, mut create, mut list, mut errors, mut waits) = (Vec::new(), Vec::new(), Vec::new(), 0, 0);
    let mut last_answer = burst_start;
    for t in tasks {
        let (id, c, l, w, answered) = t.await.unwrap();
        last_answer = last_answer.max(answered);
        waits += w;
        match id {
            Some(id) => {
                ids.push(id);
                create.push(c);
            }
            None => errors += 1,
        }
        match l {
            Some(l) => list.push(l),
            None => errors += 1,
        }
    }
    let burst_ms = (last_answer - burst_start).as_secs_f64() * 1000.0;
    let submitted_ms = if respond_async {
        all_submitted(&http, &urls, &token, &ids).await;
        burst_start.elapsed().as_secs_f64() * 1000.0
    } else {
        burst_ms
    };
    let rpcs = bench.rpcs().since(rpcs_before);
    let burst_round_trips = round_trips(&http, &urls, &token).await - trips_before;
    create.sort_by(|a, b| a.partial_cmp(b).unwrap());
    list.sort_by(|a, b| a.partial_cmp(b).unwrap());

    // A quiet window: what the monitors of all replicas cost the cluster.
    let before = monitor_counts(&http, &urls, &token).await;
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(quiet)).await;
    let after = monitor_counts(&http, &urls, &token).await;
    let quiet_secs = started.elapsed().as_secs_f64();
    let mut holders = 0;
    for u in &urls {
        let s = stats(&http, u, &token).await;
        if s["workspaces"][0]["refreshes"].as_u64().unwrap_or(0) > 0 {
            holders += 1;
        }
    }
    for (mut child, _) in servers {
        let _ = child.kill();
        let _ = child.wait();
    }
    let all_ids: Vec<String> = ids.iter().chain(&warm_ids).cloned().collect();
    for chunk in all_ids.chunks(250) {
        let mut args = vec!["cancel"];
        args.extend(chunk.iter().map(String::as_str));
        let _ = bench.cmd(&args).output();
    }
    Row {
        backend: backend.to_string(),
        replicas,
        mode: mode.to_string(),
        burst_ms,
        submitted_ms,
        burst_round_trips,
        rpcs,
        create,
        list,
        errors,
        waits,
        quiet_secs,
        refreshes: after.0 - before.0,
        refresh_round_trips: after.1 - before.1,
        holders,
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let clients = env_or("BENCH_CLIENTS", 200) as usize;
    let quiet = env_or("BENCH_QUIET_SECS", 30);
    let database = std::env::var("BENCH_DATABASE_URL").ok().filter(|u| !u.is_empty());
    let mut rows = Vec::new();
    let mut backends: Vec<(&str, Option<&str>)> = vec![("SQLite", None)];
    if let Some(url) = database.as_deref() {
        backends.push(("PostgreSQL", Some(url)));
    }
    // BENCH_BACKENDS=postgresql (or sqlite) runs one backend only.
    if let Ok(only) = std::env::var("BENCH_BACKENDS") {
        backends.retain(|(name, _)| only.split(',').any(|b| b.trim().eq_ignore_ascii_case(name)));
    }
    let modes = std::env::var("BENCH_MODES").unwrap_or_else(|_| "batched,single".into());
    let floor_bench = Bench::new(None);
    let mut floors = Vec::new();
    for (backend, url) in &backends {
        // BENCH_REPLICAS=2 (or 1) runs that many replicas only.
        let counts = std::env::var("BENCH_REPLICAS").unwrap_or_else(|_| "1,2".into());
        for replicas in counts.split(',').filter_map(|n| n.trim().parse::<usize>().ok()) {
            for mode in modes.split(',').map(str::trim).filter(|m| !m.is_empty()) {
                eprintln!("{backend}, {replicas} replica(s), {mode}...");
                floors.push(floor_bench.floor_ms(clients));
                rows.push(run(backend, *url, mode, replicas, clients, quiet).await);
            }
        }
    }
    floors.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let floor = percentile(&floors, 0.5);
    let mut s = String::from(
        "<!-- replicas-bench:begin -->\n## Replicas (`serve` on one and two processes, examples/replicas_bench.rs)\n\n",
    );
    s.push_str(&format!(
        "After one create on each replica (the service's ssh connection open and the cluster's facts known, as the floor's are; `BENCH_WARM=0` skips it), {clients} concurrent clients each create one held job (`begin=now+1day`) through the API, spread over the replicas, then list the org's jobs (`?size=50`); then a quiet window of {quiet} s in which the monitors of all replicas are counted. A create the service turns away (503: its pool of creates per workspace and replica stayed full for 3 s) is waited out for its Retry-After and asked again, as a client should; its latency includes the waits. Every replica answers every route; the one holding the workspace's lease refreshes it. Release build, the service, the clients and the sandbox cluster on one 2-core machine.\n\n"
    ));
    s.push_str(&format!(
        "**The floor**: {clients} `sbatch --hold` submissions made by one script on the login host, timed there: median {floor:.0} ms over {} runs ({:.0}-{:.0} ms), one before each row. `batched` is the service as it ships (concurrent creates of a workspace go to the cluster together: the engine's group commit, at most 64 a round trip, {} creates at once per workspace and replica; on PostgreSQL a replica's stores share at most {} server connections, each held only for a statement or transaction; each PostgreSQL row in a schema of its own, dropped after it, as each SQLite row starts from a fresh state file); `async` is the same service, each create asking `Prefer: respond-async` (answered 202 once the job is recorded; the group commit submits it after); `single` is the old path (`TAO_SLURM_SUBMIT_BATCH=1`: each create its own two round trips, 4 at once per workspace and replica). Burst: from the first create sent to the last answered; submitted: until every job had its Slurm job id (the same for `batched` and `single`, whose answers carry it; `async` polled every 50 ms on every replica). RPCs: the controller's counts (`sdiag`) over the burst, the monitors' refreshes included.\n\n",
        floors.len(),
        floors.first().copied().unwrap_or(f64::NAN),
        floors.last().copied().unwrap_or(f64::NAN),
        tao_slurm_service::limits::CREATES_AT_ONCE,
        tao_slurm_engine::store::pg_links::LINKS_PER_SCHEMA,
    ));
    s.push_str("| backend | replicas | path | creates | burst ms | submitted ms | submitted / floor | create p50 ms | p50 / floor | create p95 ms | create max ms | round trips | sbatch RPCs | release RPCs | partition RPCs | job-info RPCs | list p50 ms | list p95 ms | 503s waited out | errors | monitor refreshes / s | round trips per refresh | replicas refreshing |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for r in &rows {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {:.0} | {:.0} | {:.2} | {:.0} | {:.2} | {:.0} | {:.0} | {} | {} | {} | {} | {} | {:.1} | {:.1} | {} | {} | {:.2} | {:.2} | {} |\n",
            r.backend,
            r.replicas,
            r.mode,
            r.create.len(),
            r.burst_ms,
            r.submitted_ms,
            r.submitted_ms / floor,
            percentile(&r.create, 0.5),
            percentile(&r.create, 0.5) / floor,
            percentile(&r.create, 0.95),
            r.create.last().copied().unwrap_or(f64::NAN),
            r.burst_round_trips,
            r.rpcs.submit,
            r.rpcs.update,
            r.rpcs.partition_info,
            r.rpcs.job_info,
            percentile(&r.list, 0.5),
            percentile(&r.list, 0.95),
            r.waits,
            r.errors,
            r.refreshes as f64 / r.quiet_secs,
            if r.refreshes == 0 { f64::NAN } else { r.refresh_round_trips as f64 / r.refreshes as f64 },
            r.holders,
        ));
    }
    s.push_str("\nReproduce: `dev/bench-replicas` (env `BENCH_CLIENTS`, `BENCH_QUIET_SECS`, `BENCH_DATABASE_URL`, `BENCH_BACKENDS`, `BENCH_MODES`, `BENCH_WARM`).\n<!-- replicas-bench:end -->\n");
    println!("{s}");
    let report = std::path::Path::new("bench/report.md");
    let text = std::fs::read_to_string(report).unwrap_or_default();
    let new = match (text.find("<!-- replicas-bench:begin -->"), text.find("<!-- replicas-bench:end -->")) {
        (Some(a), Some(b)) => {
            format!("{}{}{}", &text[..a], s.trim_end(), &text[b + "<!-- replicas-bench:end -->".len()..])
        }
        _ => format!("{}\n\n{}", text.trim_end(), s),
    };
    std::fs::write(report, new).unwrap();
}
