//! The dashboard's live KPI chart in a real browser (issue 26): a job whose stand-in writes six epochs
//! of loss to status.json, one every few seconds; its page, opened while it runs, draws the chart
//! point by point without a reload, and its GPU utilisation beside it, a line per node (the sandbox's
//! stand-in nvidia-smi: 75%). The screenshot goes to docs/dashboard-kpis.png when
//! TAO_SLURM_UPDATE_SCREENSHOTS=1 (else to a temporary directory).

use crate::common::wait::wait_for_async;
use crate::service_dashboard::{browser, screenshot, sign_in, until};
use crate::service_support::Service;
use serde_json::{json, Value};
use std::time::Duration;

/// Six epochs, 6 s apart (the service's monitor refreshes every 2 s while a job is young and changing).
const SIX_EPOCHS: &str = r#"d="$TAO_API_RESULTS_DIR/$TAO_JOB_ID"; mkdir -p "$d"; for e in 1 2 3 4 5 6; do echo "{\"status\":\"RUNNING\",\"message\":\"Epoch $e/6\",\"epoch\":$e,\"max_epoch\":6,\"eta\":\"$((6*(6-e)))s\",\"kpi\":{\"loss\":0.$((9-e)),\"accuracy\":0.$((3+e))}}" >> "$d/status.json"; sleep 6; done; echo "{\"status\":\"SUCCESS\",\"message\":\"training finished\"}" >> "$d/status.json""#;

const LOSS_POINTS: &str = "return document.querySelectorAll('#kpi-chart circle[data-kpi=\"loss\"]').length;";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
// The readings' lock orders this test among the tests (threads), not tasks: held for its whole run.
#[allow(clippy::await_holding_lock)]
async fn the_job_page_draws_its_kpis_point_by_point_without_a_reload() {
    // No other test sets the nodes' GPU readings meanwhile (they read 75% here).
    let _readings = crate::common::gpu_readings_lock();
    let svc = Service::start();
    let profile = tempfile::tempdir().unwrap();
    let shots = tempfile::tempdir().unwrap();
    let (_driver, c) = browser(profile.path()).await;
    sign_in(&c, &svc).await;

    let (s, a) = svc
        .create(&json!({"name": "classifier-train", "image": "ubuntu:22.04", "command": SIX_EPOCHS, "gpus": 1,
            "workspace": "login1", "action": "train", "gpu_watch": {"sample_secs": 2}}))
        .await;
    assert_eq!(s, 201, "{a}");
    let id = a["id"].as_str().unwrap().to_string();
    let limit = Duration::from_secs(400);
    // The list's progress bar first, then the job's page, while it runs; a marker a reload would wipe.
    until(
        &c,
        "the job's progress bar in the list",
        limit,
        "const b = document.querySelector(`tr[data-job-id='${arguments[0]}'] .progress .bar span`); return !!b;",
        vec![json!(id)],
    )
    .await;
    c.goto(&format!("{}/#/jobs/{id}", svc.url)).await.unwrap();
    until(&c, "the job's page", limit, "return !!document.getElementById('kpis');", vec![]).await;
    c.execute("window.__noReload = 7; return true;", vec![]).await.unwrap();

    // Every count of the loss's points the page shows, from the first to all six.
    let counts = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u64>::new()));
    wait_for_async("six loss points on the chart", limit, Duration::from_millis(200), || {
        let (c, counts) = (c.clone(), counts.clone());
        async move {
            let n = c.execute(LOSS_POINTS, vec![]).await.unwrap().as_u64().unwrap_or(0);
            let mut seen = counts.lock().unwrap();
            if seen.last() != Some(&n) {
                seen.push(n);
            }
            if n == 6 {
                Ok(())
            } else {
                Err(format!("{n} points so far"))
            }
        }
    })
    .await;
    let seen = counts.lock().unwrap().clone();
    let drawn: Vec<u64> = seen.iter().copied().filter(|n| *n > 0).collect();
    assert!(drawn.windows(2).all(|w| w[0] < w[1]), "the chart only grows: {seen:?}");
    assert!(drawn.len() >= 4, "the chart grew point by point, not at once: {seen:?}");
    let marker = c.execute("return window.__noReload === 7;", vec![]).await.unwrap();
    assert_eq!(marker, Value::Bool(true), "the page was never reloaded");

    // The points are the job's losses, epoch by epoch, and the accuracy has its own line.
    let values = c
        .execute(
            "return [...document.querySelectorAll('#kpi-chart circle[data-kpi=\"loss\"]')].map(p => [Number(p.dataset.x), Number(p.dataset.value)]);",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(values, json!([[1, 0.8], [2, 0.7], [3, 0.6], [4, 0.5], [5, 0.4], [6, 0.3]]));
    let lines = c.execute("return document.querySelectorAll('#kpi-chart polyline').length;", vec![]).await.unwrap();
    assert_eq!(lines, json!(2), "loss and accuracy");
    let api = svc.json(&svc.api(&format!("/jobs/{id}:kpis"))).await;
    assert_eq!(api["points"].as_array().map(Vec::len), Some(6), "{api}");
    assert_eq!(api["points"][5]["max_epoch"], json!(6.0), "{api}");
    // The GPU chart beside it: the samples seen while the page was open, 75% each.
    until(
        &c,
        "two GPU samples on the chart",
        limit,
        "return document.querySelectorAll('#gpu-chart circle').length >= 2;",
        vec![],
    )
    .await;
    let gpu = c
        .execute("return [...document.querySelectorAll('#gpu-chart circle')].map(p => [p.dataset.node, Number(p.dataset.value)]);", vec![])
        .await
        .unwrap();
    assert!(
        gpu.as_array()
            .unwrap()
            .iter()
            .all(|p| p[1] == json!(75) && p[0].as_str().is_some_and(|n| n.starts_with("node"))),
        "{gpu}"
    );
    screenshot(&c, "dashboard-kpis.png", shots.path()).await;
    c.close().await.unwrap();
}
