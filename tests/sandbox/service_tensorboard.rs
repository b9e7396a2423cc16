//! A running job's TensorBoard through the service (issues 26 and 35): `:tensorboard` starts it in
//! the job's container on a port drawn for that start and answers a one-time link; the link's ticket
//! becomes a session in the path; only that session reaches the proxied TensorBoard, never another
//! job's, not after the job ends, and not after its token is revoked. Whatever the job serves there
//! runs sandboxed in an opaque origin: it reads none of the dashboard's storage and cannot call the
//! API (headless Chromium). Replies are capped, requests rate-limited, and a `tensorboard.log` the
//! job planted as a symlink is not written through.

use crate::common::wait::wait_for_async;
use crate::service_dashboard::{browser, sign_in, until};
use crate::service_support::{Service, ORG};
use reqwest::header::{CONTENT_SECURITY_POLICY, COOKIE, LOCATION, SET_COOKIE};
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(240);
const EVENTS: &str = "echo events > \"$TAO_API_RESULTS_DIR/$TAO_JOB_ID/events.out.tfevents.7\"; sleep 300";
/// The service's cap on one TensorBoard reply (`service::tensorboard::MAX_REPLY`).
const MAX_REPLY: u64 = 64 << 20;

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

async fn open_link(svc: &Service, token: &str, id: &str) -> Value {
    let r = svc.http.post(svc.api(&format!("/jobs/{id}:tensorboard"))).bearer_auth(token).send().await.unwrap();
    let status = r.status();
    let body: Value = r.json().await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

/// The session URL (absolute, ending in `/`) a ticket link leads to, after checking the redirect.
async fn redeem(svc: &Service, http: &reqwest::Client, link: &Value, id: &str) -> String {
    let url = format!("{}{}", svc.url, link["url"].as_str().unwrap());
    let r = http.get(&url).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert!(r.headers().get(SET_COOKIE).is_none(), "no cookie: a sandboxed page would not send it");
    let location = r.headers()[LOCATION].to_str().unwrap().to_string();
    let session = location.strip_prefix(&format!("/tensorboard/{id}/")).and_then(|s| s.strip_suffix('/'));
    assert!(session.is_some_and(|s| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())), "{location}");
    let used = http.get(&url).send().await.unwrap();
    assert_eq!(used.status(), StatusCode::UNAUTHORIZED, "a ticket works once");
    format!("{}{location}", svc.url)
}

/// A page's text once it answers 200 and contains `marker`.
async fn page_with(http: &reqwest::Client, url: &str, marker: &str) -> String {
    wait_for_async(&format!("{marker:?} on {url}"), LIMIT, Duration::from_millis(300), || async {
        let r = http.get(url).send().await.unwrap();
        let (status, text) = (r.status(), r.text().await.unwrap());
        if status == StatusCode::OK && text.contains(marker) {
            Ok(text)
        } else {
            Err(format!("{status}: {}", &text[..text.len().min(300)]))
        }
    })
    .await
}

