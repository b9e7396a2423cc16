//! The dashboard in a real browser: Debian's headless Chromium driven over WebDriver
//! (chromium-driver) against `tao-slurm serve` on the sandbox. A job submitted through the API
//! appears, turns Running then Done without a reload, its logs appear on its page; another job is
//! cancelled from its page after the confirmation. Screenshots go to docs/ when
//! TAO_SLURM_UPDATE_SCREENSHOTS=1 (else to a temporary directory).

use crate::common::wait::wait_for_async;
use crate::service_support::{Service, ORG};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub(crate) struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

pub(crate) async fn browser(profile: &std::path::Path) -> (Driver, Client) {
    for tool in ["chromium", "chromedriver"] {
        assert!(
            Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().unwrap().status.success(),
            "{tool} is missing: run dev/browser-env.sh (dev/test does)"
        );
    }
    let port = free_port();
    let driver = Driver(
        Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": "/usr/bin/chromium",
            "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1440,960",
                format!("--user-data-dir={}", profile.display())]
        }),
    );
    let client =
        wait_for_async("chromium started over WebDriver", Duration::from_secs(30), Duration::from_millis(300), || {
            let caps = caps.clone();
            async move {
                let connector = hyper_util::client::legacy::connect::HttpConnector::new();
                ClientBuilder::new(connector)
                    .capabilities(caps)
                    .connect(&format!("http://127.0.0.1:{port}"))
                    .await
                    .map_err(|e| e.to_string())
            }
        })
        .await;
    (driver, client)
}

/// Wait until the script returns true.
/// Open the dashboard and sign in with the org and its token, up to the job list.
pub(crate) async fn sign_in(c: &Client, svc: &Service) {
    c.goto(&format!("{}/", svc.url)).await.unwrap();
    c.wait().for_element(Locator::Id("login-form")).await.unwrap();
    c.find(Locator::Id("org")).await.unwrap().send_keys(ORG).await.unwrap();
    c.find(Locator::Id("token")).await.unwrap().send_keys(&svc.token).await.unwrap();
    c.find(Locator::Id("signin")).await.unwrap().click().await.unwrap();
    c.wait().for_element(Locator::Id("jobs-table")).await.unwrap();
}

pub(crate) async fn until(c: &Client, what: &str, limit: Duration, script: &str, args: Vec<Value>) {
    wait_for_async(what, limit, Duration::from_millis(250), || {
        let args = args.clone();
        async move { c.execute(script, args).await.unwrap() == Value::Bool(true) }
    })
    .await
}

const ROW_STATUS: &str =
    "const r = document.querySelector(`tr[data-job-id='${arguments[0]}'] .status`); return !!r && r.dataset.status === arguments[1];";

