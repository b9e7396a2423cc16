//! Issue 12 on the sandbox: nothing another user, a job or a broken network can do makes tao-slurm
//! leak a secret, hang, or report a false verdict. The hostile neighbour is a second Unix user of the
//! sandbox (`SANDBOX_NEIGHBOUR`); shared storage is the sandbox's local filesystem.

use crate::common::sandbox::{self, ssh_ports};
use crate::common::wait::{poll, wait_for};
use crate::common::Env;
use serde_json::Value;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn uniq() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..12].to_string()
}

fn neighbour() -> String {
    sandbox::settings().get("SANDBOX_NEIGHBOUR").cloned().unwrap_or_else(|| "neighbour".into())
}

/// Run a shell snippet as the neighbour (root runs the tests).
fn as_neighbour(script: &str) {
    let st = Command::new("runuser").args(["-u", &neighbour(), "--", "bash", "-c", script]).status().unwrap();
    assert!(st.success(), "as the neighbour: {script}");
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A results base of this test's own, inside the sandbox user's shared directory.
fn own_base(env: &mut Env) -> PathBuf {
    let base = PathBuf::from(&env.vars["SLURM_BASE_RESULTS_DIR"]).join(format!("trust-{}", uniq()));
    env.vars.insert("SLURM_BASE_RESULTS_DIR".into(), base.display().to_string());
    base
}

/// Every file under `dir` that contains `needle` (a secret must be in none).
fn files_containing(dir: &Path, needle: &str) -> Vec<String> {
    let out = Command::new("grep").args(["-rlF", "--", needle]).arg(dir).output().unwrap();
    String::from_utf8_lossy(&out.stdout).lines().map(String::from).collect()
}

fn submit_json(env: &Env, args: &[&str]) -> (Value, String) {
    let mut full = vec!["submit", "--json"];
    full.extend_from_slice(args);
    let out = env.run(&full);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "submit {args:?}: {stdout}\n{stderr}");
    (serde_json::from_str(&stdout).unwrap(), stderr)
}

