//! Caps hold across replicas (issue 50, item 6): two `serve` processes on one database, an org
//! capped at 8 workspaces and 3 active jobs. Ten parallel creates of each, spread over both replicas,
//! give exactly the cap; a place freed on one replica is free on the other, and a retry on either is
//! checked against the jobs every replica started.

use crate::common::wait::wait_for_async;
use crate::service_support::{short, Service};
use serde_json::{json, Value};
use std::time::Duration;

const CLUSTERS: &str =
    "[default]\norgs = [\"team-a\"]\n\n[login1]\nslurm_hostname = [\"sandbox-login1\"]\norgs = [\"team-a\"]\n\n\
     [orgs.team-a]\nmax_workspaces = 8\nmax_active_jobs = 3\n";

/// One request: its status and its body as JSON (Null when it is not JSON).
async fn send(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    token: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut r = http.request(method, url).bearer_auth(token);
    if let Some(b) = body {
        r = r.json(&b);
    }
    let r = r.send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

fn api(base: &str, path: &str) -> String {
    format!("{base}/api/v2/orgs/team-a{path}")
}

/// A workspace on a host nobody answers on, kept anyway (force_create): each counts.
fn unreachable_workspace(i: usize) -> Value {
    json!({"name": format!("ws {i}"), "cloud_type": "slurm", "force_create": true,
        "cloud_specific_details": {"slurm_user": "slurmuser", "slurm_hostname": ["127.0.0.1:1"],
            "base_results_dir": format!("/tmp/caps-ws-{i}"), "partition": "polar"}})
}

/// A job's status as the replica at `base` has it.
async fn status(http: &reqwest::Client, base: &str, token: &str, id: &str) -> Result<String, String> {
    let (s, j) = send(http, reqwest::Method::GET, api(base, &format!("/jobs/{id}")), token, None).await;
    match j["status"].as_str() {
        Some(st) if s == 200 => Ok(st.to_string()),
        _ => Err(format!("{s}: {j}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_on_sqlite_hold_the_workspace_and_active_job_caps() {
    let svc = Service::start_configured(&[], CLUSTERS, true);
    caps_hold_across_replicas(svc, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_on_postgres_hold_the_workspace_and_active_job_caps() {
    let (bare, password) = crate::service_postgres::split_password(&crate::service_postgres::database_url());
    let schema = format!("caps_{}", uuid::Uuid::new_v4().simple());
    let flags = ["--database", bare.as_str()];
    let svc = Service::start_configured_with_flags(
        &[
            ("TAO_SLURM_DATABASE_URL", &bare),
            ("TAO_SLURM_DATABASE_PASSWORD", &password),
            ("TAO_SLURM_DATABASE_SCHEMA", &schema),
        ],
        CLUSTERS,
        true,
        &flags,
    );
    caps_hold_across_replicas(svc, &flags).await;
}

async fn caps_hold_across_replicas(svc: Service, replica_flags: &[&str]) {
    let b = svc.replica("replica-b", replica_flags);
    let bases = [svc.url.clone(), b.url.clone()];
    let http = reqwest::Client::builder().timeout(Duration::from_secs(120)).build().unwrap();
    let token = svc.token.clone();
    let post = reqwest::Method::POST;

    // Ten workspaces asked at once, five of each replica: exactly the cap of 8.
    let creates = (0..10).map(|i| {
        let (http, url, token) = (http.clone(), api(&bases[i % 2], "/workspaces"), token.clone());
        async move { send(&http, reqwest::Method::POST, url, &token, Some(unreachable_workspace(i))).await }
    });
    let replies = futures_util::future::join_all(creates).await;
    let made = replies.iter().filter(|(s, _)| *s == 201).count();
    assert_eq!(made, 8, "exactly the cap across both replicas: {replies:#?}");
    for (s, e) in replies.iter().filter(|(s, _)| *s != 201) {
        assert_eq!((*s, e["field"].as_str()), (403, Some("max_workspaces")), "{e}");
        assert!(e["error_desc"].as_str().unwrap().contains("max_workspaces = 8"), "the cap named: {e}");
    }
    // Each replica counts the other's: a ninth is refused on either.
    for base in &bases {
        let (s, e) = send(&http, post.clone(), api(base, "/workspaces"), &token, Some(unreachable_workspace(99))).await;
        assert_eq!((s, e["field"].as_str()), (403, Some("max_workspaces")), "the ninth on {base}: {e}");
    }

    // Ten jobs asked at once, five of each replica: exactly the cap of 3 active jobs.
    let job = short(json!({"image": "ubuntu:22.04", "command": "sleep 300", "gpus": 0, "workspace": "login1"}));
    let creates = (0..10).map(|i| {
        let (http, url, token, body) = (http.clone(), api(&bases[i % 2], "/jobs"), token.clone(), job.clone());
        async move { send(&http, reqwest::Method::POST, url, &token, Some(body)).await }
    });
    let replies = futures_util::future::join_all(creates).await;
    let mut accepted: Vec<String> =
        replies.iter().filter(|(s, _)| *s == 201).map(|(_, j)| j["id"].as_str().unwrap().to_string()).collect();
    assert_eq!(accepted.len(), 3, "exactly the cap across both replicas: {replies:#?}");
    for (s, e) in replies.iter().filter(|(s, _)| *s != 201) {
        assert_eq!((*s, e["field"].as_str()), (403, Some("active_jobs")), "{e}");
        assert!(e["error_desc"].as_str().unwrap().contains("max_active_jobs = 3"), "the cap named: {e}");
    }

    // Each replica knows every accepted job (the other's within its observation period).
    for base in &bases {
        for id in &accepted {
            wait_for_async(
                &format!("{base} knows {id}"),
                Duration::from_secs(60),
                Duration::from_millis(300),
                || async { status(&http, base, &token, id).await.map(|_| ()) },
            )
            .await;
        }
    }

    // One cancelled on A frees its place (given back before any replica shows it ended) for a
    // create on B.
    let (s, c) =
        send(&http, post.clone(), api(&bases[0], &format!("/jobs/{}:cancel", accepted[0])), &token, None).await;
    assert_eq!(s, 200, "{c}");
    wait_for_async("the cancel seen", Duration::from_secs(60), Duration::from_millis(300), || async {
        match status(&http, &bases[0], &token, &accepted[0]).await {
            Ok(s) if s == "Canceled" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let (s, fourth) = send(&http, post.clone(), api(&bases[1], "/jobs"), &token, Some(job.clone())).await;
    assert_eq!(s, 201, "the freed place, taken on the other replica: {fourth}");
    accepted.push(fourth["id"].as_str().unwrap().to_string());
    wait_for_async("B knows the cancel made on A", Duration::from_secs(60), Duration::from_millis(300), || async {
        match status(&http, &bases[1], &token, &accepted[0]).await {
            Ok(s) if s == "Canceled" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // At the cap again: a retry of the cancelled job is refused on either replica, and starts nothing.
    for base in &bases {
        let (s, e) = send(&http, post.clone(), api(base, &format!("/jobs/{}:retry", accepted[0])), &token, None).await;
        assert_eq!((s, e["field"].as_str()), (403, Some("active_jobs")), "a retry past the cap on {base}: {e}");
        assert!(e["error_desc"].as_str().unwrap().contains("max_active_jobs = 3"), "{e}");
    }
    assert_eq!(
        status(&http, &bases[1], &token, &accepted[0]).await.unwrap(),
        "Canceled",
        "the refused retry started nothing"
    );
    // One more cancelled, on B: once A sees it ended, the retry goes through on A.
    let (s, c) =
        send(&http, post.clone(), api(&bases[1], &format!("/jobs/{}:cancel", accepted[1])), &token, None).await;
    assert_eq!(s, 200, "{c}");
    wait_for_async(
        "replica A sees the cancel made on B",
        Duration::from_secs(60),
        Duration::from_millis(300),
        || async {
            match status(&http, &bases[0], &token, &accepted[1]).await {
                Ok(s) if s == "Canceled" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let (s, r) = send(&http, post.clone(), api(&bases[0], &format!("/jobs/{}:retry", accepted[0])), &token, None).await;
    assert_eq!(s, 200, "a retry within the cap: {r}");
    assert_ne!(r["status"], "Canceled", "retried: {r}");
    // And now the org is at its cap again, on either replica.
    for base in &bases {
        let (s, e) = send(&http, post.clone(), api(base, "/jobs"), &token, Some(job.clone())).await;
        assert_eq!((s, e["field"].as_str()), (403, Some("active_jobs")), "{base}: {e}");
    }

    // What still runs is cancelled.
    for id in [&accepted[0], &accepted[2], &accepted[3]] {
        let (s, c) = send(&http, post.clone(), api(&bases[0], &format!("/jobs/{id}:cancel")), &token, None).await;
        assert_eq!(s, 200, "{c}");
    }
}

/// Fails after a few seconds with an infrastructure pattern (NCCL): a retry is due, never a verdict.
const FAILS_AS_INFRA: &str = "sleep 5; echo 'ncclSystemError: NCCL error: unhandled system error' >&2; exit 1";

/// The automatic retry of a job is put to the policy as it is when the retry is due, not as it was
/// when the job was created: the replica that created the job is killed, the operator lowers the
/// org's cap to 0, and the replica that takes the workspace over refuses the retry (the job ends
/// Error naming the cap; no second attempt reaches Slurm).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_taking_over_refuses_an_automatic_retry_past_the_policy_as_it_is_now() {
    let svc = Service::start_configured(&[("TAO_SLURM_RETRY_BACKOFF_SECS", "1")], CLUSTERS, false);
    let job = short(json!({"image": "ubuntu:22.04", "command": FAILS_AS_INFRA, "gpus": 0, "workspace": "login1"}));
    let (s, j) = svc.create(&job).await;
    assert_eq!(s, 201, "{j}");
    let id = j["id"].as_str().unwrap().to_string();
    // The creator dies before the job fails; the operator lowers the cap; another replica starts.
    unsafe { libc::kill(svc.pid() as i32, libc::SIGKILL) };
    let lowered = CLUSTERS.replace("max_active_jobs = 3", "max_active_jobs = 0");
    std::fs::write(svc.env.dir.path().join("clusters.toml"), lowered).unwrap();
    let b = svc.replica("replica-b", &[]);
    let http = reqwest::Client::new();
    let ended = wait_for_async("the retry refused", Duration::from_secs(180), Duration::from_millis(500), || async {
        let (s, j) = send(&http, reqwest::Method::GET, api(&b.url, &format!("/jobs/{id}")), &svc.token, None).await;
        if s == 200 && j["status"] == "Error" {
            Ok(j)
        } else {
            Err(format!("{s}: {j}"))
        }
    })
    .await;
    let message = ended["message"].as_str().or(ended["status_message"].as_str()).unwrap_or_default().to_string();
    let text = ended.to_string();
    assert!(text.contains("not retried") && text.contains("max_active_jobs = 0"), "the cap named: {message} / {ended}");
    let (s, attempts) =
        send(&http, reqwest::Method::GET, api(&b.url, &format!("/jobs/{id}:attempts")), &svc.token, None).await;
    assert_eq!(s, 200, "{attempts}");
    let list = attempts["attempts"].as_array().unwrap();
    assert_eq!(list.len(), 2, "the first attempt and the refused one: {attempts}");
    assert_eq!(list[1]["failure_class"], "policy", "{attempts}");
    assert!(list[1]["slurm_job_id"].is_null(), "the refused attempt never reached Slurm: {attempts}");
}

/// `sql` run on the service's SQLite records by the sqlite3 client (as an operator would).
fn service_db(svc: &Service, sql: &str) -> String {
    let db = svc.env.dir.path().join("state.db.service.db");
    let out =
        std::process::Command::new("sqlite3").arg("-cmd").arg(".timeout 10000").arg(&db).arg(sql).output().unwrap();
    assert!(out.status.success(), "sqlite3 {sql}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Jobs that were active before places were kept (an upgrade: here their places are removed by
/// hand) get theirs when a replica starts, so the cap counts them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_jobs_without_places_get_them_when_a_replica_starts_and_count() {
    let svc = Service::start_configured(&[], CLUSTERS, false);
    let job = short(json!({"image": "ubuntu:22.04", "command": "sleep 300", "gpus": 0, "workspace": "login1"}));
    let mut ids = Vec::new();
    for _ in 0..3 {
        let (s, j) = svc.create(&job).await;
        assert_eq!(s, 201, "{j}");
        ids.push(j["id"].as_str().unwrap().to_string());
    }
    assert_eq!(service_db(&svc, "SELECT COUNT(*) FROM job_places"), "3", "a place each");
    service_db(&svc, "DELETE FROM job_places");
    let b = svc.replica("replica-b", &[]);
    wait_for_async(
        "the places given back to the active jobs",
        Duration::from_secs(60),
        Duration::from_millis(300),
        || async {
            match service_db(&svc, "SELECT COUNT(*) FROM job_places").as_str() {
                "3" => Ok(()),
                n => Err(n.to_string()),
            }
        },
    )
    .await;
    let http = reqwest::Client::new();
    for base in [&svc.url, &b.url] {
        let (s, e) = send(&http, reqwest::Method::POST, api(base, "/jobs"), &svc.token, Some(job.clone())).await;
        assert_eq!((s, e["field"].as_str()), (403, Some("active_jobs")), "{base}: {e}");
    }
    for id in &ids {
        let (s, c) =
            send(&http, reqwest::Method::POST, api(&svc.url, &format!("/jobs/{id}:cancel")), &svc.token, None).await;
        assert_eq!(s, 200, "{c}");
    }
}
