//! A job's own bytes as hostile input (issue 35): file names in its results that look like `tar`
//! options, progress lines without end, and output past what one call keeps.

use crate::common::Env;
use crate::service_support::Service;
use serde_json::json;
use std::io::Read;
use std::time::{Duration, Instant};

/// The members of a gzip'd tar and their contents.
fn members(gz: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(gz));
    let mut out = Vec::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let mut body = Vec::new();
        entry.read_to_end(&mut body).unwrap();
        out.push((name, body));
    }
    out
}

fn names(m: &[(String, Vec<u8>)]) -> Vec<&str> {
    m.iter().map(|(n, _)| n.as_str()).collect()
}

/// A job leaves an empty file named `--checkpoint-action=exec=touch <marker>;.pth` (a future mtime:
/// the newest checkpoint), one named `--files-from=list.pth` and list.pth naming /etc/passwd. The
/// newest-checkpoint download and the whole download archive those files as files: no marker
/// appears (looked for after each download has come back whole), nothing of /etc/passwd comes
/// back; and a results directory over the cap is refused with the cap named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_like_tar_options_run_nothing_read_nothing_outside_and_the_cap_holds() {
    const CAP: u64 = 3 << 20;
    let svc = Service::start_with(&[("TAO_SLURM_DOWNLOAD_MAX_BYTES", &CAP.to_string())]);
    let marker = format!("tao-marker-{}", uuid::Uuid::new_v4().simple());
    let exec_name = format!("--checkpoint-action=exec=touch {marker};.pth");
    let command = format!(
        r#"d="$TAO_API_RESULTS_DIR/$TAO_JOB_ID"; mkdir -p "$d" && cd "$d" && head -c 1048576 /dev/zero > big.bin && printf '/etc/passwd\n' > list.pth && : > '{exec_name}' && : > --files-from=list.pth && touch -d '+1 day' -- '{exec_name}' && echo '{{"status":"SUCCESS","message":"done"}}' >> status.json"#
    );
    let (s, a) = svc
        .create(&json!({"name": "hostile-names", "image": "ubuntu:22.04", "command": command, "gpus": 1,
            "workspace": "login1", "action": "train"}))
        .await;
    assert_eq!(s, 201, "{a}");
    let id = a["id"].as_str().unwrap().to_string();
    let done = svc
        .wait_job(&id, Duration::from_secs(300), |j| {
            ["Done", "Error", "Canceled"].contains(&j["status"].as_str().unwrap_or(""))
        })
        .await;
    assert_eq!(done["status"], "Done", "{done}");
    let results = done["backend_details"]["slurm_metadata"]["results_dir"].as_str().unwrap().to_string();
    let no_marker = || {
        let seen =
            svc.env.ssh(&format!("ls -a -- '{results}'; test -e '{results}/{marker}' && echo MARKER-FOUND; true"));
        assert!(seen.contains("big.bin"), "the results are there: {seen}");
        assert!(!seen.contains("MARKER-FOUND"), "tar ran the job's command on the login node: {seen}");
    };
    let svc = &svc;
    let download = |query: String| {
        let url = svc.api(&format!("/jobs/{id}:{query}"));
        async move {
            let r = svc.get(&url).send().await.unwrap();
            let status = r.status().as_u16();
            (status, r.bytes().await.unwrap().to_vec())
        }
    };
    let nothing_of_passwd = |m: &[(String, Vec<u8>)]| {
        for (name, body) in m {
            assert!(!String::from_utf8_lossy(body).contains("root:"), "{name} holds /etc/passwd");
            assert!(!name.contains("etc/passwd"), "{name}");
        }
    };

    // The newest checkpoint is the `exec` one, with a file of 1 MiB asked for beside it (tar's
    // checkpoints, where the action would run, come every 100 KiB).
    let (status, body) = download("download_selective_files?file_lists=big.bin&latest_model=True".into()).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    no_marker();
    let m = members(&body);
    assert_eq!(names(&m), ["./big.bin".to_string(), format!("./{exec_name}")], "names stay names");
    assert_eq!(m[0].1.len(), 1 << 20);

    // Now `--files-from=list.pth` is the newest.
    svc.env.ssh(&format!("touch -d '+2 days' -- '{results}/--files-from=list.pth'"));
    let (status, body) = download("download_selective_files?latest_model=True".into()).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let m = members(&body);
    nothing_of_passwd(&m);
    assert_eq!(names(&m), ["./--files-from=list.pth"]);
    assert!(m[0].1.is_empty());
    no_marker();

    // The whole results directory (and the logs).
    let (status, body) = download("download".into()).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let m = members(&body);
    let all = names(&m);
    for want in ["./big.bin", "./list.pth", "./--files-from=list.pth", &format!("./{exec_name}"), "logs/main.out"] {
        assert!(all.contains(&want), "{want} in {all:?}");
    }
    nothing_of_passwd(&m);
    no_marker();

    // Over the cap: refused, the cap named (du says so before any archive is made).
    svc.env.ssh(&format!("head -c 4194304 /dev/zero > '{results}/big2.bin'"));
    for query in ["download", "download_selective_files?file_lists=big2.bin"] {
        let (status, body) = download(query.to_string()).await;
        let text = String::from_utf8_lossy(&body);
        assert_eq!(status, 413, "{query}: {text}");
        assert!(text.contains(&format!("{CAP}-byte cap")), "{query}: {text}");
    }
    no_marker();
}