#[test]
fn secrets_are_gone_whatever_way_a_job_ends_and_never_reach_a_log() {
    let mut env = Env::new();
    let base = own_base(&mut env);
    let secret = format!("tok-{}-'$(x)", uniq());
    env.vars.insert("MY_TOKEN".into(), secret.clone());
    env.vars.insert("MAX_JOB_RETRIES".into(), "0".into());
    env.vars.insert("TAO_SLURM_LOG".into(), "trace".into());
    let common = ["--image", "ubuntu:22.04", "--gpus", "0", "--secret-env", "MY_TOKEN", "--shell", "--"];
    let with = |cmd: &str| -> Vec<String> { common.iter().map(|s| s.to_string()).chain([cmd.to_string()]).collect() };
    let mut logs = String::new();
    let mut submit = |cmd: &str, monitor: bool| {
        let mut args = with(cmd);
        if monitor {
            args.insert(0, "--monitor".into());
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let (v, stderr) = submit_json(&env, &refs);
        logs.push_str(&stderr);
        v["job_id"].as_str().unwrap().to_string()
    };
    // The job checks that it got the value (without printing it).
    let user_error = submit("[ -n \"$MY_TOKEN\" ] && echo has-token; exit 3", true);
    let infra = submit("echo 'NCCL error: unhandled system error' >&2; exit 1", false);
    let cancelled = submit("echo started; sleep 300", false);
    // Cancelled once it runs, or after a while pending (the shared sandbox may be busy): either
    // way its secrets file exists and must go.
    let _ = poll(Duration::from_secs(20), Duration::from_millis(500), || env.status(&cancelled)["status"] == "Running");
    assert!(base.join("secrets").join(&cancelled).join("env").exists(), "the secrets file was written");
    let out = env.run(&["cancel", &cancelled]);
    logs.push_str(&text(&out).1);
    assert!(out.status.success(), "{:?}", text(&out));
    for (job, want) in [(&user_error, "Error"), (&infra, "Error"), (&cancelled, "Canceled")] {
        let v = env.wait_terminal(job, Duration::from_secs(300));
        assert_eq!(v["status"], want, "{v}");
        let secrets_dir = base.join("secrets").join(job);
        assert!(!secrets_dir.exists(), "{} outlived job {job} ({want})", secrets_dir.display());
    }
    let v = env.status(&infra);
    assert!(v["message"].as_str().unwrap().contains("retry budget exhausted"), "{v}");
    let out = env.json(&["logs", &user_error, "--json"]);
    assert!(out["stdout"].as_str().unwrap().contains("has-token"), "the job had its secret: {out}");
    assert!(files_containing(&base, "tok-").is_empty(), "the secret is still under {}", base.display());
    // No log line, at trace level, carried the value: not the submits', not the cancel's, not the
    // background monitor's.
    let monitor_log = format!("{}.monitor.log", env.vars["TAO_SLURM_STATE"]);
    let monitor = std::fs::read_to_string(&monitor_log).unwrap_or_default();
    assert!(logs.contains("round trip") && logs.contains("***"), "trace logs of the scripts were written");
    for (name, text) in [("stderr", &logs), ("monitor log", &monitor)] {
        assert!(!text.contains("tok-"), "the secret is in the {name}");
    }
    // Local files are private: the state file, its WAL and SHM, and the monitor's log.
    let state = PathBuf::from(&env.vars["TAO_SLURM_STATE"]);
    for suffix in ["", "-wal", "-shm", ".monitor.log"] {
        let p = PathBuf::from(format!("{}{suffix}", state.display()));
        let mode = std::fs::metadata(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).permissions().mode();
        assert_eq!(mode & 0o077, 0, "{} has mode {mode:o}", p.display());
    }
}

#[test]
fn enroot_credentials_at_trace_level_log_no_key() {
    let mut env = Env::new();
    let key = format!("nvapi-{}", uniq());
    env.vars.insert("NGC_KEY".into(), key.clone());
    env.vars.insert("TAO_SLURM_LOG".into(), "trace".into());
    let out = env.run(&["credentials", "enroot"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("round trip"), "the script was traced");
    assert!(!stderr.contains(&key) && !stdout.contains(&key), "the key was printed");
}

#[test]
fn a_submitter_killed_after_recording_never_lets_the_job_run_without_its_secret() {
    let mut env = Env::new();
    own_base(&mut env);
    env.vars.insert("MY_TOKEN".into(), format!("tok-{}", uniq()));
    let mut cmd = env.command(&[
        "submit",
        "--json",
        "--image",
        "ubuntu:22.04",
        "--gpus",
        "0",
        "--secret-env",
        "MY_TOKEN",
        "--",
        "true",
    ]);
    let mut child =
        cmd.env("TAO_SLURM_FAILPOINT", "after-record").stderr(std::process::Stdio::piped()).spawn().unwrap();
    // The attempt is recorded before anything is sent; the submitter dies right then.
    let state = PathBuf::from(&env.vars["TAO_SLURM_STATE"]);
    wait_for("the job recorded", Duration::from_secs(90), Duration::from_millis(500), || {
        env.json(&["list", "--json"]).as_array().is_some_and(|a| !a.is_empty())
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let job = env.json(&["list", "--json"])[0]["job_id"].as_str().unwrap().to_string();
    assert!(state.exists());
    // A later process resumes the submission (once it is 30 s old): without the secret's value it
    // refuses to submit, and says why. (Before then a status leaves the job as it is.)
    let v = env.wait_terminal(&job, Duration::from_secs(32 + 60));
    assert_eq!(v["status"], "Error", "{v}");
    let message = v["message"].as_str().unwrap();
    assert!(message.contains("secrets file") && message.contains("MY_TOKEN"), "{message}");
    assert!(env.slurm_jobs_named(&format!("tao-job-{job}")).is_empty(), "no Slurm job ran without the secret");
}

/// A directory below the sandbox's shared root (which root owns), of `owner` with `mode`.
fn shared_dir(owner: &str, mode: u32) -> PathBuf {
    let dir = sandbox::dir().join("shared").join(format!("open-{}", uniq()));
    std::fs::create_dir(&dir).unwrap();
    assert!(Command::new("chown").arg(owner).arg(&dir).status().unwrap().success());
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
    dir
}

/// A directory of the neighbour's, for their plots.
fn neighbour_dir(mode: u32) -> PathBuf {
    shared_dir(&neighbour(), mode)
}

#[test]
fn a_base_the_neighbour_can_write_or_owns_is_refused_and_nothing_of_theirs_runs() {
    let marker = sandbox::dir().join("shared").join(format!("marker-{}", uniq()));
    // 1. A parent that others can write (root's, mode 777, no sticky bit).
    let open = shared_dir("root", 0o777);
    let mut env = Env::new();
    env.vars.insert("SLURM_BASE_RESULTS_DIR".into(), open.join("slurmuser/tao").display().to_string());
    let out = env.run(&["submit", "--image", "ubuntu:22.04", "--gpus", "0", "--", "true"]);
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(err.contains(&format!("{} is writable by group or others", open.display())), "{err}");
    assert!(err.contains(&format!("chmod go-w {}", open.display())), "the fix is named: {err}");
    assert!(!open.join("slurmuser").exists(), "nothing was created below it");
    // 2. The neighbour made the base itself (and planted a secrets directory and a script in it).
    let theirs = neighbour_dir(0o755);
    as_neighbour(&format!(
        "mkdir -p {t}/secrets {t}/sbatch && printf 'touch {m}\\n' > {t}/sbatch/plant.sh && chmod -R a+rwx {t}",
        t = theirs.display(),
        m = marker.display()
    ));
    env.vars.insert("SLURM_BASE_RESULTS_DIR".into(), theirs.display().to_string());
    env.vars.insert("MY_TOKEN".into(), "tok-neighbour-test".into());
    let out = env.run(&["submit", "--image", "ubuntu:22.04", "--gpus", "0", "--secret-env", "MY_TOKEN", "--", "true"]);
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(err.contains(&format!("refusing {}", theirs.display())), "{err}");
    assert!(files_containing(&theirs, "tok-neighbour-test").is_empty(), "a secret landed in the neighbour's base");
    // 3. Our own base, with a symlink planted where the logs go (a job of ours, or an earlier mistake).
    let mut env = Env::new();
    let base = own_base(&mut env);
    std::fs::create_dir_all(&base).unwrap();
    std::os::unix::fs::symlink(&theirs, base.join("slurm-logs")).unwrap();
    let user = &env.vars["SLURM_USER"];
    assert!(Command::new("chown")
        .args(["-h", user])
        .arg(&base)
        .arg(base.join("slurm-logs"))
        .status()
        .unwrap()
        .success());
    let out = env.run(&["submit", "--image", "ubuntu:22.04", "--gpus", "0", "--", "true"]);
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(err.contains(&format!("refusing {}/slurm-logs", base.display())) && err.contains("symbolic link"), "{err}");
    assert!(!marker.exists(), "the neighbour's command ran");
}

#[test]
fn a_cache_entry_the_neighbour_planted_is_never_used() {
    let cache = neighbour_dir(0o1777);
    let image = "nvcr.io/nvidia/tao/tao-toolkit:6.26.3-pyt";
    let name = tao_slurm::sqsh::cache_file_name(&tao_slurm::spec::ImageRef::parse(image).unwrap());
    // A file with the cache's name and the squashfs magic, made by the neighbour.
    as_neighbour(&format!(
        "printf 'hsqs-planted' > {}/{name} && chmod 644 {}/{name}",
        cache.display(),
        cache.display()
    ));
    let mut env = Env::new();
    own_base(&mut env);
    env.vars.insert("TAO_SLURM_USE_SQSH".into(), "true".into());
    env.vars.insert("TAO_SLURM_SQSH_CACHE_DIR".into(), cache.display().to_string());
    let out = env.run(&["submit", "--json", "--image", image, "--gpus", "0", "--", "true"]);
    let (stdout, err) = text(&out);
    // It cannot replace the neighbour's file in a sticky directory: it says so and submits nothing.
    assert_eq!(out.status.code(), Some(5), "the remote command's failure: {stdout}");
    assert!(err.contains("belongs to another user"), "{err}");
    assert_eq!(std::fs::read_to_string(cache.join(&name)).unwrap(), "hsqs-planted");
    // In a directory others may write without a sticky bit, a symlink planted under the name is
    // replaced by our own conversion, never followed.
    let loose = neighbour_dir(0o777);
    let victim = loose.join("victim");
    as_neighbour(&format!("printf precious > {v} && ln -s {v} {}/{name}", loose.display(), v = victim.display()));
    env.vars.insert("TAO_SLURM_SQSH_CACHE_DIR".into(), loose.display().to_string());
    let v = env.json(&["submit", "--json", "--image", image, "--gpus", "0", "--", "true"]);
    let job = v["job_id"].as_str().unwrap().to_string();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let entry = loose.join(&name);
    let meta = std::fs::symlink_metadata(&entry).unwrap();
    assert!(meta.file_type().is_file(), "the planted link was replaced");
    assert_eq!(
        meta.uid(),
        std::fs::metadata(sandbox::dir().join("shared").join(sandbox::setting("SLURM_USER"))).unwrap().uid()
    );
    assert_eq!(env.wait_terminal(&job, Duration::from_secs(300))["status"], "Complete");
}

#[test]
fn a_job_that_turns_status_json_into_a_fifo_or_a_huge_symlink_hangs_nothing() {
    let mut env = Env::new();
    let base = own_base(&mut env);
    let big = base.join("big.bin");
    // status.json becomes a FIFO (reading it would block forever) or a symlink to a 20 GiB sparse file.
    let fifo = env.submit(&[
        "--image", "ubuntu:22.04", "--gpus", "0", "--shell", "--",
        "d=$TAO_API_RESULTS_DIR/$TAO_JOB_ID; mkdir -p $d; echo '{\"status\":\"RUNNING\",\"message\":\"hi\"}' > $d/status.json; sleep 4; rm -f $d/status.json; mkfifo $d/status.json; sleep 12",
    ]).0;
    let link = env.submit(&[
        "--image", "ubuntu:22.04", "--gpus", "0", "--shell", "--",
        &format!("d=$TAO_API_RESULTS_DIR/$TAO_JOB_ID; mkdir -p $d; truncate -s 20G {b}; ln -sfn {b} $d/status.json; sleep 12", b = big.display()),
    ]).0;
    // status, watch and the monitor keep answering while the files are there.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        let out = env.run_with_deadline(&["status", &fifo, &link, "--json"], Duration::from_secs(40));
        assert!(out.status.success(), "{:?}", text(&out));
        std::thread::sleep(Duration::from_secs(1));
    }
    let out = env.run_with_deadline(&["watch", &fifo, &link, "--interval", "1"], Duration::from_secs(120));
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    let out = env.run_with_deadline(&["monitor", "--idle-exit", "1"], Duration::from_secs(60));
    assert!(out.status.success(), "{:?}", text(&out));
    let v = env.json(&["status", &fifo, &link, "--json"]);
    for j in v.as_array().unwrap() {
        assert_eq!(j["status"], "Complete", "{j}");
    }
    let _ = std::fs::remove_file(&big);
}

/// A TCP listener that accepts connections and never says a word: a login host that hangs.
fn silent_host() -> (std::net::TcpListener, u16) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

#[test]
fn a_login_host_that_never_speaks_costs_about_the_connect_timeout() {
    let (_hold, port) = silent_host();
    let mut env = Env::isolated();
    env.vars.insert("SLURM_HOSTNAME".into(), format!("127.0.0.1:{port},sandbox-login2"));
    env.vars.insert("SSH_CONNECT_TIMEOUT".into(), "3".into());
    let start = Instant::now();
    let out = env.run_with_deadline(&["check-path", "/var", "--json"], Duration::from_secs(60));
    let took = start.elapsed();
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(took < Duration::from_secs(3 + 5 + 5), "failover took {took:?}");
}

#[test]
fn a_remote_command_that_hangs_ends_at_its_deadline() {
    let mut env = Env::isolated();
    env.vars.insert("TAO_SLURM_REMOTE_TIMEOUT".into(), "2".into());
    let remote = tao_slurm_engine::remote::connect(&env.settings()).unwrap();
    let start = Instant::now();
    let err = remote.run_script("sleep 30", tao_slurm_engine::remote::Idempotency::Idempotent).unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(15), "{:?}", start.elapsed());
    assert!(err.to_string().contains("did not finish within 2 s"), "{err}");
    // The transport recovers: the next call gets a new shell.
    let out = remote.run_script("echo fine", tao_slurm_engine::remote::Idempotency::Idempotent).unwrap();
    assert_eq!(out.stdout.trim(), "fine");
}

/// Straight to the login hosts' addresses with the sandbox key, without its ssh_config (whose
/// IdentityFile would offer the sandbox key whatever SSH_KEY_PATH says).
fn direct() -> Env {
    let mut env = Env::new();
    env.vars.remove("SSH_CONFIG");
    env.vars.insert(
        "SLURM_HOSTNAME".into(),
        ssh_ports().iter().map(|p| format!("127.0.0.1:{p}")).collect::<Vec<_>>().join(","),
    );
    env
}

#[test]
fn a_warm_master_never_lets_other_settings_skip_host_key_or_key_checks() {
    let warm = direct();
    warm.ok(&["check-path", "/var"]);
    // Same control directory, an empty known_hosts: refused, although a master is up.
    let mut empty = direct();
    let known = empty.dir.path().join("known_hosts");
    std::fs::write(&known, "").unwrap();
    empty.vars.insert("SSH_KNOWN_HOSTS".into(), known.display().to_string());
    let out = empty.run(&["check-path", "/var"]);
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(err.contains("host key"), "{err}");
    // Same control directory, a key the host does not accept: refused.
    let mut wrong = direct();
    let key = wrong.dir.path().join("id_other");
    assert!(Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&key)
        .status()
        .unwrap()
        .success());
    wrong.vars.insert("SSH_KEY_PATH".into(), key.display().to_string());
    let out = wrong.run(&["check-path", "/var"]);
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(err.contains("Permission denied"), "{err}");
}

#[test]
fn a_changed_host_key_is_a_possible_attack_and_stops_failover() {
    let mut env = Env::isolated();
    // known_hosts with another key for the first login host, the right one for the second.
    let other = env.dir.path().join("other_host_key");
    assert!(Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&other)
        .status()
        .unwrap()
        .success());
    let fake = std::fs::read_to_string(other.with_extension("pub")).unwrap();
    let real = std::fs::read_to_string(&env.vars["SSH_KNOWN_HOSTS"]).unwrap();
    let ports = ssh_ports();
    let fake_line =
        format!("[127.0.0.1]:{} {}", ports[0], fake.split_whitespace().take(2).collect::<Vec<_>>().join(" "));
    let real_lines: Vec<&str> =
        real.lines().filter(|l| !l.starts_with(&format!("[127.0.0.1]:{} ", ports[0]))).collect();
    let known = env.dir.path().join("known_hosts");
    std::fs::write(&known, format!("{fake_line}\n{}\n", real_lines.join("\n"))).unwrap();
    env.vars.insert("SSH_KNOWN_HOSTS".into(), known.display().to_string());
    env.vars.remove("SSH_CONFIG");
    env.vars
        .insert("SLURM_HOSTNAME".into(), ports.iter().map(|p| format!("127.0.0.1:{p}")).collect::<Vec<_>>().join(","));
    let out = env.run(&["check-path", "/var"]);
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(4), "it must not fail over to the second host: {err}");
    assert!(err.contains("man-in-the-middle") && !err.contains("ssh-keyscan"), "{err}");
}
