//! Progress in the CLI (issue 26): `watch` prints the newest KPIs of a job in one line as they come,
//! and `list` shows a progress bar for a running job that reports its epochs.

use crate::common::wait::wait_for;
use crate::common::Env;
use std::time::Duration;

/// Three epochs of loss, 4 s apart.
const THREE_EPOCHS: &str = r#"d="$TAO_API_RESULTS_DIR/$TAO_JOB_ID"; mkdir -p "$d"; for e in 1 2 3; do echo "{\"status\":\"RUNNING\",\"message\":\"Epoch $e/3\",\"epoch\":$e,\"max_epoch\":3,\"kpi\":{\"loss\":0.$((9-e))}}" >> "$d/status.json"; sleep 4; done"#;

#[test]
fn watch_prints_the_newest_kpis_and_list_shows_a_bar() {
    let env = Env::new();
    let (job, _) = env.submit(&["--image", "ubuntu:22.04", "--gpus", "0", "--shell", "--", THREE_EPOCHS]);
    let watch = {
        let mut cmd = env.command(&["watch", &job, "--interval", "1"]);
        std::thread::spawn(move || cmd.output().unwrap())
    };
    let list = wait_for("a progress bar in the list", Duration::from_secs(300), Duration::from_millis(500), || {
        let out = env.ok(&["list"]);
        let row = out.lines().find(|l| l.contains(&job[..8])).unwrap_or_default().to_string();
        if row.contains("#") && row.contains("/3") {
            Ok(row)
        } else {
            Err(out)
        }
    });
    assert!(list.contains("Running") && list.contains('['), "{list}");
    let out = watch.join().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let kpi_lines: Vec<&str> = stdout.lines().filter(|l| l.trim_start().starts_with("epoch ")).collect();
    assert!(kpi_lines.iter().any(|l| l.trim() == "epoch 3/3 · loss 0.6"), "{stdout}");
    assert!(kpi_lines.len() >= 2, "the KPI line follows the epochs: {stdout}");
}
