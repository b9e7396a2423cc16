//! `init` (issue 41) against the sandbox, from a user with no settings at all: with `--yes` and flags
//! it writes an env file that preflight passes and a first job completes with; driven through a
//! terminal it asks, offers what it found and writes only on "y"; a key others can read, an unknown
//! host key and a partition that does not exist are each named with their fix, and nothing is written.

use crate::common::pty::PtyChild;
use crate::common::wait::wait_for;
use crate::common::Env;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

const SSH: &str = "/var/lib/tao-slurm-sandbox/ssh";
const BASE: &str = "/var/lib/tao-slurm-sandbox/shared/slurmuser";

/// A user with a HOME of its own and none of the sandbox's settings.
fn newcomer() -> Env {
    let mut env = Env::isolated();
    let keep = ["HOME", "TAO_SLURM_STATE", "TAO_SLURM_CONTROL_DIR", "TAO_SLURM_CONTROL_PERSIST", "TAO_SLURM_USE_SQSH"];
    env.vars.retain(|k, _| keep.contains(&k.as_str()));
    env
}

fn env_file(env: &Env) -> PathBuf {
    env.dir.path().join(".config/tao/.env")
}

/// A copy of the sandbox key in the user's ~/.ssh with `mode` (and its .pub beside it).
fn own_key(env: &Env, mode: u32) -> PathBuf {
    let dir = env.dir.path().join(".ssh");
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("id_ed25519");
    std::fs::copy(format!("{SSH}/id_ed25519"), &key).unwrap();
    std::fs::copy(format!("{SSH}/id_ed25519.pub"), dir.join("id_ed25519.pub")).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(mode)).unwrap();
    key
}

fn flags<'a>(key: &'a str, known_hosts: &'a str, partition: &'a str) -> Vec<&'a str> {
    vec![
        "init",
        "--yes",
        "--host",
        "127.0.0.1:2222",
        "--user",
        "slurmuser",
        "--key",
        key,
        "--known-hosts",
        known_hosts,
        "--partition",
        partition,
        "--base-dir",
        BASE,
    ]
}

