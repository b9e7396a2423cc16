//! The service under load (dev/bench-service): 1,000 held jobs created through the API, then 200
//! concurrent clients polling job status for a minute, paced (each every 250 ms) and flat out. Counts
//! what the cluster saw meanwhile: the monitor's refreshes and round trips (the service's transport
//! counters) and slurmctld's RPCs (`sdiag`), against a quiet window with no client. Rewrites its
//! section of bench/report.md. Env: BENCH_JOBS (1000), BENCH_CLIENTS (200), BENCH_SECS (60).

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn sandbox_dir() -> String {
    std::env::var("SANDBOX_DIR").unwrap_or_else(|_| "/var/lib/tao-slurm-sandbox".into())
}

/// slurmctld's RPC counts by message type (sdiag, run locally as root).
fn sdiag() -> BTreeMap<String, u64> {
    let out = Command::new("sdiag").env("SLURM_CONF", format!("{}/etc/slurm.conf", sandbox_dir())).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut counts = BTreeMap::new();
    let mut on = false;
    for line in text.lines() {
        if line.starts_with("Remote Procedure Call statistics by message type") {
            on = true;
            continue;
        }
        if line.starts_with("Remote Procedure Call statistics by user") {
            break;
        }
        if on {
            if let (Some(name), Some(count)) = (line.split_whitespace().next(), line.split("count:").nth(1)) {
                if let Ok(c) = count.split_whitespace().next().unwrap_or("").parse() {
                    counts.insert(name.to_string(), c);
                }
            }
        }
    }
    counts
}

fn rpc_delta(a: &BTreeMap<String, u64>, b: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    b.iter()
        .filter(|(k, _)| k.as_str() != "REQUEST_STATS_INFO")
        .map(|(k, v)| (k.clone(), v - a.get(k).copied().unwrap_or(0)))
        .filter(|(_, v)| *v > 0)
        .collect()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

struct Window {
    secs: f64,
    refreshes: u64,
    refresh_round_trips: u64,
    round_trips: u64,
    rpcs: BTreeMap<String, u64>,
    interval: f64,
}

struct Load {
    name: String,
    requests: usize,
    errors: usize,
    p50: f64,
    p90: f64,
    p99: f64,
    max: f64,
    rps: f64,
    window: Window,
}

async fn stats(http: &reqwest::Client, url: &str, token: &str) -> Value {
    http.get(format!("{url}/api/v2/orgs/bench/stats")).bearer_auth(token).send().await.unwrap().json().await.unwrap()
}

/// Run `f` and count what the cluster saw meanwhile.
async fn window<F: std::future::Future<Output = T>, T>(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    f: F,
) -> (T, Window) {
    let s0 = stats(http, url, token).await;
    let r0 = sdiag();
    let start = Instant::now();
    let out = f.await;
    let secs = start.elapsed().as_secs_f64();
    let r1 = sdiag();
    let s1 = stats(http, url, token).await;
    let w = |s: &Value, k: &str| s["workspaces"][0][k].as_u64().unwrap();
    (
        out,
        Window {
            secs,
            refreshes: w(&s1, "refreshes") - w(&s0, "refreshes"),
            refresh_round_trips: w(&s1, "refresh_round_trips") - w(&s0, "refresh_round_trips"),
            round_trips: w(&s1, "round_trips") - w(&s0, "round_trips"),
            rpcs: rpc_delta(&r0, &r1),
            interval: s1["workspaces"][0]["monitor_interval_secs"].as_f64().unwrap(),
        },
    )
}

async fn load(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    ids: &Arc<Vec<String>>,
    clients: usize,
    secs: u64,
    pace: Option<Duration>,
) -> (Vec<f64>, usize) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (http, url, token, ids) = (http.clone(), url.to_string(), token.to_string(), ids.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut errors = 0;
            let mut i = c * 7919;
            let mut next = Instant::now() + Duration::from_millis((c as u64 * 37) % 250);
            while Instant::now() < deadline {
                if let Some(p) = pace {
                    tokio::time::sleep_until(next.into()).await;
                    next += p;
                }
                let id = &ids[i % ids.len()];
                i += 1;
                let t = Instant::now();
                match http.get(format!("{url}/api/v2/orgs/bench/jobs/{id}")).bearer_auth(&token).send().await {
                    Ok(r) if r.status() == 200 => match r.bytes().await {
                        Ok(b) if b.len() > 100 => lat.push(t.elapsed().as_secs_f64() * 1000.0),
                        _ => errors += 1,
                    },
                    _ => errors += 1,
                }
            }
            (lat, errors)
        }));
    }
    let mut all = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (l, e) = t.await.unwrap();
        all.extend(l);
        errors += e;
    }
    all.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (all, errors)
}

