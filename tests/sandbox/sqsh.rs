//! The squashfs image cache on the sandbox, with the real `enroot import` (on the CPU partition) and
//! Pyxis: converted once for concurrent submits, every node starting from the `.sqsh`, served from
//! the cache afterwards, stale partial files replaced, failures stop the submit. The auxiliary inputs'
//! stand-in tools (aws, huggingface-cli) read hooks from the sandbox's enroot-hooks.env.

use crate::common::sandbox;
use crate::common::Env;
use std::time::Duration;

/// Writes the stand-in tools' hooks file (read on the compute nodes) and removes it when dropped.
struct EnrootHooks(std::path::PathBuf);
impl EnrootHooks {
    fn set(text: &str) -> EnrootHooks {
        let path = sandbox::dir().join("enroot-hooks.env");
        std::fs::write(&path, text).unwrap();
        EnrootHooks(path)
    }
}
impl Drop for EnrootHooks {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Both tests write the stand-ins' hooks file: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A CPU-only job that gets the AWS credentials as secrets (the submit arguments before its inputs).
const AWS_JOB: [&str; 8] = [
    "--image",
    "ubuntu:22.04",
    "--gpus",
    "0",
    "--secret-env",
    "AWS_ACCESS_KEY_ID",
    "--secret-env",
    "AWS_SECRET_ACCESS_KEY",
];

/// An empty file the stand-in tools (running as the sandbox user) append their calls to.
fn stand_in_call_log(name: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let log = std::path::PathBuf::from(format!("/tmp/tao-slurm-{name}-{}.log", std::process::id()));
    std::fs::write(&log, "").unwrap();
    std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o666)).unwrap();
    log
}

fn sqsh_env() -> Env {
    let mut env = Env::new();
    env.vars.insert("TAO_SLURM_USE_SQSH".into(), "true".into());
    env
}

