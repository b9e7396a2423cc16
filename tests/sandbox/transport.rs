//! The login-node transport against the sandbox's two sshd login hosts: failover only on connection
//! failures, in-band exit status, key and host-key policies, local mode.

use crate::common::sandbox::{self, logins_per_host};
use crate::common::Env;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};
use tao_slurm_engine::remote::{self, Idempotency};

#[test]
fn first_host_down_fails_over_to_the_second_within_the_connect_timeout() {
    let mut env = Env::isolated();
    // Nothing listens on 2299: the first host refuses connections.
    env.vars.insert("SLURM_HOSTNAME".into(), "127.0.0.1:2299,sandbox-login2".into());
    let start = Instant::now();
    let v = env.json(&["submit", "--json", "--image", "ubuntu:22.04", "--gpus", "0", "--", "true"]);
    let took = start.elapsed();
    assert_eq!(v["login_host"], "sandbox-login2", "{v}");
    assert!(took < Duration::from_secs(10), "the switch took {took:?}, more than the 10 s connect timeout");
    let status = env.wait_terminal(v["job_id"].as_str().unwrap(), Duration::from_secs(300));
    assert_eq!(status["status"], "Complete");
    assert_eq!(status["login_host"], "sandbox-login2");
}

#[test]
fn words_in_output_and_exit_255_are_results_not_connection_failures() {
    let env = Env::isolated();
    let settings = env.settings();
    let transport = remote::connect(&settings).unwrap();
    let marker = format!("/tmp/tao-slurm-255-{}", std::process::id());
    let _ = std::fs::remove_file(&marker);
    let script = format!(
        "echo ran >> {marker}\necho 'ssh: connect to host login port 22: Connection refused' >&2\necho 'No route to host'\nexit 255\n"
    );
    let out = transport.run_script(&script, Idempotency::Idempotent).unwrap();
    assert_eq!(out.exit_code, 255);
    assert_eq!(out.host, "sandbox-login1", "no failover");
    assert_eq!(out.stdout, "No route to host\n");
    assert!(out.stderr.contains("Connection refused"));
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "ran\n", "run exactly once, never re-run");
    let _ = std::fs::remove_file(&marker);
}