/// A job writes 10,000 unique progress lines while it is refreshed as fast as a client can: the
/// job's KPI history never holds more than `kpi::MAX_POINTS_PER_JOB` points, though more than that
/// many were read over the run, and the first and the newest are kept.
#[test]
fn ten_thousand_progress_lines_leave_at_most_the_cap_of_kpi_points() {
    let cap = tao_slurm::kpi::MAX_POINTS_PER_JOB;
    let env = Env::new();
    // 200 bursts of 50 lines, 0.2 s apart: each refresh reads the last 20 lines of status.json.
    let cmd = r#"d="$TAO_API_RESULTS_DIR/$TAO_JOB_ID"; mkdir -p "$d"; i=0; while [ $i -lt 10000 ]; do for k in $(seq 50); do echo "{\"status\":\"RUNNING\",\"cur_iter\":$i,\"kpi\":{\"loss\":$i}}"; i=$((i+1)); done >> "$d/status.json"; sleep 0.2; done"#;
    let (job, _) = env.submit(&["--image", "ubuntu:22.04", "--gpus", "0", "--shell", "--", cmd]);
    let client = tao_slurm::Client::new(env.settings()).unwrap();
    let started = Instant::now();
    let (mut most, mut seen) = (0usize, std::collections::BTreeSet::new());
    let mut refreshes = 0;
    loop {
        assert!(started.elapsed() < Duration::from_secs(400), "the job did not end");
        let views = client.refresh(&[]).unwrap();
        refreshes += 1;
        let history = client.kpi_history(&job).unwrap();
        most = most.max(history.len());
        seen.extend(history.iter().filter_map(|p| p.cur_iter.map(|i| i as i64)));
        if !views.iter().any(|v| v.job_id == job) {
            break; // ended: no longer active
        }
    }
    let history = client.kpi_history(&job).unwrap();
    let status = env.status(&job);
    assert_eq!(status["status"], "Complete", "{status}");
    assert!(most <= cap, "{most} points kept at one time, more than the {cap} documented");
    assert!(
        seen.len() > cap,
        "only {} unique points were read in {refreshes} refreshes: the cap was never reached, so this proves nothing",
        seen.len()
    );
    let iters: Vec<i64> = history.iter().filter_map(|p| p.cur_iter.map(|i| i as i64)).collect();
    assert_eq!(iters.last(), Some(&9_999), "the newest is kept");
    assert!(iters.windows(2).all(|w| w[0] < w[1]), "oldest first");
    eprintln!(
        "{refreshes} refreshes, {} unique points read, at most {most} kept, {} at the end",
        seen.len(),
        iters.len()
    );
}

/// A call whose output passes its cap (64 MiB by default, or the call's own) fails with an error
/// that names the cap; the transport keeps working.
#[test]
fn remote_output_over_the_cap_is_a_clear_error() {
    use tao_slurm_engine::remote::{self, Idempotency, RemoteError, MAX_OUTPUT_BYTES};
    let env = Env::isolated();
    let transport = remote::connect(&env.settings()).unwrap();
    let deadline = Duration::from_secs(120);
    for (script, cap) in [
        (format!("head -c {} /dev/zero", MAX_OUTPUT_BYTES + (1 << 20)), None),
        ("head -c 3000000 /dev/zero >&2".to_string(), Some(1u64 << 20)),
    ] {
        let err = match cap {
            None => transport.run_script_within(&script, Idempotency::Idempotent, deadline),
            Some(c) => transport.run_script_capped(&script, Idempotency::Idempotent, deadline, c),
        }
        .unwrap_err();
        let want = cap.unwrap_or(MAX_OUTPUT_BYTES);
        assert!(matches!(err, RemoteError::OutputTooLarge { cap, .. } if cap == want), "{err:?}");
        let text = err.to_string();
        assert!(text.contains(&format!("more than {want} bytes")) && text.contains("sandbox-login1"), "{text}");
        let err = tao_slurm::Error::from(err);
        assert_eq!(err.kind(), tao_slurm::error::ErrorKind::OutcomeUnknown);
    }
    let ok = transport.run_script("echo still-here", Idempotency::Idempotent).unwrap();
    assert_eq!(ok.stdout, "still-here\n");
}

/// A capture of a command in a running job (MCP's `exec`, Python's `exec_job`) cuts each stream as it
/// is written on the login node: the first `max_bytes` come back with the full sizes and the status.
#[test]
fn an_exec_capture_is_cut_as_it_is_written_with_its_full_sizes() {
    let env = Env::new();
    let (job, _) = env.submit(&["--image", "ubuntu:22.04", "--gpus", "0", "--shell", "--", "sleep 300"]);
    env.wait_job(&job, "running", Duration::from_secs(300), |v| v["status"] == "Running" && v["node_list"].is_string());
    let client = tao_slurm::Client::new(env.settings()).unwrap();
    let at = tao_slurm::client::Where::new(None, None);
    let command: Vec<String> =
        ["sh", "-c", "head -c 5000000 /dev/zero; head -c 7000 /dev/zero >&2; exit 4"].map(String::from).to_vec();
    // At once: Pyxis makes the job's container a few seconds after Slurm says RUNNING, and the
    // capture waits for it rather than failing ("a container with name ... does not exist").
    let out = client.exec_capture(&job, &at, &command, 60, 100).unwrap();
    assert_eq!((out.exit_code, out.stdout.len(), out.stderr.len()), (4, 100, 100), "{out:?}");
    // srun adds its own line about the exit code to stderr.
    assert_eq!((out.stdout_bytes, out.truncated), (5_000_000, true));
    assert!((7000..8000).contains(&out.stderr_bytes), "{out:?}");
    env.ok(&["cancel", &job]);
}
