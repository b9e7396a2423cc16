//! The service on PostgreSQL (issue 25): `serve --database URL` (the password in the environment,
//! never on the command line) keeps the jobs' state in the sandbox's PostgreSQL: a job created,
//! listed and cancelled over HTTP is a row of its schema there, with its events; and the command line
//! on the same database shares jobs between two machines.

use crate::service_support::Service;
use serde_json::{json, Value};
use std::time::Duration;

/// The sandbox's test database (dev/sandbox/up.sh writes it to settings.env); no URL is a failure.
pub(crate) fn database_url() -> String {
    std::env::var("TAO_SLURM_TEST_DATABASE_URL").ok().filter(|u| !u.is_empty()).unwrap_or_else(|| {
        let text = std::fs::read_to_string(crate::common::sandbox::dir().join("settings.env")).unwrap_or_default();
        text.lines()
            .find_map(|l| l.strip_prefix("TAO_SLURM_TEST_DATABASE_URL=").map(str::to_string))
            .expect("TAO_SLURM_TEST_DATABASE_URL in the sandbox's settings.env: run dev/sandbox/up.sh")
    })
}

/// `postgresql://user:password@rest` as (`postgresql://user@rest`, password).
pub(crate) fn split_password(url: &str) -> (String, String) {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (userinfo, host) = rest.split_once('@').unwrap();
    let (user, password) = userinfo.split_once(':').unwrap();
    (format!("{scheme}://{user}@{host}"), password.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_created_listed_and_cancelled_over_http_lives_in_postgres() {
    let url = database_url();
    let (bare, password) = split_password(&url);
    let schema = format!("svc_{}", uuid::Uuid::new_v4().simple());
    let svc = Service::start_with_flags(
        // The token command (before the service starts) finds the same database in the environment.
        &[
            ("TAO_SLURM_DATABASE_URL", &bare),
            ("TAO_SLURM_DATABASE_PASSWORD", &password),
            ("TAO_SLURM_DATABASE_SCHEMA", &schema),
        ],
        &["--database", &bare],
    );
    let (status, created) = svc
        .create(&json!({"name": "on-postgres", "image": "ubuntu:22.04", "command": "sleep 120", "workspace": "login1"}))
        .await;
    assert_eq!(status, 201, "{created} {}", svc.log());
    let id = created["id"].as_str().unwrap().to_string();
    let listed = svc.json(&svc.api("/jobs")).await;
    assert!(listed.to_string().contains(&id), "{listed}");
    let r = svc.http.post(svc.api(&format!("/jobs/{id}:cancel"))).bearer_auth(&svc.token).send().await.unwrap();
    assert!(r.status().is_success(), "cancel: {}", r.status());
    let done = svc.wait_job(&id, Duration::from_secs(300), |j: &Value| j["status"] == "Canceled").await;
    assert_eq!(done["status"], "Canceled");

    // The rows are in PostgreSQL, in the schema named (the sync client off the test's runtime).
    let (url, schema2, id2) = (url.clone(), schema.clone(), id.clone());
    tokio::task::spawn_blocking(move || rows_in_postgres(&url, &schema2, &id2)).await.unwrap();
    assert!(!svc.log().contains(&password), "the database password reached the service's log");
}

fn rows_in_postgres(url: &str, schema: &str, id: &str) {
    let mut db = postgres::Client::connect(url, postgres::NoTls).unwrap();
    let q = format!("SELECT status FROM \"{schema}\".jobs WHERE job_id = $1");
    let row = db.query_one(q.as_str(), &[&id]).unwrap();
    assert_eq!(row.get::<_, String>(0), "Canceled");
    let q = format!("SELECT kind FROM \"{schema}\".events WHERE job_id = $1 ORDER BY id");
    let kinds: Vec<String> = db.query(q.as_str(), &[&id]).unwrap().iter().map(|r| r.get(0)).collect();
    assert!(kinds.contains(&"created".to_string()) && kinds.contains(&"submitted".to_string()), "{kinds:?}");
    // The service's own records too: the API's job and the audit trail of its create and cancel.
    let q = format!("SELECT org FROM \"{schema}_service\".api_jobs WHERE job_id = $1");
    assert_eq!(db.query_one(q.as_str(), &[&id]).unwrap().get::<_, String>(0), "team-a");
    let q = format!("SELECT action FROM \"{schema}_service\".audit WHERE target = $1 ORDER BY id");
    let actions: Vec<String> = db.query(q.as_str(), &[&id]).unwrap().iter().map(|r| r.get(0)).collect();
    assert!(actions.iter().any(|a| a.contains("cancel")), "{actions:?}");
    db.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE; DROP SCHEMA \"{schema}_service\" CASCADE")).unwrap();
}

/// The command line on PostgreSQL: two machines (their own homes, SSH connections and state-file
/// paths) with the same `TAO_SLURM_DATABASE_URL` share the jobs. One submits; the other follows the
/// job to its end and reads its logs; neither writes a state file.
#[test]
fn the_command_line_on_postgres_shares_jobs_between_two_machines() {
    let (bare, password) = split_password(&database_url());
    let schema = format!("cli_{}", uuid::Uuid::new_v4().simple());
    let machine = || {
        let mut env = crate::common::Env::isolated();
        env.vars.insert("TAO_SLURM_DATABASE_URL".into(), bare.clone());
        env.vars.insert("TAO_SLURM_DATABASE_PASSWORD".into(), password.clone());
        env.vars.insert("TAO_SLURM_DATABASE_SCHEMA".into(), schema.clone());
        env
    };
    let (a, b) = (machine(), machine());
    let (job, _) = a.submit(&["--image", "ubuntu:22.04", "--gpus", "0", "--shell", "--", "echo on-postgres-cli"]);
    let listed = b.json(&["list", "--json"]);
    assert!(listed.to_string().contains(&job), "the other machine lists it: {listed}");
    let end = b.wait_terminal(&job, Duration::from_secs(300));
    assert_eq!(end["status"], "Complete", "{end}");
    let logs = b.json(&["logs", &job, "--json"]);
    assert!(logs["stdout"].as_str().unwrap().contains("on-postgres-cli"), "{logs}");
    assert_eq!(a.status(&job)["status"], "Complete", "the first machine sees the end the other saw");
    for env in [&a, &b] {
        let state = env.vars["TAO_SLURM_STATE"].clone();
        assert!(!std::path::Path::new(&state).exists(), "no state file at {state}: the state is in PostgreSQL");
    }
}
