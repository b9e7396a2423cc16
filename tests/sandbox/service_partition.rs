//! A partition between the service and its database (issue 25): the service's PostgreSQL is stopped
//! for 30 s under a running job. Meanwhile readiness says 503 and why, a change is refused at once
//! with a clear error (and leaves nothing half-made), reads are answered from the service's memory;
//! once the database is back the service is ready again by itself, takes changes, and the job that
//! ran through the outage ends Done, submitted once. The database is a private PostgreSQL server of
//! the test's own (Debian's binaries), so stopping it touches no other test.

use crate::common::private_postgres::PrivatePostgres;
use crate::common::wait::wait_for_async;
use crate::service_support::Service;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// How long the database is down: the measure.
const OUTAGE: Duration = Duration::from_secs(30);

/// GET a URL with the service's token: (status, body).
async fn get(svc: &Service, url: &str) -> (u16, Value) {
    match svc.get(url).timeout(Duration::from_secs(20)).send().await {
        Ok(r) => (r.status().as_u16(), r.json().await.unwrap_or(Value::Null)),
        Err(e) => panic!("GET {url}: no answer ({e})"),
    }
}

fn readiness(svc: &Service) -> String {
    format!("{}/api/v2/health/readiness", svc.url)
}

fn ids(listed: &Value) -> Vec<String> {
    listed["jobs"].as_array().unwrap().iter().map(|j| j["id"].as_str().unwrap().to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_its_database_stopped_for_30_s_the_service_refuses_changes_answers_reads_and_recovers() {
    let pg = PrivatePostgres::start();
    let url = pg.url();
    let svc = Service::start_with_flags(&[("TAO_SLURM_DATABASE_URL", &url)], &[]);
    let job = |name: &str, secs: u32| json!({"name": name, "image": "ubuntu:22.04", "gpus": 0, "command": format!("sleep {secs}"), "workspace": "login1"});
    // A job that runs through the outage.
    let (status, before) = svc.create(&job("before-the-outage", 45)).await;
    assert_eq!(status, 201, "{before} {}", svc.log());
    let before = before["id"].as_str().unwrap().to_string();

    pg.down();
    let stopped = Instant::now();
    // Readiness says the database does not take writes.
    let why = wait_for_async("readiness to say 503", Duration::from_secs(30), Duration::from_millis(500), || async {
        match get(&svc, &readiness(&svc)).await {
            (503, body) => Ok(body),
            seen => Err(format!("{seen:?}")),
        }
    })
    .await;
    let why = why["error_desc"].as_str().unwrap_or_default().to_string();
    assert!(why.contains("database"), "readiness names the database: {why}");
    eprintln!("readiness 503 {:.1} s after the stop: {why}", stopped.elapsed().as_secs_f64());

    // A change is refused with an error that says what is wrong, well within the client's patience.
    let asked = Instant::now();
    let (status, refused) = svc.create(&job("during-the-outage", 1)).await;
    eprintln!("create during the outage: {status} in {:.1} s: {refused}", asked.elapsed().as_secs_f64());
    assert_eq!((status, refused["error_type"].as_str()), (503, Some("database_unavailable")), "{refused}");
    let desc = refused["error_desc"].as_str().unwrap_or_default();
    assert!(!desc.is_empty() && refused["error_code"] == status, "a TAO error body: {refused}");
    assert!(asked.elapsed() < Duration::from_secs(20), "the refusal came at once");

    // Reads are answered from memory for the rest of the outage.
    let mut reads = 0;
    while stopped.elapsed() < OUTAGE {
        let (status, listed) = get(&svc, &svc.api("/jobs")).await;
        assert_eq!(status, 200, "the list during the outage: {listed}");
        assert!(ids(&listed).contains(&before), "{listed}");
        let (status, one) = get(&svc, &svc.api(&format!("/jobs/{before}"))).await;
        assert_eq!(status, 200, "a job during the outage: {one}");
        reads += 2;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    eprintln!("{reads} reads answered during the {} s outage", OUTAGE.as_secs());

    pg.up();
    let restarted = Instant::now();
    wait_for_async("readiness to say OK again", Duration::from_secs(60), Duration::from_millis(500), || async {
        match get(&svc, &readiness(&svc)).await {
            (200, _) => Ok(()),
            seen => Err(format!("{seen:?}")),
        }
    })
    .await;
    eprintln!("ready again {:.1} s after the database came back", restarted.elapsed().as_secs_f64());

    // Changes are taken again; the refused create left no job; the job that ran through ends Done.
    let (status, after) = svc.create(&job("after-the-outage", 1)).await;
    assert_eq!(status, 201, "{after} {}", svc.log());
    let after = after["id"].as_str().unwrap().to_string();
    for id in [&before, &after] {
        let end = svc
            .wait_job(id, Duration::from_secs(180), |j: &Value| j["status"] != "Pending" && j["status"] != "Running")
            .await;
        assert_eq!(end["status"], "Done", "{end}");
    }
    let (_, listed) = get(&svc, &svc.api("/jobs")).await;
    let names: Vec<&str> = listed["jobs"].as_array().unwrap().iter().filter_map(|j| j["name"].as_str()).collect();
    assert!(!names.contains(&"during-the-outage"), "the refused create made no job: {names:?}");
    assert_eq!(names.len(), 2, "{names:?}");
    // Submitted once: sacct shows the job once (polled: slurmdbd records it a moment after it ended;
    // a second submission would show two lines and never one).
    let script = format!("sacct -X -P -n -S now-1hours -E now -o JobName%200 --name=tao-job-{before}\n");
    svc.env.wait_ssh("the job once in sacct", &script, Duration::from_secs(120), |out| {
        out.lines().filter(|l| !l.trim().is_empty()).count() == 1
    });
}
