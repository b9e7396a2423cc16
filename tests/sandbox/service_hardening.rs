//! Issue 21 (items 4, 6, 7, 8) over real HTTP against the sandbox: a job that swaps its main.out for
//! a FIFO or a symlink to a file outside it gets every log route answered in time without that
//! file's content; a revoked token's stream ends; 50 parallel log requests are answered 200 or
//! 429/503 with Retry-After while the monitor goes on; local files others can write are refused.

use crate::common::Env;
use crate::service_support::{read_events, Service};
use serde_json::{json, Value};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn uniq() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..12].to_string()
}

/// Most time any log route may take on a hostile log (the remote read's own limit is 30 s).
const ANSWER_WITHIN: Duration = Duration::from_secs(25);

async fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The job's main.out on the sandbox's shared storage (the tests run on the same machine).
fn main_out(svc: &Service, job: &Value) -> PathBuf {
    let attempts_dir = PathBuf::from(&svc.env.vars["SLURM_BASE_RESULTS_DIR"]).join("slurm-logs");
    let slurm = job["backend_details"]["slurm_metadata"]["slurm_job_id"].as_str().unwrap();
    let found = std::fs::read_dir(&attempts_dir)
        .unwrap()
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().ends_with(&format!("-{slurm}")))
        .unwrap_or_else(|| panic!("no log directory of Slurm job {slurm} in {}", attempts_dir.display()));
    found.path().join("main.out")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_or_a_symlink_for_main_out_gets_every_log_route_answered_in_time_without_the_linked_file() {
    let svc = Service::start_with(&[("TAO_SLURM_MAX_QUERIES_PER_MINUTE", "120")]);
    let base = PathBuf::from(&svc.env.vars["SLURM_BASE_RESULTS_DIR"]);
    // A file the login user can read, outside every job: the symlink points at it.
    let secret = format!("linked-content-{}", uniq());
    let outside = base.join(format!("outside-{}", uniq()));
    std::fs::write(&outside, format!("{secret}\n")).unwrap();
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o644)).unwrap();
    // The job writes a line, swaps its main.out, then says so on stderr (which stays a plain file).
    let swap = |how: &str| {
        format!(
            "echo before-swap; f={base}/slurm-logs/$SLURM_JOB_NAME-$SLURM_JOB_ID/main.out; rm -f \"$f\"; {how}; \
             echo after-swap >&2; sleep 90",
            base = base.display()
        )
    };
    let cases = [("fifo", swap("mkfifo \"$f\"")), ("symlink", swap(&format!("ln -s {} \"$f\"", outside.display())))];
    let mut ids = Vec::new();
    for (kind, command) in &cases {
        let (status, job) = svc
            .create(&json!({"name": format!("hostile-{kind}"), "image": "ubuntu:22.04", "gpus": 0, "command": command}))
            .await;
        assert_eq!(status, 201, "{job}");
        ids.push((kind, job["id"].as_str().unwrap().to_string(), job));
    }
    for (kind, id, job) in &ids {
        let path = main_out(&svc, job);
        // The job says "after-swap" on stderr only after the swap: wait for both, or a read in
        // between finds the swapped main.out without the line that follows it (seen under load).
        let err = path.with_file_name("main.err");
        wait_until(&format!("the {kind} job swaps its main.out and says so"), Duration::from_secs(240), || {
            let swapped = std::fs::symlink_metadata(&path).is_ok_and(|m| {
                if **kind == "fifo" {
                    m.file_type().is_fifo()
                } else {
                    m.file_type().is_symlink()
                }
            });
            swapped && std::fs::read_to_string(&err).is_ok_and(|t| t.contains("after-swap"))
        })
        .await;
        // Every plain log route: in time, 200, never the linked file's content.
        for route in [
            ":logs",
            ":logs?stream=stdout&tail=5",
            ":logs?stream=stdout&offset=0",
            ":logs?stream=stdout&offset=3&limit=100",
        ] {
            let started = Instant::now();
            let r = svc.get(&svc.api(&format!("/jobs/{id}{route}"))).timeout(ANSWER_WITHIN).send().await;
            let r = r.unwrap_or_else(|e| panic!("{kind} {route}: no answer within {ANSWER_WITHIN:?}: {e}"));
            let status = r.status();
            let text = r.text().await.unwrap();
            assert_eq!(status, 200, "{kind} {route}: {text}");
            assert!(!text.contains(&secret), "{kind} {route} gave out the linked file: {text}");
            assert!(started.elapsed() < ANSWER_WITHIN);
            if route == ":logs" {
                assert!(text.contains("(not shown") && text.contains("after-swap"), "{kind}: {text}");
            }
        }
        // The stream's follower: it reads both files each poll; stderr's line shows it read past
        // main.out, and nothing of the linked file came with it.
        let r = svc.get(&svc.api(&format!("/jobs/{id}:stream"))).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let events = read_events(r, Duration::from_secs(60), |name, v| {
            name == "log" && v["stream"] == "stderr" && v["text"].as_str().is_some_and(|t| t.contains("after-swap"))
        })
        .await;
        let all = serde_json::to_string(&events).unwrap();
        assert!(all.contains("after-swap"), "{kind}: the follower did not get past main.out in time: {all}");
        assert!(!all.contains(&secret), "{kind}: the follower gave out the linked file");
        let r = svc.http.post(svc.api(&format!("/jobs/{id}:cancel"))).bearer_auth(&svc.token).send().await.unwrap();
        assert_eq!(r.status(), 200);
    }
    assert!(!svc.log().contains(&secret));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_token_ends_its_stream_and_is_refused_after() {
    // At debug level: no token material in any line even there.
    let svc = Service::start_with(&[("TAO_SLURM_LOG", "debug")]);
    let made = svc.env.json(&["token", "create", "--org", crate::service_support::ORG, "--name", "revoked", "--json"]);
    let (token, id) = (made["token"].as_str().unwrap().to_string(), made["id"].as_str().unwrap().to_string());
    assert!(!token.contains(&id), "the id is not part of the token");
    // Tokens are picked up within a second of their creation.
    let list = svc.api("/jobs");
    let start = Instant::now();
    while svc.http.get(&list).bearer_auth(&token).send().await.unwrap().status() != 200 {
        assert!(start.elapsed() < Duration::from_secs(10), "the new token was not accepted");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut stream = svc.http.get(svc.api("/jobs:stream")).bearer_auth(&token).send().await.unwrap();
    assert_eq!(stream.status(), 200);
    let first = tokio::time::timeout(Duration::from_secs(10), stream.chunk()).await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first.unwrap()).contains("snapshot"));
    svc.env.ok(&["token", "revoke", &id]);
    let revoked_at = Instant::now();
    // The stream ends (the body finishes) within a few seconds; keep-alives may come before.
    loop {
        match tokio::time::timeout(Duration::from_secs(10), stream.chunk()).await {
            Ok(Ok(Some(_))) => assert!(revoked_at.elapsed() < Duration::from_secs(10), "still streaming"),
            Ok(_) => break,
            Err(_) => panic!("the stream of a revoked token is still open after 10 s"),
        }
    }
    assert!(revoked_at.elapsed() < Duration::from_secs(6), "ended after {:?}", revoked_at.elapsed());
    let r = svc.http.get(&list).bearer_auth(&token).send().await.unwrap();
    assert_eq!(r.status(), 401);
    // The other token's requests go on; no token, id aside, is in the service's log.
    assert_eq!(svc.get(&list).send().await.unwrap().status(), 200);
    let log = svc.log();
    assert!(!log.contains(&token[4..]) && !log.contains(&svc.token[4..]), "token material in the log");
    assert!(log.contains(&id), "the revoked stream's end is logged by token id");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_parallel_log_requests_get_200_or_retry_after_and_the_monitor_goes_on() {
    // The default per-token limit (10 a second, bursts of 20), as an operator's service has it.
    let svc = Service::start_with_rate_limit(&[("TAO_SLURM_MAX_QUERIES_PER_MINUTE", "120")], "10");
    let (status, job) = svc
        .create(&json!({"name": "chatty", "image": "ubuntu:22.04", "gpus": 0, "workspace": "login1",
            "command": "for i in $(seq 1 400); do echo line $i; done; sleep 300"}))
        .await;
    assert_eq!(status, 201, "{job}");
    let id = job["id"].as_str().unwrap().to_string();
    let stats = || async {
        loop {
            let r = svc.get(&svc.api("/stats")).send().await.unwrap();
            if r.status() == 429 {
                let wait: u64 = r.headers()["retry-after"].to_str().unwrap().parse().unwrap();
                tokio::time::sleep(Duration::from_secs(wait)).await;
                continue;
            }
            assert_eq!(r.status(), 200);
            let v: Value = r.json().await.unwrap();
            return v["workspaces"].as_array().unwrap().iter().find(|w| w["workspace"] == "login1").unwrap().clone();
        }
    };
    let before = stats().await["refreshes"].as_u64().unwrap();
    let requests = (0..50).map(|i| {
        let url = if i % 2 == 0 {
            svc.api(&format!("/jobs/{id}:logs?tail=50"))
        } else {
            svc.api(&format!("/jobs/{id}:logs?stream=stdout&offset=0&limit=4096"))
        };
        let req = svc.get(&url).timeout(Duration::from_secs(60));
        async move {
            let r = req.send().await.unwrap();
            let retry_after = r.headers().get("retry-after").map(|v| v.to_str().unwrap().to_string());
            (r.status().as_u16(), retry_after, r.text().await.unwrap_or_default())
        }
    });
    let replies = futures_util::future::join_all(requests).await;
    let mut by_status = std::collections::BTreeMap::<u16, usize>::new();
    for (status, retry_after, body) in &replies {
        *by_status.entry(*status).or_default() += 1;
        match status {
            200 => {}
            429 | 503 => {
                let secs: u64 =
                    retry_after.as_deref().unwrap_or_else(|| panic!("{status} without Retry-After")).parse().unwrap();
                assert!((1..=60).contains(&secs), "{secs}");
            }
            other => panic!("a reply {other}: {body}"),
        }
    }
    assert!(by_status.get(&200).copied().unwrap_or(0) > 0, "{by_status:?}");
    eprintln!("50 parallel log requests: {by_status:?}");
    // The monitor's refreshes go on (its own client, outside the pool).
    let start = Instant::now();
    loop {
        let now = stats().await;
        if now["refreshes"].as_u64().unwrap() > before + 1 {
            assert_eq!(now["remote_pool_size"], 4);
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "no refresh since the burst: {now}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let r = svc.http.post(svc.api(&format!("/jobs/{id}:cancel"))).bearer_auth(&svc.token).send().await.unwrap();
    assert_eq!(r.status(), 200);
    // `:cluster?refresh=true` runs the checks at most once per interval: a second ask shares the view.
    let first = svc.json(&svc.api("/workspaces/login1:cluster?refresh=true")).await;
    let second = svc.json(&svc.api("/workspaces/login1:cluster?refresh=true")).await;
    assert_eq!(first["checked_at"], second["checked_at"], "the checks ran twice within the interval");
}

#[test]
fn local_files_others_can_write_are_refused_with_the_fix() {
    let mut env = Env::new();
    let clusters = env.dir.path().join("clusters.toml");
    std::fs::write(&clusters, "[login1]\nslurm_hostname = \"sandbox-login1\"\n").unwrap();
    env.vars.insert("TAO_SLURM_CLUSTERS_FILE".into(), clusters.display().to_string());
    std::fs::set_permissions(&clusters, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = env.run(&["--cluster", "login1", "list"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a clusters.toml others can write was used");
    assert!(err.contains(&format!("chmod 600 {}", clusters.display())), "{err}");
    std::fs::set_permissions(&clusters, std::fs::Permissions::from_mode(0o644)).unwrap();
    env.ok(&["--cluster", "login1", "list"]);
    // The env file, the same.
    let env_file = env.dir.path().join(".env");
    std::fs::write(&env_file, "SLURM_PARTITION=polar\n").unwrap();
    std::fs::set_permissions(&env_file, std::fs::Permissions::from_mode(0o620)).unwrap();
    env.vars.insert("TAO_ENV_FILE".into(), env_file.display().to_string());
    let out = env.run(&["list"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("chmod 600"), "{}", String::from_utf8_lossy(&out.stderr));
    env.vars.remove("TAO_ENV_FILE");
    // A secret_env_file: private, and a bad line named by its number, never its text.
    let secrets = env.dir.path().join("secrets.env");
    std::fs::write(&secrets, "GOOD=1\nthis line hides hunter2-value\n").unwrap();
    std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o644)).unwrap();
    let submit = |env: &Env| {
        let f = secrets.display().to_string();
        let out = env.run(&[
            "submit",
            "--image",
            "ubuntu:22.04",
            "--gpus",
            "0",
            "--secret-env-file",
            &f,
            "--secret-env",
            "GOOD",
            "--",
            "true",
        ]);
        assert!(!out.status.success(), "submitted");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = submit(&env);
    assert!(err.contains("chmod 600") && err.contains("secret_env_file"), "{err}");
    std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o600)).unwrap();
    let err = submit(&env);
    assert!(err.contains("line 2") && !err.contains("hunter2"), "{err}");
    assert_eq!(env.json(&["list", "--json"]), json!([]), "nothing was recorded");
}
