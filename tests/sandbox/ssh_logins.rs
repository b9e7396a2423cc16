//! SSH login counts, read from the sandbox sshd's own log, for logins with this test's own key (so
//! that nothing else using the sandbox meanwhile can change the counts).

use crate::common::sandbox::accepted_logins_with;
use crate::common::wait::wait_for;
use crate::common::Env;
use std::time::Duration;

#[test]
fn logins_are_shared_and_missing_settings_never_connect() {
    let mut env = Env::isolated();
    let fingerprint = env.use_own_key();
    let accepted_logins = || accepted_logins_with(&fingerprint);
    // Without SLURM_USER: the contract's message, a non-zero exit, and no connection attempted.
    let mut missing = Env::isolated();
    missing.vars = env.vars.clone();
    missing.vars.remove("SLURM_USER");
    let before = accepted_logins();
    let out = missing.run(&["submit", "--image", "ubuntu:22.04", "--", "true"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "the configuration error's code");
    assert!(
        stderr.contains("MISSING: set SLURM_USER and SLURM_HOSTNAME (comma-separated for failover) in your env (~/.config/tao/.env)."),
        "{stderr}"
    );
    assert_eq!(accepted_logins(), before, "no connection may be attempted without SLURM_USER");

    // One submit and 20 back-to-back `status` invocations of a running job: one login in total.
    let before = accepted_logins();
    let (job, _) = env.submit(&["--image", "ubuntu:22.04", "--gpus", "1", "--", "sleep", "120"]);
    for _ in 0..20 {
        let v = env.status(&job);
        assert!(matches!(v["status"].as_str(), Some("Pending" | "Running")), "{v}");
    }
    let logins = accepted_logins() - before;
    assert_eq!(logins, 1, "submit + 20 status invocations must share one SSH login");

    // What ssh_config makes of the login host is remembered beside the master's socket (so that a
    // command whose master is up starts no `ssh -G`). A remembered socket that no master answers is
    // resolved again before any login: still the one login, and the entry names the real socket.
    let cm = std::path::PathBuf::from(&env.vars["TAO_SLURM_CONTROL_DIR"]);
    let entry = std::fs::read_dir(&cm)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "resolved"))
        .expect("the login host's remembered resolution");
    let real: serde_json::Value = serde_json::from_slice(&std::fs::read(&entry).unwrap()).unwrap();
    let socket = real["target"]["control_path"].as_str().unwrap().to_string();
    assert!(std::path::Path::new(&socket).exists(), "the remembered socket is the master's: {real}");
    let mut stale = real.clone();
    stale["target"]["control_path"] = cm.join("no-master-here").display().to_string().into();
    std::fs::write(&entry, serde_json::to_vec(&stale).unwrap()).unwrap();
    let v = env.status(&job);
    assert!(matches!(v["status"].as_str(), Some("Pending" | "Running")), "{v}");
    assert_eq!(accepted_logins() - before, 1, "a stale entry must not cost a login");
    let again: serde_json::Value = serde_json::from_slice(&std::fs::read(&entry).unwrap()).unwrap();
    assert_eq!(again["target"]["control_path"], socket.as_str(), "resolved again: {again}");
    env.ok(&["cancel", &job]);
    let v = env.status(&job);
    assert_eq!(v["status"], "Canceled");

    // 100 back-to-back remote commands in one process: one login.
    let mut lib = Env::isolated();
    lib.vars = env.vars.clone();
    lib.vars.insert("TAO_SLURM_CONTROL_DIR".into(), lib.dir.path().join("cm").display().to_string());
    let sources = tao_slurm::config::SettingSources {
        flags: Default::default(),
        env: lib.vars.clone(),
        file: Default::default(),
        uid: Some(tao_slurm_engine::private::current_uid()),
    };
    let settings = tao_slurm::config::Settings::from_sources(&sources).unwrap();
    let transport = tao_slurm_engine::remote::connect(&settings).unwrap();
    let before = accepted_logins();
    for i in 0..100 {
        let out =
            transport.run_script(&format!("echo {i}"), tao_slurm_engine::remote::Idempotency::Idempotent).unwrap();
        assert_eq!(out.stdout, format!("{i}\n"));
    }
    assert_eq!(accepted_logins() - before, 1, "100 remote commands in one process must share one login");

    // The sessions are asked of the master over its socket: while this process holds its shell, no
    // ssh client of this control directory runs on this machine (one would name it in its argv).
    let control_dir = lib.vars["TAO_SLURM_CONTROL_DIR"].clone();
    let ssh_clients = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .filter(|c| c.starts_with("ssh ") && c.contains(&control_dir) && c.contains("bash -s"))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        transport.run_script("echo held", tao_slurm_engine::remote::Idempotency::Idempotent).unwrap().stdout,
        "held\n"
    );
    assert_eq!(ssh_clients(), Vec::<String>::new(), "a session over the master's socket starts no ssh client");
    // A script that outlives its deadline ends the call, and its session (the master's channel,
    // closed with the socket); the next call gets a new one on the same login.
    let started = std::time::Instant::now();
    let err = transport
        .run_script_capped(
            "echo partial; sleep 30",
            tao_slurm_engine::remote::Idempotency::Idempotent,
            Duration::from_millis(500),
            1 << 20,
        )
        .unwrap_err();
    assert!(err.to_string().contains("did not finish within"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10), "waited {:?}", started.elapsed());
    assert_eq!(
        transport.run_script("echo after", tao_slurm_engine::remote::Idempotency::Idempotent).unwrap().stdout,
        "after\n"
    );
    assert_eq!(accepted_logins() - before, 1, "still the one login");
    // The service opens sessions, and drops its transports (a workspace deleted), on its async
    // runtime's threads: neither may need to wait there.
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    runtime.block_on(async {
        let t = tao_slurm_engine::remote::connect(&settings).unwrap();
        let out = t.run_script("echo on-the-runtime", tao_slurm_engine::remote::Idempotency::Idempotent).unwrap();
        assert_eq!(out.stdout, "on-the-runtime\n");
        drop(t);
    });

    // The master dies (network blip, sshd restart): the next command reconnects by itself, once.
    // The master's socket is the one socket in this test's control directory (its name carries a
    // hash of the authentication settings, the user, the host and this machine: openssh::socket_name).
    let control_dir = lib.vars["TAO_SLURM_CONTROL_DIR"].clone();
    let socket = std::fs::read_dir(&control_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| std::os::unix::fs::FileTypeExt::is_socket(&std::fs::metadata(p).unwrap().file_type()))
        .expect("the master's control socket");
    let exit = std::process::Command::new("ssh")
        .args([
            "-o",
            &format!("ControlPath={}", socket.display()),
            "-O",
            "exit",
            "-p",
            &crate::common::sandbox::ssh_ports()[0],
            "-l",
            crate::common::sandbox::setting("SLURM_USER"),
            "127.0.0.1",
        ])
        .output()
        .unwrap();
    assert!(exit.status.success(), "{}", String::from_utf8_lossy(&exit.stderr));
    wait_for("the master's socket gone", Duration::from_secs(30), Duration::from_millis(100), || !socket.exists());
    let before = accepted_logins();
    for i in 0..10 {
        let out =
            transport.run_script(&format!("echo {i}"), tao_slurm_engine::remote::Idempotency::Idempotent).unwrap();
        assert_eq!(out.stdout, format!("{i}\n"));
    }
    assert_eq!(accepted_logins() - before, 1, "one reconnect, then shared again");

    // A host whose key is not known is refused, with the ssh-keyscan remediation.
    let mut stranger = Env::isolated();
    let empty = stranger.dir.path().join("empty_known_hosts");
    std::fs::write(&empty, "").unwrap();
    stranger.vars.insert("SSH_KNOWN_HOSTS".into(), empty.display().to_string());
    let out = stranger.run_with_deadline(&["submit", "--image", "ubuntu:22.04", "--", "true"], Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("ssh-keyscan"), "{stderr}");
}
