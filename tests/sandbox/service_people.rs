//! Each person their own Unix identity (issue 39), over real HTTP and real SSH against the sandbox: a
//! workspace with `identity = "person"` runs each person's jobs as their own Unix user (the sandbox's
//! `ada` and `bo`, who have no authorized_keys), logged in with certificates the service signs with a
//! CA this test makes and the login hosts trust for as long as it runs. `sacct` shows each job under
//! its person's user; one person's job cannot read the other's results nor cancel their Slurm job; a
//! certificate names exactly its user and lives seconds here; an expired one is refused by the login
//! host and the service signs a new one without the person noticing; machines' tokens are refused.

use crate::common::sandbox::settings as sandbox_settings;
use crate::common::wait::wait_for_async;
use crate::service_support::{send, Service, TrustedCa, ORG};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

use std::time::{Duration, Instant};

fn terminal(j: &Value) -> bool {
    matches!(j["status"].as_str(), Some("Done" | "Error" | "Canceled"))
}

fn certificate(path: &Path) -> ssh_key::Certificate {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    ssh_key::Certificate::from_openssh(text.trim()).unwrap()
}

/// `ssh USER@login1 true` with this key and certificate only: whether the login host let it in.
fn logs_in(user: &str, key: &Path, cert: &Path) -> (bool, String) {
    let s = sandbox_settings();
    let port = s["SANDBOX_SSH_PORTS"].split(',').next().unwrap().to_string();
    let out = std::process::Command::new("ssh")
        .args(["-F", "/dev/null", "-i"])
        .arg(key)
        .arg("-o")
        .arg(format!("CertificateFile={}", cert.display()))
        .args([
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "IdentityAgent=none",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=10",
        ])
        .arg("-o")
        .arg(format!("UserKnownHostsFile={}", s["SSH_KNOWN_HOSTS"]))
        .args(["-o", "StrictHostKeyChecking=yes", "-o", "ControlMaster=no", "-o", "ControlPath=none", "-p", &port])
        .arg(format!("{user}@127.0.0.1"))
        .arg("id -un")
        .env_remove("SSH_AUTH_SOCK")
        .output()
        .unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr))
}

