//! People sign in to the service through a real OpenID Connect provider on loopback
//! (`oidc-provider-mock` from PyPI, in the repository's .venv): ada from a terminal
//! (`tao-slurm login --service`, the link it prints opened by an HTTP client as a browser would),
//! bo in the dashboard in headless Chromium. Each runs a job on a per-person workspace, which `sacct`
//! shows under each one's Unix user, and the audit trail names each. ada, taken out of the org's group
//! at the provider, loses access when her token ends (its lifetime here: 30 s) and cannot sign in again.

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
        wait_for_async("the OIDC provider serves", Duration::from_secs(30), Duration::from_millis(200), || async {
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

/// What a browser does with a terminal's link: to the provider (keeping the service's cookie), the
/// person's "sign-in" there as `sub`, back to the service's callback, and the confirmation of the
/// terminal when it asks; the service's last page. A callback without the browser's cookie (an answer
/// someone else's sign-in got) is refused first.
async fn open_link_as(svc_url: &str, link: &str, sub: &str) -> (u16, String) {
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let to_provider = http.get(link).send().await.unwrap();
    assert_eq!(to_provider.status(), 302, "{}", to_provider.text().await.unwrap());
    let cookie = to_provider.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
    let authorize = to_provider.headers()["location"].to_str().unwrap().to_string();
    let back = http.post(&authorize).form(&[("sub", sub)]).send().await.unwrap();
    assert_eq!(back.status(), 302, "the provider's form: {}", back.text().await.unwrap());
    let callback = back.headers()["location"].to_str().unwrap().to_string();
    assert!(callback.contains("/auth/callback?"), "{callback}");
    let stranger = http.get(&callback).send().await.unwrap();
    assert_eq!(stranger.status(), 400, "an answer without the browser's cookie");
    let page = http.get(&callback).header("cookie", &cookie).send().await.unwrap();
    let (status, text) = (page.status().as_u16(), page.text().await.unwrap());
    let Some(confirm) = text.split("name=confirm value=\"").nth(1).and_then(|r| r.split('"').next()) else {
        return (status, text);
    };
    assert!(text.contains("Sign a terminal in?"), "{text}");
    let done = http.post(format!("{svc_url}/auth/device/confirm")).form(&[("confirm", confirm)]).send().await.unwrap();
    (done.status().as_u16(), done.text().await.unwrap())
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
    let link = loop {
        let mut line = String::new();
        assert!(err.read_line(&mut line).unwrap() > 0, "login ended before printing a link: {said}");
        said.push_str(&line);
        if let Some(l) = line.trim().strip_prefix("http") {
            break format!("http{l}");
        }
    };
    let (status, page) = open_link_as(&svc.url, &link, sub).await;
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
            let (_, j) = send(svc, token, reqwest::Method::GET, &url, None).await;
            Some(j).filter(|j| matches!(j["status"].as_str(), Some("Done" | "Error" | "Canceled")))
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
         [sign_in]\nissuer = \"{}\"\nclient_id = \"tao-slurm\"\ntoken_lifetime = \"30s\"\n[sign_in.orgs]\n{ORG} = \"tao-team-a\"\n",
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
    assert!((1..=30).contains(&lifetime), "lives the 30 s the operator set: {lifetime}");

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
    assert_eq!(creates, [(ada.clone(), a_id), (bo.clone(), b_id)], "{audit}");

    // ada leaves the org's group at the provider: her token ends within its lifetime, and she cannot
    // sign in again.
    provider.set_user(&ada, json!({"preferred_username": ada, "groups": ["someone-else"]})).await;
    let stats = svc.api("/stats");
    wait_for_async("ada's token to end", Duration::from_secs(40), Duration::from_millis(500), || async {
        send(&svc, &ada_token, reqwest::Method::GET, &stats, None).await.0 == 401
    })
    .await;
    let (ok, said, _) = terminal_sign_in(&svc, &ada, &files.path().join("again.json")).await;
    assert!(!ok && said.contains("in none of the groups"), "{said}");
    assert!(!files.path().join("again.json").exists(), "no token for her");
    // The client secret never reached a log.
    assert!(!svc.log().contains(secret));
}
