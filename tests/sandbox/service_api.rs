//! `tao-slurm serve` over real HTTP against the sandbox cluster: two clusters as two workspaces, jobs
//! created, listed, followed (event streams), read (logs, events, attempts), cancelled and deleted;
//! the OpenAPI document validated by openapi-spec-validator and every route in it exercised; bad
//! bodies and bad tokens refused with the right status before anything reaches a cluster.

use crate::common::wait::{wait_for_async, when};
use crate::service_support::{read_events, Service, ORG};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::Duration;

/// A secret the service's environment holds and a job asks for by name.
const SECRET: &str = "s3cr3t-v4lue-never-shown";

/// A job that logs, writes status.json progress for three epochs and succeeds.
const TRAINING: &str = r#"[ -n "$SERVICE_TEST_SECRET" ] && echo "the secret arrived"; echo "training starts"; d="$TAO_API_RESULTS_DIR/$TAO_JOB_ID"; mkdir -p "$d"; for e in 1 2 3 4 5; do echo "epoch $e/5"; echo "{\"status\":\"RUNNING\",\"message\":\"Epoch $e/5\",\"epoch\":$e,\"max_epoch\":5,\"kpi\":{\"loss\":0.$e}}" >> "$d/status.json"; sleep 2; done; echo "{\"status\":\"SUCCESS\",\"message\":\"finished\"}" >> "$d/status.json"; echo "a warning on stderr" >&2; echo "training done""#;

