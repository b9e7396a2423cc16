//! What an org may make the service do with the operator's reach, over real HTTP and SSH against the
//! sandbox: an org's own workspace logs in with the org's key only (not the operator's ssh_config
//! identity nor its agent), on an ssh_config alias only where the operator granted it, and its login
//! failures tell it nothing of the service's network; the active-job limit holds under parallel
//! creates and a retry; an org's workspaces are capped; a path's org is exactly the token's.

use crate::common::sandbox::settings as sandbox_settings;
use crate::service_support::{send, short, tenant, Authorised, Service, ORG};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn org_url(svc: &Service, org: &str, path: &str) -> String {
    format!("{}/api/v2/orgs/{org}{path}", svc.url)
}

fn new_token(svc: &Service, org: &str) -> String {
    svc.env.json(&["token", "create", "--org", org, "--admin", "--json"])["token"].as_str().unwrap().to_string()
}

/// Poll until a new token is honoured (the service reads tokens again within a second).
async fn until_known(svc: &Service, org: &str, token: &str) {
    let start = Instant::now();
    while send(svc, token, reqwest::Method::GET, &org_url(svc, org, "/jobs"), None).await.0 != 200 {
        assert!(start.elapsed() < Duration::from_secs(10), "token of {org} never honoured");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn workspace(user: &str, host: &str, base: &str, force: bool) -> Value {
    json!({"name": format!("{user} on {host}"), "cloud_type": "slurm", "force_create": force,
        "cloud_specific_details": {"slurm_user": user, "slurm_hostname": [host], "base_results_dir": base,
            "partition": "polar"}})
}

/// An ssh-agent holding the operator's key, stopped when dropped.
struct Agent {
    child: std::process::Child,
    sock: std::path::PathBuf,
}

impl Agent {
    fn with_key(dir: &std::path::Path, key: &str) -> Agent {
        let sock = dir.join("agent.sock");
        let child = std::process::Command::new("ssh-agent").arg("-D").arg("-a").arg(&sock).spawn().unwrap();
        let start = Instant::now();
        while !sock.exists() {
            assert!(start.elapsed() < Duration::from_secs(10), "ssh-agent did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        let added = std::process::Command::new("ssh-add").arg(key).env("SSH_AUTH_SOCK", &sock).output().unwrap();
        assert!(added.status.success(), "ssh-add: {}", String::from_utf8_lossy(&added.stderr));
        Agent { child, sock }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The tests here that authorise a key for the tenant user, one at a time (each takes its line out
/// of the same authorized_keys again).
static TENANT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A results directory of the tenant user's, made for this run.
fn tenant_base(tag: &str) -> String {
    let t = tenant();
    let base = format!("{}/shared/{t}/org-trust-{tag}-{}", sandbox_settings()["SANDBOX_DIR"], std::process::id());
    let made = std::process::Command::new("install").args(["-d", "-m", "700", "-o", &t, "-g", &t, &base]).status();
    assert!(made.unwrap().success(), "cannot make {base}");
    base
}

/// The org-facing words of a refusal, without the workspace's random id.
fn words(e: &Value) -> String {
    let desc = e["error_desc"].as_str().unwrap_or_default();
    desc.split_once(": ").map(|(_, rest)| rest.to_string()).unwrap_or_else(|| desc.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_org_workspace_on_the_operators_alias_logs_in_with_the_org_key_only() {
    let sandbox = sandbox_settings();
    let operator_key = sandbox["SSH_KEY_PATH"].clone();
    let agent_dir = tempfile::tempdir().unwrap();
    // The operator's key is in the service's ssh_config (sandbox-login1's IdentityFile, User
    // slurmuser), in SSH_KEY_PATH and in the service's agent: none of them may log an org in.
    let agent = Agent::with_key(agent_dir.path(), &operator_key);
    let clusters = "[orgs.team-a]\nssh_aliases = [\"sandbox-login1\"]\npartitions = [\"polar\"]\n\n[orgs.team-c]\n";
    let svc = Service::start_configured(&[("SSH_AUTH_SOCK", agent.sock.to_str().unwrap())], clusters, true);
    let team_c = new_token(&svc, "team-c");
    until_known(&svc, "team-c", &team_c).await;
    let post = reqwest::Method::POST;
    let base_user = format!("{}/org-trust-{}", sandbox["SLURM_BASE_RESULTS_DIR"], std::process::id());
    // Everything else of the preflight would pass: only the login can fail.
    svc.env.ssh(&format!("mkdir -p -m 700 '{base_user}'"));

    // team-a's admin, on the alias the operator granted it, as the operator's Unix user, with the org
    // key authorised nowhere: refused at preflight, nothing kept.
    let (s, e) = send(
        &svc,
        &svc.token,
        post.clone(),
        &svc.api("/workspaces"),
        Some(workspace("slurmuser", "sandbox-login1", &base_user, false)),
    )
    .await;
    assert_eq!(
        (s, e["error_type"].as_str()),
        (422, Some("preflight_failed")),
        "the operator's identity logged an org in: {e}"
    );
    assert_eq!(e["field"], "preflight.ssh login", "{e}");
    let said = e["error_desc"].as_str().unwrap();
    assert!(said.contains("ssh-key") && !said.contains("Permission denied") && !said.contains(&operator_key), "{e}");
    let (_, listed) = send(&svc, &svc.token, reqwest::Method::GET, &svc.api("/workspaces"), None).await;
    assert_eq!(listed["workspaces"], json!([]), "a failed preflight keeps nothing: {listed}");

    // The same alias works with the org's own key once the user authorises it (so the refusal above
    // was the key's): tenant2 authorises team-a's key.
    let (s, key) = send(&svc, &svc.token, reqwest::Method::GET, &svc.api("/ssh-key"), None).await;
    assert_eq!(s, 200, "{key}");
    let _tenant = TENANT.lock().await;
    let t = tenant();
    let base_t = tenant_base("alias");
    // Whatever the sandbox's own user accepts: the tenant user accepts the operator's key, and still
    // the org's workspace as that user does not log in until the org's key is authorised.
    let operator_public = std::fs::read_to_string(format!("{operator_key}.pub")).unwrap();
    let _operator_authorised = Authorised::add(operator_public.trim());
    let (s, e) = send(
        &svc,
        &svc.token,
        post.clone(),
        &svc.api("/workspaces"),
        Some(workspace(&t, "sandbox-login1", &base_t, false)),
    )
    .await;
    assert_eq!(
        (s, e["field"].as_str()),
        (422, Some("preflight.ssh login")),
        "the operator's key logged an org in: {e}"
    );
    let _authorised = Authorised::add(key["public_key"].as_str().unwrap());
    let (s, w) = send(
        &svc,
        &svc.token,
        post.clone(),
        &svc.api("/workspaces"),
        Some(workspace(&t, "sandbox-login1", &base_t, false)),
    )
    .await;
    assert_eq!((s, w["ready"].as_bool()), (201, Some(true)), "{w}");
    assert_eq!(w["cloud_specific_details"]["slurm_hostname"], json!(["sandbox-login1"]), "{w}");
    let id = w["id"].as_str().unwrap();
    assert_eq!(
        send(&svc, &svc.token, reqwest::Method::DELETE, &svc.api(&format!("/workspaces/{id}")), None).await.0,
        200
    );

    // team-c was granted no alias: the alias is a host name like any other (it resolves nowhere),
    // and every login failure reads the same, whatever answered at the address (a closed port, a
    // database, an SSH server that refuses the key): no port probing from the service's host.
    let mut answers = Vec::new();
    for host in ["sandbox-login1", "127.0.0.1:1", "127.0.0.1:5432", "127.0.0.1:2222"] {
        let (s, e) = send(
            &svc,
            &team_c,
            post.clone(),
            &org_url(&svc, "team-c", "/workspaces"),
            Some(workspace("slurmuser", host, &base_user, false)),
        )
        .await;
        assert_eq!((s, e["field"].as_str()), (422, Some("preflight.ssh login")), "{host}: {e}");
        answers.push(words(&e));
    }
    assert!(answers.iter().all(|a| *a == answers[0]), "one answer whatever the host: {answers:#?}");
    for detail in ["refused", "Could not resolve", "Permission denied", "banner", "timed out"] {
        assert!(!answers[0].contains(detail), "{detail} in {}", answers[0]);
    }
    // The operator's log has what ssh said.
    let log = svc.log();
    assert!(log.contains("Connection refused"), "the details are in the operator's log:\n{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_creates_and_a_retry_hold_the_active_job_limit() {
    // In team-a's own workspace (the tenant user, the org's key): the limit is the org's.
    let clusters = "[orgs.team-a]\nssh_aliases = [\"sandbox-login1\"]\nmax_active_jobs = 3\n";
    let svc = Service::start_configured(&[], clusters, true);
    let _tenant = TENANT.lock().await;
    let (s, key) = send(&svc, &svc.token, reqwest::Method::GET, &svc.api("/ssh-key"), None).await;
    assert_eq!(s, 200, "{key}");
    let _authorised = Authorised::add(key["public_key"].as_str().unwrap());
    let base = tenant_base("limit");
    let (s, w) = send(
        &svc,
        &svc.token,
        reqwest::Method::POST,
        &svc.api("/workspaces"),
        Some(workspace(&tenant(), "sandbox-login1", &base, false)),
    )
    .await;
    assert_eq!((s, w["ready"].as_bool()), (201, Some(true)), "{w}");
    let ws = w["id"].as_str().unwrap().to_string();
    let job = short(json!({"image": "ubuntu:22.04", "command": "sleep 300", "gpus": 0, "workspace": ws}));
    let creates = (0..10).map(|_| {
        let (http, url, token, body) = (svc.http.clone(), svc.api("/jobs"), svc.token.clone(), job.clone());
        async move {
            let r = http.post(url).bearer_auth(token).json(&body).send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap_or(Value::Null))
        }
    });
    let replies = futures_util::future::join_all(creates).await;
    let accepted: Vec<String> =
        replies.iter().filter(|(s, _)| *s == 201).map(|(_, j)| j["id"].as_str().unwrap().to_string()).collect();
    let refused: Vec<&Value> = replies.iter().filter(|(s, _)| *s != 201).map(|(_, e)| e).collect();
    assert_eq!(accepted.len(), 3, "exactly the limit accepted: {replies:#?}");
    for e in &refused {
        assert_eq!((e["error_type"].as_str(), e["field"].as_str()), (Some("forbidden"), Some("active_jobs")), "{e}");
        assert!(e["error_desc"].as_str().unwrap().contains("max_active_jobs = 3"), "the limit named: {e}");
    }
    // One cancelled makes room for one create; a retry of the cancelled one is then past the limit.
    let post = reqwest::Method::POST;
    let (s, c) =
        send(&svc, &svc.token, post.clone(), &svc.api(&format!("/jobs/{}:cancel", accepted[0])), Some(json!({}))).await;
    assert_eq!(s, 200, "{c}");
    svc.wait_job(&accepted[0], Duration::from_secs(300), |j| j["status"] == "Canceled").await;
    let (s, fourth) = svc.create(&job).await;
    assert_eq!(s, 201, "{fourth}");
    let (s, e) = send(&svc, &svc.token, post.clone(), &svc.api(&format!("/jobs/{}:retry", accepted[0])), None).await;
    assert_eq!((s, e["field"].as_str()), (403, Some("active_jobs")), "a retry past the limit: {e}");
    assert!(e["error_desc"].as_str().unwrap().contains("max_active_jobs = 3"), "{e}");
    let (_, j) = send(&svc, &svc.token, reqwest::Method::GET, &svc.api(&format!("/jobs/{}", accepted[0])), None).await;
    assert_eq!(j["status"], "Canceled", "the refused retry started nothing: {j}");
    // With room again (one more cancelled), the retry goes through.
    let (s, _) =
        send(&svc, &svc.token, post.clone(), &svc.api(&format!("/jobs/{}:cancel", accepted[1])), Some(json!({}))).await;
    assert_eq!(s, 200);
    svc.wait_job(&accepted[1], Duration::from_secs(300), |j| j["status"] == "Canceled").await;
    let (s, r) = send(&svc, &svc.token, post, &svc.api(&format!("/jobs/{}:retry", accepted[0])), None).await;
    assert_eq!(s, 200, "{r}");
    assert!(r["status"] != "Canceled", "retried: {r}");
    // The service's own cleanup knows no org workspace: cancel what runs here.
    for id in [&accepted[0], &accepted[2], fourth["id"].as_str().unwrap_or_default()] {
        let (s, c) =
            send(&svc, &svc.token, reqwest::Method::POST, &svc.api(&format!("/jobs/{id}:cancel")), Some(json!({})))
                .await;
        assert_eq!(s, 200, "{c}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orgs_workspaces_are_capped_and_a_paths_org_is_the_tokens() {
    let clusters = "[orgs.team-c]\nmax_workspaces = 2\n";
    let svc = Service::start_configured(&[], clusters, true);
    let team_c = new_token(&svc, "team-c");
    until_known(&svc, "team-c", &team_c).await;
    // Unreachable hosts, kept anyway (force_create): each counts.
    let body = |i: usize| workspace("slurmuser", "127.0.0.1:1", &format!("/tmp/ws-{i}"), true);
    let creates = (0..12).map(|i| {
        let (http, url, token) = (svc.http.clone(), svc.api("/workspaces"), svc.token.clone());
        async move {
            let r = http.post(url).bearer_auth(token).json(&body(i)).send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap_or(Value::Null))
        }
    });
    let replies = futures_util::future::join_all(creates).await;
    let made: Vec<&Value> = replies.iter().filter(|(s, _)| *s == 201).map(|(_, w)| w).collect();
    assert_eq!(made.len(), 8, "the default cap, under parallel creates: {replies:#?}");
    for (s, e) in replies.iter().filter(|(s, _)| *s != 201) {
        assert_eq!((*s, e["field"].as_str()), (403, Some("max_workspaces")), "{e}");
        assert!(e["error_desc"].as_str().unwrap().contains("max_workspaces = 8"), "the cap named: {e}");
    }
    let (s, e) = send(&svc, &svc.token, reqwest::Method::POST, &svc.api("/workspaces"), Some(body(99))).await;
    assert_eq!((s, e["field"].as_str()), (403, Some("max_workspaces")), "the ninth: {e}");
    // Deleting one makes room for one.
    let first = made[0]["id"].as_str().unwrap();
    assert_eq!(
        send(&svc, &svc.token, reqwest::Method::DELETE, &svc.api(&format!("/workspaces/{first}")), None).await.0,
        200
    );
    assert_eq!(send(&svc, &svc.token, reqwest::Method::POST, &svc.api("/workspaces"), Some(body(100))).await.0, 201);
    // The operator's own cap for team-c.
    for expected in [201, 201, 403] {
        let (s, e) =
            send(&svc, &team_c, reqwest::Method::POST, &org_url(&svc, "team-c", "/workspaces"), Some(body(7))).await;
        assert_eq!(s, expected, "{e}");
        if s == 403 {
            assert!(e["error_desc"].as_str().unwrap().contains("max_workspaces = 2"), "{e}");
        }
    }

    // `/orgs/team-a:x/...` is not team-a's: refused before any handler acts on "team-a:x".
    for (method, path) in [
        (reqwest::Method::GET, "/jobs"),
        (reqwest::Method::POST, "/workspaces"),
        (reqwest::Method::GET, "/workspaces"),
        (reqwest::Method::GET, "/ssh-key"),
    ] {
        let url = format!("{}/api/v2/orgs/{ORG}:x{path}", svc.url);
        let (s, e) = send(&svc, &svc.token, method, &url, Some(body(1))).await;
        assert_eq!((s, e["error_type"].as_str()), (403, Some("forbidden")), "{path}: {e}");
    }
    let url = format!("{}/api/v2/orgs/{ORG}%3Ax/jobs", svc.url);
    assert_eq!(send(&svc, &svc.token, reqwest::Method::GET, &url, None).await.0, 403);
    // The org's own route with an action still works.
    let (s, e) =
        send(&svc, &svc.token, reqwest::Method::GET, &format!("{}/api/v2/orgs/{ORG}:audit", svc.url), None).await;
    assert_eq!(s, 200, "{e}");
}
