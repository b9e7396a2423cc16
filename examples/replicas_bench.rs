//! The service on one and on two replicas (dev/bench-replicas, issue 25): 200 concurrent clients each
//! create a held job through the API (spread over the replicas), then list the org's jobs; the
//! latency of both, and what the monitors cost meanwhile (refreshes and round trips summed over the
//! replicas: one replica holds the workspace's lease, so the cluster sees one monitor however many
//! replicas run). Backends: SQLite (the state file) and, when BENCH_DATABASE_URL names one,
//! PostgreSQL (`serve --database`). Rewrites its section of bench/report.md.
//! Env: BENCH_CLIENTS (200), BENCH_QUIET_SECS (30), BENCH_DATABASE_URL.

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
}

impl Bench {
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
        if let Some(url) = database {
            vars.push(("TAO_SLURM_DATABASE_URL".to_string(), url.to_string()));
        }
        std::fs::write(dir.path().join("clusters.toml"), "[default]\norgs = [\"bench\"]\n").unwrap();
        Bench { exe, vars, _dir: dir }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.exe);
        c.args(args).env_clear().env("PATH", std::env::var("PATH").unwrap_or_default());
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
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(server.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let url = line.split_whitespace().nth(2).unwrap().trim_end_matches('/').to_string();
        (server, url)
    }
}

async fn stats(http: &reqwest::Client, url: &str, token: &str) -> Value {
    http.get(format!("{url}/api/v2/orgs/bench/stats")).bearer_auth(token).send().await.unwrap().json().await.unwrap()
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

async fn run(backend: &str, database: Option<&str>, replicas: usize, clients: usize, quiet: u64) -> Row {
    let bench = Bench::new(database);
    let out = bench.cmd(&["token", "create", "--org", "bench", "--json"]).output().unwrap();
    let token: Value = serde_json::from_slice(&out.stdout).expect("token create");
    let token = token["token"].as_str().unwrap().to_string();
    let servers: Vec<(Child, String)> = (0..replicas).map(|_| bench.serve()).collect();
    let urls: Vec<String> = servers.iter().map(|(_, u)| u.clone()).collect();
    let http = reqwest::Client::builder().pool_max_idle_per_host(clients + 8).build().unwrap();
    // Let the replicas settle on a lease holder.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let mut tasks = Vec::new();
    for c in 0..clients {
        let (http, url, token) = (http.clone(), urls[c % urls.len()].clone(), token.clone());
        tasks.push(tokio::spawn(async move {
            // A client as TAO's waits out a 503 (the service's pool of cluster work is full) for its
            // Retry-After and asks again; the time counts in its create's latency.
            let t = Instant::now();
            let mut turned_away = 0;
            let id = loop {
                let r = http
                    .post(format!("{url}/api/v2/orgs/bench/jobs"))
                    .bearer_auth(&token)
                    .json(&json!({"image": "ubuntu:22.04", "command": ["true"], "gpus": 0, "name": "bench-replicas",
                        "sbatch_options": {"begin": "now+1day"}}))
                    .send()
                    .await;
                match r {
                    Ok(r) if r.status() == 201 => {
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
            let t = Instant::now();
            let listed = http.get(format!("{url}/api/v2/orgs/bench/jobs?size=50")).bearer_auth(&token).send().await;
            let list = t.elapsed().as_secs_f64() * 1000.0;
            let listed = matches!(listed, Ok(r) if r.status() == 200);
            (id, create, listed.then_some(list), turned_away)
        }));
    }
    let (mut ids, mut create, mut list, mut errors, mut waits) = (Vec::new(), Vec::new(), Vec::new(), 0, 0);
    for t in tasks {
        let (id, c, l, w) = t.await.unwrap();
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
    for chunk in ids.chunks(250) {
        let mut args = vec!["cancel"];
        args.extend(chunk.iter().map(String::as_str));
        let _ = bench.cmd(&args).output();
    }
    Row {
        backend: backend.to_string(),
        replicas,
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
    for (backend, url) in &backends {
        for replicas in [1, 2] {
            eprintln!("{backend}, {replicas} replica(s)...");
            rows.push(run(backend, *url, replicas, clients, quiet).await);
        }
    }
    let mut s = String::from(
        "<!-- replicas-bench:begin -->\n## Replicas (`serve` on one and two processes, examples/replicas_bench.rs)\n\n",
    );
    s.push_str(&format!(
        "{clients} concurrent clients each create one held job (`begin=now+1day`) through the API, spread over the replicas, then list the org's jobs (`?size=50`); then a quiet window of {quiet} s in which the monitors of all replicas are counted. A create the service turns away (503: its pool of 4 concurrent cluster calls per workspace and replica is full) is waited out for its Retry-After and asked again, as a client should; its latency includes the waits. Every replica answers every route; the one holding the workspace's lease refreshes it. Release build, the service, the clients and the sandbox cluster on one 2-core machine.\n\n"
    ));
    s.push_str("| backend | replicas | creates | create p50 ms | create p95 ms | create max ms | list p50 ms | list p95 ms | 503s waited out | errors | monitor refreshes / s | round trips per refresh | replicas refreshing |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for r in &rows {
        s.push_str(&format!(
            "| {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.1} | {:.1} | {} | {} | {:.2} | {:.2} | {} |\n",
            r.backend,
            r.replicas,
            r.create.len(),
            percentile(&r.create, 0.5),
            percentile(&r.create, 0.95),
            r.create.last().copied().unwrap_or(f64::NAN),
            percentile(&r.list, 0.5),
            percentile(&r.list, 0.95),
            r.waits,
            r.errors,
            r.refreshes as f64 / r.quiet_secs,
            if r.refreshes == 0 { f64::NAN } else { r.refresh_round_trips as f64 / r.refreshes as f64 },
            r.holders,
        ));
    }
    s.push_str("\nReproduce: `dev/bench-replicas` (env `BENCH_CLIENTS`, `BENCH_QUIET_SECS`, `BENCH_DATABASE_URL`).\n<!-- replicas-bench:end -->\n");
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