fn uid_of(user: &str) -> String {
    let out = std::process::Command::new("id").args(["-u", user]).output().unwrap();
    assert!(out.status.success(), "no user {user}: run bash dev/sandbox/up.sh");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

async fn get(svc: &Service, token: &str, path: &str) -> (u16, Value) {
    send(svc, token, reqwest::Method::GET, &svc.api(path), None).await
}

async fn post(svc: &Service, token: &str, path: &str, body: Value) -> (u16, Value) {
    send(svc, token, reqwest::Method::POST, &svc.api(path), Some(body)).await
}

async fn wait(svc: &Service, token: &str, id: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let (s, j) = get(svc, token, &format!("/jobs/{id}")).await;
        assert_eq!(s, 200, "{j}");
        if pred(&j) {
            return j;
        }
        assert!(start.elapsed() < Duration::from_secs(300), "job {id}: {j}\n{}", svc.log());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn logs(svc: &Service, token: &str, id: &str) -> String {
    match get(svc, token, &format!("/jobs/{id}:logs")).await {
        (200, Value::String(t)) => t,
        other => panic!("logs of {id}: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_person_runs_as_their_own_unix_user_with_short_lived_certificates() {
    let sandbox = sandbox_settings();
    let sd = sandbox["SANDBOX_DIR"].clone();
    let persons: Vec<String> = sandbox["SANDBOX_PERSONS"].split(',').map(String::from).collect();
    let (ada, bo) = (persons[0].clone(), persons[1].clone());
    let port = sandbox["SANDBOX_SSH_PORTS"].split(',').next().unwrap().to_string();

    // The test's CA; the login hosts trust it while the test runs.
    let ca_dir = tempfile::tempdir().unwrap();
    let (ca, _trusted) = TrustedCa::make(ca_dir.path());

    let run = format!("{:x}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos());
    // The workspace's webhooks (its profile's TAO_SLURM_NOTIFY) name each job's person.
    let hooks = crate::notify::Receiver::accepting();
    let clusters = format!(
        "[people]\nslurm_hostname = [\"127.0.0.1:{port}\"]\nbase_results_dir = \"{sd}/shared/{{user}}/people-{run}\"\n\
         orgs = [\"{ORG}\"]\nidentity = \"person\"\nTAO_SLURM_NOTIFY = \"json:http://127.0.0.1:{}/hook\"\n",
        hooks.port
    );
    let ca_text = ca.display().to_string();
    let svc = Service::start_configured_with_flags(
        &[],
        &clusters,
        false,
        &["--ssh-ca-key", &ca_text, "--ssh-cert-lifetime", "20s", "--metrics-addr", "127.0.0.1:0"],
    );
    // What the admin puts in TrustedUserCAKeys.
    let shown = svc.env.ok(&["serve", "--ssh-ca-key", &ca_text, "ca-key"]);
    let ca_pub = std::fs::read_to_string(ca.with_extension("pub")).unwrap();
    let fields = |t: &str| t.split_whitespace().take(2).map(String::from).collect::<Vec<_>>();
    assert_eq!(fields(&shown), fields(&ca_pub));
    let person_token = |p: &str| {
        svc.env.json(&["token", "create", "--org", ORG, "--person", p, "--json"])["token"].as_str().unwrap().to_string()
    };
    let (ada_token, bo_token) = (person_token(&ada), person_token(&bo));
    let (ada_token, bo_token) = (ada_token.as_str(), bo_token.as_str());
    let job = |cmd: &str| json!({"image": "ubuntu:22.04", "command": cmd, "gpus": 0, "workspace": "people"});
    // Tokens made on the command line are read within a second.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // A machine's token (the service's usual one) names no person: refused, nothing recorded.
    let (s, e) = svc.create(&job("true")).await;
    assert_eq!((s, e["error_type"].as_str()), (403, Some("forbidden")), "{e}");
    assert!(e["error_desc"].as_str().unwrap().contains("--person"), "{e}");

    // ada's job: as her Unix user, in her directory; it leaves a private file, then waits until she
    // cancels it at the end (it must still be running at bo's scancel below, however slowly a loaded
    // cluster runs bo's job first: at 120 s it had ended there, and scancel said nothing).
    let ada_cmd = r#"echo "uid=$(id -u)"; d="$TAO_API_RESULTS_DIR/$TAO_JOB_ID"; mkdir -p "$d"; echo ada-private > "$d/private.txt"; echo a-ready; sleep 900"#;
    let (s, ja) = post(&svc, ada_token, "/jobs", job(ada_cmd)).await;
    assert_eq!(s, 201, "{ja}");
    assert_eq!(
        (ja["user"].as_str(), ja["workspace"].as_str()),
        (Some(ada.as_str()), Some(format!("people@{ada}").as_str()))
    );
    let a_id = ja["id"].as_str().unwrap().to_string();
    let running = wait(&svc, ada_token, &a_id, |j| j["status"] == "Running" || terminal(j)).await;
    assert_eq!(running["status"], "Running", "{running}");
    let start = Instant::now();
    while !logs(&svc, ada_token, &a_id).await.contains("a-ready") {
        assert!(start.elapsed() < Duration::from_secs(60), "ada's job never wrote its file");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(logs(&svc, ada_token, &a_id).await.contains(&format!("uid={}", uid_of(&ada))));
    let meta = &running["backend_details"]["slurm_metadata"];
    let a_slurm = meta["slurm_job_id"].as_str().unwrap().to_string();
    let private = format!("{}/private.txt", meta["results_dir"].as_str().unwrap());
    assert!(private.starts_with(&format!("{sd}/shared/{ada}/people-{run}/")), "{private}");

    // bo's job, as bo, tries to read ada's file from its container (the shared storage is mounted).
    let bo_cmd = format!(r#"echo "uid=$(id -u)"; err=$(cat '{private}' 2>&1 >/dev/null); echo "read exit=$? $err""#);
    let (s, jb) = post(&svc, bo_token, "/jobs", job(&bo_cmd)).await;
    assert_eq!(s, 201, "{jb}");
    let b_id = jb["id"].as_str().unwrap().to_string();
    let done = wait(&svc, bo_token, &b_id, terminal).await;
    let b_logs = logs(&svc, bo_token, &b_id).await;
    assert_eq!(done["status"], "Done", "{done}\n{b_logs}");
    assert!(b_logs.contains(&format!("uid={}", uid_of(&bo))), "{b_logs}");
    let line = b_logs.lines().find(|l| l.starts_with("read ")).unwrap_or_default();
    assert!(line.contains("exit=1") && line.contains("Permission denied"), "bo read ada's file: {line:?}");
    assert!(!b_logs.contains("ada-private"), "{b_logs}");
    // bo's Unix user tries to cancel ada's Slurm job on the cluster itself.
    let slurm_conf = format!("{sd}/etc/slurm.conf");
    let scancel = std::process::Command::new("runuser")
        .args(["-u", &bo, "--", "scancel", &a_slurm])
        .env("SLURM_CONF", &slurm_conf)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&scancel.stderr);
    assert!(!scancel.status.success() && said.contains("Access/permission denied"), "bo's scancel: {said}");
    // ...and through the API: ada's job is hers alone to change.
    let (s, e) = post(&svc, bo_token, &format!("/jobs/{a_id}:cancel"), json!({})).await;
    assert_eq!((s, e["error_type"].as_str()), (403, Some("forbidden")), "{e}");

    // Nothing a request names leads to another person's workspace or Unix user: bo names ada's
    // workspace in the body, as the cluster's name, in a path, and her job's id in his requests; a
    // machine's token names hers. Each is refused, and no job runs as ada but hers.
    let jobs_before = get(&svc, bo_token, "/jobs").await.1["jobs"].as_array().unwrap().len();
    let hers = format!("people@{ada}");
    let as_ada = |extra: Value| {
        let mut j = job("id -u");
        j.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        j
    };
    for (how, body) in [
        ("workspace", as_ada(json!({"workspace": hers}))),
        (
            "cluster name",
            as_ada(json!({"workspace": null, "backend_details": {"backend_type": "slurm", "cluster_name": hers}})),
        ),
        ("after ada's job", as_ada(json!({"after": [a_id.clone()]}))),
    ] {
        let (s, e) = post(&svc, bo_token, "/jobs", body).await;
        assert_eq!((s, e["error_type"].as_str()), (403, Some("forbidden")), "{how}: {e}");
    }
    let (s, e) = svc.create(&as_ada(json!({"workspace": hers}))).await;
    assert_eq!((s, e["error_type"].as_str()), (403, Some("forbidden")), "a machine's token: {e}");
    for path in [format!("/workspaces/{hers}"), format!("/workspaces/{hers}:cluster")] {
        let (s, e) = get(&svc, bo_token, &path).await;
        assert_eq!(s, 404, "{path}: {e}");
    }
    for path in [
        format!("/jobs/{a_id}:logs"),
        format!("/jobs/{a_id}:events"),
        format!("/jobs/{a_id}:kpis"),
        format!("/jobs/{a_id}:list_files"),
        format!("/jobs/{a_id}:download"),
    ] {
        let (s, e) = get(&svc, bo_token, &path).await;
        assert_eq!((s, e["error_type"].as_str()), (403, Some("forbidden")), "{path}: {e}");
    }
    for action in ["retry", "pause", "resume", "tensorboard"] {
        let (s, e) = post(&svc, bo_token, &format!("/jobs/{a_id}:{action}"), json!({})).await;
        assert_eq!((s, e["error_type"].as_str()), (403, Some("forbidden")), "{action}: {e}");
    }
    // An org admin's token is no one's identity either.
    let admin =
        svc.env.json(&["token", "create", "--org", ORG, "--admin", "--json"])["token"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (s, e) = post(&svc, &admin, &format!("/jobs/{a_id}:cancel"), json!({})).await;
    assert_eq!((s, e["error_type"].as_str()), (403, Some("forbidden")), "an admin: {e}");
    assert_eq!(get(&svc, bo_token, "/jobs").await.1["jobs"].as_array().unwrap().len(), jobs_before, "no job was made");
    // sacct shows each job under its person's user.
    let b_slurm = done["backend_details"]["slurm_metadata"]["slurm_job_id"].as_str().unwrap().to_string();
    crate::service_support::wait_for_sacct_users(&[(&a_slurm, &ada), (&b_slurm, &bo)]);

    // The webhooks, the listings and the audit trail name the person.
    crate::common::wait::wait_for(
        "bo's job's end heard, naming bo",
        Duration::from_secs(60),
        Duration::from_millis(300),
        || {
            hooks
                .messages()
                .iter()
                .any(|m| m["job_id"] == b_id.as_str() && m["event"] == "finished" && m["user"] == bo.as_str())
        },
    );
    let started = hooks.messages().into_iter().find(|m| m["job_id"] == a_id.as_str() && m["event"] == "started");
    assert_eq!(started.as_ref().map(|m| m["user"].clone()), Some(json!(ada)), "{:?}", hooks.messages());
    let (_, mine) = get(&svc, ada_token, "/jobs?mine=true").await;
    let mine: Vec<&str> = mine["jobs"].as_array().unwrap().iter().map(|j| j["id"].as_str().unwrap()).collect();
    assert_eq!(mine, [a_id.as_str()]);
    let (_, all) = get(&svc, bo_token, "/jobs?workspace=people").await;
    assert_eq!(all["jobs"].as_array().unwrap().len(), 2, "the org sees both: {all}");
    let audit = svc.env.json(&["audit", "--org", ORG, "--json"]);
    let creates: Vec<(String, String)> = audit
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "jobs.create" && e["status"] == 201)
        .map(|e| (e["person"].as_str().unwrap_or("-").to_string(), e["target"].as_str().unwrap_or("-").to_string()))
        .collect();
    assert_eq!(creates, [(ada.clone(), a_id.clone()), (bo.clone(), b_id.clone())], "{audit}");

    // ada's certificate: exactly her principal, for seconds; signed by the test's CA.
    let keys = PathBuf::from(format!("{}.keys/people", svc.env.vars["TAO_SLURM_STATE"]));
    let (key, cert_path) = (keys.join(format!("{ada}_ed25519")), keys.join(format!("{ada}_ed25519-cert.pub")));
    let cert = certificate(&cert_path);
    assert_eq!(cert.valid_principals(), [ada.as_str()]);
    assert!(cert.valid_before() - cert.valid_after() <= 20 + 60, "20 s, dated back a minute for skew");
    let shown = std::process::Command::new("ssh-keygen").args(["-L", "-f"]).arg(&cert_path).output().unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains(&format!("Principals: \n                {ada}\n")), "{shown}");
    // A copy: it logs ada in (not bo), until it ends; then the login host refuses it.
    let copy = tempfile::tempdir().unwrap();
    let (k2, c2) = (copy.path().join("k"), copy.path().join("k-cert.pub"));
    std::fs::copy(&key, &k2).unwrap();
    std::fs::copy(&cert_path, &c2).unwrap();
    let (ok, said) = logs_in(&ada, &k2, &c2);
    assert!(ok && said.trim() == ada, "{said}");
    assert!(!logs_in(&bo, &k2, &c2).0, "ada's certificate is not bo's");
    let ends = cert.valid_before();
    while (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()) <= ends + 1 {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (ok, said) = logs_in(&ada, &k2, &c2);
    assert!(!ok && said.contains("Permission denied"), "an expired certificate: {said}");
    // The service, meanwhile, let go of the connections it made with that certificate (sshd checks a
    // certificate only at login): each of them ends by itself within the monitor's next cycles, and
    // ada's next request logs in again with a certificate the login host accepts.
    let sshd_log = || -> Vec<String> {
        sandbox["SANDBOX_SSHD_LOGS"]
            .split(',')
            .flat_map(|p| std::fs::read_to_string(p).unwrap_or_default().lines().map(String::from).collect::<Vec<_>>())
            .collect()
    };
    let ports: Vec<String> = sshd_log()
        .iter()
        .filter(|l| {
            l.starts_with(&format!("Accepted publickey for {ada} "))
                && l.contains(&format!("(serial {})", cert.serial()))
        })
        .filter_map(|l| l.split(" port ").nth(1).and_then(|r| r.split_whitespace().next()).map(String::from))
        .collect();
    assert!(!ports.is_empty(), "the certificate logged the service in");
    wait_for_async(
        "the connections made with that certificate end",
        Duration::from_secs(30),
        Duration::from_millis(500),
        || async {
            let log = sshd_log();
            let open: Vec<&String> = ports
                .iter()
                .filter(|p| {
                    !log.iter().any(|l| l.starts_with(&format!("Disconnected from user {ada} 127.0.0.1 port {p}")))
                })
                .collect();
            open.is_empty().then_some(()).ok_or(format!("still connected from ports {open:?}"))
        },
    )
    .await;
    assert!(logs(&svc, ada_token, &a_id).await.contains("a-ready"));
    let renewed = certificate(&cert_path);
    assert!(renewed.valid_before() > ends && renewed.serial() != cert.serial(), "renewed");
    let accepted = |serial: u64| {
        sandbox["SANDBOX_SSHD_LOGS"]
            .split(',')
            .map(|p| std::fs::read_to_string(p).unwrap_or_default())
            .flat_map(|t| t.lines().map(String::from).collect::<Vec<_>>())
            .any(|l| l.contains(&format!("Accepted publickey for {ada} ")) && l.contains(&format!("(serial {serial})")))
    };
    assert!(accepted(cert.serial()), "the first certificate logged the service in");
    let latest = certificate(&cert_path);
    assert!(accepted(latest.serial()) || accepted(renewed.serial()), "a renewed certificate logged it in");

    // The metrics count the persons' jobs under the workspace, naming no one; the per-person
    // workspace has no cluster view of its own (it never logs in as the operator).
    let metrics = reqwest::get(svc.metrics_url.clone().unwrap()).await.unwrap().text().await.unwrap();
    assert!(
        metrics.contains("tao_slurm_jobs{status=\"Running\",workspace=\"people\"} 1")
            || metrics.contains("tao_slurm_jobs{workspace=\"people\",status=\"Running\"} 1"),
        "{metrics}"
    );
    for name in [&ada, &bo] {
        assert!(!metrics.contains(&format!("@{name}")) && !metrics.contains(&format!("\"{name}\"")), "{metrics}");
    }
    let (s, e) = get(&svc, ada_token, "/workspaces/people:cluster").await;
    assert_eq!((s, e["error_type"].as_str()), (409, Some("per_person_workspace")), "{e}");

    // ada cancels her own job.
    let (s, j) = post(&svc, ada_token, &format!("/jobs/{a_id}:cancel"), json!({})).await;
    assert_eq!(s, 200, "{j}");
    let ended = wait(&svc, ada_token, &a_id, terminal).await;
    assert_eq!(ended["status"], "Canceled", "{ended}");
}