/// Validate the document with openapi-spec-validator (the repository's Python environment).
fn validate_openapi(doc: &str) {
    let out = std::process::Command::new("bash").arg("dev/python-env.sh").output().unwrap();
    assert!(out.status.success(), "dev/python-env.sh: {}", String::from_utf8_lossy(&out.stderr));
    let python = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("openapi.json");
    std::fs::write(&path, doc).unwrap();
    let out = std::process::Command::new(python)
        .args([
            "-c",
            "import json,sys\nfrom openapi_spec_validator import validate\nfrom openapi_spec_validator.validation import OpenAPIV31SpecValidator\nvalidate(json.load(open(sys.argv[1])), cls=OpenAPIV31SpecValidator)\nprint('valid')",
        ])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("valid"),
        "the OpenAPI document is not valid OpenAPI 3.1:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The routes TAO's own client calls beyond jobs and workspaces, on a finished job (tests/tao_client
/// drives them with the real client): login and health without a token, GPU types, files, downloads.
async fn tao_routes(svc: &Service, job: &str, hit: &mut impl FnMut(&str, &str)) {
    for probe in ["liveness", "readiness"] {
        let r = svc.http.get(format!("{}/api/v2/health/{probe}", svc.url)).send().await.unwrap();
        assert_eq!((r.status().as_u16(), r.json::<Value>().await.unwrap()), (200, json!("OK")), "{probe}");
        hit("get", &format!("/api/v2/health/{probe}"));
    }
    let login = |key: String, org: &str| {
        svc.http
            .post(format!("{}/api/v2/login", svc.url))
            .body(json!({"ngc_key": key, "ngc_org_name": org}).to_string())
            .send()
    };
    let r = login(svc.token.clone(), ORG).await.unwrap();
    assert_eq!(r.status(), 200);
    let creds: Value = r.json().await.unwrap();
    assert_eq!(creds["token"], svc.token.as_str(), "{creds}");
    hit("post", "/api/v2/login");
    for (key, org) in [("tsk_nope".to_string(), ORG), (svc.token.clone(), "team-z")] {
        let r = login(key, org).await.unwrap();
        assert_eq!(r.status(), 401);
        assert_eq!(r.json::<Value>().await.unwrap()["error_code"], 401);
    }
    let gpus = svc.json(&svc.api("/jobs:gpu_types")).await;
    hit("get", "/api/v2/orgs/{org}/jobs:gpu_types");
    let polar: Vec<&Value> = gpus.as_array().unwrap().iter().filter(|g| g["node"] == "polar").collect();
    assert_eq!(polar.len(), 3, "one per workspace: {gpus}");
    assert!(polar.iter().all(|g| g["max_limit"] == 32 && g["backend_type"] == "slurm"), "{gpus}");
    let one = svc.json(&svc.api("/workspaces/login1/gpu_types")).await;
    hit("get", "/api/v2/orgs/{org}/workspaces/{workspace_id}/gpu_types");
    assert!(one.as_array().unwrap().iter().all(|g| g["cluster"] == "login1"), "{one}");
    let files = svc.json(&svc.api(&format!("/jobs/{job}:list_files"))).await;
    hit("get", "/api/v2/orgs/{org}/jobs/{job_id}:list_files");
    assert_eq!(files, json!(["status.json", "logs/main.out", "logs/main.err"]));
    for (route, query) in [("download", ""), ("download_selective_files", "?file_lists=status.json&tar_files=True")] {
        let r = svc.get(&svc.api(&format!("/jobs/{job}:{route}{query}"))).send().await.unwrap();
        assert_eq!(
            (r.status().as_u16(), r.headers()["content-type"].to_str().unwrap()),
            (200, "application/gzip"),
            "{route}"
        );
        let bytes = r.bytes().await.unwrap();
        assert_eq!(&bytes[..2], &[0x1f, 0x8b], "{route}: gzip");
        hit("get", &format!("/api/v2/orgs/{{org}}/jobs/{{job_id}}:{route}"));
    }
    let r = svc.get(&svc.api(&format!("/jobs/{job}:download_selective_files?file_lists=../x"))).send().await.unwrap();
    assert_eq!(r.status(), 400);
    let r = svc.get(&svc.api("/datasets")).send().await.unwrap();
    assert_eq!(r.status(), 501);
    assert!(r.text().await.unwrap().contains("not implemented by tao-slurm"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_on_two_clusters_over_http() {
    // A query budget of 60 a minute: a refresh every 2 s while the jobs are young.
    let svc = Service::start_with(&[
        ("SERVICE_TEST_SECRET", SECRET),
        ("TAO_SLURM_LOG", "debug"),
        ("TAO_SLURM_MAX_QUERIES_PER_MINUTE", "60"),
    ]);
    // Every reply's text, to check that the secret is in none.
    let mut seen = String::new();
    let mut hits: BTreeSet<(String, String)> = BTreeSet::new();
    let mut hit = |method: &str, path: &str| {
        hits.insert((method.to_string(), path.to_string()));
    };

    // Health needs no token; everything else does.
    let r = svc.http.get(format!("{}/api/v2/health", svc.url)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    hit("get", "/api/v2/health");
    let r = svc.http.get(format!("{}/api/v2/openapi.json", svc.url)).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let doc_text = svc.get(&format!("{}/api/v2/openapi.json", svc.url)).send().await.unwrap().text().await.unwrap();
    hit("get", "/api/v2/openapi.json");
    let doc: Value = serde_json::from_str(&doc_text).unwrap();
    assert_eq!(doc["openapi"].as_str().map(|v| v.starts_with("3.1")), Some(true), "{}", doc["openapi"]);
    validate_openapi(&doc_text);

    // Workspaces: the profiles, plus the settings without one.
    let ws = svc.json(&svc.api("/workspaces")).await;
    hit("get", "/api/v2/orgs/{org}/workspaces");
    let ids: Vec<&str> = ws["workspaces"].as_array().unwrap().iter().map(|w| w["id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec!["default", "login1", "login2"]);
    let w2 = svc.json(&svc.api("/workspaces/login2")).await;
    hit("get", "/api/v2/orgs/{org}/workspaces/{workspace_id}");
    assert_eq!(w2["cloud_type"], "slurm");
    assert_eq!(w2["cloud_specific_details"]["slurm_hostname"], json!(["sandbox-login2"]));
    assert_eq!(w2["cloud_specific_details"]["slurm_user"], crate::common::sandbox::setting("SLURM_USER"));
    assert!(w2["cloud_specific_details"]["base_results_dir"]
        .as_str()
        .unwrap()
        .starts_with(&crate::common::sandbox::dir().display().to_string()));
    assert_eq!(svc.get(&svc.api("/workspaces/nope")).send().await.unwrap().status(), 404);
    let cluster = svc.json(&svc.api("/workspaces/login1:cluster")).await;
    hit("get", "/api/v2/orgs/{org}/workspaces/{workspace_id}:cluster");
    let polar = cluster["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "polar")
        .unwrap_or_else(|| panic!("no partition polar in the cluster view: {cluster}"))
        .clone();
    assert_eq!((polar["gpus_total"].as_u64(), polar["nodes"].as_u64()), (Some(32), Some(4)), "{cluster}");
    assert_eq!(polar["max_time_minutes"], 240);
    assert!(
        cluster["checks"].as_array().unwrap().iter().any(|c| c["name"] == "ssh login" && c["ok"] == true),
        "{cluster}"
    );

    // A dry run is the client's one preview, checked with the cluster and the service's policy: the
    // plan and the batch script, the placement fields in it; nothing recorded or submitted.
    let dry = svc
        .http
        .post(svc.api("/jobs?dry_run=true"))
        .bearer_auth(&svc.token)
        .json(&json!({"image": "ubuntu:22.04", "command": "echo dry", "gpus": 1, "workspace": "login1",
            "nodelist": "node2", "exclude": "node1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(dry.status(), 200);
    let dry: Value = dry.json().await.unwrap();
    assert_eq!((dry["dry_run"].as_bool(), dry["plan"]["nodelist"].as_str()), (Some(true), Some("node2")), "{dry}");
    let script = dry["files"].as_array().unwrap().last().unwrap()["contents"].as_str().unwrap().to_string();
    for line in ["\n#SBATCH --nodelist=node2\n", "\n#SBATCH --exclude=node1\n", "echo dry"] {
        assert!(script.contains(line), "{line:?} not in the dry run's script:\n{script}");
    }
    let dry_id = dry["job_id"].as_str().unwrap();
    let r = svc.get(&svc.api(&format!("/jobs/{dry_id}"))).send().await.unwrap();
    assert_eq!(r.status(), 404, "a dry run records nothing");
    let bad = svc
        .http
        .post(svc.api("/jobs?dry_run=true"))
        .bearer_auth(&svc.token)
        .json(&json!({"image": "ubuntu:22.04", "command": "true", "workspace": "login1", "nodelist": "node2 --x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    assert_eq!(bad.json::<Value>().await.unwrap()["field"], "nodelist");

    // A training job on login1 (by workspace), a long one on login2 (by backend_details).
    let (status, a) = svc
        .create(&json!({"name": "train-a", "image": "ubuntu:22.04", "command": TRAINING, "gpus": 1,
            "workspace": "login1", "action": "train", "specs": {"train": {"num_epochs": 3}},
            "secret_env": ["SERVICE_TEST_SECRET"], "nodelist": "node2"}))
        .await;
    hit("post", "/api/v2/orgs/{org}/jobs");
    assert_eq!(status, 201, "{a}");
    let a_id = a["id"].as_str().unwrap().to_string();
    assert_eq!(a["backend_details"]["cluster_name"], "login1");
    assert_eq!(a["backend_details"]["backend_type"], "slurm");
    assert_eq!(a["backend_details"]["slurm_metadata"]["login_host"], "sandbox-login1");
    assert!(a["backend_details"]["slurm_metadata"]["slurm_job_id"].as_str().is_some(), "{a}");
    assert_eq!(a["specs"]["train"]["num_epochs"], 3);
    let (status, b) = svc
        .create(&json!({"name": "long-b", "image": "ubuntu:22.04", "command": ["sleep", "600"], "num_gpu": 2,
            "backend_details": {"backend_type": "slurm", "cluster_name": "login2", "partition": "polar"}}))
        .await;
    assert_eq!(status, 201, "{b}");
    let b_id = b["id"].as_str().unwrap().to_string();
    assert_eq!(b["workspace"], "login2");
    assert_eq!(b["backend_details"]["slurm_metadata"]["login_host"], "sandbox-login2");
    assert_eq!((b["num_gpu"].as_i64(), b["gpus_per_node"].as_u64()), (Some(2), Some(2)));

    // The job list's stream starts with every job of the org.
    let resp = svc.get(&svc.api("/jobs:stream")).send().await.unwrap();
    hit("get", "/api/v2/orgs/{org}/jobs:stream");
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let events = read_events(resp, Duration::from_secs(10), |name, _| name == "snapshot").await;
    let snap = &events.last().unwrap().1;
    let snap_ids: Vec<&str> = snap["jobs"].as_array().unwrap().iter().map(|j| j["id"].as_str().unwrap()).collect();
    assert!(snap_ids.contains(&a_id.as_str()) && snap_ids.contains(&b_id.as_str()), "{snap}");

    // Job A's stream: its status changes to Running then Complete, and its log lines, to the end.
    let resp = svc.get(&svc.api(&format!("/jobs/{a_id}:stream"))).send().await.unwrap();
    hit("get", "/api/v2/orgs/{org}/jobs/{job_id}:stream");
    let events = read_events(resp, Duration::from_secs(400), |name, _| name == "end").await;
    let statuses: Vec<&str> =
        events.iter().filter(|(n, _)| n == "status").map(|(_, v)| v["status"].as_str().unwrap()).collect();
    assert!(statuses.contains(&"Running") && statuses.last() == Some(&"Done"), "{statuses:?}");
    let stdout: String = events
        .iter()
        .filter(|(n, v)| n == "log" && v["stream"] == "stdout")
        .map(|(_, v)| v["text"].as_str().unwrap())
        .collect();
    assert!(
        stdout.contains("training starts") && stdout.contains("epoch 5/5") && stdout.contains("training done"),
        "{stdout}"
    );
    assert!(events.iter().any(|(n, v)| n == "log"
        && v["stream"] == "stderr"
        && v["text"].as_str().unwrap().contains("a warning on stderr")));
    assert_eq!(events.last().unwrap().0, "end");
    assert!(stdout.contains("the secret arrived"), "{stdout}");
    seen.push_str(&format!("{events:?}"));

    let got = svc.json(&svc.api(&format!("/jobs/{a_id}"))).await;
    hit("get", "/api/v2/orgs/{org}/jobs/{job_id}");
    seen.push_str(&format!("{a}{got}"));
    assert_eq!((got["status"].as_str(), got["platform_status"].as_str()), (Some("Done"), Some("Complete")), "{got}");
    assert_eq!(got["progress"]["detailed_status"]["status"], "SUCCESS");
    assert_eq!(got["backend_details"]["slurm_metadata"]["retry_count"], 0);
    // The core's placement field, in the body as in every door: the job ran where it named.
    assert_eq!(got["backend_details"]["slurm_metadata"]["node_list"], "node2", "{got}");
    assert_eq!(got["backend_details"]["slurm_metadata"]["failed_slurm_job_ids"], json!([]));
    // TAO's JobResult keeps the last epoch past the final SUCCESS line that has none.
    let result = &got["job_details"][a_id.as_str()];
    assert_eq!((result["epoch"].as_u64(), result["max_epoch"].as_u64()), (Some(5), Some(5)), "{got}");
    assert_eq!(got["kind"], Value::Null, "tao-slurm's own body: no TAO kind");
    tao_routes(&svc, &a_id, &mut hit).await;

    // Listing: paging, sorting, status filter; bad parameters name themselves.
    let page = svc.json(&svc.api("/jobs?size=1&skip=1&sort=name")).await;
    hit("get", "/api/v2/orgs/{org}/jobs");
    assert_eq!(page["pagination_info"]["total_records"], 2);
    assert_eq!(page["pagination_info"]["total_pages"], 2);
    assert_eq!(page["jobs"][0]["name"], "train-a", "ascending by name, second page");
    let done = svc.json(&svc.api("/jobs?status=Done")).await;
    assert_eq!(done["jobs"].as_array().unwrap().len(), 1);
    let done2 = svc.json(&svc.api("/jobs?status=complete&workspace=login1")).await;
    assert_eq!(done2["jobs"][0]["id"], a_id.as_str());
    for (q, field) in [("status=Finished", "status"), ("size=0", "size"), ("sort=age", "sort"), ("colour=red", "query")]
    {
        let r = svc.get(&svc.api(&format!("/jobs?{q}"))).send().await.unwrap();
        assert_eq!(r.status(), 400, "{q}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(
            (body["error_type"].as_str(), body["field"].as_str()),
            (Some("invalid_field"), Some(field)),
            "{q}: {body}"
        );
    }

    // Logs: the tail of both files, one file, a byte range with its offsets.
    let text = svc.get(&svc.api(&format!("/jobs/{a_id}:logs"))).send().await.unwrap().text().await.unwrap();
    hit("get", "/api/v2/orgs/{org}/jobs/{job_id}:logs");
    assert!(text.contains("training done") && text.contains("a warning on stderr"), "{text}");
    let err = svc.get(&svc.api(&format!("/jobs/{a_id}:logs?stream=stderr&tail=5"))).send().await.unwrap();
    assert!(!err.text().await.unwrap().contains("training done"));
    let whole = svc.get(&svc.api(&format!("/jobs/{a_id}:logs?stream=stdout&offset=0"))).send().await.unwrap();
    let whole = whole.text().await.unwrap();
    let k = whole.find("training starts").unwrap() + "training ".len();
    let r = svc.get(&svc.api(&format!("/jobs/{a_id}:logs?stream=stdout&offset={k}&limit=100"))).send().await.unwrap();
    assert_eq!(r.headers()["x-log-offset"].to_str().unwrap(), k.to_string());
    let next: u64 = r.headers()["x-next-offset"].to_str().unwrap().parse().unwrap();
    let size: u64 = r.headers()["x-log-size"].to_str().unwrap().parse().unwrap();
    assert_eq!((next, size), (whole.len() as u64, whole.len() as u64));
    assert!(r.text().await.unwrap().starts_with("starts\n"));
    let r = svc.get(&svc.api(&format!("/jobs/{a_id}:logs?offset=0"))).send().await.unwrap();
    assert_eq!(r.status(), 400, "an offset needs one file");

    // Events and attempts.
    let ev = svc.json(&svc.api(&format!("/jobs/{a_id}:events"))).await;
    hit("get", "/api/v2/orgs/{org}/jobs/{job_id}:events");
    let kinds: Vec<&str> = ev["events"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert!(kinds.starts_with(&["created", "submitted"]) && kinds.contains(&"status"), "{kinds:?}");
    let after = ev["events"][1]["id"].as_i64().unwrap();
    let later = svc.json(&svc.api(&format!("/jobs/{a_id}:events?after={after}"))).await;
    assert_eq!(later["events"].as_array().unwrap().len(), kinds.len() - 2);
    seen.push_str(&format!("{ev}"));
    let at = svc.json(&svc.api(&format!("/jobs/{a_id}:attempts"))).await;
    seen.push_str(&format!("{at}{}", svc.json(&svc.api("/jobs")).await));
    hit("get", "/api/v2/orgs/{org}/jobs/{job_id}:attempts");
    assert_eq!(at["attempts"].as_array().unwrap().len(), 1);
    assert_eq!(at["attempts"][0]["slurm_job_id"], got["backend_details"]["slurm_metadata"]["slurm_job_id"]);
    // The KPIs over time: each epoch's report once, in order.
    let kpis = svc.json(&svc.api(&format!("/jobs/{a_id}:kpis"))).await;
    hit("get", "/api/v2/orgs/{org}/jobs/{job_id}:kpis");
    let epochs: Vec<(f64, f64)> = kpis["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["epoch"].as_f64().unwrap(), p["kpi"]["loss"].as_f64().unwrap()))
        .collect();
    assert_eq!(epochs, [(1.0, 0.1), (2.0, 0.2), (3.0, 0.3), (4.0, 0.4), (5.0, 0.5)], "{kpis}");

    // A completed job has nothing to retry (TAO's :retry of a Done job is refused the same way).
    let r = svc.http.post(svc.api(&format!("/jobs/{a_id}:retry"))).bearer_auth(&svc.token).send().await.unwrap();
    hit("post", "/api/v2/orgs/{org}/jobs/{job_id}:retry");
    assert_eq!(r.status(), 400, "{}", r.text().await.unwrap());
    // Nor to pause or resume (the whole of both: tests/tao_client, through TAO's own client).
    for (action, words) in [("pause", "nothing to pause"), ("resume", "nothing to resume")] {
        let r = svc
            .http
            .post(svc.api(&format!("/jobs/{a_id}:{action}")))
            .bearer_auth(&svc.token)
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        hit("post", &format!("/api/v2/orgs/{{org}}/jobs/{{job_id}}:{action}"));
        assert_eq!(r.status(), 400);
        assert!(r.text().await.unwrap().contains(words));
    }
    // Nor a TensorBoard (service_tensorboard opens one of a running job).
    let r = svc.http.post(svc.api(&format!("/jobs/{a_id}:tensorboard"))).bearer_auth(&svc.token).send().await.unwrap();
    hit("post", "/api/v2/orgs/{org}/jobs/{job_id}:tensorboard");
    assert_eq!(r.status(), 409, "{}", r.text().await.unwrap());

    // B runs on login2: a running job cannot be deleted; cancel it; then it can.
    let b_running = svc.wait_job(&b_id, Duration::from_secs(400), |j| j["status"] == "Running").await;
    let r = svc.http.delete(svc.api(&format!("/jobs/{b_id}"))).bearer_auth(&svc.token).send().await.unwrap();
    hit("delete", "/api/v2/orgs/{org}/jobs/{job_id}");
    assert_eq!(r.status(), 409);
    let r = svc.http.post(svc.api(&format!("/jobs/{b_id}:cancel"))).bearer_auth(&svc.token).send().await.unwrap();
    hit("post", "/api/v2/orgs/{org}/jobs/{job_id}:cancel");
    assert_eq!(r.status(), 200);
    let cancelled: Value = r.json().await.unwrap();
    assert_eq!(cancelled["status"], "Canceled", "{cancelled}");
    let slurm_b = b_running["backend_details"]["slurm_metadata"]["slurm_job_id"].as_str().unwrap().to_string();
    wait_for_async(
        &format!("Slurm job {slurm_b} gone from the queue after the cancel"),
        Duration::from_secs(30),
        Duration::from_millis(500),
        || async { svc.env.ssh(&format!("squeue -h -j {slurm_b} -o %T 2>/dev/null || true")).trim().is_empty() },
    )
    .await;
    let again = svc.http.post(svc.api(&format!("/jobs/{b_id}:cancel"))).bearer_auth(&svc.token).send().await.unwrap();
    assert_eq!(again.status(), 200, "cancel is idempotent");

    // Every job recorded the cluster it ran on (in the state file the CLI reads too).
    let listed = svc.env.json(&["list", "--json"]);
    let cluster_of =
        |id: &str| listed.as_array().unwrap().iter().find(|j| j["job_id"] == id).unwrap()["cluster"].clone();
    assert_eq!((cluster_of(&a_id), cluster_of(&b_id)), (json!("login1"), json!("login2")));
    // A job of another cluster is refused by a client of this one, with the flag to use.
    let out = svc.env.run(&["--cluster", "login1", "logs", &b_id]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--cluster login2"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Delete both (terminal now): they leave the org's jobs.
    for id in [&a_id, &b_id] {
        let r = svc.http.delete(svc.api(&format!("/jobs/{id}"))).bearer_auth(&svc.token).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(svc.get(&svc.api(&format!("/jobs/{id}"))).send().await.unwrap().status(), 404);
    }
    assert_eq!(svc.json(&svc.api("/jobs")).await["pagination_info"]["total_records"], 0);

    // The secret reached the job and no reply nor the service's debug log.
    assert!(!seen.contains(SECRET), "a reply holds the secret");
    let log = svc.log();
    let leaks: Vec<&str> = log.lines().filter(|l| l.contains(SECRET)).collect();
    assert!(!log.is_empty() && leaks.is_empty(), "the service's log holds the secret: {leaks:?}");

    let stats = svc.json(&svc.api("/stats")).await;
    hit("get", "/api/v2/orgs/{org}/stats");
    for w in stats["workspaces"].as_array().unwrap() {
        assert_eq!(w["refresh_errors"], 0, "{stats}");
    }

    // Every route the document lists was exercised above.
    let mut documented = BTreeSet::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for method in ops.as_object().unwrap().keys() {
            documented.insert((method.clone(), path.clone()));
        }
    }
    // The tenancy routes (an org's own workspaces, its key and secrets) are exercised by
    // service_tenancy, the audit trail's by service_ops.
    for route in crate::service_tenancy::ROUTES.iter().chain(crate::service_ops::ROUTES) {
        documented.remove(&(route.0.to_string(), route.1.to_string()));
    }
    let missing: Vec<_> = documented.difference(&hits).collect();
    assert!(missing.is_empty(), "routes in the OpenAPI document this test did not exercise: {missing:?}");
    let undocumented: Vec<_> = hits.difference(&documented).collect();
    assert!(undocumented.is_empty(), "routes exercised but not documented: {undocumented:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_and_tokens_are_refused_before_any_cluster() {
    let svc = Service::start();
    let post = |body: String, content_type: &'static str, token: Option<String>| {
        let mut r = svc.http.post(svc.api("/jobs")).header("content-type", content_type).body(body);
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r.send()
    };
    let good = json!({"image": "ubuntu:22.04", "command": ["true"], "gpus": 0});
    let with = |extra: Value| {
        let mut v = good.clone();
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        v.to_string()
    };
    let cases: Vec<(String, u16, &str)> = vec![
        (with(json!({"gpus": "eight"})), 400, "gpus"),
        (with(json!({"gpuz": 1})), 400, "gpuz"),
        (
            with(json!({"backend_details": {"slurm_metadata": {"slurm_job_id": "1"}}})),
            400,
            "backend_details.slurm_metadata",
        ),
        (with(json!({"backend_details": {"backend_type": "kubernetes"}})), 400, "backend_details.backend_type"),
        (
            with(json!({"workspace": "login1", "backend_details": {"cluster_name": "login2"}})),
            400,
            "backend_details.cluster_name",
        ),
        (
            with(json!({"partition": "polar", "backend_details": {"partition": "long"}})),
            400,
            "backend_details.partition",
        ),
        (with(json!({"num_gpu": 4})), 400, "num_gpu"),
        (with(json!({"num_gpu": -7, "gpus": null})), 400, "num_gpu"),
        (with(json!({"image": ""})), 400, "image"),
        (with(json!({"partition": "polar\n#SBATCH --uid=0"})), 400, "partition"),
        (with(json!({"env": {"BAD NAME": "x"}})), 400, "env"),
        (with(json!({"secret_env": ["TAO_SLURM_TEST_SECRET_THAT_IS_NOT_SET"]})), 400, "secret_env"),
        (with(json!({"inputs": {"custom.path": "file:///home/me/data"}})), 400, "input custom.path"),
        (with(json!({"nodes": 0})), 400, "nodes"),
        (with(json!({"specs": {"x": "y".repeat(300 * 1024)}})), 400, "specs"),
        ("{not json".to_string(), 400, "body"),
        ("[]".to_string(), 400, "body"),
    ];
    let token = || Some(svc.token.clone());
    for (body, status, field) in &cases {
        let r = post(body.clone(), "application/json", token()).await.unwrap();
        let got = r.status().as_u16();
        let v: Value = r.json().await.unwrap();
        assert_eq!(got, *status, "{body:.200}: {v}");
        assert_eq!(v["error_type"], "invalid_field", "{v}");
        assert_eq!(v["field"].as_str(), Some(*field), "{body:.200}: {v}");
        assert!(v["error_desc"].as_str().unwrap().contains(field.split('.').next_back().unwrap()), "{v}");
    }
    // A workspace that does not exist and one not granted to the org: one answer.
    let r = post(with(json!({"workspace": "mars"})), "application/json", token()).await.unwrap();
    assert_eq!(r.status(), 403);
    let v: Value = r.json().await.unwrap();
    assert_eq!((v["error_type"].as_str(), v["field"].as_str()), (Some("forbidden"), Some("workspace")), "{v}");
    let r = post(good.to_string(), "text/plain", token()).await.unwrap();
    assert_eq!(r.status(), 415);
    // A body over the cap is refused once the cap is read (sent by hand, the body from another
    // thread: a client that insists on writing the whole body races the server's closing).
    {
        use std::io::{Read, Write};
        let addr = svc.url.trim_start_matches("http://").to_string();
        let mut tcp = std::net::TcpStream::connect(&addr).unwrap();
        write!(
            tcp,
            "POST /api/v2/orgs/{ORG}/jobs HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            svc.token,
            2 << 20
        )
        .unwrap();
        let mut writer = tcp.try_clone().unwrap();
        let sender = std::thread::spawn(move || {
            let _ = writer.write_all(&vec![b' '; 2 << 20]);
        });
        tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut reply = vec![0u8; 4096];
        let n = tcp.read(&mut reply).unwrap();
        let reply = String::from_utf8_lossy(&reply[..n]).to_string();
        drop(tcp);
        let _ = sender.join();
        assert!(reply.starts_with("HTTP/1.1 413") && reply.contains("payload_too_large"), "{reply}");
    }

    // Tokens: missing, wrong, another org's, revoked.
    let r = post(good.to_string(), "application/json", None).await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
    assert_eq!(r.json::<Value>().await.unwrap()["error_type"], "unauthorized");
    let r = post(good.to_string(), "application/json", Some(format!("tsk_{}", "0".repeat(64)))).await.unwrap();
    assert_eq!(r.status(), 401);
    let other = svc.env.json(&["token", "create", "--org", "team-b", "--json"]);
    let other_token = other["token"].as_str().unwrap().to_string();
    // team-b's token works on team-b's routes (read within the service's one-second token reload).
    wait_for_async(
        "a new token honoured without a restart",
        Duration::from_secs(10),
        Duration::from_millis(250),
        || async {
            let r = svc
                .http
                .get(format!("{}/api/v2/orgs/team-b/jobs", svc.url))
                .bearer_auth(&other_token)
                .send()
                .await
                .unwrap();
            when(r.status(), |s| *s == 200)
        },
    )
    .await;
    let r = post(good.to_string(), "application/json", Some(other_token.clone())).await.unwrap();
    assert_eq!(r.status(), 403, "team-b's token on team-a's routes");
    assert_eq!(r.json::<Value>().await.unwrap()["error_type"], "forbidden");
    svc.env.ok(&["token", "revoke", &svc.token_id]);
    wait_for_async("a revoked token refused", Duration::from_secs(10), Duration::from_millis(250), || async {
        let r = post(with(json!({"gpus": "x"})), "application/json", token()).await.unwrap();
        assert!(r.status() == 401 || r.status() == 400, "probe with an invalid body: never creates a job");
        when(r.status(), |s| *s == 401)
    })
    .await;
    let listed = svc.env.json(&["token", "list", "--json"]);
    assert!(!listed.to_string().contains(&svc.token), "token list never shows a token");

    // Nothing was recorded, and no workspace talked to its cluster.
    assert_eq!(svc.env.json(&["list", "--json"]), json!([]));
    let stats: Value = svc
        .http
        .get(format!("{}/api/v2/orgs/team-b/stats", svc.url))
        .bearer_auth(&other_token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for w in stats["workspaces"].as_array().unwrap() {
        assert_eq!(w["round_trips"], 0, "{stats}");
    }
    let _ = ORG;
}
