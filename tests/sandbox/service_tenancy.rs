//! The service shared by two orgs, as a hostile org would try it, over real HTTP against the sandbox:
//! each org's own workspace logs in as its own Unix user (team-a as the sandbox user with a key the
//! operator assigned, team-b as `tenant2` with the key the service made for it), so team-b's job
//! cannot read team-a's results, specs or secrets files nor cancel its Slurm job; an org cannot use a
//! workspace it was not granted; secrets resolve only from the org's own; the operator's credentials
//! stay out of org workspaces; policy and `after` are checked before anything reaches a cluster.

use crate::common::sandbox::settings as sandbox_settings;
use crate::service_support::{read_events, short, tenant, Authorised, Service, ORG};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The routes this file covers (service_api skips them in its coverage check).
pub const ROUTES: &[(&str, &str)] = &[
    ("post", "/api/v2/orgs/{org}/workspaces"),
    ("delete", "/api/v2/orgs/{org}/workspaces/{workspace_id}"),
    ("get", "/api/v2/orgs/{org}/ssh-key"),
    ("put", "/api/v2/orgs/{org}/secrets/{name}"),
    ("get", "/api/v2/orgs/{org}/secrets"),
    ("delete", "/api/v2/orgs/{org}/secrets/{name}"),
];

const ORG_B: &str = "team-b";
/// team-a's secret, stored through the API.
const A_SECRET: &str = "tenancy-a-s3cret-value";
/// The operator's NGC key in the service's environment.
const OPERATOR_NGC: &str = "operator-ngc-key-never-in-org-jobs";
/// A variable of the service's environment that no org was given.
const SERVICE_ONLY: &str = "service-only-value-xyz";

struct Org<'a> {
    svc: &'a Service,
    org: &'a str,
    token: String,
}