fn text(out: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn init_yes_writes_an_env_file_that_preflight_passes_and_a_job_runs_with() {
    let env = newcomer();
    let known = format!("{SSH}/known_hosts");
    let out = env.run(&flags(&format!("{SSH}/id_ed25519"), &known, "polar"));
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    for found in ["debug: MaxTime 00:30:00", "polar (default): MaxTime 04:00:00", "accounts: default", "pyxis: present"]
    {
        assert!(said.contains(found), "init names {found:?}: {said}");
    }
    let path = env_file(&env);
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    let written = std::fs::read_to_string(&path).unwrap();
    assert!(written.contains("SLURM_HOSTNAME=127.0.0.1:2222\nSLURM_USER=slurmuser\n"), "{written}");
    assert!(
        written.contains("SLURM_PARTITION=polar\n") && written.contains(&format!("SLURM_BASE_RESULTS_DIR={BASE}\n"))
    );

    // The settings come from the file alone: preflight is green, a first job completes.
    let pre = env.run(&["preflight"]);
    assert_eq!(pre.status.code(), Some(0), "{}", text(&pre));
    assert!(!text(&pre).contains("FAIL"), "{}", text(&pre));
    let (job, _) = env.submit(&["--image", "ubuntu:22.04", "--gpus", "0", "--shell", "--", "echo first job"]);
    let done = env.wait_terminal(&job, Duration::from_secs(300));
    assert_eq!(done["status"], "Complete", "{done}");
    assert!(env.ok(&["logs", &job]).contains("first job"));

    // A second run does not replace the file without --overwrite; with it, other lines are kept.
    std::fs::write(&path, format!("{written}NGC_KEY=kept-secret\n")).unwrap();
    let again = env.run(&flags(&format!("{SSH}/id_ed25519"), &known, "debug"));
    assert_ne!(again.status.code(), Some(0));
    assert!(text(&again).contains("--overwrite"), "{}", text(&again));
    assert!(std::fs::read_to_string(&path).unwrap().contains("SLURM_PARTITION=polar\n"));
    let key = format!("{SSH}/id_ed25519");
    let mut args = flags(&key, &known, "debug");
    args.push("--overwrite");
    assert_eq!(env.run(&args).status.code(), Some(0));
    let now = std::fs::read_to_string(&path).unwrap();
    assert!(now.contains("SLURM_PARTITION=debug\n") && now.contains("NGC_KEY=kept-secret\n"), "{now}");
    assert!(!now.contains("SLURM_PARTITION=polar"), "{now}");
}

/// Run `init` in a terminal: answer each prompt as it appears, then `last` to "Write ...?"; its output
/// once it has exited and `ends_with` has been read (the terminal's reader may still be behind).
fn init_in_a_terminal(env: &Env, last: &str, ends_with: &str) -> String {
    let mut cmd = env.command(&["init", "--known-hosts", &format!("{SSH}/known_hosts"), "--base-dir", BASE]);
    cmd.env("TERM", "dumb");
    let mut term = PtyChild::spawn(cmd);
    let answers = [
        ("Login host", "127.0.0.1:2222\r"),
        ("User on the cluster", "slurmuser\r"),
        ("Private key", "\r"),
        ("Partition [polar]", "debug\r"),
        ("Account", "default\r"),
        ("(mode 600)? [y/N]", last),
    ];
    for (prompt, answer) in answers {
        wait_for(&format!("the prompt {prompt:?}"), Duration::from_secs(60), Duration::from_millis(50), || {
            term.seen().contains(prompt)
        });
        if prompt.ends_with("[y/N]") {
            // Asked to agree, and nothing written yet.
            assert!(!env_file(env).exists(), "written before the user agreed");
        }
        term.type_in(answer);
    }
    let status = wait_for("init to exit", Duration::from_secs(120), Duration::from_millis(100), || {
        term.child.try_wait().unwrap()
    });
    assert!(status.code().is_some(), "{}", term.seen());
    wait_for("init's last words", Duration::from_secs(10), Duration::from_millis(50), || {
        let seen = term.seen();
        seen.contains(ends_with).then_some(seen)
    })
}

#[test]
fn init_in_a_terminal_asks_offers_what_it_found_and_writes_only_on_yes() {
    let env = newcomer();
    let key = own_key(&env, 0o600);
    std::fs::write(env.dir.path().join(".ssh/config"), "Host mycluster other\n    HostName 127.0.0.1\nHost *\n")
        .unwrap();

    let seen = init_in_a_terminal(&env, "n\r", "nothing was written");
    assert!(seen.contains("ssh_config aliases: mycluster, other"), "{seen}");
    assert!(seen.contains(&format!("key {} (mode 600)", key.display())), "{seen}");
    assert!(seen.contains("nothing was written"), "{seen}");
    assert!(!env_file(&env).exists());

    let seen = init_in_a_terminal(&env, "y\r", "preflight: all required checks passed");
    assert!(seen.contains("preflight: all required checks passed"), "{seen}");
    let written = std::fs::read_to_string(env_file(&env)).unwrap();
    for line in [
        "SLURM_HOSTNAME=127.0.0.1:2222".to_string(),
        format!("SSH_KEY_PATH={}", key.display()),
        "SLURM_PARTITION=debug".into(),
        "SLURM_ACCOUNT=default".into(),
    ] {
        assert!(written.lines().any(|l| l == line), "{line} in {written}");
    }
    let pre = env.run(&["preflight"]);
    assert_eq!(pre.status.code(), Some(0), "{}", text(&pre));
}

fn refused(env: &Env, args: &[&str], fix: &str) -> String {
    let out = env.run(args);
    let said = text(&out);
    assert_ne!(out.status.code(), Some(0), "{said}");
    assert!(said.contains(fix), "the fix {fix:?} named: {said}");
    assert!(said.contains("nothing was written"), "{said}");
    assert!(!env_file(env).exists(), "nothing written: {said}");
    assert!(
        !env.dir.path().join(".config/tao").exists()
            || std::fs::read_dir(env.dir.path().join(".config/tao")).unwrap().next().is_none()
    );
    said
}

#[test]
fn init_names_a_wrong_key_mode_an_unknown_host_key_and_a_missing_partition_and_writes_nothing() {
    let known = format!("{SSH}/known_hosts");
    let env = newcomer();
    let key = own_key(&env, 0o644);
    let k = key.display().to_string();
    refused(&env, &flags(&k, &known, "polar"), &format!("chmod 600 {k}"));
    // Left as it was: init never changes the user's key.
    assert_eq!(std::fs::metadata(&key).unwrap().permissions().mode() & 0o777, 0o644);

    let env = newcomer();
    let empty = env.dir.path().join("known_hosts");
    std::fs::write(&empty, "").unwrap();
    let said = refused(
        &env,
        &flags(&format!("{SSH}/id_ed25519"), &empty.display().to_string(), "polar"),
        "--accept-new-host-key",
    );
    assert!(said.contains("ssh-keyscan -p 2222"), "{said}");

    let env = newcomer();
    let said =
        refused(&env, &flags(&format!("{SSH}/id_ed25519"), &known, "nosuch"), "pass --partition with one of: polar");
    assert!(said.contains("\"nosuch\" does not exist") && said.contains("debug"), "{said}");

    // The host key accepted on the user's word: recorded, and the file written.
    let env = newcomer();
    let fresh = env.dir.path().join("known_hosts");
    std::fs::write(&fresh, "").unwrap();
    let mut args = vec!["--accept-new-host-key"];
    let f = fresh.display().to_string();
    let key = format!("{SSH}/id_ed25519");
    args.extend(flags(&key, &f, "polar"));
    let out = env.run(&args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(std::fs::read_to_string(&fresh).unwrap().contains("ssh-ed25519"));
    assert!(Path::new(&env_file(&env)).is_file());
}

/// A user who exported what TAO's skill asks an agent to export (the TAO SDK's names) and nothing
/// else. (ssh reads `~/.ssh/known_hosts` of the passwd entry, not of HOME: the sandbox's known_hosts
/// is given as `--known-hosts` or SSH_KNOWN_HOSTS.)
fn tao_sdk_user() -> (Env, PathBuf) {
    let mut env = newcomer();
    let key = own_key(&env, 0o600);
    for (name, value) in [
        ("SLURM_HOSTNAME", "127.0.0.1:2222"),
        ("SLURM_USER", "slurmuser"),
        ("SSH_KEY_PATH", &key.display().to_string()),
        ("SLURM_BASE_RESULTS_DIR", BASE),
    ] {
        env.vars.insert(name.into(), value.into());
    }
    (env, key)
}

/// What the agent's environment (and later its env file) gave init.
const TAKEN: [&str; 5] = ["SLURM_HOSTNAME", "SLURM_USER", "SSH_KEY_PATH", "SSH_KNOWN_HOSTS", "SLURM_BASE_RESULTS_DIR"];

#[test]
fn init_yes_takes_the_tao_sdk_environment_writes_it_and_runs_preflight() {
    let (env, key) = tao_sdk_user();
    let known = format!("{SSH}/known_hosts");
    let out = env.run(&["init", "--yes", "--known-hosts", &known]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("ready: submit a first job"), "preflight ran and passed: {said}");
    let written = std::fs::read_to_string(env_file(&env)).unwrap();
    for line in [
        "SLURM_HOSTNAME=127.0.0.1:2222\n".to_string(),
        "SLURM_USER=slurmuser\n".to_string(),
        format!("SSH_KEY_PATH={}\n", key.display()),
        "SLURM_PARTITION=polar\n".to_string(),
        format!("SLURM_BASE_RESULTS_DIR={BASE}\n"),
    ] {
        assert!(written.contains(&line), "{line:?} in:\n{written}");
    }

    // For agents: one JSON object, no question; without --yes nothing is written. The TAO SDK's
    // other names (SSH_HOST, SSH_USER) stand for ours; a flag still wins over the environment.
    let (mut agent, _) = tao_sdk_user();
    let host = agent.vars.remove("SLURM_HOSTNAME").unwrap();
    let user = agent.vars.remove("SLURM_USER").unwrap();
    agent.vars.insert("SSH_HOST".into(), host);
    agent.vars.insert("SSH_USER".into(), user);
    agent.vars.insert("SSH_KNOWN_HOSTS".into(), known.clone());
    let out = agent.run(&["init", "--json", "--partition", "debug"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["written"], false, "{shown}");
    let taken: Vec<&str> = shown["already_set"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(taken, TAKEN, "{shown}");
    assert!(shown["text"].as_str().unwrap().contains("SLURM_PARTITION=debug\n"), "{shown}");
    assert_eq!(shown["found"]["pyxis"], true, "{shown}");
    assert!(!env_file(&agent).exists());
    let out = agent.run(&["init", "--json", "--yes"]);
    let done: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{done}");
    assert_eq!((&done["written"], &done["preflight"]["ok"]), (&true.into(), &true.into()), "{done}");

    // The env file's settings are the defaults too, once the environment holds none.
    let mut again = Env::isolated();
    again.vars = agent.vars.clone();
    for name in ["SSH_HOST", "SSH_USER", "SSH_KEY_PATH", "SSH_KNOWN_HOSTS", "SLURM_BASE_RESULTS_DIR"] {
        again.vars.remove(name);
    }
    let out = again.run(&["init", "--json", "--yes", "--overwrite", "--partition", "debug"]);
    let redone: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{redone}");
    let taken: Vec<&str> = redone["already_set"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(taken, TAKEN, "{redone}");
    assert!(std::fs::read_to_string(env_file(&agent)).unwrap().contains("SLURM_PARTITION=debug\n"));

    // A problem is JSON too, naming the field and its fix; nothing is written.
    let mut wrong = Env::isolated();
    wrong.vars = again.vars.clone();
    wrong.vars.insert("HOME".into(), wrong.dir.path().display().to_string());
    wrong.vars.insert("SLURM_HOSTNAME".into(), "127.0.0.1:2222".into());
    wrong.vars.insert("SLURM_USER".into(), "slurmuser".into());
    let out =
        wrong.run(&["init", "--json", "--yes", "--known-hosts", "/dev/null", "--key", &format!("{SSH}/id_ed25519")]);
    let refused: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(3), "{refused}");
    assert_eq!(refused["problem"]["field"], "host", "{refused}");
    assert!(refused["problem"]["fix"].as_str().unwrap().contains("--accept-new-host-key"), "{refused}");
    assert!(!env_file(&wrong).exists());
}

#[test]
fn init_in_a_terminal_offers_what_the_environment_already_says() {
    let (mut env, key) = tao_sdk_user();
    env.vars.insert("SLURM_PARTITION".into(), "debug".into());
    let mut cmd = env.command(&["init", "--known-hosts", &format!("{SSH}/known_hosts")]);
    cmd.env("TERM", "dumb");
    let mut term = PtyChild::spawn(cmd);
    // Each question offers the environment's value, and an empty answer takes it.
    let offers = [
        "Login host (host, host:port or ssh_config alias) [127.0.0.1:2222]: ".to_string(),
        "User on the cluster [slurmuser]: ".to_string(),
        format!("Private key (empty: ssh's own choice) [{}]: ", key.display()),
        "Partition [debug]: ".to_string(),
        "Account (empty: Slurm's default): ".to_string(),
        format!("Results directory on shared storage (empty: the default) [{BASE}]: "),
    ];
    for offer in &offers {
        wait_for(&format!("the prompt {offer:?}"), Duration::from_secs(60), Duration::from_millis(50), || {
            term.seen().contains(offer.as_str())
        });
        term.type_in("\r");
    }
    wait_for("the question to write", Duration::from_secs(60), Duration::from_millis(50), || {
        term.seen().contains("(mode 600)? [y/N]")
    });
    term.type_in("y\r");
    let status = wait_for("init to exit", Duration::from_secs(120), Duration::from_millis(100), || {
        term.child.try_wait().unwrap()
    });
    assert_eq!(status.code(), Some(0), "{}", term.seen());
    let written = std::fs::read_to_string(env_file(&env)).unwrap();
    for line in [
        "SLURM_HOSTNAME=127.0.0.1:2222".to_string(),
        "SLURM_USER=slurmuser".to_string(),
        format!("SSH_KEY_PATH={}", key.display()),
        "SLURM_PARTITION=debug".into(),
        format!("SLURM_BASE_RESULTS_DIR={BASE}"),
    ] {
        assert!(written.lines().any(|l| l == line), "{line} in {written}");
    }
}
