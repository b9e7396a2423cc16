//! The group commit of submits (issue 38) on the real cluster: library clients on threads of one
//! process, each with its own client (as the Python package's and the service's pools give them),
//! share one batch of online checks and one batch of submissions.

use crate::common::wait::wait_for_async;
use crate::common::Env;
use crate::service_support::Service;
use serde_json::json;
use std::sync::{Arc, Barrier};
use std::time::Duration;
use tao_slurm::spec::SecretValues;
use tao_slurm::{Client, JobSpec};

fn held(name: &str) -> JobSpec {
    JobSpec {
        name: Some(name.into()),
        image: "ubuntu:22.04".into(),
        command: vec!["true".into()],
        gpus: Some(0),
        // Pending for a day: the cluster does no work for them.
        sbatch_options: [("begin".to_string(), "now+1day".to_string())].into(),
        ..Default::default()
    }
}

/// Each thread's result and what its client cost on the wire.
type Run = (tao_slurm::Result<tao_slurm::client::Submitted>, u64);

fn submit_together(env: &Env, specs: Vec<JobSpec>) -> Vec<Run> {
    let settings = env.settings();
    let barrier = Arc::new(Barrier::new(specs.len()));
    let threads: Vec<_> = specs
        .into_iter()
        .map(|spec| {
            let (settings, barrier) = (settings.clone(), Arc::clone(&barrier));
            std::thread::spawn(move || {
                let client = Client::new(settings).unwrap();
                barrier.wait();
                let result = client.create_job(&spec, &SecretValues::default());
                (result, client.transport_stats().round_trips)
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

fn batched_env(batch: usize) -> Env {
    // Its own control directory: no other test's checks are known to it, so its first submits check.
    let mut env = Env::isolated();
    // The image as the registry gives it: no conversion round trip of its own.
    env.vars.insert("TAO_SLURM_USE_SQSH".into(), "false".into());
    env.vars.insert("TAO_SLURM_SUBMIT_BATCH".into(), batch.to_string());
    // Long enough for every thread to join the first batch; a full batch goes at once.
    env.vars.insert("TAO_SLURM_SUBMIT_BATCH_WAIT_MS".into(), "3000".into());
    env
}

/// Six threads submit at once: one round trip checks all six, one submits the five that passed; the
/// one whose input is missing is refused by the checks and the one sbatch refuses is refused by
/// sbatch, each alone with its own error; each other job is its own Slurm job, recorded once. Six
/// more, with the checks now known, go in one round trip.
#[test]
fn concurrent_library_submits_go_in_one_batch_and_bad_members_are_refused_alone() {
    let env = batched_env(6);
    let mut specs: Vec<JobSpec> = (0..6).map(|i| held(&format!("gc-{i}"))).collect();
    specs[2].inputs = [("custom.val.path".to_string(), "slurm:///tmp/tao-slurm-no-such-input".to_string())].into();
    specs[4].constraint = Some("nosuchfeature".into());
    let runs = submit_together(&env, specs);
    let round_trips: u64 = runs.iter().map(|(_, n)| n).sum();
    let missing = runs[2].0.as_ref().unwrap_err().to_string();
    assert!(missing.contains("/tmp/tao-slurm-no-such-input") && missing.contains("nothing was staged"), "{missing}");
    let refused = runs[4].0.as_ref().unwrap_err().to_string();
    assert!(refused.contains("sbatch"), "{refused}");
    let mut ids = Vec::new();
    for (i, (r, _)) in runs.iter().enumerate().filter(|(i, _)| ![2, 4].contains(i)) {
        let s = r.as_ref().unwrap_or_else(|e| panic!("member {i}: {e}"));
        assert_eq!(
            env.slurm_jobs_counted(&format!("tao-job-{}", s.job_id), 1),
            vec![s.slurm_job_id.clone()],
            "member {i}"
        );
        ids.push(s.slurm_job_id.clone());
    }
    ids.dedup();
    assert_eq!(ids.len(), 4, "each its own Slurm job: {ids:?}");
    assert_eq!(round_trips, 2, "one round trip of checks and one of submissions for all six");
    // With the checks known, the next six are one round trip: each submission checks its own
    // inputs, so the one with a missing input is refused there, alone.
    let mut again: Vec<JobSpec> = (0..6).map(|i| held(&format!("gc-warm-{i}"))).collect();
    again[3].inputs = [("custom.val.path".to_string(), "slurm:///tmp/tao-slurm-no-such-input".to_string())].into();
    let warm = submit_together(&env, again);
    assert_eq!(warm.iter().map(|(_, n)| n).sum::<u64>(), 1, "one round trip for the six");
    let missing = warm[3].0.as_ref().unwrap_err().to_string();
    assert!(missing.contains("/tmp/tao-slurm-no-such-input") && missing.contains("nothing was staged"), "{missing}");
    let warm_ids: Vec<String> = warm
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3)
        .map(|(i, (r, _))| r.as_ref().unwrap_or_else(|e| panic!("warm member {i}: {e}")).job_id.clone())
        .collect();
    assert_eq!(warm_ids.len(), 5);
    let client = Client::new(env.settings()).unwrap();
    let jobs = client.list_jobs().unwrap();
    assert_eq!(jobs.len(), 10, "the members refused by the checks were never recorded; the rest were, once each");
    let errored: Vec<_> = jobs.iter().filter(|j| j.status == tao_slurm::PlatformStatus::Error).collect();
    assert_eq!(errored.len(), 1, "only the member sbatch refused ends Error");
    let submitted: Vec<String> = jobs.iter().filter(|j| j.slurm_job_id.is_some()).map(|j| j.job_id.clone()).collect();
    assert_eq!(submitted.len(), 9);
    client.cancel_jobs(&submitted).unwrap();
}

/// The service's creates that arrive together go in batches; a batch's round trip is cut off after
/// its other members were submitted (its second pauses on the host past the deadline): every create
/// is answered (with its job, or with an unknown outcome), each job is then found by its name or
/// submitted by the service's monitor, and none is submitted twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_service_batch_cut_off_midway_loses_no_job_and_doubles_none() {
    let svc = Service::start_with(&[
        ("TAO_SLURM_USE_SQSH", "false"),
        ("TAO_SLURM_SUBMIT_BATCH", "4"),
        ("TAO_SLURM_SUBMIT_BATCH_WAIT_MS", "3000"),
        ("TAO_SLURM_FAILPOINT", "batch-second-before-sbatch"),
        ("TAO_SLURM_REMOTE_TIMEOUT", "5"),
    ]);
    let svc = Arc::new(svc);
    let creates: Vec<_> = (0..4)
        .map(|i| {
            let svc = Arc::clone(&svc);
            tokio::spawn(async move {
                svc.create(&json!({"name": format!("gc-cut-{i}"), "image": "ubuntu:22.04", "command": "true",
                    "workspace": "login1", "sbatch_options": {"begin": "now+1day"}}))
                    .await
            })
        })
        .collect();
    let mut answers = Vec::new();
    for c in creates {
        answers.push(c.await.unwrap());
    }
    // A create whose batch ended before the cut has its job (201); the batch that was cut off had
    // its other members submitted (they run at once), but its answer never came: no create of it
    // knows how it went (502, an unknown outcome, not a refusal).
    for (status, body) in &answers {
        assert!(*status == 201 || *status == 502, "{status}: {body}");
    }
    assert!(answers.iter().any(|(s, _)| *s == 502), "the batch with the pause was cut off: {answers:?}");
    // The cut batch's private directory on the host: there while its member pauses, and removed
    // once its script ends, though nobody reads its output any more.
    let batch_dirs: Vec<String> =
        svc.env.ssh("ls -d /tmp/tao-batch-* 2>/dev/null || true\n").lines().map(String::from).collect();
    assert!(!batch_dirs.is_empty(), "the cut batch's directory is there while its member pauses");
    let still_there = format!("for d in {}; do [ ! -e \"$d\" ] || echo \"$d\"; done\n", batch_dirs.join(" "));
    // Every job the org has (four: none lost) gets exactly one Slurm job.
    let jobs = wait_for_async(
        "every job submitted (found by name or by the monitor)",
        Duration::from_secs(300),
        Duration::from_secs(2),
        || async {
            let list = svc.json(&svc.api("/jobs?size=100")).await;
            let jobs = list["jobs"].as_array().cloned().unwrap_or_default();
            (jobs.len() == 4 && jobs.iter().all(|j| j["backend_details"]["slurm_metadata"]["slurm_job_id"].is_string()))
                .then_some(jobs)
        },
    )
    .await;
    for j in &jobs {
        let id = j["id"].as_str().unwrap();
        assert_eq!(svc.env.slurm_jobs_counted(&format!("tao-job-{id}"), 1).len(), 1, "exactly one Slurm job for {id}");
        svc.http.post(svc.api(&format!("/jobs/{id}:cancel"))).bearer_auth(&svc.token).send().await.unwrap();
    }
    wait_for_async("the cut batch's directory removed", Duration::from_secs(120), Duration::from_secs(2), || {
        let left = svc.env.ssh(&still_there);
        async move { left.trim().is_empty().then_some(()) }
    })
    .await;
}

/// Once a submit's checks ran, the next submits of the process take one round trip each: the
/// submission checks the job's own inputs (a missing one is refused, nothing staged or recorded)
/// and its image's squashfs file (gone from the cache: checked again, converted, submitted).
#[test]
fn a_warm_submit_is_one_round_trip_and_checks_its_own_inputs_and_image() {
    let mut env = Env::isolated();
    let cache_dir = format!("{}/sqsh-warm-{}", env.vars["SLURM_BASE_RESULTS_DIR"], std::process::id());
    env.vars.insert("TAO_SLURM_SQSH_CACHE_DIR".into(), cache_dir.clone());
    let client = Client::new(env.settings()).unwrap();
    let none = SecretValues::default();
    let trips = || client.transport_stats().round_trips;
    let first = client.create_job(&held("warm-0"), &none).unwrap();
    let cold = trips();
    assert!(cold >= 2, "the first submit checks first (and converts the image): {cold}");
    let second = client.create_job(&held("warm-1"), &none).unwrap();
    assert_eq!(trips() - cold, 1, "a warm submit is one round trip");
    assert_ne!(first.slurm_job_id, second.slurm_job_id);

    let mut missing = held("warm-missing");
    missing.inputs = [("custom.val.path".to_string(), "slurm:///tmp/tao-slurm-warm-no-such".to_string())].into();
    let before = trips();
    let e = client.create_job(&missing, &none).unwrap_err().to_string();
    assert!(e.contains("/tmp/tao-slurm-warm-no-such") && e.contains("nothing was staged"), "{e}");
    assert_eq!(trips() - before, 1, "refused by the submission's own checks");
    assert_eq!(client.list_jobs().unwrap().len(), 2, "the refused job is not recorded");

    // The image's file leaves the cache: the warm submission notices, the checks run again and
    // convert it, and the job is submitted once.
    env.ssh(&format!("rm -f {cache_dir}/*.sqsh\n"));
    let third = client.create_job(&held("warm-2"), &none).unwrap();
    assert_eq!(env.slurm_jobs_counted(&format!("tao-job-{}", third.job_id), 1), vec![third.slurm_job_id.clone()]);
    let views = client.list_jobs().unwrap();
    assert_eq!(views.len(), 3);
    let image = views.iter().find(|v| v.job_id == third.job_id).unwrap().image.clone();
    assert!(image.starts_with(&cache_dir) && image.ends_with(".sqsh"), "{image}");
    let ls = env.ssh(&format!("ls {cache_dir}\n"));
    assert!(ls.contains(".sqsh"), "converted again: {ls}");
    client.cancel_jobs(&views.iter().map(|v| v.job_id.clone()).collect::<Vec<_>>()).unwrap();
    env.ssh(&format!("rm -rf {cache_dir}\n"));
}

/// A create that prefers `respond-async` (RFC 7240) is answered 202 once its job is recorded, and
/// the group commit submits it after: four that arrive together go in one round trip, each refused
/// alone, and a refusal met after the answer ends that job Error with its own message (the job is
/// kept, where a create that waits is refused with no job left). The others are each their own
/// Slurm job, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn creates_answered_once_recorded_are_submitted_together_and_refused_alone() {
    let svc = Service::start_with(&[
        ("TAO_SLURM_USE_SQSH", "false"),
        ("TAO_SLURM_SUBMIT_BATCH", "4"),
        ("TAO_SLURM_SUBMIT_BATCH_WAIT_MS", "3000"),
    ]);
    let body = |name: &str| {
        json!({"name": name, "image": "ubuntu:22.04", "command": "true", "workspace": "login1",
            "sbatch_options": {"begin": "now+1day"}})
    };
    // A create that waits (201, with its Slurm job): the checks are known after it, so the next
    // submissions check their own inputs, in their one round trip.
    let (status, first) = svc.create(&body("gc-async-0")).await;
    assert_eq!(status, 201, "{first}");
    assert!(first["backend_details"]["slurm_metadata"]["slurm_job_id"].is_string(), "{first}");
    let round_trips = |s: serde_json::Value| {
        let all = s["workspaces"].as_array().cloned().unwrap_or_default();
        let w = all.iter().find(|w| w["workspace"] == "login1").unwrap();
        // The requests' round trips: the monitor's refreshes are counted in both.
        w["round_trips"].as_u64().unwrap() - w["refresh_round_trips"].as_u64().unwrap()
    };
    let before = round_trips(svc.json(&svc.api("/stats")).await);

    let mut bodies: Vec<serde_json::Value> = (1..5).map(|i| body(&format!("gc-async-{i}"))).collect();
    bodies[1]["inputs"] = json!({"custom.val.path": "slurm:///tmp/tao-slurm-async-no-such-input"});
    bodies[2]["constraint"] = json!("nosuchfeature");
    let svc = Arc::new(svc);
    let creates: Vec<_> = bodies
        .into_iter()
        .map(|b| {
            let svc = Arc::clone(&svc);
            tokio::spawn(async move {
                let r = svc
                    .http
                    .post(svc.api("/jobs"))
                    .bearer_auth(&svc.token)
                    .header("prefer", "respond-async")
                    .json(&b)
                    .send()
                    .await
                    .unwrap();
                let (status, headers) = (r.status().as_u16(), r.headers().clone());
                (status, headers, r.json::<serde_json::Value>().await.unwrap())
            })
        })
        .collect();
    let mut ids = Vec::new();
    for c in creates {
        let (status, headers, job) = c.await.unwrap();
        assert_eq!(status, 202, "answered once recorded: {job}");
        assert_eq!(headers["preference-applied"], "respond-async");
        let id = job["id"].as_str().unwrap().to_string();
        assert!(headers["location"].to_str().unwrap().ends_with(&format!("/jobs/{id}")), "{headers:?}");
        ids.push(id);
    }
    let settled = |want: &'static str| move |j: &serde_json::Value| j["platform_status"] == want;
    let missing = svc.wait_job(&ids[1], Duration::from_secs(300), settled("Error")).await;
    let message = missing["message"].as_str().unwrap_or_default();
    assert!(message.contains("/tmp/tao-slurm-async-no-such-input"), "kept, Error, its own message: {missing}");
    let refused = svc.wait_job(&ids[2], Duration::from_secs(300), settled("Error")).await;
    assert!(refused["message"].as_str().unwrap_or_default().contains("sbatch"), "{refused}");
    for i in [0, 3] {
        let job = svc
            .wait_job(&ids[i], Duration::from_secs(300), |j| {
                j["backend_details"]["slurm_metadata"]["slurm_job_id"].is_string()
            })
            .await;
        let slurm = job["backend_details"]["slurm_metadata"]["slurm_job_id"].as_str().unwrap().to_string();
        assert_eq!(svc.env.slurm_jobs_counted(&format!("tao-job-{}", ids[i]), 1), vec![slurm], "exactly one Slurm job");
    }
    for i in [1, 2] {
        assert!(svc.env.slurm_jobs_named(&format!("tao-job-{}", ids[i])).is_empty(), "refused: no Slurm job");
    }
    // A client's round trips are counted when it goes back to the pool, once its submit returned.
    let after =
        wait_for_async("the batch's round trip counted", Duration::from_secs(30), Duration::from_millis(200), || {
            let svc = Arc::clone(&svc);
            async move { Some(round_trips(svc.json(&svc.api("/stats")).await)).filter(|n| *n > before) }
        })
        .await;
    assert_eq!(after - before, 1, "the four went to the cluster in one round trip");
    for id in ids.iter().chain([first["id"].as_str().unwrap().to_string()].iter()) {
        svc.http.post(svc.api(&format!("/jobs/{id}:cancel"))).bearer_auth(&svc.token).send().await.unwrap();
    }
}