impl Org<'_> {
    fn url(&self, path: &str) -> String {
        format!("{}/api/v2/orgs/{}{path}", self.svc.url, self.org)
    }

    async fn send(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        crate::service_support::send(self.svc, &self.token, method, &self.url(path), body).await
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.send(reqwest::Method::GET, path, None).await
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(reqwest::Method::POST, path, Some(body)).await
    }

    async fn text(&self, path: &str) -> String {
        let r = self.svc.http.get(self.url(path)).bearer_auth(&self.token).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        r.text().await.unwrap()
    }

    async fn wait_job(&self, id: &str, limit: Duration, pred: impl Fn(&Value) -> bool) -> Value {
        let start = Instant::now();
        loop {
            let (s, j) = self.get(&format!("/jobs/{id}")).await;
            assert_eq!(s, 200, "{j}");
            if pred(&j) {
                return j;
            }
            if start.elapsed() > limit {
                let log = self.svc.log();
                let tail: Vec<&str> = log.lines().filter(|l| !l.contains(" INFO ")).take(12).collect();
                panic!(
                    "job {id} not as expected after {limit:?}: {j}\nservice log (first warnings):\n{}",
                    tail.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

fn admin_token(svc: &Service, org: &str, admin: bool) -> String {
    let mut args = vec!["token", "create", "--org", org, "--json"];
    if admin {
        args.push("--admin");
    }
    svc.env.json(&args)["token"].as_str().unwrap().to_string()
}

/// Poll until a new token is honoured (the service reads tokens again within a second).
async fn until_known(o: &Org<'_>) {
    for _ in 0..40 {
        if o.get("/jobs").await.0 == 200 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("token of {} never honoured", o.org);
}

fn terminal(j: &Value) -> bool {
    matches!(j["status"].as_str(), Some("Done" | "Error" | "Canceled"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_orgs_with_their_own_unix_users_stay_apart() {
    let sandbox = sandbox_settings();
    let sd = sandbox["SANDBOX_DIR"].clone();
    let run = uuid_like();
    let base_a = format!("{}/tenancy-{run}", sandbox["SLURM_BASE_RESULTS_DIR"]);
    let base_b = format!("{sd}/shared/{}/tenancy-{run}", tenant());
    let key_dir = tempfile::tempdir().unwrap();
    let key_file = key_dir.path().join("secrets.key");
    std::fs::write(&key_file, [0x5au8; 32]).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let clusters = format!(
        r#"
[login1]
slurm_hostname = ["sandbox-login1"]
orgs = ["team-a"]
forward_credentials = true

[orgs.team-a]
ssh_key = "{key}"
ssh_aliases = ["sandbox-login1"]
partitions = ["polar"]

[orgs.team-b]
ssh_aliases = ["sandbox-login1"]
partitions = ["polar"]
max_gpus_per_job = 2
"#,
        key = sandbox["SSH_KEY_PATH"]
    );
    let svc = Service::start_configured(
        &[
            ("NGC_KEY", OPERATOR_NGC),
            ("TENANCY_SERVICE_ONLY", SERVICE_ONLY),
            ("TAO_SLURM_SECRETS_KEY_FILE", key_file.to_str().unwrap()),
            ("TAO_SLURM_MAX_QUERIES_PER_MINUTE", "60"),
            ("TAO_SLURM_LOG", "info"),
        ],
        &clusters,
        true,
    );
    let a = Org { svc: &svc, org: ORG, token: svc.token.clone() };
    let b = Org { svc: &svc, org: ORG_B, token: admin_token(&svc, ORG_B, true) };
    let a_plain = Org { svc: &svc, org: ORG, token: admin_token(&svc, ORG, false) };
    until_known(&b).await;
    until_known(&a_plain).await;
    // Every error body, to check that none names a local path.
    let mut errors: Vec<Value> = Vec::new();
    let local_dir = svc.env.dir.path().display().to_string();

    // The operator's workspace is login1, granted to team-a only.
    let (_, wa) = a.get("/workspaces").await;
    assert_eq!(wa["workspaces"].as_array().unwrap().len(), 1, "{wa}");
    let (_, wb) = b.get("/workspaces").await;
    assert_eq!(wb["workspaces"], json!([]), "team-b is granted nothing: {wb}");
    let (s, e) = b.get("/workspaces/login1").await;
    assert_eq!(s, 404, "{e}");
    errors.push(e);

    // Workspaces: team-a's own (the sandbox user, with the key the operator assigned).
    svc.env.ssh(&format!("mkdir -p -m 700 '{base_a}'"));
    let t = tenant();
    let made = std::process::Command::new("install").args(["-d", "-m", "700", "-o", &t, "-g", &t, &base_b]).status();
    assert!(made.unwrap().success(), "cannot make {base_b}");
    let ws_body = |user: &str, base: &str| {
        json!({"name": format!("{user}'s"), "cloud_type": "slurm", "cloud_specific_details": {
            "slurm_user": user, "slurm_hostname": ["sandbox-login1"], "base_results_dir": base,
            "partition": "polar", "cloud_type": "slurm"}})
    };
    let (plain, e) = a_plain.post("/workspaces", ws_body("slurmuser", &base_a)).await;
    assert_eq!(
        (plain, e["error_type"].as_str()),
        (403, Some("forbidden")),
        "an org token does not make workspaces: {e}"
    );
    let (s, ws_a) = a.post("/workspaces", ws_body(&sandbox["SLURM_USER"], &base_a)).await;
    assert_eq!(s, 201, "{ws_a}");
    assert_eq!((ws_a["ready"].as_bool(), ws_a["shared"].as_bool()), (Some(true), Some(false)), "{ws_a}");
    let ws_a = ws_a["id"].as_str().unwrap().to_string();

    // team-b's: tenant2, with the service's key for team-b, which tenant2 has not authorised yet.
    let (s, key) = b.get("/ssh-key").await;
    assert_eq!(s, 200, "{key}");
    let line = key["public_key"].as_str().unwrap().to_string();
    assert!(line.starts_with("ssh-ed25519 ") && key["assigned_by_operator"] == false, "{key}");
    let cli_line = svc.env.ok(&["serve", "key", "--org", ORG_B]);
    assert_eq!(cli_line.trim(), line, "the CLI shows the same key");
    let (_, key_a) = a.get("/ssh-key").await;
    assert_eq!(key_a["assigned_by_operator"], true);
    assert_ne!(key_a["public_key"], key["public_key"], "each org its own key");
    let (s, e) = b.post("/workspaces", ws_body(&tenant(), &base_b)).await;
    assert_eq!((s, e["error_type"].as_str()), (422, Some("preflight_failed")), "{e}");
    assert!(e["field"].as_str().unwrap().starts_with("preflight."), "{e}");
    assert!(e["error_desc"].as_str().unwrap().contains("ssh-key"), "says what to do: {e}");
    errors.push(e);
    assert_eq!(b.get("/workspaces").await.1["workspaces"], json!([]), "a failed preflight keeps nothing");
    let _authorised = Authorised::add(&line);
    let (s, ws_b) = b.post("/workspaces", ws_body(&tenant(), &base_b)).await;
    assert_eq!(s, 201, "{ws_b}");
    let ws_b = ws_b["id"].as_str().unwrap().to_string();
    let (_, wb) = b.get("/workspaces").await;
    let ids: Vec<&str> = wb["workspaces"].as_array().unwrap().iter().map(|w| w["id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec![ws_b.as_str()], "team-b sees its own workspace only");

    // team-b cannot use team-a's workspace nor login1, and sees the same answer for one that does
    // not exist.
    let job = |ws: &str, cmd: &str| short(json!({"image": "ubuntu:22.04", "command": cmd, "gpus": 0, "workspace": ws}));
    let mut refusals = Vec::new();
    for ws in [ws_a.as_str(), "login1", "no-such-workspace"] {
        let (s, e) = b.post("/jobs", job(ws, "true")).await;
        assert_eq!((s, e["field"].as_str()), (403, Some("workspace")), "{e}");
        refusals.push(e["error_desc"].as_str().unwrap().replace(ws, "W"));
        errors.push(e);
    }
    assert!(refusals.iter().all(|r| *r == refusals[0]), "one answer: {refusals:?}");
    assert_eq!(b.get(&format!("/workspaces/{ws_a}")).await.0, 404);
    assert_eq!(b.send(reqwest::Method::DELETE, &format!("/workspaces/{ws_a}"), None).await.0, 404);

    // Secrets: stored through the API by an admin token, never returned; an org token cannot.
    let put = |o: &Org, name: &str, value: &str| {
        let (url, token) = (o.url(&format!("/secrets/{name}")), o.token.clone());
        let body = json!({"value": value});
        let http = o.svc.http.clone();
        async move {
            let r = http.put(url).bearer_auth(token).json(&body).send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    let (s, text) = put(&a_plain, "A_TOKEN", A_SECRET).await;
    assert_eq!(s, 403, "{text}");
    let (s, text) = put(&a, "A_TOKEN", A_SECRET).await;
    assert_eq!(s, 204, "{text}");
    assert!(!text.contains(A_SECRET));
    let (s, text) = put(&a, "GONE_SOON", "to-be-deleted-value").await;
    assert_eq!(s, 204, "{text}");
    let (_, names) = a.get("/secrets").await;
    assert_eq!(
        names,
        json!({"secrets": [{"name": "A_TOKEN", "source": "stored"}, {"name": "GONE_SOON", "source": "stored"}]})
    );
    assert_eq!(b.get("/secrets").await.1, json!({"secrets": []}), "team-b sees none of team-a's");
    assert_eq!(a.send(reqwest::Method::DELETE, "/secrets/GONE_SOON", None).await.0, 204);
    assert_eq!(a.send(reqwest::Method::DELETE, "/secrets/GONE_SOON", None).await.0, 404);
    let raw = std::fs::read(svc.env.dir.path().join("state.db.service.db")).unwrap_or_default();
    let wal = std::fs::read(svc.env.dir.path().join("state.db.service.db-wal")).unwrap_or_default();
    for bytes in [raw, wal] {
        assert!(!bytes.windows(A_SECRET.len()).any(|w| w == A_SECRET.as_bytes()), "stored encrypted");
    }

    // Refused before anything reaches a cluster: a name of the service's environment the org was
    // not given (the same words as a name that exists nowhere), another org's secret, policy.
    let jobs_before = svc.env.json(&["list", "--json"]).as_array().unwrap().len();
    let mut neutral = Vec::new();
    for (o, ws, name) in [
        (&a, &ws_a, "TENANCY_SERVICE_ONLY"),
        (&a, &ws_a, "NGC_KEY"),
        (&a, &ws_a, "NOT_SET_ANYWHERE"),
        (&b, &ws_b, "A_TOKEN"),
    ] {
        let mut body = job(ws, "true");
        body["secret_env"] = json!([name]);
        let (s, e) = o.post("/jobs", body).await;
        assert_eq!((s, e["field"].as_str()), (400, Some("secret_env")), "{e}");
        neutral.push(e["error_desc"].as_str().unwrap().replace(name, "N").replace(o.org, "O"));
        assert!(!e.to_string().contains(SERVICE_ONLY) && !e.to_string().contains("no value"), "{e}");
        errors.push(e);
    }
    assert!(neutral.iter().all(|n| *n == neutral[0]), "one neutral refusal: {neutral:?}");
    for (body, field) in [
        (json!({"gpus": 4}), "gpus"),
        (json!({"partition": "debug"}), "partition"),
        (json!({"sbatch_options": {"dependency": "afterok:1"}}), "sbatch_options.dependency"),
    ] {
        let mut j = job(&ws_b, "true");
        for (k, v) in body.as_object().unwrap() {
            j[k] = v.clone();
        }
        let (s, e) = b.post("/jobs", j).await;
        assert_eq!((s, e["error_type"].as_str(), e["field"].as_str()), (403, Some("forbidden"), Some(field)), "{e}");
        errors.push(e);
    }
    assert_eq!(svc.env.json(&["list", "--json"]).as_array().unwrap().len(), jobs_before, "nothing recorded");

    // team-a's job in its own workspace: the stored secret arrives, the operator's NGC key does not;
    // it leaves results, a specs file and (while it runs) its secrets file, then waits.
    let a_cmd = r#"echo "a=$A_TOKEN"; [ -n "${NGC_KEY:-}" ] && echo ngc-present || echo ngc-absent; d="$TAO_API_RESULTS_DIR/$TAO_JOB_ID"; mkdir -p "$d"; echo "$A_TOKEN" > "$d/private.txt"; echo a-ready; sleep 90"#;
    let mut body = job(&ws_a, a_cmd);
    body["secret_env"] = json!(["A_TOKEN"]);
    body["specs"] = json!({"train": {"note": "team-a's specs"}});
    let (s, ja) = a.post("/jobs", body).await;
    assert_eq!(s, 201, "{ja}");
    assert!(!ja.to_string().contains(A_SECRET));
    let a_id = ja["id"].as_str().unwrap().to_string();
    // login1, shared and opted in: the operator's NGC key reaches team-a's job there.
    let (s, jl) =
        a.post("/jobs", job("login1", r#"[ -n "${NGC_KEY:-}" ] && echo ngc-present || echo ngc-absent"#)).await;
    assert_eq!(s, 201, "{jl}");
    let l_id = jl["id"].as_str().unwrap().to_string();

    // `after`: another org's job is refused like one that does not exist, and so is a prefix.
    let mut afters = Vec::new();
    for (o, ws, after) in
        [(&b, &ws_b, a_id.clone()), (&b, &ws_b, format!("{}-0000", &a_id[..8])), (&a, &ws_a, a_id[..8].to_string())]
    {
        let mut j = job(ws, "true");
        j["after"] = json!([after]);
        let (s, e) = o.post("/jobs", j).await;
        assert_eq!((s, e["field"].as_str()), (400, Some("after[0]")), "{e}");
        afters.push(e["error_desc"].as_str().unwrap().replace(&after, "J").replace(o.org, "O"));
        errors.push(e);
    }
    assert!(afters.iter().all(|x| *x == afters[0]), "one answer: {afters:?}");

    let running = a.wait_job(&a_id, Duration::from_secs(180), |j| j["status"] == "Running" || terminal(j)).await;
    assert_eq!(running["status"], "Running", "{running}");
    let start = Instant::now();
    while !a.text(&format!("/jobs/{a_id}:logs")).await.contains("a-ready") {
        assert!(start.elapsed() < Duration::from_secs(60), "team-a's job never wrote its files");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let meta = &running["backend_details"]["slurm_metadata"];
    let a_slurm = meta["slurm_job_id"].as_str().unwrap().to_string();
    let results = format!("{}/private.txt", meta["results_dir"].as_str().unwrap());
    let specs = format!("{base_a}/specs/{a_id}.json");
    let secrets = format!("{base_a}/secrets/{a_id}/env");
    // The files exist (as team-a's user sees them).
    let seen = svc.env.ssh(&format!("cat '{results}'; test -f '{specs}' && test -f '{secrets}' && echo all-there"));
    assert!(seen.contains(A_SECRET) && seen.contains("all-there"), "{seen}");

    // team-b's job tries to read them from its container (the shared storage is mounted there).
    let b_cmd = format!(
        r#"for f in '{results}' '{specs}' '{secrets}'; do err=$(cat "$f" 2>&1 >/dev/null); echo "read $f exit=$? $err"; done"#
    );
    let (s, jb) = b.post("/jobs", job(&ws_b, &b_cmd)).await;
    assert_eq!(s, 201, "{jb}");
    let b_id = jb["id"].as_str().unwrap().to_string();
    let done = b.wait_job(&b_id, Duration::from_secs(180), terminal).await;
    let b_logs = b.text(&format!("/jobs/{b_id}:logs")).await;
    assert_eq!(done["status"], "Done", "{done}\n{b_logs}");
    for f in [&results, &specs, &secrets] {
        let line = b_logs.lines().find(|l| l.starts_with(&format!("read {f} "))).unwrap_or_default();
        assert!(line.contains("exit=1") && line.contains("Permission denied"), "team-b read {f}: {line:?}\n{b_logs}");
    }
    assert!(!b_logs.contains(A_SECRET) && !b_logs.contains("team-a's specs"), "{b_logs}");
    // The container has no Slurm commands: team-b's Unix user tries to cancel team-a's Slurm job on
    // the cluster itself, as a job that left its container would.
    let scancel = std::process::Command::new("runuser")
        .args(["-u", &tenant(), "--", "scancel", &a_slurm])
        .env("SLURM_CONF", format!("{sd}/etc/slurm.conf"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&scancel.stderr);
    assert!(
        !scancel.status.success() && said.contains("Access/permission denied"),
        "team-b's scancel of team-a's job failed: {said}"
    );
    // team-a's job is still running (polled over a few refreshes).
    let still = a.wait_job(&a_id, Duration::from_secs(20), |j| j["status"] == "Running").await;
    assert_eq!(still["backend_details"]["slurm_metadata"]["slurm_job_id"], a_slurm.as_str());
    let sq = svc.env.ssh(&format!("squeue -h -j {a_slurm} -o %T"));
    assert_eq!(sq.trim(), "RUNNING", "team-a's Slurm job runs on");
    // team-b cannot cancel it through the API either (not found, as if it did not exist).
    let (s, e) = b.post(&format!("/jobs/{a_id}:cancel"), json!({})).await;
    assert_eq!(s, 404, "{e}");
    errors.push(e);

    // team-a's logs: its secret shows as ***, never as itself; no NGC key in its own workspace.
    let a_logs = a.text(&format!("/jobs/{a_id}:logs")).await;
    assert!(a_logs.contains("a=***") && !a_logs.contains(A_SECRET), "{a_logs}");
    assert!(a_logs.contains("ngc-absent"), "{a_logs}");
    let a_range = a.text(&format!("/jobs/{a_id}:logs?offset=0&stream=stdout")).await;
    assert!(a_range.contains("a=***") && !a_range.contains(A_SECRET), "{a_range}");
    // The event stream's log lines too.
    let resp = svc.http.get(a.url(&format!("/jobs/{a_id}:stream"))).bearer_auth(&a.token).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let events = read_events(resp, Duration::from_secs(30), |name, data| {
        name == "log" && data["text"].as_str().is_some_and(|t| t.contains("a-ready"))
    })
    .await;
    let streamed: String =
        events.iter().filter(|(n, _)| n == "log").map(|(_, d)| d["text"].as_str().unwrap_or("").to_string()).collect();
    assert!(streamed.contains("a=***") && !streamed.contains(A_SECRET), "{streamed}");
    let l_done = a.wait_job(&l_id, Duration::from_secs(180), terminal).await;
    assert_eq!(l_done["status"], "Done", "{l_done}");
    assert!(a.text(&format!("/jobs/{l_id}:logs")).await.contains("ngc-present"), "opted in: forwarded");

    // Deleting: not the operator's workspace, not one with active jobs; then it is gone.
    let (s, e) = a.send(reqwest::Method::DELETE, "/workspaces/login1", None).await;
    assert_eq!(s, 403, "{e}");
    errors.push(e);
    let (s, e) = a.send(reqwest::Method::DELETE, &format!("/workspaces/{ws_a}"), None).await;
    assert_eq!(s, 409, "{e}");
    errors.push(e);
    assert_eq!(a.post(&format!("/jobs/{a_id}:cancel"), json!({})).await.0, 200);
    a.wait_job(&a_id, Duration::from_secs(300), terminal).await;
    let (s, e) = a.send(reqwest::Method::DELETE, &format!("/workspaces/{ws_a}"), None).await;
    assert_eq!(s, 200, "{e}");
    assert_eq!(a.get(&format!("/workspaces/{ws_a}")).await.0, 404);
    assert_eq!(b.send(reqwest::Method::DELETE, &format!("/workspaces/{ws_b}"), None).await.0, 200);

    // No error body names a local path of the service.
    for e in &errors {
        let t = e.to_string();
        assert!(!t.contains(&local_dir) && !t.contains(&sandbox["SSH_KEY_PATH"]), "a local path in {t}");
    }
    // No reply and no log line of the service holds the secret.
    assert!(!svc.log().contains(A_SECRET), "the service's log holds team-a's secret");
}

/// A short random tag for this run's directories.
fn uuid_like() -> String {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    format!("{:x}{:x}", t.as_nanos() & 0xffff_ffff, std::process::id())
}

#[test]
fn a_secrets_key_file_others_can_read_stops_the_service() {
    let env = crate::common::Env::new();
    let key = env.dir.path().join("k");
    std::fs::write(&key, [1u8; 32]).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut env = env;
    env.vars.insert("TAO_SLURM_SECRETS_KEY_FILE".into(), key.display().to_string());
    let out = env.run(&["serve", "--port", "0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("chmod 600"), "{err}");
}
