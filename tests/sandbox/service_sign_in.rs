//! People sign in to the service through a real OpenID Connect provider on loopback
//! (`oidc-provider-mock` from PyPI, in the repository's .venv): ada from a terminal
//! (`tao-slurm login --service`, the link it prints opened by an HTTP client as a browser would),
//! bo in the dashboard in headless Chromium. Each runs a job on a per-person workspace, which `sacct`
//! shows under each one's Unix user, and the audit trail names each. ada, taken out of the org's group
//! at the provider, loses her access within a minute though her token would live an hour: her routes
//! answer 401/403, her workspace closes (no SSH master of hers is left, her key is removed), her job
//! stays in the org's records, the audit trail says why; bo keeps working; she cannot sign in again.

use crate::common::wait::wait_for_async;
use crate::service_dashboard::{browser, until};
use crate::service_support::{send, Service, TrustedCa, ORG};
use fantoccini::Locator;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The provider's process; dropping it stops it.
struct Provider {
    child: Child,
    url: String,
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Provider {
    async fn start() -> Provider {
        let python = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
        assert!(python.exists(), "{} is missing: run bash dev/python-env.sh (dev/test does)", python.display());
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new(python)
            .args(["-W", "ignore", "-m", "oidc_provider_mock", "--host", "127.0.0.1", "--port", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let url = format!("http://127.0.0.1:{port}");
        let probe = format!("{url}/.well-known/openid-configuration");
        // (Python starting flask and authlib: seconds alone, past 30 on a loaded machine)
        wait_for_async("the OIDC provider serves", Duration::from_secs(120), Duration::from_millis(200), || async {
            reqwest::get(&probe).await.is_ok_and(|r| r.status().is_success())
        })
        .await;
        Provider { child, url }
    }

    /// Set a person's claims at the provider (replacing what it had).
    async fn set_user(&self, sub: &str, claims: Value) {
        let r = reqwest::Client::new().put(format!("{}/users/{sub}", self.url)).json(&claims).send().await.unwrap();
        assert!(r.status().is_success(), "{}", r.status());
    }
}

/// A browser as the client of one service: no redirects followed (each step is read), from `from`
/// (a loopback address: each is its own client to the service's limits).
fn browser_from(from: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .local_address(from.parse::<std::net::IpAddr>().unwrap())
        .build()
        .unwrap()
}

/// The provider's sign-in of `sub` for an authorization URL the service sent a browser to; the
/// service's callback URL the provider sends the browser back to.
async fn provider_signs_in(http: &reqwest::Client, authorize: &str, sub: &str) -> String {
    let back = http.post(authorize).form(&[("sub", sub)]).send().await.unwrap();
    assert_eq!(back.status(), 302, "the provider's form: {}", back.text().await.unwrap());
    let callback = back.headers()["location"].to_str().unwrap().to_string();
    assert!(callback.contains("/auth/callback?"), "{callback}");
    callback
}

/// The cookie a reply sets (its `name=value`).
fn set_cookie(r: &reqwest::Response) -> String {
    r.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string()
}

/// What a person does with a terminal's code: the service's page, the code typed, the provider's
/// sign-in as `sub`, back to the service's callback (on `finish_at`, another replica if need be), and
/// the confirmation; (the last page's status, its text, the confirmation page's text). A callback
/// without the browser's cookie (an answer someone else's sign-in got) is refused first.
async fn type_code_as(page_url: &str, finish_at: &str, user_code: &str, sub: &str) -> (u16, String, String) {
    type_code(page_url, finish_at, user_code, sub, true).await
}

/// [`type_code_as`], confirming the terminal only when `and_confirm`.
async fn type_code(
    page_url: &str,
    finish_at: &str,
    user_code: &str,
    sub: &str,
    and_confirm: bool,
) -> (u16, String, String) {
    let http = browser_from("127.0.0.1");
    let form = http.get(page_url).send().await.unwrap();
    assert_eq!(form.status(), 200);
    assert!(form.text().await.unwrap().contains("name=user_code"));
    let base = page_url.trim_end_matches("/auth/device");
    let to_provider =
        http.post(format!("{base}/auth/device/verify")).form(&[("user_code", user_code)]).send().await.unwrap();
    if to_provider.status() != 302 {
        let status = to_provider.status().as_u16();
        return (status, to_provider.text().await.unwrap(), String::new());
    }
    let cookie = set_cookie(&to_provider);
    let authorize = to_provider.headers()["location"].to_str().unwrap().to_string();
    assert!(authorize.contains("prompt=login") && authorize.contains("max_age=0"), "a fresh sign-in: {authorize}");
    let callback = provider_signs_in(&http, &authorize, sub).await;
    let callback = format!("{finish_at}/auth/callback?{}", callback.split_once('?').unwrap().1);
    let stranger = http.get(&callback).send().await.unwrap();
    assert_eq!(stranger.status(), 400, "an answer without the browser's cookie");
    let page = http.get(&callback).header("cookie", &cookie).send().await.unwrap();
    let (status, text) = (page.status().as_u16(), page.text().await.unwrap());
    let Some(confirm) = text.split("name=confirm value=\"").nth(1).and_then(|r| r.split('"').next()) else {
        return (status, text, String::new());
    };
    assert!(text.contains("Sign a terminal in?"), "{text}");
    if !and_confirm {
        return (status, text.clone(), text);
    }
    let done =
        http.post(format!("{finish_at}/auth/device/confirm")).form(&[("confirm", confirm)]).send().await.unwrap();
    (done.status().as_u16(), done.text().await.unwrap(), text)
}

/// `tao-slurm login --service` as `sub`: (its exit status, what it printed, the token file's JSON).
async fn terminal_sign_in(svc: &Service, sub: &str, file: &std::path::Path) -> (bool, String, Option<Value>) {
    let mut child = svc
        .env
        .command(&["login", "--service", &svc.url, "--token-file", file.to_str().unwrap()])
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    // The page to open, then the code to type there.
    let (mut page_url, mut code) = (None, None);
    while code.is_none() {
        let mut line = String::new();
        assert!(err.read_line(&mut line).unwrap() > 0, "login ended before printing a page and a code: {said}");
        said.push_str(&line);
        let t = line.trim();
        if t.starts_with("http") {
            page_url = Some(t.to_string());
        } else if page_url.is_some() && t.len() == 9 && t.as_bytes()[4] == b'-' {
            code = Some(t.to_string());
        }
    }
    let (page_url, code) = (page_url.unwrap(), code.unwrap());
    assert!(!page_url.contains(&code), "the page's address does not hold the code: {page_url}");
    let (status, page, _) = type_code_as(&page_url, &svc.url, &code, sub).await;
    let out = tokio::task::spawn_blocking(move || {
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
        (child.wait().unwrap(), rest)
    })
    .await
    .unwrap();
    said.push_str(&out.1);
    said.push_str(&format!("\n[page {status}] {page}"));
    let kept = std::fs::read_to_string(file).ok().and_then(|t| serde_json::from_str(&t).ok());
    (out.0.success(), said, kept)
}

/// The ssh processes of this machine whose command line names `key` (a master or client logged in
/// with it).
fn ssh_processes_with(key: &std::path::Path) -> Vec<String> {
    let key = key.display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .filter(|c| c.split(' ').next().is_some_and(|p| p.ends_with("ssh")) && c.contains(&key))
        .collect()
}

fn job() -> Value {
    json!({"image": "ubuntu:22.04", "command": "echo uid=$(id -u)", "gpus": 0, "workspace": "people"})
}

async fn run_job(svc: &Service, token: &str) -> (String, String) {
    let (s, j) = send(svc, token, reqwest::Method::POST, &svc.api("/jobs"), Some(job())).await;
    assert_eq!(s, 201, "{j}");
    let id = j["id"].as_str().unwrap().to_string();
    let url = svc.api(&format!("/jobs/{id}"));
    let done =
        wait_for_async(&format!("job {id} ends"), Duration::from_secs(180), Duration::from_millis(500), || async {
            // The org's machine token reads the cache's view (a person's token may end meanwhile).
            let (_, j) = send(svc, &svc.token, reqwest::Method::GET, &url, None).await;
            let done = matches!(j["status"].as_str(), Some("Done" | "Error" | "Canceled"));
            // The job as last seen, for the failure's message.
            if done {
                Ok(j)
            } else {
                Err(format!("{j}"))
            }
        })
        .await;
    assert_eq!(done["status"], "Done", "{done}");
    (id, done["backend_details"]["slurm_metadata"]["slurm_job_id"].as_str().unwrap().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn people_sign_in_through_the_identity_provider_and_run_as_themselves() {
    let sandbox = crate::common::sandbox::settings();
    let (sd, port) =
        (sandbox["SANDBOX_DIR"].clone(), sandbox["SANDBOX_SSH_PORTS"].split(',').next().unwrap().to_string());
    let persons: Vec<String> = sandbox["SANDBOX_PERSONS"].split(',').map(String::from).collect();
    let (ada, bo) = (persons[0].clone(), persons[1].clone());
    let provider = Provider::start().await;
    for p in [&ada, &bo] {
        provider
            .set_user(
                p,
                json!({"preferred_username": p, "groups": ["tao-team-a"], "email": format!("{p}@example.org")}),
            )
            .await;
    }
    let ca_dir = tempfile::tempdir().unwrap();
    let (ca, _trusted) = TrustedCa::make(ca_dir.path());
    let run = format!("{:x}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos());
    let clusters = format!(
        "[people]\nslurm_hostname = [\"127.0.0.1:{port}\"]\nbase_results_dir = \"{sd}/shared/{{user}}/sign-in-{run}\"\n\
         orgs = [\"{ORG}\"]\nidentity = \"person\"\n\n\
         [sign_in]\nissuer = \"{}\"\nclient_id = \"tao-slurm\"\ntoken_lifetime = \"1h\"\n[sign_in.orgs]\n{ORG} = \"tao-team-a\"\n",
        provider.url
    );
    let secret = "oidc-client-secret-never-shown";
    let svc = Service::start_configured_with_flags(
        &[("TAO_SLURM_OIDC_CLIENT_SECRET", secret)],
        &clusters,
        false,
        &["--ssh-ca-key", ca.to_str().unwrap()],
    );

    // ada, from a terminal.
    let files = tempfile::tempdir().unwrap();
    let ada_file = files.path().join("ada.json");
    let (ok, said, kept) = terminal_sign_in(&svc, &ada, &ada_file).await;
    assert!(ok, "{said}");
    let kept = kept.unwrap_or_else(|| panic!("no token file: {said}"));
    assert_eq!((kept["person"].as_str(), kept["org"].as_str()), (Some(ada.as_str()), Some(ORG)), "{kept}");
    assert!(said.contains(&format!("Signed in to {} as {ada} (org {ORG})", svc.url)), "{said}");
    let ada_token = kept["token"].as_str().unwrap().to_string();
    assert!(!said.contains(&ada_token), "the token is never printed");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&ada_file).unwrap().permissions().mode() & 0o777, 0o600);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    let lifetime = kept["expires_at"].as_i64().unwrap() - now;
    assert!((3000..=3600).contains(&lifetime), "lives the hour the operator set: {lifetime}");

    // A provider's error comes back as words of OAuth's characters: no markup, no line of its own
    // in the log.
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let start = http.get(format!("{}/auth/login", svc.url)).send().await.unwrap();
    let cookie = start.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
    let to = reqwest::Url::parse(start.headers()["location"].to_str().unwrap()).unwrap();
    let state = to.query_pairs().find(|(k, _)| k == "state").unwrap().1.to_string();
    let hostile = "%3Cscript%3Ealert(1)%3C%2Fscript%3E%0Aforged-line";
    let back = http
        .get(format!("{}/auth/callback?state={state}&error={hostile}", svc.url))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(back.status(), 403);
    let text = back.text().await.unwrap();
    assert!(
        text.contains("(scriptalert1script forged-line)") || text.contains("(scriptalert1scriptforged-line)"),
        "{text}"
    );
    assert!(!text.contains("<script>") && !svc.log().lines().any(|l| l.starts_with("forged-line")));

    // bo, in the dashboard: the provider's page, then back to the dashboard, signed in as bo.
    let profile = tempfile::tempdir().unwrap();
    let (_driver, c) = browser(profile.path()).await;
    c.goto(&format!("{}/", svc.url)).await.unwrap();
    c.wait().for_element(Locator::Id("sign-in-provider")).await.unwrap().click().await.unwrap();
    let sub = c.wait().for_element(Locator::Css("input[name=sub]")).await.unwrap();
    sub.send_keys(&bo).await.unwrap();
    c.find(Locator::Css("form button[type=submit]")).await.unwrap().click().await.unwrap();
    c.wait().for_element(Locator::Id("jobs-table")).await.unwrap();
    let who = format!("{bo} · org {ORG}");
    until(
        &c,
        "the dashboard names bo",
        Duration::from_secs(20),
        "return document.getElementById('who').textContent === arguments[0];",
        vec![json!(who)],
    )
    .await;
    let url = c.current_url().await.unwrap();
    assert!(url.fragment().is_none(), "the token left the address bar: {url}");
    let stored = c.execute("return localStorage.getItem('tao-slurm-dashboard');", vec![]).await.unwrap();
    let stored: Value = serde_json::from_str(stored.as_str().unwrap()).unwrap();
    assert_eq!(stored["person"].as_str(), Some(bo.as_str()));
    let bo_token = stored["token"].as_str().unwrap().to_string();
    // A link that carries a session in its address (as the dashboard once took one) changes nothing:
    // bo is still bo, with his own token.
    let forged = json!({"org": ORG, "token": "tsk_forged", "person": "eve"}).to_string();
    let fragment: String = form_urlencoded::byte_serialize(forged.as_bytes()).collect();
    // A fresh load of the page with the link's address (the old dashboard read it as it loaded).
    c.goto("about:blank").await.unwrap();
    c.goto(&format!("{}/#sign_in={fragment}", svc.url)).await.unwrap();
    c.wait().for_element(Locator::Id("jobs-table")).await.unwrap();
    until(
        &c,
        "the dashboard still names bo",
        Duration::from_secs(20),
        "return document.getElementById('who').textContent === arguments[0];",
        vec![json!(who)],
    )
    .await;
    let kept = c.execute("return localStorage.getItem('tao-slurm-dashboard');", vec![]).await.unwrap();
    let kept: Value = serde_json::from_str(kept.as_str().unwrap()).unwrap();
    assert_eq!(kept["token"].as_str(), Some(bo_token.as_str()), "a link set no session: {kept}");
    c.close().await.unwrap();

    // Each runs a job, as themselves.
    let (a_id, a_slurm) = run_job(&svc, &ada_token).await;
    let (b_id, b_slurm) = run_job(&svc, &bo_token).await;
    crate::service_support::wait_for_sacct_users(&[(&a_slurm, &ada), (&b_slurm, &bo)]);
    let audit = svc.env.json(&["audit", "--org", ORG, "--json"]);
    let creates: Vec<(String, String)> = audit
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "jobs.create")
        .map(|e| (e["person"].as_str().unwrap_or("-").to_string(), e["target"].as_str().unwrap_or("-").to_string()))
        .collect();
    assert_eq!(creates, [(ada.clone(), a_id.clone()), (bo.clone(), b_id.clone())], "{audit}");

    // ada's workspace is up: a route of hers logs in as her (an SSH master with her key).
    let keys = std::path::PathBuf::from(format!("{}.keys/people", svc.env.vars["TAO_SLURM_STATE"]));
    let ada_key = keys.join(format!("{ada}_ed25519"));
    let ada_logs = svc.api(&format!("/jobs/{a_id}:logs"));
    let (s, said) = send(&svc, &ada_token, reqwest::Method::GET, &ada_logs, None).await;
    assert_eq!(s, 200, "{said}");
    assert!(!ssh_processes_with(&ada_key).is_empty(), "a master of ada's is up before her removal");

    // ada leaves the org's group at the provider: within a minute (her token would live an hour) no
    // route of hers works and no SSH master of hers is left.
    provider.set_user(&ada, json!({"preferred_username": ada, "groups": ["someone-else"]})).await;
    let removed_at = std::time::Instant::now();
    let jobs = svc.api("/jobs");
    wait_for_async("ada's access to end", Duration::from_secs(60), Duration::from_millis(500), || async {
        let list = send(&svc, &ada_token, reqwest::Method::GET, &jobs, None).await.0;
        let logs = send(&svc, &ada_token, reqwest::Method::GET, &ada_logs, None).await.0;
        let masters = ssh_processes_with(&ada_key);
        let refused = |s: u16| s == 401 || s == 403;
        (refused(list) && refused(logs) && masters.is_empty() && !ada_key.exists())
            .then_some(())
            .ok_or(format!("jobs {list}, logs {logs}, key there {}, ssh processes {masters:?}", ada_key.exists()))
    })
    .await;
    let took = removed_at.elapsed();
    // (Her key is removed only by her workspace's close, after its monitor was stopped.)
    eprintln!("ada's access ended {took:?} after her removal at the provider");
    // bo keeps working, on a route that logs in as him; ada's job stays in the org's records.
    let (s, said) = send(&svc, &bo_token, reqwest::Method::GET, &svc.api(&format!("/jobs/{b_id}:logs")), None).await;
    assert_eq!(s, 200, "{said}");
    let (s, job) = send(&svc, &svc.token, reqwest::Method::GET, &svc.api(&format!("/jobs/{a_id}")), None).await;
    assert_eq!((s, job["status"].as_str()), (200, Some("Done")), "{job}");
    let audit = svc.env.json(&["audit", "--org", ORG, "--json"]);
    let ended: Vec<&Value> =
        audit.as_array().unwrap().iter().filter(|e| e["action"] == "people.access_ended").collect();
    assert_eq!(ended.len(), 1, "{audit}");
    assert_eq!(ended[0]["person"].as_str(), Some(ada.as_str()));
    assert!(ended[0]["outcome"].as_str().unwrap().contains("in none of the groups"), "{audit}");
    let (ok, said, _) = terminal_sign_in(&svc, &ada, &files.path().join("again.json")).await;
    assert!(!ok && said.contains("in none of the groups"), "{said}");
    assert!(!files.path().join("again.json").exists(), "no token for her");
    // The client secret never reached a log.
    assert!(!svc.log().contains(secret));
}

/// A terminal's sign-in by hand: started on `start_at` from `terminal`, its code typed and confirmed
/// on `finish_at` by `sub`, its token collected on `start_at`: (the last answer's status, its body).
async fn device_sign_in(terminal: &reqwest::Client, start_at: &str, finish_at: &str, sub: &str) -> (u16, Value) {
    let dev: Value =
        terminal.post(format!("{start_at}/auth/device")).json(&json!({})).send().await.unwrap().json().await.unwrap();
    let (code, user_code) = (dev["device_code"].as_str().unwrap(), dev["user_code"].as_str().unwrap());
    let (status, page, _) = type_code_as(&format!("{finish_at}/auth/device"), finish_at, user_code, sub).await;
    let url = format!("{start_at}/auth/device/token");
    let mut answer = wait_for_async(
        "the terminal's sign-in settles",
        Duration::from_secs(30),
        Duration::from_millis(500),
        || async {
            let r = terminal.post(&url).json(&json!({"device_code": code})).send().await.unwrap();
            let s = r.status().as_u16();
            let v: Value = r.json().await.unwrap();
            (v["error"] != "authorization_pending").then_some((s, v))
        },
    )
    .await;
    if answer.0 != 200 {
        // What the person saw, for the failure's message.
        answer.1["page"] = json!(format!("[{status}] {page}"));
    }
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_is_shared_by_replicas_and_cannot_be_jammed_borrowed_or_had_by_a_system_user() {
    let sandbox = crate::common::sandbox::settings();
    let (sd, port) =
        (sandbox["SANDBOX_DIR"].clone(), sandbox["SANDBOX_SSH_PORTS"].split(',').next().unwrap().to_string());
    let persons: Vec<String> = sandbox["SANDBOX_PERSONS"].split(',').map(String::from).collect();
    let (ada, bo) = (persons[0].clone(), persons[1].clone());
    let provider = Provider::start().await;
    // Subjects are not names: a person is the provider's subject.
    let sub = |name: &str| format!("subject-of-{name}");
    let member = |name: &str| json!({"preferred_username": name, "groups": ["tao-team-a"]});
    for name in [ada.as_str(), bo.as_str(), "root", "slurm", "daemon", "mallory"] {
        provider.set_user(&sub(name), member(name)).await;
    }
    let ca_dir = tempfile::tempdir().unwrap();
    let (ca, _trusted) = TrustedCa::make(ca_dir.path());
    let ca_text = ca.display().to_string();
    let run = format!("{:x}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos());
    // Both replicas answer for one address, as behind a balancer: the redirect URI names it, and the
    // test sends each step to the replica it picks.
    let clusters = format!(
        "[people]\nslurm_hostname = [\"127.0.0.1:{port}\"]\nbase_results_dir = \"{sd}/shared/{{user}}/sign-in-b-{run}\"\n\
         orgs = [\"{ORG}\"]\nidentity = \"person\"\n\n\
         [sign_in]\nissuer = \"{}\"\nclient_id = \"tao-slurm\"\npublic_url = \"http://tao.invalid\"\n[sign_in.orgs]\n{ORG} = \"tao-team-a\"\n",
        provider.url
    );
    let svc = Service::start_configured_with_flags(
        &[("TAO_SLURM_OIDC_CLIENT_SECRET", "another-secret")],
        &clusters,
        false,
        &["--ssh-ca-key", &ca_text],
    );
    let other = svc.replica("second", &["--ssh-ca-key", &ca_text]);
    let (a, b) = (svc.url.clone(), other.url.clone());

    // One client floods the public routes: 1,200 sign-in starts, 1,200 terminal codes.
    let flood = browser_from("127.0.0.2");
    let (mut started, mut limited) = (0, 0);
    for _ in 0..1200 {
        match flood.get(format!("{a}/auth/login")).send().await.unwrap().status().as_u16() {
            302 => started += 1,
            429 => limited += 1,
            s => panic!("a sign-in start answered {s}"),
        }
    }
    assert!(started > 0 && limited > 0, "its address's rate holds: {started} started, {limited} limited");
    let mut codes = 0;
    for _ in 0..1200 {
        match flood.post(format!("{a}/auth/device")).json(&json!({})).send().await.unwrap().status().as_u16() {
            200 => codes += 1,
            429 => {}
            s => panic!("a terminal's start answered {s}"),
        }
    }
    assert!((1..=5).contains(&codes), "at most 5 codes wait per client: {codes}");

    // Another client signs in after it, in the dashboard: started on one replica, finished on the other.
    let http = browser_from("127.0.0.1");
    let start = http.get(format!("{a}/auth/login")).send().await.unwrap();
    assert_eq!(start.status(), 302);
    let cookie = set_cookie(&start);
    let authorize = start.headers()["location"].to_str().unwrap().to_string();
    let callback = provider_signs_in(&http, &authorize, &sub(&bo)).await;
    let query = callback.split_once('?').unwrap().1.to_string();
    let back = http.get(format!("{b}/auth/callback?{query}")).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(back.status(), 302, "{}", back.text().await.unwrap());
    assert_eq!(back.headers()["location"], "/#signed-in", "nothing of the session in the address");
    let handoff = back
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().split(';').next().unwrap().to_string())
        .find(|c| c.starts_with("tao_session=") && c.len() > "tao_session=".len())
        .expect("the session's cookie");
    // Only a request that carries the browser's cookie takes the token (a link or a page elsewhere
    // carries none).
    let taken = http.post(format!("{a}/auth/session")).send().await.unwrap();
    assert_eq!(taken.status(), 401);
    let taken = http.post(format!("{a}/auth/session")).header("cookie", &handoff).send().await.unwrap();
    assert_eq!(taken.status(), 200);
    let session: Value = taken.json().await.unwrap();
    assert_eq!((session["person"].as_str(), session["org"].as_str()), (Some(bo.as_str()), Some(ORG)), "{session}");
    let stats = format!("{b}/api/v2/orgs/{ORG}/stats");
    let r = http.get(&stats).bearer_auth(session["token"].as_str().unwrap()).send().await.unwrap();
    assert_eq!(r.status(), 200, "the token works on either replica");

    // A terminal's code cannot be borrowed: a link with it signs no one in, and a person who types a
    // code is shown where and when it was asked for before confirming.
    let eve = browser_from("127.0.0.3");
    let dev: Value = eve.post(format!("{a}/auth/device")).json(&json!({})).send().await.unwrap().json().await.unwrap();
    assert!(dev.get("verification_uri_complete").is_none(), "no link holds the code: {dev}");
    assert_eq!(dev["verification_uri"], "http://tao.invalid/auth/device");
    let eve_code = dev["user_code"].as_str().unwrap().to_string();
    let link = http.get(format!("{b}/auth/login?device={eve_code}")).send().await.unwrap();
    assert_eq!(link.status(), 400, "a link with a code starts no one's sign-in");
    let (_, _, shown) = type_code(&format!("{b}/auth/device"), &b, &eve_code, &sub(&bo), false).await;
    assert!(shown.contains("from the address 127.0.0.3") && shown.contains(&eve_code), "{shown}");
    let pending = eve
        .post(format!("{a}/auth/device/token"))
        .json(&json!({"device_code": dev["device_code"]}))
        .send()
        .await
        .unwrap();
    let pending: Value = pending.json().await.unwrap();
    assert_eq!(pending["error"], "authorization_pending", "not signed in without the person's confirmation");

    // ada's own terminal: started on one replica, her code typed and confirmed on the other, collected
    // on the first, once.
    let (s, issued) = device_sign_in(&http, &a, &b, &sub(&ada)).await;
    assert_eq!((s, issued["person"].as_str()), (200, Some(ada.as_str())), "{issued}");

    // Renamed at the provider to a colleague's name: still ada (her subject's first name).
    provider.set_user(&sub(&ada), member(&bo)).await;
    let (s, renamed) = device_sign_in(&http, &b, &a, &sub(&ada)).await;
    assert_eq!((s, renamed["person"].as_str()), (200, Some(ada.as_str())), "{renamed}");
    // Another subject naming ada is not ada.
    provider.set_user(&sub("mallory"), member(&ada)).await;
    let (s, refused) = device_sign_in(&http, &a, &a, &sub("mallory")).await;
    assert_eq!((s, refused["error"].as_str()), (400, Some("access_denied")), "{refused}");
    assert!(refused["error_description"].as_str().unwrap().contains("another person"), "{refused}");

    // A person the provider names root, slurm or daemon: refused at sign-in; no certificate made.
    for system in ["root", "slurm", "daemon"] {
        let (s, refused) = device_sign_in(&http, &a, &b, &sub(system)).await;
        assert_eq!((s, refused["error"].as_str()), (400, Some("access_denied")), "{system}: {refused}");
        assert!(refused["error_description"].as_str().unwrap().contains("user of the system"), "{refused}");
    }

    // The renamed ada's job runs as her own Unix user (her token, made by the other replica, is read
    // here within a second).
    let token = renamed["token"].as_str().unwrap();
    let stats = svc.api("/stats");
    wait_for_async("the token is known here", Duration::from_secs(10), Duration::from_millis(200), || async {
        send(&svc, token, reqwest::Method::GET, &stats, None).await.0 == 200
    })
    .await;
    let (_, slurm_id) = run_job(&svc, token).await;
    crate::service_support::wait_for_sacct_users(&[(&slurm_id, &ada)]);
    let keys = std::path::PathBuf::from(format!("{}.keys/people", svc.env.vars["TAO_SLURM_STATE"]));
    for system in ["root", "slurm", "daemon"] {
        assert!(!keys.join(format!("{system}_ed25519")).exists(), "a key for {system}");
        assert!(!keys.join(format!("{system}_ed25519-cert.pub")).exists(), "a certificate for {system}");
    }
    assert!(keys.join(format!("{ada}_ed25519-cert.pub")).exists());

    // The provider revokes ada's grant (still in the group): it refuses her refresh token, and one
    // of the replicas (the grants' lease holder) ends her access within a minute, on both.
    let r = reqwest::Client::new()
        .post(format!("{}/users/{}/revoke-tokens", provider.url, sub(&ada)))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let other_stats = format!("{b}/api/v2/orgs/{ORG}/stats");
    wait_for_async(
        "ada's refused grant ends her access",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || async {
            let here = send(&svc, token, reqwest::Method::GET, &stats, None).await.0;
            let there = http.get(&other_stats).bearer_auth(token).send().await.unwrap().status().as_u16();
            (here == 401 && there == 401).then_some(()).ok_or(format!("{here} here, {there} on the other replica"))
        },
    )
    .await;
    let audit = svc.env.json(&["audit", "--org", ORG, "--json"]);
    let ended: Vec<&Value> =
        audit.as_array().unwrap().iter().filter(|e| e["action"] == "people.access_ended").collect();
    assert_eq!(ended.len(), 1, "{audit}");
    assert!(ended[0]["outcome"].as_str().unwrap().contains("invalid_grant"), "{audit}");
    drop(other);
}
