//! The dashboard's GPU chart with a history (issue 55, item 5): a 2-node job whose nodes' stand-in
//! readings move for a minute (one node's GPUs then stall at 0%) before its page is opened; the page
//! draws every node's samples from before it was opened, from the job's kept history (`gpu.history`
//! of the service's job). The screenshot goes to docs/dashboard-gpu-history.png when
//! TAO_SLURM_UPDATE_SCREENSHOTS=1 (else to a temporary directory).

use crate::gpu_health::Readings;
use crate::service_dashboard::{browser, screenshot, sign_in, until};
use crate::service_support::Service;
use serde_json::{json, Value};
use std::time::Duration;

/// A training whose rank 0 reports a falling loss every 2 s until it is cancelled (bash arithmetic:
/// the sandbox's images have no awk).
const TRAINING: &str = r#"[ "${NODE_RANK:-0}" = 0 ] || exec sleep 3600; d="$TAO_API_RESULTS_DIR/$TAO_JOB_ID"; mkdir -p "$d"; for e in $(seq 1 300); do m=$((14000 / (e + 9) + 120)); l=$(printf '%d.%03d' $((m / 1000)) $((m % 1000))); echo "{\"status\":\"RUNNING\",\"message\":\"Epoch $e/300\",\"epoch\":$e,\"max_epoch\":300,\"kpi\":{\"loss\":$l}}" >> "$d/status.json"; sleep 2; done"#;

/// Four GPUs' readings (`util, MiB, W` lines) around `util`.
fn four_gpus(util: u32) -> String {
    (0..4u32)
        .map(|g| {
            let u = if util == 0 { 0 } else { (util + g * 3).min(100) };
            format!("{u}, {}, {}\n", 30_000 + g * 512 + u * 40, 90 + u * 3)
        })
        .collect()
}

/// The service's log, shown when the test fails.
struct LogOnPanic<'a>(&'a Service);

impl Drop for LogOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = self.0.log();
            eprintln!("the service's log (its end):\n{}", &log[log.len().saturating_sub(20_000)..]);
        }
    }
}

/// The nodes of the job, once its samples name them.
fn sampled_nodes(job: &Value) -> Option<Vec<String>> {
    let nodes: Vec<String> =
        job["gpu"]["nodes"].as_array()?.iter().filter_map(|n| n["node"].as_str().map(String::from)).collect();
    (nodes.len() == 2).then_some(nodes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
// The readings' lock orders this test among the tests (threads), not tasks: held for its whole run.
#[allow(clippy::await_holding_lock)]
async fn the_job_page_draws_the_gpu_history_from_before_it_was_opened() {
    let mut readings = Readings::take();
    let svc = Service::start();
    let _log = LogOnPanic(&svc);
    let (s, a) = svc
        .create(&json!({"name": "detectnet-train-2x4", "image": "ubuntu:22.04", "command": TRAINING, "nodes": 2,
            "gpus": 4, "workspace": "login1", "action": "train", "gpu_watch": {"sample_secs": 2}}))
        .await;
    assert_eq!(s, 201, "{a}");
    let id = a["id"].as_str().unwrap().to_string();
    let job = svc.wait_job(&id, Duration::from_secs(400), |j| sampled_nodes(j).is_some()).await;
    let nodes = sampled_nodes(&job).unwrap();
    // A minute of moving readings: node A works in waves, node B too until it stalls at 0%.
    for i in 0..30u32 {
        let wave = |phase: f64, amp: f64, mid: f64| (mid + amp * ((i as f64) / 3.0 + phase).sin()).round() as u32;
        readings.set(&nodes[0], &four_gpus(wave(0.0, 18.0, 74.0)));
        readings.set(&nodes[1], &four_gpus(if i < 22 { wave(1.5, 22.0, 62.0) } else { 0 }));
        // Pacing the input, one reading per sample (no assertion follows a sleep).
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let opened = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    let kept = svc
        .wait_job(&id, Duration::from_secs(300), |j| {
            j["gpu"]["history"].as_array().is_some_and(|h| {
                h.len() == 2 && h.iter().all(|n| n["points"].as_array().is_some_and(|p| p.len() >= 25))
            })
        })
        .await;
    for h in kept["gpu"]["history"].as_array().unwrap() {
        let points = h["points"].as_array().unwrap();
        assert!(points.len() <= tao_slurm::gpu::HISTORY_SAMPLES, "the ring's bound: {h}");
        assert!(points.windows(2).all(|w| w[0]["at"].as_i64() < w[1]["at"].as_i64()), "{h}");
    }

    let profile = tempfile::tempdir().unwrap();
    let shots = tempfile::tempdir().unwrap();
    let (_driver, c) = browser(profile.path()).await;
    sign_in(&c, &svc).await;
    c.goto(&format!("{}/#/jobs/{id}", svc.url)).await.unwrap();
    let limit = Duration::from_secs(60);
    until(
        &c,
        "both nodes' history on the chart",
        limit,
        "return arguments[0].every(n => document.querySelectorAll(`#gpu-chart circle[data-node='${n}']`).length >= 25);",
        vec![json!(nodes)],
    )
    .await;
    let drawn = c
        .execute(
            "return [...document.querySelectorAll('#gpu-chart circle')].map(p => [p.dataset.node, Number(p.dataset.at), Number(p.dataset.value)]);",
            vec![],
        )
        .await
        .unwrap();
    let drawn: Vec<(String, i64, u64)> = serde_json::from_value(drawn).unwrap();
    let of = |n: &str| drawn.iter().filter(|p| p.0 == n).collect::<Vec<_>>();
    let (a, b) = (of(&nodes[0]), of(&nodes[1]));
    assert!(
        a.iter().chain(&b).filter(|p| p.1 < opened - 30).count() >= 20,
        "samples from before the page opened: {drawn:?}"
    );
    assert!(a.iter().any(|p| p.2 >= 85) && a.iter().any(|p| p.2 <= 62), "node A's waves: {a:?}");
    assert!(b.iter().any(|p| p.2 >= 70) && b.last().is_some_and(|p| p.2 == 0), "node B stalled at 0%: {b:?}");
    let source = c.execute("return document.getElementById('gpu-source').textContent;", vec![]).await.unwrap();
    assert!(source.as_str().is_some_and(|s| s.contains("from nvidia-smi")), "{source}");
    until(
        &c,
        "the loss on the KPI chart",
        limit,
        "return document.querySelectorAll('#kpi-chart circle').length >= 20;",
        vec![],
    )
    .await;
    c.execute("document.getElementById('gpus').scrollIntoView(); return true;", vec![]).await.unwrap();
    screenshot(&c, "dashboard-gpu-history.png", shots.path()).await;
    c.close().await.unwrap();
    let r = svc.http.post(svc.api(&format!("/jobs/{id}:cancel"))).bearer_auth(&svc.token).send().await.unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap_or_default());
}