#[test]
fn images_are_converted_once_and_failures_submit_nothing() {
    // A cache directory of this run's own: the first conversion of the image is this test's.
    let mut env = sqsh_env();
    let cache_dir = format!("{}/sqsh-test-{}", env.vars["SLURM_BASE_RESULTS_DIR"], std::process::id());
    env.vars.insert("TAO_SLURM_SQSH_CACHE_DIR".into(), cache_dir.clone());
    // Its own control directory: what its submits' checks found is kept there, for this test alone.
    let control_dir = env.dir.path().join("cm").display().to_string();
    env.vars.insert("TAO_SLURM_CONTROL_DIR".into(), control_dir);
    let image = "nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt";
    let started = env.ssh("date +%Y-%m-%dT%H:%M:%S").trim().to_string();
    // The conversions of this cache: Slurm jobs named after the cache file, run by `enroot import`.
    let name =
        format!("tao-sqsh-{}", tao_slurm::sqsh::cache_file_name(&tao_slurm::spec::ImageRef::parse(image).unwrap()));
    let name = name.trim_end_matches(".sqsh").to_string();
    // The conversions sacct shows, polled until they are `n`: slurmdbd records a job that ended a
    // moment ago asynchronously (its agent queue can be empty while the record is still on its way),
    // so one read is never evidence. Panics with the last count after the deadline.
    let conversions_reach = |env: &Env, n: usize, why: &str| {
        let script = format!("sacct -X -n -P -S {started} --name={name} -o JobID\n");
        env.wait_ssh(&format!("{n} conversions in sacct ({why})"), &script, Duration::from_secs(120), |out| {
            out.lines().filter(|l| !l.trim().is_empty()).count() == n
        });
    };

    // Three concurrent submits of one new image: one import, three jobs on the cache file; one of
    // them on two nodes, each starting its container from the .sqsh on shared storage.
    let runs: Vec<_> = (0..3)
        .map(|i| {
            let vars = env.vars.clone();
            std::thread::spawn(move || {
                let mut env = Env::new();
                env.vars = vars;
                let nodes = if i == 0 { "2" } else { "1" };
                let (job, _) = env.submit(&[
                    "--image",
                    image,
                    "--gpus",
                    "0",
                    "--nodes",
                    nodes,
                    "--shell",
                    "--",
                    "echo \"image=$(. /etc/os-release; echo $TAO_SLURM_SANDBOX_IMAGE) node=$SLURMD_NODENAME\"",
                ]);
                let v = env.wait_terminal(&job, Duration::from_secs(300));
                let logs = env.json(&["logs", &job, "--json"]);
                (v, logs["stdout"].as_str().unwrap().to_string())
            })
        })
        .collect();
    let results: Vec<_> = runs.into_iter().map(|h| h.join().unwrap()).collect();
    conversions_reach(&env, 1, "exactly one import for three submits");
    let cache_file = results[0].0["image"].as_str().unwrap().to_string();
    assert!(cache_file.ends_with(".sqsh") && cache_file.starts_with(&cache_dir), "{cache_file}");
    assert!(std::fs::read(&cache_file).unwrap().starts_with(b"hsqs"), "a real squashfs file");
    for (i, (v, stdout)) in results.iter().enumerate() {
        assert_eq!(v["status"], "Complete", "{v}");
        assert_eq!(v["image"].as_str(), Some(cache_file.as_str()));
        let ran = stdout.lines().filter(|l| l.starts_with("image=nvidia/tao/tao-toolkit:6.0.0-pyt node=")).count();
        assert_eq!(ran, if i == 0 { 2 } else { 1 }, "every node ran the image from the cache file: {stdout}");
    }

    // Cached: not converted again.
    let text = env.ok(&["image", "import", image]);
    assert!(text.starts_with("cached "), "{text}");

    // A submit of a cached image whose checks ran a moment ago (the submits above, which left what
    // they found in this test's own control directory) is one round trip: the submission checks the
    // image's file in the cache itself. With the checks made afresh (their time to live 0), two:
    // the checks (with the cache probe), then the submission.
    for (ttl, trips) in [("300", 1), ("0", 2)] {
        let mut vars = env.vars.clone();
        vars.insert("TAO_SLURM_CHECKS_TTL_SECS".into(), ttl.into());
        let env = Env { dir: tempfile::tempdir().unwrap(), vars };
        let client = tao_slurm::Client::new(env.settings()).unwrap();
        let spec = tao_slurm::JobSpec {
            image: image.into(),
            command: vec!["true".into()],
            gpus: Some(0),
            ..Default::default()
        };
        let submitted = client.create_job(&spec, &Default::default()).unwrap();
        assert_eq!(client.transport_stats().round_trips, trips, "ttl {ttl}: {:?}", client.transport_stats());
        client.cancel_job(&submitted.job_id).unwrap();
    }
    conversions_reach(&env, 1, "the second and later jobs did not import again");

    // The cache directory changed since those checks: the file they found (in the other cache) is
    // not used; the image is converted into this cache, and the job runs from there.
    let moved = format!("{cache_dir}/moved");
    let mut vars = env.vars.clone();
    vars.insert("TAO_SLURM_CHECKS_TTL_SECS".into(), "300".into());
    vars.insert("TAO_SLURM_SQSH_CACHE_DIR".into(), moved.clone());
    let moved_env = Env { dir: tempfile::tempdir().unwrap(), vars };
    let (job, _) = moved_env.submit(&["--image", image, "--gpus", "0", "--", "true"]);
    let v = moved_env.status(&job);
    assert!(v["image"].as_str().is_some_and(|i| i.starts_with(&format!("{moved}/"))), "{v}");
    conversions_reach(&env, 2, "converted into the new cache");
    moved_env.ok(&["cancel", &job]);

    // A stale partial file is ignored and replaced.
    let path = cache_file.clone();
    std::fs::remove_file(&path).unwrap();
    let stale = format!("{path}.partial.4242");
    std::fs::write(&stale, "half-written").unwrap();
    let v = env.json(&["image", "import", image, "--json"]);
    assert_eq!(v["how"], "converted", "a partial file never counts as cached");
    assert!(!std::path::Path::new(&stale).exists());
    assert!(std::fs::read(&path).unwrap().starts_with(b"hsqs"));

    // A failing import (Enroot's own: the registry has no such image): a clear error naming the
    // image and the log, and nothing submitted.
    let broken = format!("nvcr.io/nvidia/tao/sqsh-broken-{}:3.0", std::process::id());
    let out = env.run(&["submit", "--image", &broken, "--gpus", "0", "--", "true"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    assert!(
        stderr.contains(&broken) && stderr.contains("conversion log") && stderr.contains("404 Not Found"),
        "{stderr}"
    );
    assert!(env.json(&["list", "--json"]).as_array().unwrap().iter().all(|j| j["image"] != broken.as_str()));
    // Unless registry pulls are allowed explicitly.
    let v = env.json(&["submit", "--json", "--allow-registry-pull", "--image", &broken, "--gpus", "0", "--", "true"]);
    let job = v["job_id"].as_str().unwrap();
    let status = env.status(job);
    assert_eq!(status["image"], format!("nvcr.io#nvidia/tao/sqsh-broken-{}:3.0", std::process::id()));
    env.ok(&["cancel", job]);
}

#[test]
fn auxiliary_inputs_are_fetched_in_the_job_with_secret_credentials_and_a_size_cap() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let log = stand_in_call_log("aws");
    let _hooks = EnrootHooks::set(&format!("AWS_FAKE_LOG={0}\nHF_FAKE_LOG={0}\nAWS_FAKE_SIZE=64\n", log.display()));
    let mut env = Env::new();
    let key_id = format!("AKIA{}", std::process::id());
    env.vars.insert("AWS_ACCESS_KEY_ID".into(), key_id.clone());
    env.vars.insert("AWS_SECRET_ACCESS_KEY".into(), "s3cr3t/value".into());
    let bucket = format!("bucket-{}", std::process::id());
    let pretrained_input = format!("model.pretrained=s3://{bucket}/ckpt.pth");
    let args = [
        "--input",
        &pretrained_input,
        "--input",
        "model.tokenizer=hf_model://org/tokenizer",
        "--shell",
        "--",
        "cat \"$TAO_SPECS_FILE\"",
    ];
    let mut full = vec!["submit", "--json"];
    full.extend_from_slice(&AWS_JOB);
    full.extend_from_slice(&args);
    let out = env.run(&full);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let job: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let job = job["job_id"].as_str().unwrap().to_string();
    let v = env.wait_terminal(&job, Duration::from_secs(300));
    assert_eq!(v["status"], "Complete", "{v}");
    let logs = env.json(&["logs", &job, "--json"]);
    let stdout = logs["stdout"].as_str().unwrap();
    let specs: serde_json::Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    let pretrained = specs["model"]["pretrained"].as_str().unwrap();
    assert!(pretrained.contains("/aux-cache/s3-") && pretrained.ends_with("/ckpt.pth"), "{specs}");
    assert_eq!(std::fs::metadata(pretrained).unwrap().len(), 64, "the object was fetched before the command ran");
    let tokenizer = specs["model"]["tokenizer"].as_str().unwrap();
    assert!(std::path::Path::new(tokenizer).join("config.json").exists(), "{specs}");
    let calls = std::fs::read_to_string(&log).unwrap();
    assert!(
        calls.lines().any(|l| l.contains(&format!("aws s3 cp s3://{bucket}/ckpt.pth")) && l.ends_with("creds=yes")),
        "{calls}"
    );
    // The credentials never reached the script, the staged files or the logs.
    let base = env.vars["SLURM_BASE_RESULTS_DIR"].clone();
    let grep = std::process::Command::new("grep").args(["-rlF", &key_id, &base]).output().unwrap();
    assert!(grep.stdout.is_empty(), "{}", String::from_utf8_lossy(&grep.stdout));

    // Larger than the cap: the job fails before its command, with the reason, and is not retried.
    let mut capped = Env::new();
    capped.vars = env.vars.clone();
    capped.vars.insert("TAO_SLURM_AUX_MAX_BYTES".into(), "1000".into());
    let _big = EnrootHooks::set("AWS_FAKE_SIZE=5000\n");
    let big_input = format!("custom.train_dataset.path=s3://{bucket}/big/");
    let mut full = vec!["submit", "--json"];
    full.extend_from_slice(&AWS_JOB);
    full.extend_from_slice(&["--input", &big_input, "--", "echo ran"]);
    let out = capped.run(&full);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("leaves them idle"), "training data from s3 is warned about");
    let job: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let v = capped.wait_terminal(job["job_id"].as_str().unwrap(), Duration::from_secs(300));
    assert_eq!(v["status"], "Error", "{v}");
    assert_eq!(v["retries"], 0);
    assert!(v["message"].as_str().unwrap().contains("more than the 1000-byte cap"), "{v}");
    let _ = std::fs::remove_file(&log);
}

