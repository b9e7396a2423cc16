//! `preflight` on the sandbox: all green, then the exact failing line for each broken part, and
//! `credentials enroot` never exposing the key. One test function: it switches parts of the shared
//! sandbox off, so nothing else in this binary may run meanwhile.

use crate::common::sandbox;
use crate::common::wait::wait_for;
use crate::common::{is_terminal, Env};
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Runs a sandbox control script now, and its opposite when dropped (even if an assertion failed).
struct Switch(&'static str, &'static [&'static str]);
impl Switch {
    fn flip(script: &'static str, off: &'static [&'static str], on: &'static [&'static str]) -> Switch {
        sandbox_ctl(script, off);
        Switch(script, on)
    }
}
impl Drop for Switch {
    fn drop(&mut self) {
        sandbox_ctl(self.0, self.1);
    }
}

fn sandbox_ctl(script: &str, args: &[&str]) {
    let path = format!("{}/dev/sandbox/{script}", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("bash").arg(&path).args(args).output().unwrap();
    assert!(out.status.success(), "{script} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn preflight(env: &Env) -> (i32, String) {
    let out = env.run(&["preflight"]);
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
}

fn fail_lines(text: &str) -> Vec<String> {
    text.lines().filter(|l| l.starts_with("FAIL")).map(String::from).collect()
}

/// The tests here switch shared parts of the sandbox off: they run one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
#[ignore = "stops a part of the shared cluster: dev/test runs it alone (cargo test --test sandbox -- --ignored)"]
fn preflight_is_green_and_names_each_broken_part() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut env = Env::isolated();
    env.vars.insert("SLURM_ACCOUNT".into(), "default".into());
    let (code, text) = preflight(&env);
    assert_eq!(code, 0, "{text}");
    assert!(fail_lines(&text).is_empty(), "{text}");
    for check in [
        "ssh login [sandbox-login1]",
        "ssh login [sandbox-login2]",
        "accounting (sacct)",
        "partition polar",
        "pyxis",
        "container scope",
        "enroot data path",
        "account association",
        "results directory",
    ] {
        assert!(text.lines().any(|l| l.starts_with("PASS") && l.contains(check)), "no PASS for {check}:\n{text}");
    }
    let json: serde_json::Value = serde_json::from_slice(&env.run(&["preflight", "--json"]).stdout).unwrap();
    assert_eq!(json["ok"], true);

    // A partition that does not exist.
    let mut bad = Env::isolated();
    bad.vars.insert("SLURM_PARTITION".into(), "polar,nosuch".into());
    let (code, text) = preflight(&bad);
    assert_ne!(code, 0);
    let fails = fail_lines(&text);
    assert!(!fails.is_empty() && fails.iter().all(|l| l.starts_with("FAIL  partition nosuch")), "{text}");

    // A key the login host does not accept.
    let mut wrong = Env::isolated();
    let key = wrong.dir.path().join("id_wrong");
    let st = Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", "", "-f"]).arg(&key).status().unwrap();
    assert!(st.success());
    wrong.vars.insert("SSH_KEY_PATH".into(), key.display().to_string());
    // Without the sandbox's ssh_config, whose IdentityFile would offer the right key too.
    wrong.vars.remove("SSH_CONFIG");
    wrong.vars.insert("SLURM_HOSTNAME".into(), "127.0.0.1:2222".into());
    let (code, text) = preflight(&wrong);
    assert_ne!(code, 0);
    assert!(
        text.lines().any(|l| l.starts_with("FAIL  ssh login [127.0.0.1:2222]") && l.contains("Permission denied")),
        "{text}"
    );
    assert!(
        text.contains("SLURM is blocked on passwordless SSH. Please provide: SSH_KEY_PATH=/path/to/private_key"),
        "{text}"
    );

    // The Pyxis stand-in switched off.
    {
        let _pyxis = Switch::flip("pyxis-ctl.sh", &["off"], &["on"]);
        let (code, text) = preflight(&env);
        assert_ne!(code, 0);
        let fails = fail_lines(&text);
        assert_eq!(fails.len(), 2, "one per login host:\n{text}");
        assert!(fails.iter().all(|l| l.starts_with("FAIL  pyxis")), "{text}");
        assert!(text.contains("Pyxis or Enroot is unavailable"), "{text}");
    }
    // slurmdbd stopped: preflight names it, and no job gets a verdict from missing data.
    {
        let (job, slurm_id) = env.submit(&["--image", "ubuntu:22.04", "--gpus", "0", "--", "sleep", "4"]);
        env.wait_job(&job, "running", Duration::from_secs(300), |v| v["status"] == "Running");
        let dbd = Switch::flip("service-ctl.sh", &["stop", "slurmdbd"], &["start", "slurmdbd"]);
        // Wait until the controller has forgotten the job (MinJobAge): from then on only sacct could
        // tell how it ended.
        wait_for("the job aged out of the controller", Duration::from_secs(240), Duration::from_millis(300), || {
            let out = Command::new("ssh")
                .args(["-F", &env.vars["SSH_CONFIG"], "sandbox-login1", "squeue", "-t", "all", "-h", "-j", &slurm_id])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).trim().is_empty()
        });
        for _ in 0..3 {
            let out = env.run(&["status", &job, "--json"]);
            let v: serde_json::Value = serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()[0].clone();
            assert_eq!(v["status"], "Running", "no verdict without accounting: {v}");
            assert!(String::from_utf8_lossy(&out.stderr).contains("sacct failed"), "and it says so");
        }
        let (code, text) = preflight(&env);
        assert_ne!(code, 0);
        let fails = fail_lines(&text);
        assert!(!fails.is_empty(), "{text}");
        assert!(
            fails
                .iter()
                .all(|l| l.starts_with("FAIL  accounting (sacct)") || l.starts_with("FAIL  account association")),
            "{text}"
        );
        assert!(fails.iter().any(|l| l.contains("Problem talking to the database")), "{text}");
        drop(dbd);
        // Accounting is back: the verdict arrives (slurmctld re-sends the job's record within seconds).
        let v = env.wait_terminal(&job, Duration::from_secs(300));
        assert_eq!(v["status"], "Complete", "{v}");
        assert_eq!(v["exit_code"], 0);
    }

    // Enroot credentials: missing -> named failure; installed -> pass; the key never shows.
    let creds = sandbox::dir().join("home").join(sandbox::setting("SLURM_USER")).join(".config/enroot/.credentials");
    let _ = std::fs::remove_file(&creds);
    let key = format!("nvapi-{}-{}", std::process::id(), uuid_like());
    let mut ngc = Env::isolated();
    ngc.vars.insert("NGC_KEY".into(), key.clone());
    let (code, text) = preflight(&ngc);
    assert_ne!(code, 0);
    assert!(fail_lines(&text).iter().all(|l| l.starts_with("FAIL  enroot credentials")), "{text}");
    assert!(text.contains("tao-slurm credentials enroot"), "{text}");

    let stop = Arc::new(AtomicBool::new(false));
    let scanner = {
        let (stop, key) = (stop.clone(), key.clone());
        std::thread::spawn(move || {
            let mut scans = 0;
            let mut leaks = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                for entry in std::fs::read_dir("/proc").unwrap().flatten() {
                    if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
                        if String::from_utf8_lossy(&cmdline).contains(&key) {
                            leaks.push(String::from_utf8_lossy(&cmdline).replace('\0', " "));
                        }
                    }
                }
                scans += 1;
            }
            (scans, leaks)
        })
    };
    for _ in 0..2 {
        let out = ngc.run(&["credentials", "enroot"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        for stream in [&out.stdout, &out.stderr] {
            assert!(!String::from_utf8_lossy(stream).contains(&key), "the key was printed");
        }
    }
    stop.store(true, Ordering::Relaxed);
    let (scans, leaks) = scanner.join().unwrap();
    assert!(scans > 0);
    assert!(leaks.is_empty(), "the key was in a process's argv: {leaks:?}");
    let text = std::fs::read_to_string(&creds).unwrap();
    assert_eq!(
        text,
        format!("machine nvcr.io login $oauthtoken password {key}\nmachine authn.nvidia.com login $oauthtoken password {key}\n"),
        "exactly one pair after two runs"
    );
    assert_eq!(std::fs::metadata(&creds).unwrap().permissions().mode() & 0o777, 0o600);
    let found = Command::new("grep").args(["-rlF", &key]).arg(ngc.dir.path()).output().unwrap();
    assert!(found.stdout.is_empty(), "the key is in a local file: {}", String::from_utf8_lossy(&found.stdout));
    let (code, text) = preflight(&ngc);
    assert_eq!(code, 0, "{text}");
    assert!(text.lines().any(|l| l.starts_with("PASS  enroot credentials")), "{text}");
}

fn uuid_like() -> String {
    format!("{:x}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos())
}

#[test]
#[ignore = "stops a part of the shared cluster: dev/test runs it alone (cargo test --test sandbox -- --ignored)"]
fn the_monitor_resumes_after_being_killed_and_gives_no_false_verdict_while_slurmctld_restarts() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::isolated();
    // The monitor's warnings go to a file: the test waits for the one that says a refresh met the
    // controller down.
    let monitor_log = env.dir.path().join("monitor.err");
    let spawn_monitor = || {
        env.command(&["monitor"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::fs::File::create(&monitor_log).unwrap())
            .spawn()
            .unwrap()
    };
    let (job, _) = env.submit(&["--image", "ubuntu:22.04", "--gpus", "0", "--", "sleep", "25"]);
    let mut monitor = spawn_monitor();
    // `list` reads the state file only: what it shows, the monitor wrote.
    let state_of = || -> serde_json::Value {
        env.json(&["list", "--json"]).as_array().unwrap().iter().find(|v| v["job_id"] == job.as_str()).unwrap().clone()
    };
    wait_for("the monitor saw the job run", Duration::from_secs(60), Duration::from_millis(300), || {
        state_of()["status"] == "Running"
    });
    monitor.kill().unwrap();
    monitor.wait().unwrap();
    let mut monitor = spawn_monitor();
    {
        let _ctld = Switch::flip("service-ctl.sh", &["stop", "slurmctld"], &["start", "slurmctld"]);
        // The moment that proves it: a refresh of the restarted monitor found squeue failing (the
        // refresh that, misreading the silence, would have given a verdict).
        wait_for("a refresh met the controller down", Duration::from_secs(60), Duration::from_millis(300), || {
            std::fs::read_to_string(&monitor_log).unwrap_or_default().contains("squeue failed")
        });
        let v = state_of();
        assert!(!is_terminal(&v), "no verdict while slurmctld is down: {v}");
    }
    wait_for("the restarted monitor finished the job", Duration::from_secs(180), Duration::from_millis(500), || {
        is_terminal(&state_of())
    });
    monitor.kill().unwrap();
    monitor.wait().unwrap();
    let v = state_of();
    assert_eq!(v["status"], "Complete", "{v}");
    let events = env.json(&["events", &job, "--json"]);
    assert!(
        !events.as_array().unwrap().iter().any(|e| e["detail"].as_str().unwrap_or("").starts_with("Error")),
        "never an Error on the way: {events}"
    );
}

#[test]
#[ignore = "stops a part of the shared cluster: dev/test runs it alone (cargo test --test sandbox -- --ignored)"]
fn a_cancel_that_cannot_reach_the_controller_changes_nothing_and_says_why() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::isolated();
    let (job, _) = env.submit(&["--image", "ubuntu:22.04", "--gpus", "0", "--", "sleep", "120"]);
    let status_of = || -> serde_json::Value {
        env.json(&["list", "--json"]).as_array().unwrap().iter().find(|v| v["job_id"] == job.as_str()).unwrap().clone()
    };
    {
        let _ctld = Switch::flip("service-ctl.sh", &["stop", "slurmctld"], &["start", "slurmctld"]);
        let out = env.run(&["cancel", &job]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(5), "{err}");
        assert!(err.contains("not cancelled") && err.contains(&job), "{err}");
        assert!(err.contains("slurm controller") || err.contains("slurmctld"), "the reason is named: {err}");
        let v = status_of();
        assert_ne!(v["status"], "Canceled", "{v}");
        let events = env.json(&["events", &job, "--json"]);
        assert!(events.as_array().unwrap().iter().any(|e| e["kind"] == "cancel_failed"), "{events}");
    }
    // With the controller back, the same cancel works.
    wait_for("the cancel succeeds", Duration::from_secs(60), Duration::from_secs(1), || {
        let out = env.run(&["cancel", &job, "--json"]);
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    });
    assert_eq!(status_of()["status"], "Canceled");
    let v = env.wait_terminal(&job, Duration::from_secs(300));
    assert_eq!(v["status"], "Canceled", "{v}");
}

/// A tmpfs over every node's Enroot data path of the sandbox user (as a node whose ENROOT_DATA_PATH
/// is on a small disk), unmounted when dropped, even if an assertion failed.
struct SmallDataPath(Vec<std::path::PathBuf>);
impl SmallDataPath {
    fn mount(size: &str) -> SmallDataPath {
        let user = sandbox::setting("SLURM_USER");
        let id = |flag: &str| {
            let out = Command::new("id").args([flag, user]).output().unwrap();
            String::from_utf8(out.stdout).unwrap().trim().to_string()
        };
        let (uid, gid) = (id("-u"), id("-g"));
        let mut mounted = SmallDataPath(Vec::new());
        for node in ["node1", "node2", "node3", "node4"] {
            let data = sandbox::dir().join(format!("enroot-data/{node}/user-{uid}/data"));
            std::fs::create_dir_all(&data).unwrap();
            let out = Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700,uid={uid},gid={gid}"), "tmpfs"])
                .arg(&data)
                .output()
                .unwrap();
            assert!(out.status.success(), "mount {}: {}", data.display(), String::from_utf8_lossy(&out.stderr));
            mounted.0.push(data);
        }
        mounted
    }
}
impl Drop for SmallDataPath {
    fn drop(&mut self) {
        for data in &self.0 {
            let _ = Command::new("umount").arg(data).status();
        }
    }
}

/// Preflight looks at a compute node's Enroot data path (as that node's enroot.conf sets it) and
/// warns, with the path and the figures, when the largest image of the squashfs cache does not fit
/// there unpacked, and a job of the image then fails with the real Enroot's "No space left on
/// device", classified as the node's; on the sandbox's own disk it fits.
#[test]
#[ignore = "mounts a small tmpfs over every node's Enroot data path, which other tests' containers need: dev/test runs it alone (cargo test --test sandbox -- --ignored)"]
fn preflight_warns_when_the_enroot_data_path_cannot_hold_the_image() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::isolated();
    // At least one image in the cache (the sandbox's are about 29 MB as squashfs, more unpacked).
    env.ok(&["image", "import", "nvcr.io/nvidia/pytorch:24.01-py3"]);
    let cache = format!("{}/sqsh-cache/", env.vars["SLURM_BASE_RESULTS_DIR"].trim_end_matches('/'));
    let line = |text: &str, mark: &str| {
        let lines: Vec<String> =
            text.lines().filter(|l| l.starts_with(&format!("{mark}  enroot data path"))).map(String::from).collect();
        assert_eq!(lines.len(), 2, "one per login host, {mark}:\n{text}");
        lines[0].clone()
    };
    let uid = {
        let out = Command::new("id").args(["-u", sandbox::setting("SLURM_USER")]).output().unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let data_path = |node: &str| format!("{}/enroot-data/{node}/user-{uid}/data", sandbox::dir().display());
    {
        let _small = SmallDataPath::mount("1m");
        let (code, text) = preflight(&env);
        assert_eq!(code, 0, "a warning, not a failure: {text}");
        let warn = line(&text, "WARN");
        let node = warn.split(" on ").nth(1).and_then(|r| r.split_whitespace().next()).unwrap_or("").to_string();
        assert!(warn.contains(&format!("ENROOT_DATA_PATH {} on {node} has ", data_path(&node))), "{warn}");
        // 1 MiB of tmpfs, in bytes, and the image unpacked: tens of MB.
        assert!(warn.contains("1.0 MiB (1048576 bytes) free"), "{warn}");
        assert!(
            warn.contains(&format!("the largest cached image, {cache}")) && warn.contains(".sqsh, unpacks to "),
            "{warn}"
        );
        assert!(warn.contains("No space left on device"), "{warn}");
        assert!(text.contains("Ask the cluster admins for an ENROOT_DATA_PATH on a larger local disk"), "{text}");
        // What the warning foretells: a job of the image fails as Enroot unpacks it (infra: a full
        // node's disk; no retry asked for here, every node is as full), with the line and the path.
        let mut once = Env::isolated();
        once.vars.insert("MAX_JOB_RETRIES".into(), "0".into());
        let (job, _) = once.submit(&["--image", "nvcr.io/nvidia/pytorch:24.01-py3", "--gpus", "0", "--", "true"]);
        let v = once.wait_terminal(&job, Duration::from_secs(300));
        assert_eq!(v["attempts"][0]["failure_class"], "infra", "{v}");
        let message = v["message"].as_str().unwrap_or("");
        assert!(message.contains("Write on output file failed because No space left on device"), "{v}");
        assert!(message.contains("ENROOT_DATA_PATH"), "{v}");
    }
    // The sandbox's own disk holds it.
    let (code, text) = preflight(&env);
    assert_eq!(code, 0, "{text}");
    let pass = line(&text, "PASS");
    assert!(pass.contains("free; the largest cached image, ") && pass.contains(".sqsh, unpacks to "), "{pass}");
    assert!(pass.contains("/enroot-data/node"), "{pass}");
}