#[test]
fn a_key_readable_by_others_is_refused_and_left_unchanged() {
    let mut env = Env::isolated();
    let key = env.dir.path().join("id_open");
    std::fs::copy(&env.vars["SSH_KEY_PATH"], &key).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    env.vars.insert("SSH_KEY_PATH".into(), key.display().to_string());
    let out = env.run(&["submit", "--image", "ubuntu:22.04", "--", "true"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains(&format!("chmod 600 {}", key.display())), "{stderr}");
    assert_eq!(std::fs::metadata(&key).unwrap().permissions().mode() & 0o777, 0o644, "the tool never changes the key");
}

#[test]
fn a_new_host_key_is_accepted_only_by_explicit_choice_and_recorded() {
    let mut env = Env::isolated();
    let known = env.dir.path().join("known_hosts");
    std::fs::write(&known, "").unwrap();
    env.vars.insert("SSH_KNOWN_HOSTS".into(), known.display().to_string());
    env.vars.insert("SLURM_HOSTNAME".into(), "sandbox-login1".into());
    let out = env.run(&["submit", "--image", "ubuntu:22.04", "--gpus", "0", "--", "true"]);
    assert_eq!(out.status.code(), Some(4), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ssh-keyscan"));
    assert_eq!(std::fs::read_to_string(&known).unwrap(), "", "nothing recorded without the choice");
    let v = env.json(&[
        "--accept-new-host-key",
        "submit",
        "--json",
        "--image",
        "ubuntu:22.04",
        "--gpus",
        "0",
        "--",
        "true",
    ]);
    assert!(v["slurm_job_id"].as_str().is_some());
    let recorded = std::fs::read_to_string(&known).unwrap();
    let port = &sandbox::ssh_ports()[0];
    assert!(recorded.contains(&format!("[127.0.0.1]:{port}")), "the key is recorded: {recorded}");
    // And from then on it is verified without the flag.
    env.ok(&["status", v["job_id"].as_str().unwrap()]);
}

#[test]
fn local_mode_runs_the_same_paths_without_ssh() {
    let mut env = Env::isolated();
    let base = env.dir.path().join("shared");
    std::fs::create_dir(&base).unwrap();
    std::fs::set_permissions(env.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    env.vars.insert("SLURM_BASE_RESULTS_DIR".into(), base.display().to_string());
    env.vars.insert("SLURM_CONF".into(), sandbox::dir().join("etc/slurm.conf").display().to_string());
    env.vars.insert(
        "PATH".into(),
        format!("{}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", sandbox::dir().join("bin").display()),
    );
    env.vars.remove("SLURM_HOSTNAME");
    env.vars.remove("SSH_KEY_PATH");
    let v = env.json(&[
        "--local",
        "submit",
        "--json",
        "--image",
        "ubuntu:22.04",
        "--gpus",
        "1",
        "--shell",
        "--",
        "echo local-ok",
    ]);
    assert_eq!(v["login_host"], "local");
    let status = env.wait_terminal_with(&["--local"], v["job_id"].as_str().unwrap(), Duration::from_secs(300));
    assert_eq!(status["status"], "Complete", "{status}");
    let logs = env.json(&["--local", "logs", v["job_id"].as_str().unwrap(), "--json"]);
    assert!(logs["stdout"].as_str().unwrap().contains("local-ok"), "{logs}");
}

#[test]
fn an_unknown_submission_is_found_by_its_name_and_never_resubmitted() {
    let env = Env::new();
    let plan = env.record_unsubmitted();
    // What a connection lost during sbatch leaves behind: the job exists, its id never came back.
    let slurm_id =
        env.ssh(&format!("sbatch --parsable -o /dev/null --job-name={} --wrap true\n", plan.layout.job_name));
    let slurm_id = slurm_id.trim().to_string();
    let v = env.wait_terminal(&plan.layout.job_id, Duration::from_secs(300));
    assert_eq!(v["slurm_job_id"].as_str(), Some(slurm_id.as_str()), "{v}");
    assert_eq!(v["status"], "Complete", "{v}");
    let events = env.json(&["events", &plan.layout.job_id, "--json"]);
    assert!(events.as_array().unwrap().iter().any(|e| e["kind"] == "adopted"), "{events}");
    assert_eq!(
        env.slurm_jobs_counted(&plan.layout.job_name, 1),
        vec![slurm_id],
        "one Slurm job for the name, never two"
    );
}

#[test]
fn a_login_host_behind_a_jump_host_is_reached_through_the_users_ssh_config() {
    let mut env = Env::isolated();
    let fingerprint = env.use_own_key();
    let key = env.vars["SSH_KEY_PATH"].clone();
    let known = sandbox::dir().join("ssh/known_hosts");
    // The user's own ssh_config: the login host (port 2223) is reached only through a jump host
    // (port 2222), as on sites whose login nodes sit behind a bastion.
    let ports = sandbox::ssh_ports();
    let (login, bastion, user) = (&ports[1], &ports[0], sandbox::setting("SLURM_USER"));
    let config = env.dir.path().join("ssh_config");
    std::fs::write(
        &config,
        format!(
            "Host behind-the-bastion\n    HostName 127.0.0.1\n    Port {login}\n    ProxyJump bastion\n\
             Host bastion\n    HostName 127.0.0.1\n    Port {bastion}\n\
             Host *\n    User {user}\n    IdentityFile {key}\n    IdentitiesOnly yes\n    UserKnownHostsFile {}\n    \
             GlobalKnownHostsFile /dev/null\n    StrictHostKeyChecking yes\n    BatchMode yes\n",
            known.display()
        ),
    )
    .unwrap();
    env.vars.insert("SSH_CONFIG".into(), config.display().to_string());
    env.vars.insert("SLURM_HOSTNAME".into(), "behind-the-bastion".into());
    let before = logins_per_host(&fingerprint);
    let out = env.run(&["check-path", "/tmp", "/nonexistent-tao-path"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("/nonexistent-tao-path"), "{text}");
    assert_eq!(out.status.code(), Some(1), "connected, one path missing: {text}");
    let after = logins_per_host(&fingerprint);
    let delta: Vec<usize> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    assert_eq!(delta, vec![1, 1], "one login to the bastion, one through it to the login host: {text}");
    // The commands ran on the login host behind it: its sshd saw the session, the jump host only a tunnel.
    let v = env.json(&["preflight", "--json"]);
    assert!(v.to_string().contains("behind-the-bastion"), "{v}");
}

#[test]
fn a_jump_host_is_held_to_the_same_known_hosts_and_batch_mode() {
    // The bastion's key is not in SSH_KNOWN_HOSTS (only in a known_hosts under $HOME, which ssh does
    // not read): refused. With it there, the same set-up connects, which ssh's own ProxyJump hop
    // cannot do: it is started without our options and reads only the default known_hosts files.
    let mut env = Env::isolated();
    env.use_own_key();
    let key = env.vars["SSH_KEY_PATH"].clone();
    let sandbox_known = std::fs::read_to_string(sandbox::dir().join("ssh/known_hosts")).unwrap();
    let home_ssh = env.dir.path().join(".ssh");
    std::fs::create_dir_all(&home_ssh).unwrap();
    std::fs::write(home_ssh.join("known_hosts"), &sandbox_known).unwrap();
    // Only the login host behind the bastion (port 2223) is in the configured known_hosts.
    let only_login: String = sandbox_known
        .lines()
        .filter(|l| l.starts_with(&format!("[127.0.0.1]:{} ", sandbox::ssh_ports()[1])))
        .map(|l| format!("{l}\n"))
        .collect();
    let known = env.dir.path().join("known_hosts_login_only");
    std::fs::write(&known, only_login).unwrap();
    let ports = sandbox::ssh_ports();
    let (login, bastion, user) = (&ports[1], &ports[0], sandbox::setting("SLURM_USER"));
    let config = env.dir.path().join("ssh_config");
    std::fs::write(
        &config,
        format!(
            "Host behind-the-bastion\n    HostName 127.0.0.1\n    Port {login}\n    ProxyJump bastion\n\
             Host bastion\n    HostName 127.0.0.1\n    Port {bastion}\n\
             Host *\n    User {user}\n    IdentityFile {key}\n    IdentitiesOnly yes\n"
        ),
    )
    .unwrap();
    env.vars.insert("SSH_CONFIG".into(), config.display().to_string());
    env.vars.insert("SSH_KNOWN_HOSTS".into(), known.display().to_string());
    env.vars.insert("SLURM_HOSTNAME".into(), "behind-the-bastion".into());
    env.vars.insert("SSH_CONNECT_TIMEOUT".into(), "5".into());
    let out = env.run(&["check-path", "/tmp"]);
    let text = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(4), "the bastion's unknown key was accepted: {text}");
    // With the bastion's key in the configured file, the same set-up connects.
    std::fs::write(&known, &sandbox_known).unwrap();
    let out = env.run(&["check-path", "/tmp"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