pub(crate) async fn screenshot(c: &Client, name: &str, dir: &std::path::Path) {
    let png = c.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    let to = if std::env::var("TAO_SLURM_UPDATE_SCREENSHOTS").as_deref() == Ok("1") {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs").join(name)
    } else {
        dir.join(name)
    };
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    std::fs::write(&to, png).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_follows_jobs_live_and_cancels() {
    let svc = Service::start();
    let profile = tempfile::tempdir().unwrap();
    let shots = tempfile::tempdir().unwrap();
    let (_driver, c) = browser(profile.path()).await;

    sign_in(&c, &svc).await;
    // A marker that a reload would wipe.
    c.execute("window.__noReload = 42; return true;", vec![]).await.unwrap();

    // Jobs submitted through the API after the page loaded.
    let training = r#"d="$TAO_API_RESULTS_DIR/$TAO_JOB_ID"; mkdir -p "$d"; echo "loading the dataset"; for e in 1 2 3 4 5 6; do echo "epoch $e/6: loss 0.$((9-e))"; echo "{\"status\":\"RUNNING\",\"message\":\"Epoch $e/6\",\"epoch\":$e,\"max_epoch\":6,\"kpi\":{\"loss\":0.$((9-e))}}" >> "$d/status.json"; sleep 2; done; echo "{\"status\":\"SUCCESS\",\"message\":\"training finished\"}" >> "$d/status.json"; echo "saved the model"; echo "a deprecation warning" >&2"#;
    let (s, a) = svc
        .create(&json!({"name": "detectnet-train", "image": "ubuntu:22.04", "command": training, "gpus": 2,
            "workspace": "login1", "action": "train"}))
        .await;
    assert_eq!(s, 201, "{a}");
    let a_id = a["id"].as_str().unwrap().to_string();
    let (s, b) = svc
        .create(&json!({"name": "long-finetune", "image": "ubuntu:22.04", "command": ["sleep", "900"], "num_gpu": 8,
            "workspace": "login2"}))
        .await;
    assert_eq!(s, 201, "{b}");
    let b_id = b["id"].as_str().unwrap().to_string();
    let (s, held) = svc
        .create(&json!({"name": "tomorrow-eval", "image": "ubuntu:22.04", "command": ["true"], "gpus": 1,
            "workspace": "login1", "sbatch_options": {"begin": "now+1day"}}))
        .await;
    assert_eq!(s, 201, "{held}");
    let held_id = held["id"].as_str().unwrap().to_string();
    let (s, bad) = svc
        .create(&json!({"name": "typo-in-spec", "image": "ubuntu:22.04", "command": "echo 'KeyError: train.num_epochs' >&2; exit 3",
            "gpus": 1, "workspace": "login2"}))
        .await;
    assert_eq!(s, 201, "{bad}");
    let bad_id = bad["id"].as_str().unwrap().to_string();

    // Generous: the sandbox is shared, and others' big jobs may hold the nodes for a while.
    let limit = Duration::from_secs(400);
    until(
        &c,
        "job A's row appears",
        limit,
        "return !!document.querySelector(`tr[data-job-id='${arguments[0]}']`);",
        vec![json!(a_id)],
    )
    .await;
    until(&c, "job A turns Running", limit, ROW_STATUS, vec![json!(a_id), json!("Running")]).await;
    until(&c, "job A shows its epochs", limit,
        "const r = document.querySelector(`tr[data-job-id='${arguments[0]}'] .progress`); return !!r && r.textContent.includes('epoch');",
        vec![json!(a_id)]).await;
    until(&c, "job B turns Running", limit, ROW_STATUS, vec![json!(b_id), json!("Running")]).await;
    until(&c, "the failing job turns Error", limit, ROW_STATUS, vec![json!(bad_id), json!("Error")]).await;
    until(&c, "the held job says why it waits", limit,
        "const r = document.querySelector(`tr[data-job-id='${arguments[0]}'] .reason`); return !!r && r.textContent.includes('start time is in the future');",
        vec![json!(held_id)]).await;
    screenshot(&c, "dashboard-jobs-running.png", shots.path()).await;
    until(&c, "job A turns Done", limit, ROW_STATUS, vec![json!(a_id), json!("Done")]).await;
    let marker = c.execute("return window.__noReload === 42;", vec![]).await.unwrap();
    assert_eq!(marker, Value::Bool(true), "the page was never reloaded");
    screenshot(&c, "dashboard-jobs.png", shots.path()).await;

    // Filters.
    c.find(Locator::Id("filter-status")).await.unwrap().select_by_value("Error").await.unwrap();
    until(&c, "only the Error job is listed", limit,
        "const rows = [...document.querySelectorAll('tr.job-row')]; return rows.length === 1 && rows[0].dataset.jobId === arguments[0];",
        vec![json!(bad_id)]).await;
    c.find(Locator::Id("filter-status")).await.unwrap().select_by_value("").await.unwrap();

    // Job A's page: its logs, attempts and events.
    c.find(Locator::Css(&format!("tr[data-job-id='{a_id}'] a"))).await.unwrap().click().await.unwrap();
    until(&c, "A's stdout on its page", limit,
        "const p = document.getElementById('log-stdout'); return !!p && p.textContent.includes('saved the model') && p.textContent.includes('epoch 6/6');",
        vec![]).await;
    until(&c, "A's stderr on its page", limit,
        "const p = document.getElementById('log-stderr'); return !!p && p.textContent.includes('a deprecation warning');", vec![]).await;
    until(&c, "A's attempts and events", limit,
        "const e = document.getElementById('event-list'); const a = document.querySelector('#attempts table'); return !!e && !!a && e.textContent.includes('submitted');",
        vec![]).await;
    let cancel_disabled = c.execute("return document.getElementById('cancel-job').disabled;", vec![]).await.unwrap();
    assert_eq!(cancel_disabled, Value::Bool(true), "a finished job cannot be cancelled");
    // Tall enough for the logs, attempts and events in one picture.
    c.set_window_size(1440, 1700).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    screenshot(&c, "dashboard-job.png", shots.path()).await;
    c.set_window_size(1440, 960).await.unwrap();

    // B's page: cancel, refuse at first, then confirm.
    c.goto(&format!("{}/#/jobs/{b_id}", svc.url)).await.unwrap();
    until(&c, "B's page", limit, "const b = document.getElementById('cancel-job'); return !!b && !b.disabled;", vec![])
        .await;
    // TensorBoard opens in a window of its own, through the service's one-time link.
    let main_window = c.window().await.unwrap();
    c.find(Locator::Id("open-tensorboard")).await.unwrap().click().await.unwrap();
    let tb_window = wait_for_async("TensorBoard's window", limit, Duration::from_millis(200), || {
        let (c, main_window) = (c.clone(), main_window.clone());
        async move {
            let windows = c.windows().await.unwrap();
            windows.into_iter().find(|w| *w != main_window).ok_or("one window".to_string())
        }
    })
    .await;
    c.switch_to_window(tb_window).await.unwrap();
    until(&c, "the TensorBoard page of B", limit,
        "return document.body && document.body.textContent.includes('TensorBoard stand-in') && document.body.textContent.includes(arguments[0]);",
        vec![json!(b_id)]).await;
    let tb_url = c.current_url().await.unwrap();
    assert!(tb_url.path().starts_with(&format!("/tensorboard/{b_id}/")), "a session under the job's path: {tb_url}");
    c.close_window().await.unwrap();
    c.switch_to_window(main_window).await.unwrap();

    c.find(Locator::Id("cancel-job")).await.unwrap().click().await.unwrap();
    until(&c, "the confirmation", limit, "return !document.getElementById('modal').hidden;", vec![]).await;
    c.find(Locator::Id("modal-no")).await.unwrap().click().await.unwrap();
    // The moment that proves it: the dialog has answered and the button is still enabled (the page
    // disables it before it sends a cancel).
    until(
        &c,
        "the dialog closed with the job still cancellable",
        limit,
        "const b = document.getElementById('cancel-job'); return document.getElementById('modal').hidden && !!b && !b.disabled;",
        vec![],
    )
    .await;
    let still = svc.json(&svc.api(&format!("/jobs/{b_id}"))).await;
    assert_eq!(still["status"], "Running", "keeping it running cancels nothing");
    c.find(Locator::Id("cancel-job")).await.unwrap().click().await.unwrap();
    until(&c, "the confirmation", limit, "return !document.getElementById('modal').hidden;", vec![]).await;
    c.find(Locator::Id("modal-yes")).await.unwrap().click().await.unwrap();
    until(
        &c,
        "B shows Canceled",
        limit,
        "const p = document.querySelector('.title .status'); return !!p && p.dataset.status === 'Canceled';",
        vec![],
    )
    .await;
    let gone = svc.json(&svc.api(&format!("/jobs/{b_id}"))).await;
    assert_eq!(gone["status"], "Canceled", "{gone}");

    // The cluster view.
    c.goto(&format!("{}/#/clusters", svc.url)).await.unwrap();
    until(
        &c,
        "partitions with free GPUs",
        limit,
        "return document.querySelectorAll('table.partitions td.gpus-free').length >= 2;",
        vec![],
    )
    .await;
    screenshot(&c, "dashboard-clusters.png", shots.path()).await;

    // Leave nothing queued.
    let r = svc.http.post(svc.api(&format!("/jobs/{held_id}:cancel"))).bearer_auth(&svc.token).send().await.unwrap();
    assert_eq!(r.status(), 200);
    c.close().await.unwrap();
}