fn rpc_text(rpcs: &BTreeMap<String, u64>) -> String {
    let total: u64 = rpcs.values().sum();
    let parts: Vec<String> = rpcs.iter().map(|(k, v)| format!("{k} {v}")).collect();
    format!("{total} ({})", parts.join(", "))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let jobs = env_or("BENCH_JOBS", 1000) as usize;
    let clients = env_or("BENCH_CLIENTS", 200) as usize;
    let secs = env_or("BENCH_SECS", 60);
    let exe = std::env::var("TAO_SLURM_BIN").unwrap_or_else(|_| "target/release/tao-slurm".into());
    let dir = tempfile::tempdir().unwrap();
    let settings = std::fs::read_to_string(format!("{}/settings.env", sandbox_dir()))
        .expect("start the sandbox: bash dev/sandbox/up.sh");
    let mut vars: Vec<(String, String)> =
        settings.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.trim().into(), v.trim().into())).collect();
    let d = dir.path().display().to_string();
    vars.extend([
        ("HOME".to_string(), d.clone()),
        ("TAO_SLURM_STATE".to_string(), format!("{d}/state.db")),
        ("TAO_SLURM_CONTROL_DIR".to_string(), format!("{d}/cm")),
        ("TAO_SLURM_USE_SQSH".to_string(), "false".to_string()),
        ("TAO_SLURM_CLUSTERS_FILE".to_string(), format!("{d}/clusters.toml")),
    ]);
    // No profile: the settings without one, granted to the bench's org.
    std::fs::write(dir.path().join("clusters.toml"), "[default]\norgs = [\"bench\"]\n").unwrap();
    let cmd = |args: &[&str]| {
        let mut c = Command::new(&exe);
        c.args(args).env_clear().env("PATH", std::env::var("PATH").unwrap_or_default());
        for (k, v) in &vars {
            c.env(k, v);
        }
        c
    };
    let out = cmd(&["token", "create", "--org", "bench", "--json"]).output().unwrap();
    let token: Value = serde_json::from_slice(&out.stdout).expect("token create");
    let token = token["token"].as_str().unwrap().to_string();
    let mut server = cmd(&["serve", "--port", "0"]).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(server.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let url = line.split_whitespace().nth(2).unwrap().trim_end_matches('/').to_string();
    eprintln!("service at {url}");
    let http = reqwest::Client::builder().pool_max_idle_per_host(clients + 8).build().unwrap();

    // 1,000 held jobs (begin a day from now), created through the API, 4 at a time.
    let started = Instant::now();
    let ids = Arc::new(tokio::sync::Mutex::new(Vec::new()));
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut creators = Vec::new();
    for _ in 0..4 {
        let (http, url, token, ids, next) = (http.clone(), url.clone(), token.clone(), ids.clone(), next.clone());
        creators.push(tokio::spawn(async move {
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < jobs {
                let r = http
                    .post(format!("{url}/api/v2/orgs/bench/jobs"))
                    .bearer_auth(&token)
                    .json(&json!({"image": "ubuntu:22.04", "command": ["true"], "gpus": 0, "name": "bench-held",
                        "sbatch_options": {"begin": "now+1day"}}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
                let v: Value = r.json().await.unwrap();
                ids.lock().await.push(v["id"].as_str().unwrap().to_string());
            }
        }));
    }
    for c in creators {
        c.await.unwrap();
    }
    let ids: Arc<Vec<String>> = Arc::new(ids.lock().await.clone());
    let create_secs = started.elapsed().as_secs_f64();
    eprintln!("{} jobs created in {create_secs:.1} s", ids.len());
    // Let the monitor see them all once.
    tokio::time::sleep(Duration::from_secs(10)).await;

    let (_, quiet) = window(&http, &url, &token, tokio::time::sleep(Duration::from_secs(secs / 2))).await;
    eprintln!("quiet window: {} refreshes", quiet.refreshes);
    let mut loads = Vec::new();
    for (name, pace) in [
        (format!("{clients} clients, each polling every 250 ms"), Some(Duration::from_millis(250))),
        (format!("{clients} clients, flat out (next request as soon as the last answers)"), None),
    ] {
        let ((lat, errors), w) =
            window(&http, &url, &token, load(&http, &url, &token, &ids, clients, secs, pace)).await;
        eprintln!("{name}: {} requests, {errors} errors", lat.len());
        loads.push(Load {
            name,
            requests: lat.len(),
            errors,
            p50: percentile(&lat, 0.5),
            p90: percentile(&lat, 0.9),
            p99: percentile(&lat, 0.99),
            max: lat.last().copied().unwrap_or(f64::NAN),
            rps: lat.len() as f64 / w.secs,
            window: w,
        });
    }
    let list = {
        let t = Instant::now();
        let r = http.get(format!("{url}/api/v2/orgs/bench/jobs?size=1000")).bearer_auth(&token).send().await.unwrap();
        let n = r.bytes().await.unwrap().len();
        (t.elapsed().as_secs_f64() * 1000.0, n)
    };
    let _ = server.kill();
    let _ = server.wait();
    // Leave nothing queued.
    for chunk in ids.chunks(250) {
        let mut args = vec!["cancel"];
        args.extend(chunk.iter().map(String::as_str));
        let out = cmd(&args).output().unwrap();
        if !out.status.success() {
            eprintln!("cancel: {}", String::from_utf8_lossy(&out.stderr));
        }
    }

    let mut s = String::new();
    s.push_str(
        "<!-- service-bench:begin -->\n## Service under load (`tao-slurm serve`, examples/service_bench.rs)\n\n",
    );
    s.push_str(&format!(
        "{} held jobs (`begin=now+1day`) created through the API in {:.1} s (4 at a time: {:.0} ms each, one submit round trip apiece), then {} concurrent HTTP clients (keep-alive, one tokio runtime of 2 threads on the same 2-core machine as the service and the cluster) polling `GET /api/v2/orgs/{{org}}/jobs/{{id}}` over the 1,000 ids, {} s each; release build.\n\n",
        ids.len(), create_secs, create_secs * 1000.0 * 4.0 / ids.len() as f64, clients, secs
    ));
    s.push_str(
        "| load | requests | errors | req/s | p50 ms | p90 ms | p99 ms | max ms |\n|---|---|---|---|---|---|---|---|\n",
    );
    for l in &loads {
        s.push_str(&format!(
            "| {} | {} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {:.1} |\n",
            l.name, l.requests, l.errors, l.rps, l.p50, l.p90, l.p99, l.max
        ));
    }
    s.push_str("\nWhat the cluster saw in each window (the monitor's refreshes and round trips from the service's transport counters; slurmctld's RPCs from `sdiag`, every user of the sandbox included):\n\n");
    s.push_str("| window | s | monitor refreshes | refresh round trips | all round trips | interval s | slurmctld RPCs |\n|---|---|---|---|---|---|---|\n");
    let mut row = |name: &str, w: &Window| {
        s.push_str(&format!(
            "| {name} | {:.0} | {} | {} | {} | {:.1} | {} |\n",
            w.secs,
            w.refreshes,
            w.refresh_round_trips,
            w.round_trips,
            w.interval,
            rpc_text(&w.rpcs)
        ));
    };
    row("no client", &quiet);
    for l in &loads {
        row(&l.name, &l.window);
    }
    s.push_str(&format!(
        "\nRequests never reach the cluster: each one reads the cache the monitor publishes after its refresh, one refresh per interval (the monitor's pace within `TAO_SLURM_MAX_QUERIES_PER_MINUTE`: at the default budget of 30 at most one every 4 s; 5 s once the jobs are older than a minute), so the monitor's refreshes and round trips per second are the same with 0 or {clients} clients, and each refresh costs slurmctld 3 RPCs (REQUEST_JOB_USER_INFO, REQUEST_PARTITION_INFO, REQUEST_FED_INFO, as the refresh benchmark measured alone). sdiag counts the whole sandbox: other sessions' test suites share it (their submits and steps are the SUBMIT_BATCH_JOB, JOB_STEP_CREATE... rows), so its totals are an upper bound, not the service's. The list of all 1,000 jobs (`?size=1000`, {} KB) took {:.1} ms. Reproduce: `dev/bench-service` (env `BENCH_JOBS`, `BENCH_CLIENTS`, `BENCH_SECS`).\n<!-- service-bench:end -->\n",
        list.1 / 1000, list.0
    ));
    println!("{s}");
    let report = std::path::Path::new("bench/report.md");
    let text = std::fs::read_to_string(report).unwrap_or_default();
    let new = match (text.find("<!-- service-bench:begin -->"), text.find("<!-- service-bench:end -->")) {
        (Some(a), Some(b)) => {
            format!("{}{}{}", &text[..a], s.trim_end(), &text[b + "<!-- service-bench:end -->".len()..])
        }
        _ => format!("{}\n{}", text.trim_end(), s),
    };
    std::fs::write(report, new).unwrap();
}