async fn results_dir(svc: &Service, id: &str) -> String {
    let job = svc.json(&svc.api(&format!("/jobs/{id}"))).await;
    job["backend_details"]["slurm_metadata"]["results_dir"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tensorboard_is_reached_through_the_service_with_a_one_time_link() {
    let svc = Service::start();
    let http = no_redirects();
    let (s, a) =
        svc.create(&json!({"name": "tb", "image": "ubuntu:22.04", "command": EVENTS, "workspace": "login1"})).await;
    assert_eq!(s, 201, "{a}");
    let id = a["id"].as_str().unwrap().to_string();
    // A job that is not running yet has no TensorBoard (or one that already runs: then skip ahead).
    let early =
        svc.http.post(svc.api(&format!("/jobs/{id}:tensorboard"))).bearer_auth(&svc.token).send().await.unwrap();
    assert!(matches!(early.status().as_u16(), 409 | 200), "{}", early.text().await.unwrap());
    svc.wait_job(&id, LIMIT, |j| j["status"] == "Running").await;

    let anonymous = http.post(svc.api(&format!("/jobs/{id}:tensorboard"))).send().await.unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    let link = open_link(&svc, &svc.token, &id).await;
    assert!(link["node"].as_str().unwrap().starts_with("node"), "{link}");
    let page_url = redeem(&svc, &http, &link, &id).await;

    let bare = http.get(format!("{}/tensorboard/{id}/", svc.url)).bearer_auth(&svc.token).send().await.unwrap();
    assert_eq!(bare.status(), StatusCode::UNAUTHORIZED, "a bearer token is not a TensorBoard session");
    let page = page_with(&http, &page_url, "events.out.tfevents.7").await;
    assert!(page.contains("TensorBoard stand-in") && page.contains(&id), "{page}");
    let r = http.get(&page_url).send().await.unwrap();
    let csp = r.headers()[CONTENT_SECURITY_POLICY].to_str().unwrap().to_string();
    assert!(csp.starts_with("sandbox allow-scripts") && !csp.contains("allow-same-origin"), "{csp}");
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    assert!(r.text().await.unwrap().contains("localStorage"), "the shim is in the page");

    // A sub-path with a query reaches TensorBoard as asked, without the browser's cookie or token.
    let data: Value = http
        .get(format!("{page_url}data/logdir?run=a%2Fb&x=1"))
        .header(COOKIE, "other=1")
        .bearer_auth(&svc.token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(data["query"], "run=a%2Fb&x=1");
    assert_eq!(data["cookie"], Value::Null, "{data}");
    assert_eq!(data["authorization"], Value::Null, "{data}");
    assert!(data["files"].as_array().unwrap().iter().any(|f| f == "events.out.tfevents.7"), "{data}");

    // The session is this job's only.
    let (s, b) = svc
        .create(&json!({"name": "tb2", "image": "ubuntu:22.04", "command": "sleep 300", "workspace": "login1"}))
        .await;
    assert_eq!(s, 201, "{b}");
    let other = b["id"].as_str().unwrap().to_string();
    let cross = http.get(page_url.replace(&id, &other)).send().await.unwrap();
    assert_eq!(cross.status(), StatusCode::UNAUTHORIZED);

    // When the job ends, its TensorBoard goes with it.
    for job in [&id, &other] {
        let r = svc.http.post(svc.api(&format!("/jobs/{job}:cancel"))).bearer_auth(&svc.token).send().await.unwrap();
        assert!(r.status().is_success());
    }
    svc.wait_job(&id, LIMIT, |j| j["status"] == "Canceled").await;
    let gone = http.get(&page_url).send().await.unwrap();
    assert_eq!(gone.status(), StatusCode::GONE, "{}", gone.text().await.unwrap());
    let after = http.get(&page_url).send().await.unwrap();
    assert_eq!(after.status(), StatusCode::UNAUTHORIZED, "the session ended with the job");
    let ended =
        svc.http.post(svc.api(&format!("/jobs/{id}:tensorboard"))).bearer_auth(&svc.token).send().await.unwrap();
    assert_eq!(ended.status(), StatusCode::CONFLICT);
}

/// A job that serves pages of its own: first on the port the old scheme derived from the job id
/// (before TensorBoard starts), then, when told (`take-over` in its results), on TensorBoard's own
/// socket (it finds TensorBoard's process, kills it and listens there: the socket's directory is the
/// job user's). The page tries the dashboard's
/// storage, its cookie and the API, and writes what it got into its title. `/announced` announces
/// more than the proxy's cap; `/endless` sends more than it without a length.
const HOSTILE: &str = r#"d="$TAO_API_RESULTS_DIR/$TAO_JOB_ID"; mkdir -p "$d"; exec python3 - <<'PY'
import http.server, os, signal, socketserver, threading, time
job = os.environ["TAO_JOB_ID"]
d = os.path.join(os.environ["TAO_API_RESULTS_DIR"], job)
PAGE = b"""<!doctype html><html><head><title>loading</title></head><body><h1>a page the job wrote</h1><script>
var r = {origin: String(self.origin)};
try { var all = []; for (var i = 0; i < localStorage.length; i++) all.push(localStorage.getItem(localStorage.key(i))); r.storage = all.join("|"); } catch (e) { r.storage = "blocked:" + e.name; }
try { r.cookie = String(document.cookie); } catch (e) { r.cookie = "blocked:" + e.name; }
var found = "none";
(r.storage || "").split("|").forEach(function (v) { try { found = JSON.parse(v).token || found; } catch (e) {} });
fetch("/api/v2/orgs/ORG/jobs", {credentials: "include", headers: {"Authorization": "Bearer " + found}})
  .then(function (x) { return x.text().then(function (t) { return "status " + x.status + " " + t.slice(0, 200); }); })
  .catch(function (e) { return "blocked:" + e.name; })
  .then(function (a) { r.api = a; document.title = "hostile " + JSON.stringify(r); });
</script></body></html>""".replace(b"ORG", os.environ.get("TEST_ORG", "team-a").encode())
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        if self.path.endswith("/announced"):
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(200 << 20))
            self.end_headers()
            self.wfile.write(b"x" * 4096)
            return
        if self.path.endswith("/endless"):
            self.send_header("Content-Type", "application/octet-stream")
            self.end_headers()
            try:
                for _ in range(80):
                    self.wfile.write(b"x" * (1 << 20))
            except OSError:
                pass
            return
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)
    def log_message(self, *a):
        pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    allow_reuse_address = True
    daemon_threads = True
class U(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
class UH(H):
    def address_string(self):
        return "unix"
def serve(port):
    for _ in range(300):
        try:
            srv = S(("0.0.0.0", port), H)
            break
        except OSError:
            time.sleep(0.1)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
h = 0xcbf29ce484222325
for b in job.encode():
    h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
old = 20000 + h % 10000
serve(old)
open(os.path.join(d, "squatting"), "w").write("%d\n" % old)
while not os.path.exists(os.path.join(d, "take-over")):
    time.sleep(0.2)
sock, pids = None, []
for pid in os.listdir("/proc"):
    try:
        argv = open("/proc/%s/cmdline" % pid, "rb").read().split(b"\0")
    except OSError:
        continue
    if b"--path_prefix" in argv and ("/tensorboard/" + job).encode() in argv:
        sock = [a for a in argv if a.startswith(b"unix://")][0][len(b"unix://"):].decode()
        pids.append(int(pid))
for pid in pids:
    os.kill(pid, signal.SIGKILL)
os.unlink(sock)
threading.Thread(target=U(sock, UH).serve_forever, daemon=True).start()
open(os.path.join(d, "took-over"), "w").write(sock + "\n")
time.sleep(900)
PY"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_the_job_serves_runs_sandboxed_and_reaches_no_credentials() {
    let svc = Service::start();
    let http = no_redirects();
    let (s, a) = svc
        .create(&json!({"name": "hostile-tb", "image": "ubuntu:22.04", "command": HOSTILE, "workspace": "login1"}))
        .await;
    assert_eq!(s, 201, "{a}");
    let id = a["id"].as_str().unwrap().to_string();
    svc.wait_job(&id, LIMIT, |j| j["status"] == "Running").await;
    let results = results_dir(&svc, &id).await;
    let squatting =
        wait_for_async("the job listening on the old scheme's port", LIMIT, Duration::from_millis(500), || async {
            let out = svc.env.ssh(&format!("cat '{results}/squatting' 2>/dev/null || true"));
            out.trim().parse::<u16>().map_err(|_| format!("not yet: {out:?}"))
        })
        .await;

    // The service starts its own TensorBoard elsewhere; the job's page on the predictable port is
    // not what the link shows.
    let link = open_link(&svc, &svc.token, &id).await;
    let page_url = redeem(&svc, &http, &link, &id).await;
    let page = page_with(&http, &page_url, "TensorBoard stand-in").await;
    assert!(!page.contains("a page the job wrote"), "the squatter on port {squatting} was served: {page}");

    // The job takes TensorBoard's own socket: its page is what the proxy shows now (a job can always
    // do this: TensorBoard runs as the job's user, in the job's container).
    svc.env.ssh(&format!("touch '{results}/take-over'"));
    page_with(&http, &page_url, "a page the job wrote").await;

    // Its replies are capped: an announced length past the cap is refused before anything is sent,
    // an unannounced one is cut at the cap.
    let announced = http.get(format!("{page_url}announced")).send().await.unwrap();
    assert_eq!(announced.status(), StatusCode::BAD_GATEWAY);
    let refusal: Value = announced.json().await.unwrap();
    assert_eq!(refusal["error_type"], "tensorboard_reply_too_large", "{refusal}");
    assert!(refusal["error_desc"].as_str().unwrap().contains(&MAX_REPLY.to_string()), "{refusal}");
    let mut endless = http.get(format!("{page_url}endless")).send().await.unwrap();
    assert_eq!(endless.status(), StatusCode::OK);
    let mut received = 0u64;
    let ended = loop {
        match endless.chunk().await {
            Ok(Some(c)) => received += c.len() as u64,
            Ok(None) => break "complete",
            Err(_) => break "cut",
        }
    };
    assert_eq!(ended, "cut", "80 MiB passed a cap of 64 MiB (received {received})");
    assert!(received <= MAX_REPLY, "received {received}");

    // In a browser signed in to the dashboard (its token in the dashboard's storage), the
    // dashboard's TensorBoard button opens the job's page: it runs, in an opaque origin, with none of it.
    let profile = tempfile::tempdir().unwrap();
    let (_driver, c) = browser(profile.path()).await;
    sign_in(&c, &svc).await;
    let stored = c.execute("return localStorage.getItem('tao-slurm-dashboard') || '';", vec![]).await.unwrap();
    assert!(stored.as_str().unwrap().contains(&svc.token), "the dashboard keeps the token: {stored}");
    c.goto(&format!("{}/#/jobs/{id}", svc.url)).await.unwrap();
    until(
        &c,
        "the job's page",
        LIMIT,
        "const b = document.getElementById('open-tensorboard'); return !!b && !b.disabled;",
        vec![],
    )
    .await;
    let main_window = c.window().await.unwrap();
    c.find(fantoccini::Locator::Id("open-tensorboard")).await.unwrap().click().await.unwrap();
    let tb_window = wait_for_async("TensorBoard's window", LIMIT, Duration::from_millis(200), || {
        let (c, main_window) = (c.clone(), main_window.clone());
        async move { c.windows().await.unwrap().into_iter().find(|w| *w != main_window).ok_or("one window") }
    })
    .await;
    c.switch_to_window(tb_window).await.unwrap();
    let title = wait_for_async("the job's page reports", LIMIT, Duration::from_millis(250), || async {
        let t = c.title().await.unwrap();
        if t.starts_with("hostile ") {
            Ok(t)
        } else {
            // What the window shows and what the service said of TensorBoard, should it never come.
            let url = c.current_url().await.map(|u| u.to_string()).unwrap_or_default();
            let log = svc.log();
            let lines: Vec<&str> = log.lines().filter(|l| l.to_lowercase().contains("tensorboard")).collect();
            Err(format!(
                "title {t:?} at {url}; the service's last TensorBoard lines: {:?}",
                &lines[lines.len().saturating_sub(8)..]
            ))
        }
    })
    .await;
    let report: Value = serde_json::from_str(title.strip_prefix("hostile ").unwrap()).unwrap();
    assert!(!title.contains(&svc.token), "{title}");
    assert_eq!(report["origin"], "null", "an opaque origin: {report}");
    assert_eq!(report["storage"], "", "none of the dashboard's storage: {report}");
    assert_eq!(report["cookie"], "", "{report}");
    assert!(report["api"].as_str().unwrap().starts_with("blocked:"), "the API is out of reach: {report}");
    let url = c.current_url().await.unwrap();
    assert!(url.path().starts_with(&format!("/tensorboard/{id}/")), "{url}");
    c.close_window().await.unwrap();
    c.switch_to_window(main_window).await.unwrap();
    c.close().await.unwrap();

    let r = svc.http.post(svc.api(&format!("/jobs/{id}:cancel"))).bearer_auth(&svc.token).send().await.unwrap();
    assert!(r.status().is_success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_ends_with_its_token_is_rate_limited_and_never_writes_through_a_planted_log() {
    let svc = Service::start();
    let http = no_redirects();
    let made = svc.env.json(&["token", "create", "--org", ORG, "--name", "tb-revoked", "--json"]);
    let (token, token_id) = (made["token"].as_str().unwrap().to_string(), made["id"].as_str().unwrap().to_string());
    wait_for_async("the new token accepted", Duration::from_secs(10), Duration::from_millis(200), || async {
        svc.http.get(svc.api("/jobs")).bearer_auth(&token).send().await.unwrap().status() == StatusCode::OK
    })
    .await;
    // The job plants tensorboard.log as a link to a file of the user's outside its directory.
    let planted = r#"d="$TAO_API_RESULTS_DIR/$TAO_JOB_ID"; mkdir -p "$d"; v="$TAO_API_RESULTS_DIR/victim-$TAO_JOB_ID"; echo precious > "$v"; ln -s "$v" "$d/tensorboard.log"; echo events > "$d/events.out.tfevents.1"; sleep 300"#;
    let (s, a) = svc
        .create(&json!({"name": "tb-planted", "image": "ubuntu:22.04", "command": planted, "workspace": "login1"}))
        .await;
    assert_eq!(s, 201, "{a}");
    let id = a["id"].as_str().unwrap().to_string();
    svc.wait_job(&id, LIMIT, |j| j["status"] == "Running").await;
    let results = results_dir(&svc, &id).await;
    wait_for_async("the planted link", LIMIT, Duration::from_millis(500), || async {
        svc.env.ssh(&format!("test -L '{results}/tensorboard.log' && echo yes || true")).contains("yes")
    })
    .await;

    let link = open_link(&svc, &token, &id).await;
    let page_url = redeem(&svc, &http, &link, &id).await;
    page_with(&http, &page_url, "events.out.tfevents.1").await;
    let victim = format!("{}/victim-{id}", results.rsplit_once('/').unwrap().0);
    let seen = svc.env.ssh(&format!(
        "cat '{victim}'; test -f '{results}/tensorboard.log' && ! test -L '{results}/tensorboard.log' && echo regular"
    ));
    assert_eq!(seen, "precious\nregular\n", "the link's target untouched, our log a file of its own");

    // TensorBoard has its own rate limit per token, apart from the API's.
    let mut refused = None;
    for _ in 0..600 {
        let r = http.request(reqwest::Method::OPTIONS, &page_url).send().await.unwrap();
        match r.status() {
            StatusCode::NO_CONTENT => {}
            StatusCode::TOO_MANY_REQUESTS => {
                refused = Some((r.headers().get("retry-after").is_some(), r.json::<Value>().await.unwrap()));
                break;
            }
            other => panic!("{other}: {}", r.text().await.unwrap()),
        }
    }
    let (retry_after, body) = refused.expect("600 requests at once meet the TensorBoard rate limit");
    assert!(retry_after, "{body}");
    assert!(body["error_desc"].as_str().unwrap().contains("TensorBoard requests"), "{body}");
    let api = svc.http.get(svc.api("/jobs")).bearer_auth(&token).send().await.unwrap();
    assert_eq!(api.status(), StatusCode::OK, "the API's allowance is the token's own");

    // Revoking the token ends the session at once.
    svc.env.ok(&["token", "revoke", &token_id]);
    let refused = wait_for_async(
        "the revoked token's session refused",
        Duration::from_secs(10),
        Duration::from_millis(200),
        || async {
            let r = http.get(&page_url).send().await.unwrap();
            match r.status() {
                StatusCode::UNAUTHORIZED => Ok(r.json::<Value>().await.unwrap()),
                other => Err(other.to_string()),
            }
        },
    )
    .await;
    assert!(refused["error_desc"].as_str().unwrap().contains("revoked"), "{refused}");

    let r = svc.http.post(svc.api(&format!("/jobs/{id}:cancel"))).bearer_auth(&svc.token).send().await.unwrap();
    assert!(r.status().is_success());
}

/// Issue 50: with a host name of TensorBoard's own (`serve --tensorboard-host`), a job's pages are
/// in an origin apart from the dashboard's: the link points there, the pages are served only there,
/// and that host serves neither the dashboard nor the API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_host_name_of_its_own_tensorboard_is_served_only_there() {
    let svc = Service::start_with_flags(&[], &["--tensorboard-host", "localhost"]);
    let http = no_redirects();
    let (s, a) =
        svc.create(&json!({"name": "tb-own", "image": "ubuntu:22.04", "command": EVENTS, "workspace": "login1"})).await;
    assert_eq!(s, 201, "{a}");
    let id = a["id"].as_str().unwrap().to_string();
    svc.wait_job(&id, LIMIT, |j| j["status"] == "Running").await;
    let link = open_link(&svc, &svc.token, &id).await;
    let port = svc.url.rsplit_once(':').unwrap().1.to_string();
    let own = format!("http://localhost:{port}");
    let url = link["url"].as_str().unwrap();
    let expected = format!("//localhost:{port}/tensorboard/{id}/?ticket=");
    assert!(url.starts_with(&expected), "{link}");

    // The ticket is not taken on the dashboard's host (and stays good for its own).
    let elsewhere = http
        .get(format!("{}{}", svc.url, url.trim_start_matches(&format!("//localhost:{port}"))))
        .send()
        .await
        .unwrap();
    assert_eq!(elsewhere.status(), StatusCode::NOT_FOUND);
    let r = http.get(format!("http:{url}")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let session = r.headers()[LOCATION].to_str().unwrap().to_string();
    assert!(session.starts_with(&format!("/tensorboard/{id}/")), "{session}");
    let page = page_with(&http, &format!("{own}{session}"), "events.out.tfevents.7").await;
    assert!(page.contains("TensorBoard stand-in"), "{page}");
    let r = http.get(format!("{own}{session}")).send().await.unwrap();
    let csp = r.headers()[CONTENT_SECURITY_POLICY].to_str().unwrap().to_string();
    assert!(csp.starts_with("sandbox allow-scripts") && !csp.contains("allow-same-origin"), "{csp}");

    // The session's pages on the dashboard's host: refused.
    let there = http.get(format!("{}{session}", svc.url)).send().await.unwrap();
    assert_eq!(there.status(), StatusCode::NOT_FOUND);
    // TensorBoard's host serves neither the dashboard nor the API (not even with a valid token).
    let dashboard = http.get(format!("{own}/")).send().await.unwrap();
    assert_eq!(dashboard.status(), StatusCode::NOT_FOUND);
    let api = http.get(format!("{own}/api/v2/orgs/{ORG}/jobs")).bearer_auth(&svc.token).send().await.unwrap();
    assert_eq!(api.status(), StatusCode::NOT_FOUND);
    let api = http.get(svc.api("/jobs")).bearer_auth(&svc.token).send().await.unwrap();
    assert_eq!(api.status(), StatusCode::OK, "the dashboard's host serves the API");

    let r = svc.http.post(svc.api(&format!("/jobs/{id}:cancel"))).bearer_auth(&svc.token).send().await.unwrap();
    assert!(r.status().is_success());
}