#[test]
fn jobs_sharing_an_auxiliary_input_fetch_it_once_and_a_stale_lock_is_broken() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let log = stand_in_call_log("aws-shared");
    // Each download takes 8 s: the second job starts while the first one is fetching.
    let _hooks = EnrootHooks::set(&format!("AWS_FAKE_LOG={}\nAWS_FAKE_SIZE=64\nAWS_FAKE_DELAY=8\n", log.display()));
    let mut env = Env::new();
    env.vars.insert("AWS_ACCESS_KEY_ID".into(), "AKIASHARED".into());
    env.vars.insert("AWS_SECRET_ACCESS_KEY".into(), "shared/secret".into());
    let uri = format!("s3://shared-{}/ckpt.pth", std::process::id());
    let input = format!("model.pretrained={uri}");
    let mut args = AWS_JOB.to_vec();
    args.extend_from_slice(&["--input", &input, "--shell", "--", "cat \"$TAO_SPECS_FILE\""]);
    let jobs: Vec<String> = (0..2).map(|_| env.submit(&args).0).collect();
    let fetches =
        || std::fs::read_to_string(&log).unwrap().lines().filter(|l| l.contains(&format!("aws s3 cp {uri}"))).count();
    let mut stderr_of = Vec::new();
    for job in &jobs {
        let v = env.wait_terminal(job, Duration::from_secs(300));
        assert_eq!(v["status"], "Complete", "{v}");
        let logs = env.json(&["logs", job, "--json"]);
        stderr_of.push(logs["stderr"].as_str().unwrap().to_string());
    }
    assert_eq!(fetches(), 1, "two jobs sharing an input download it once: {}", std::fs::read_to_string(&log).unwrap());
    assert!(
        stderr_of.iter().any(|e| e.contains("waiting for another job fetching")),
        "one job waited for the other: {stderr_of:?}"
    );
    let logs = env.json(&["logs", &jobs[0], "--json"]);
    let specs: serde_json::Value =
        serde_json::from_str(logs["stdout"].as_str().unwrap().lines().next().unwrap()).unwrap();
    let object = std::path::PathBuf::from(specs["model"]["pretrained"].as_str().unwrap());
    assert_eq!(std::fs::metadata(&object).unwrap().len(), 64);

    // The fetcher died long ago holding the lock (its node crashed): the next job breaks the lock.
    let dir = object.parent().unwrap().display().to_string();
    env.ssh(&format!("rm -rf '{dir}' && mkdir '{dir}.lock' && touch -d '3 hours ago' '{dir}.lock'"));
    let job = env.submit(&args).0;
    let v = env.wait_terminal(&job, Duration::from_secs(300));
    assert_eq!(v["status"], "Complete", "{v}");
    let logs = env.json(&["logs", &job, "--json"]);
    assert!(logs["stderr"].as_str().unwrap().contains("removing the stale fetch lock"), "{logs}");
    assert_eq!(fetches(), 2);
    assert!(!std::path::Path::new(&format!("{dir}.lock")).exists(), "the lock is released");
    let _ = std::fs::remove_file(&log);
}
