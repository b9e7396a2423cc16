//! TLS to the service's PostgreSQL (issue 25: replicas on several machines reach their database over
//! a network). The test's own server takes TLS connections only, with a certificate from a CA of the
//! test's. With `sslmode=require` and that CA in `TAO_SLURM_DATABASE_CA_FILE` the service runs a job
//! over TLS connections only; without the CA (the system's roots) the certificate is refused, never
//! taken unchecked; without `sslmode=require` the connection is plain and the server refuses it.

use crate::common::private_postgres::PrivatePostgres;
use crate::common::Env;
use crate::service_support::Service;
use serde_json::{json, Value};
use std::time::Duration;

/// `tao-slurm token create` (it opens the service's database) with these settings: its stderr, after
/// it failed.
fn refused(vars: &[(&str, &str)]) -> String {
    let mut env = Env::new();
    for (k, v) in vars {
        env.vars.insert(k.to_string(), v.to_string());
    }
    let out = env.run(&["token", "create", "--org", "team-a", "--name", "x", "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "refused: {stderr}");
    stderr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_reaches_a_tls_only_database_with_its_ca_and_refuses_a_certificate_it_cannot_check() {
    let pg = PrivatePostgres::start_tls();
    let plain = pg.url();
    let tls = format!("{plain}?sslmode=require");
    let ca = pg.ca_file().display().to_string();

    let why = refused(&[("TAO_SLURM_DATABASE_URL", &plain)]);
    assert!(why.contains("no encryption"), "a plain connection is refused by the server: {why}");
    let why = refused(&[("TAO_SLURM_DATABASE_URL", &tls)]);
    assert!(why.contains("certificate"), "a certificate the system's roots do not sign is refused: {why}");
    eprintln!("without the CA: {}", why.trim());
    let scratch = tempfile::tempdir().unwrap();
    let bad_ca = scratch.path().join("not-a-ca.pem");
    std::fs::write(&bad_ca, "not a certificate\n").unwrap();
    let why = refused(&[("TAO_SLURM_DATABASE_URL", &tls), ("TAO_SLURM_DATABASE_CA_FILE", bad_ca.to_str().unwrap())]);
    assert!(why.contains("TAO_SLURM_DATABASE_CA_FILE") && why.contains("no PEM certificate"), "{why}");

    let svc = Service::start_with_flags(&[("TAO_SLURM_DATABASE_URL", &tls), ("TAO_SLURM_DATABASE_CA_FILE", &ca)], &[]);
    let job = json!({"name": "over-tls", "image": "ubuntu:22.04", "gpus": 0, "command": "echo over-tls", "workspace": "login1"});
    let (status, made) = svc.create(&job).await;
    assert_eq!(status, 201, "{made} {}", svc.log());
    let id = made["id"].as_str().unwrap().to_string();
    let end = svc
        .wait_job(&id, Duration::from_secs(180), |j: &Value| j["status"] != "Pending" && j["status"] != "Running")
        .await;
    assert_eq!(end["status"], "Done", "{end}");
    // Every connection of the service's is encrypted (the server has no other kind from the network).
    let sessions = pg.sql(
        "SELECT count(*) FILTER (WHERE s.ssl), count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
         WHERE a.client_addr IS NOT NULL",
    );
    let (encrypted, all) = sessions.split_once('|').unwrap();
    assert!(all.parse::<u32>().unwrap() >= 2 && encrypted == all, "TLS sessions of all: {sessions}");
}
