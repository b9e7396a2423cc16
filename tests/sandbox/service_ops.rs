//! Issue 25 over real HTTP against the sandbox: `/metrics` on its own address, parsed as Prometheus
//! text; the audit trail of state-changing requests; readiness and graceful shutdown.

use crate::service_support::Service;
use serde_json::{json, Value};
use std::time::Duration;

/// The documented routes this module exercises (service_api checks the others).
pub const ROUTES: &[(&str, &str)] = &[("get", "/api/v2/orgs/{org}:audit")];

/// Scrape `/metrics` and parse it with a Prometheus text-format parser.
async fn scrape(svc: &Service) -> prometheus_parse::Scrape {
    scrape_url(&svc.http, svc.metrics_url.as_ref().expect("started with --metrics-addr")).await
}

/// [`scrape`] of a metrics address.
pub(crate) async fn scrape_url(http: &reqwest::Client, url: &str) -> prometheus_parse::Scrape {
    let r = http.get(url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let ctype = r.headers()[reqwest::header::CONTENT_TYPE].to_str().unwrap().to_string();
    assert!(ctype.starts_with("text/plain; version=0.0.4"), "{ctype}");
    let text = r.text().await.unwrap();
    // prometheus-parse 0.2 ends a sample's labels at the first `}`, even inside a quoted value (the
    // route templates' `{org}`): spell them `<org>` for it. The text itself is what Prometheus reads.
    let lines = text.lines().map(|l| Ok(within_quotes(l)));
    prometheus_parse::Scrape::parse(lines).unwrap_or_else(|e| panic!("not Prometheus text ({e}):\n{text}"))
}

/// `l` with `{`/`}` inside quoted label values as `<`/`>`.
fn within_quotes(l: &str) -> String {
    let mut quoted = false;
    l.chars()
        .map(|c| match c {
            '"' => {
                quoted = !quoted;
                c
            }
            '{' if quoted => '<',
            '}' if quoted => '>',
            c => c,
        })
        .collect()
}

/// The value of the sample `name` whose labels include `labels`.
fn value(s: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    s.samples.iter().find(|x| x.metric == name && labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v))).map(|x| {
        match x.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            prometheus_parse::Value::Histogram(ref b) => b.last().map(|b| b.count).unwrap_or(0.0),
            _ => f64::NAN,
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_served_on_their_own_address_as_prometheus_text_and_count_what_happened() {
    let svc = Service::start_flags(&["--metrics-addr", "127.0.0.1:0"], false);
    // Not on the API's address (it would show every org's figures to any token).
    let r = svc.get(&format!("{}/metrics", svc.url)).send().await.unwrap();
    assert_eq!(r.status(), 404);

    let (status, job) =
        svc.create(&json!({"name": "metrics-a", "image": "ubuntu:22.04", "gpus": 0, "command": "echo metrics"})).await;
    assert_eq!(status, 201, "{job}");
    let id = job["id"].as_str().unwrap().to_string();
    let (status, long) = svc
        .create(&json!({"name": "metrics-b", "image": "ubuntu:22.04", "gpus": 0, "command": ["sleep", "600"]}))
        .await;
    assert_eq!(status, 201, "{long}");
    let long_id = long["id"].as_str().unwrap().to_string();
    let r = svc.http.post(svc.api(&format!("/jobs/{long_id}:cancel"))).bearer_auth(&svc.token).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let done = svc
        .wait_job(&id, Duration::from_secs(400), |j| {
            ["Done", "Error", "Canceled"].contains(&j["status"].as_str().unwrap_or(""))
        })
        .await;
    assert_eq!(done["status"], "Done", "{done}");
    let _ = svc.json(&svc.api("/jobs")).await;

    let s = scrape(&svc).await;
    let ws = done["workspace"].as_str().unwrap();
    assert_eq!(value(&s, "tao_slurm_jobs", &[("workspace", ws), ("status", "Done")]), Some(1.0), "{:?}", s.samples);
    let long_ws = long["workspace"].as_str().unwrap();
    assert_eq!(value(&s, "tao_slurm_jobs", &[("workspace", long_ws), ("status", "Canceled")]), Some(1.0));
    assert!(value(&s, "tao_slurm_refreshes_total", &[("workspace", ws)]).unwrap() >= 1.0);
    assert!(value(&s, "tao_slurm_round_trips_total", &[("workspace", ws)]).unwrap() >= 2.0, "submit and refresh");
    // (A login may be an SSH master an earlier process left running: present, perhaps zero.)
    assert!(value(&s, "tao_slurm_ssh_logins_total", &[("workspace", ws)]).is_some());
    // Latency by route template (never by path: ids would make one series per job).
    let created = value(
        &s,
        "tao_slurm_http_request_duration_seconds_count",
        &[("method", "POST"), ("route", "/api/v2/orgs/<org>/jobs"), ("status", "201")],
    );
    let counts: Vec<_> = s.samples.iter().filter(|x| x.metric.ends_with("_seconds_count")).collect();
    assert_eq!(created, Some(2.0), "two creates: {counts:?}");
    let buckets = value(
        &s,
        "tao_slurm_http_request_duration_seconds",
        &[("method", "POST"), ("route", "/api/v2/orgs/<org>/jobs"), ("status", "201")],
    );
    assert_eq!(buckets, Some(2.0), "the +Inf bucket counts both");
    let cancels = value(
        &s,
        "tao_slurm_http_request_duration_seconds_count",
        &[("method", "POST"), ("route", "/api/v2/orgs/<org>/jobs/<job_ref>"), ("status", "200")],
    );
    assert_eq!(cancels, Some(1.0));
    assert!(!s.samples.iter().any(|x| x.labels.values().any(|v| v.contains(&id))), "no job id in a label");
    assert_eq!(value(&s, "tao_slurm_open_streams", &[]), Some(0.0));

    // An open event stream is counted while it is open.
    let stream = svc.get(&svc.api("/jobs:stream")).send().await.unwrap();
    assert_eq!(stream.status(), 200);
    streams_become(&svc, 1.0).await;
    drop(stream);
    streams_become(&svc, 0.0).await;
}

async fn streams_become(svc: &Service, n: f64) {
    crate::common::wait::wait_for_async(
        &format!("{n} open streams in /metrics"),
        Duration::from_secs(10),
        Duration::from_millis(100),
        || async { value(&scrape(svc).await, "tao_slurm_open_streams", &[]) == Some(n) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_state_changing_request_is_in_the_audit_trail_with_its_actor_and_the_trail_is_append_only() {
    let svc = Service::start_flags(&[], true);
    let (status, job) =
        svc.create(&json!({"name": "audited", "image": "ubuntu:22.04", "gpus": 0, "command": ["sleep", "600"]})).await;
    assert_eq!(status, 201, "{job}");
    let id = job["id"].as_str().unwrap().to_string();
    let cancel = |job: String| svc.http.post(svc.api(&format!("/jobs/{job}:cancel"))).bearer_auth(&svc.token).send();
    assert_eq!(cancel(id.clone()).await.unwrap().status(), 200);
    assert_eq!(cancel("no-such-job".into()).await.unwrap().status(), 404);
    let (status, bad) = svc.create(&json!({"name": "bad", "image": "ubuntu:22.04", "gpus": -1})).await;
    assert_eq!(status, 400, "{bad}");
    let _ = svc.json(&svc.api("/jobs")).await;

    let trail = svc.json(&format!("{}:audit", svc.api(""))).await;
    let entries = trail["entries"].as_array().unwrap();
    let seen: Vec<(String, Value, u64, String)> = entries
        .iter()
        .filter(|e| e["token_id"].is_string())
        .map(|e| {
            assert_eq!(e["token_id"], svc.token_id.as_str(), "{e}");
            assert_eq!(e["token_name"], "tests", "{e}");
            assert_eq!(e["org"], crate::service_support::ORG, "{e}");
            assert!(e["at"].as_i64().unwrap() > 1_700_000_000, "{e}");
            (
                e["action"].as_str().unwrap().to_string(),
                e["target"].clone(),
                e["status"].as_u64().unwrap(),
                e["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            ("jobs.create".to_string(), json!(id), 201, "ok".to_string()),
            ("jobs.cancel".to_string(), json!(id), 200, "ok".to_string()),
            ("jobs.cancel".to_string(), json!("no-such-job"), 404, "not_found".to_string()),
            ("jobs.create".to_string(), Value::Null, 400, "invalid_field".to_string()),
        ],
        "reads are not recorded; refusals are: {trail}"
    );
    // The token made on the command line is there too, as the operator's.
    assert!(
        entries
            .iter()
            .any(|e| e["action"] == "tokens.create" && e["target"] == svc.token_id.as_str() && e["token_id"].is_null()),
        "{trail}"
    );

    // Append-only through the API: no route changes or removes an entry.
    for method in [reqwest::Method::DELETE, reqwest::Method::POST, reqwest::Method::PUT, reqwest::Method::PATCH] {
        let r = svc
            .http
            .request(method.clone(), format!("{}:audit", svc.api("")))
            .bearer_auth(&svc.token)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 405, "{method}");
    }
    let again = svc.json(&format!("{}:audit", svc.api(""))).await;
    assert_eq!(again["entries"].as_array().unwrap()[..entries.len()], entries[..], "unchanged");

    // The command line shows the same entries.
    let cli = svc.env.json(&["audit", "--org", crate::service_support::ORG, "--json"]);
    assert_eq!(cli.as_array().unwrap()[..entries.len()], entries[..]);

    // Only org admin tokens read it.
    let member = svc.env.json(&["token", "create", "--org", crate::service_support::ORG, "--name", "member", "--json"]);
    let member = member["token"].as_str().unwrap().to_string();
    let url = format!("{}:audit", svc.api(""));
    crate::common::wait::wait_for_async(
        "the member token refused the audit trail",
        Duration::from_secs(10),
        Duration::from_millis(200),
        || async { svc.http.get(&url).bearer_auth(&member).send().await.unwrap().status() == 403 },
    )
    .await;
}

/// A write transaction held on a SQLite file until dropped (another writer waits for it).
fn hold_writes(path: &str) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch("BEGIN IMMEDIATE").unwrap();
    conn
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_fails_while_the_database_takes_no_writes_and_recovers() {
    let svc = Service::start();
    let url = format!("{}/api/v2/health/readiness", svc.url);
    let ready = svc.http.get(&url).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    assert_eq!(ready.json::<Value>().await.unwrap(), "OK");
    let db = format!("{}.service.db", svc.env.vars["TAO_SLURM_STATE"]);
    let lock = hold_writes(&db);
    let r = svc.http.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 503);
    assert!(r.headers().contains_key(reqwest::header::RETRY_AFTER));
    let body: Value = r.json().await.unwrap();
    assert!(body["error_desc"].as_str().unwrap().contains("database does not take writes"), "{body}");
    drop(lock);
    assert_eq!(svc.http.get(&url).send().await.unwrap().status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_taking_requests_and_finishes_the_submission_in_flight() {
    let mut svc = Service::start_flags(&["--metrics-addr", "127.0.0.1:0"], false);
    let state = svc.env.vars["TAO_SLURM_STATE"].clone();
    // The state file held: the create waits inside the service, in flight for sure.
    let lock = hold_writes(&state);
    let body = crate::service_support::short(
        json!({"name": "graceful", "image": "ubuntu:22.04", "gpus": 0, "command": "echo graceful"}),
    );
    let create = tokio::spawn(svc.http.post(svc.api("/jobs")).bearer_auth(&svc.token).json(&body).send());
    crate::common::wait::wait_for_async(
        "the create in flight",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async {
            // (This scrape is itself in flight on the other address: it is not counted there.)
            value(&scrape(&svc).await, "tao_slurm_http_requests_in_flight", &[]) == Some(1.0)
        },
    )
    .await;
    assert_eq!(unsafe { libc::kill(svc.pid() as i32, libc::SIGTERM) }, 0);
    let health = format!("{}/api/v2/health", svc.url);
    crate::common::wait::wait_for_async(
        "new connections refused",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async { reqwest::Client::new().get(&health).send().await.is_err() },
    )
    .await;
    assert!(!create.is_finished(), "the create waits for the state file");
    drop(lock);
    let r = create.await.unwrap().unwrap();
    assert_eq!(r.status(), 201, "the submission in flight finished");
    let job: Value = r.json().await.unwrap();
    let slurm_id = job["backend_details"]["slurm_metadata"]["slurm_job_id"].as_str().map(String::from);
    assert!(slurm_id.is_some(), "submitted to Slurm: {job}");
    let status = svc.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "{status:?}; log: {}", svc.log());
    let log = svc.log();
    assert!(log.contains("stopping; finishing the requests in flight"), "{log}");
    assert!(
        log.contains("tao-slurm serve: stopped") && !log.contains("anyway"),
        "the monitors ended their cycles: {log}"
    );
    let listed = svc.env.json(&["list", "--json"]);
    let row = listed.as_array().unwrap().iter().find(|j| j["job_id"] == job["id"]).cloned();
    assert_eq!(row.map(|j| j["slurm_job_id"].clone()), Some(json!(slurm_id)), "the state file has it");
}
