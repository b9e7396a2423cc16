//! `--workdir` (issue 26): the directory is packed without what `.gitignore` ignores, uploaded once
//! per content, unpacked into the job's directory, and the command runs there.

use crate::common::Env;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

/// Submit with --workdir; the job id and the bytes the submit uploaded (from its report on stderr).
fn submit(env: &Env, dir: &std::path::Path, extra: &[&str]) -> (String, u64) {
    let d = dir.display().to_string();
    let mut args = vec!["submit", "--json", "--image", "ubuntu:22.04", "--gpus", "0", "--workdir", &d];
    args.extend_from_slice(extra);
    args.extend(["--shell", "--", "pwd; find . -type f | sort; cat src/train.py"]);
    let out = env.run(&args);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let line = stderr.lines().find(|l| l.starts_with("workdir ")).unwrap_or_else(|| panic!("no report: {stderr}"));
    let bytes = line.split(", ").find_map(|p| p.strip_suffix(" bytes uploaded")).unwrap().parse().unwrap();
    let id = v["job_id"].as_str().or(v["sweep_id"].as_str()).unwrap().to_string();
    (id, bytes)
}

#[test]
fn workdir_is_sent_once_per_content_without_ignored_files_and_the_command_runs_in_it() {
    let env = Env::new();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    std::fs::create_dir_all(p.join("src")).unwrap();
    std::fs::write(p.join(".gitignore"), "big.bin\n").unwrap();
    std::fs::write(p.join("big.bin"), vec![7u8; 8 << 20]).unwrap();
    // Unique content per run, so the first submit really uploads.
    let token = uuid::Uuid::new_v4().to_string();
    std::fs::write(p.join("src/train.py"), format!("print('{token}')\n")).unwrap();

    let (job, first) = submit(&env, p, &[]);
    assert!(first > 0 && first < 1 << 20, "the code uploaded, not the 8 MiB ignored file: {first}");
    let v = env.wait_terminal(&job, LIMIT);
    assert_eq!(v["status"], "Complete", "{v}");
    let logs = env.json(&["logs", &job, "--json"]);
    let out = logs["stdout"].as_str().unwrap();
    assert!(out.contains(&token), "the job sees the code: {out}");
    assert!(out.contains("./src/train.py") && !out.contains("big.bin"), "not the ignored file: {out}");
    assert!(out.lines().next().unwrap().ends_with(&format!("{job}/workdir")), "runs in its unpacked copy: {out}");

    let (_, second) = submit(&env, p, &[]);
    assert_eq!(second, 0, "an unchanged directory uploads nothing");
    // A sweep of the same content: one report, nothing uploaded, every variant sees the code.
    let (sweep, swept) = submit(&env, p, &["--grid", "LR=0.1,0.2"]);
    assert_eq!(swept, 0);
    let jobs = env.wait_group(&sweep, "terminal", LIMIT, |jobs| jobs.iter().all(crate::common::is_terminal));
    assert_eq!(jobs.len(), 2);
    for j in &jobs {
        let logs = env.json(&["logs", j["job_id"].as_str().unwrap(), "--json"]);
        assert!(logs["stdout"].as_str().unwrap().contains(&token), "{logs}");
    }

    std::fs::write(p.join("src/train.py"), format!("print('{token}-2')\n")).unwrap();
    let (_, third) = submit(&env, p, &[]);
    assert!(third > 0, "a changed file uploads again");

    // The library: create_job sends the workdir itself; a planned submit of a spec whose workdir was
    // never sent is refused, naming the field, before anything reaches the cluster.
    let client = tao_slurm::Client::new(env.settings()).unwrap();
    let spec = tao_slurm::JobSpec {
        image: "ubuntu:22.04".into(),
        command: vec!["cat".into(), "src/train.py".into()],
        gpus: Some(0),
        workdir: Some(p.display().to_string()),
        ..Default::default()
    };
    let refused = client.create_job_planned(&spec, client.plan(&spec).unwrap(), &Default::default()).unwrap_err();
    assert!(refused.to_string().contains("workdir"), "{refused}");
    let job = client.create_job(&spec, &Default::default()).unwrap().job_id;
    let v = env.wait_terminal(&job, LIMIT);
    assert_eq!(v["status"], "Complete", "{v}");
    let logs = env.json(&["logs", &job, "--json"]);
    assert!(logs["stdout"].as_str().unwrap().contains(&format!("{token}-2")), "{logs}");
}

/// A workdir larger than one upload part goes in parts behind a progress bar (on a terminal), is
/// assembled and checked, and the job sees every byte of it.
#[test]
fn a_large_workdir_uploads_in_parts_with_a_progress_bar() {
    use crate::common::pty::PtyChild;
    use crate::common::wait::wait_for;
    use sha2::{Digest, Sha256};
    let env = Env::new();
    let dir = tempfile::tempdir().unwrap();
    // 5 MiB that gzip cannot shrink (three 2 MiB parts), unique per run.
    let mut x = uuid::Uuid::new_v4().as_u128() as u64 | 1;
    let data: Vec<u8> = (0..5 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(dir.path().join("weights.bin"), &data).unwrap();
    let want: String = Sha256::digest(&data).iter().map(|b| format!("{b:02x}")).collect();
    let d = dir.path().display().to_string();
    let cmd = env.command(&[
        "submit",
        "--json",
        "--image",
        "ubuntu:22.04",
        "--gpus",
        "0",
        "--workdir",
        &d,
        "--",
        "sha256sum",
        "weights.bin",
    ]);
    let mut pty = PtyChild::spawn(cmd);
    let status = wait_for("the submit", LIMIT, Duration::from_millis(200), || pty.child.try_wait().unwrap());
    let seen = pty.seen();
    assert!(status.success(), "{seen}");
    assert!(seen.contains("workdir upload [------------] 0.0/5.0 MiB"), "{seen}");
    assert!(seen.contains("workdir upload [#####-------] 2.0/5.0 MiB"), "{seen}");
    assert!(seen.contains("workdir upload [############] 5.0/5.0 MiB"), "{seen}");
    let job = seen.split("\"job_id\": \"").nth(1).and_then(|r| r.split('"').next()).unwrap_or_else(|| panic!("{seen}"));
    let v = env.wait_terminal(job, LIMIT);
    assert_eq!(v["status"], "Complete", "{v}");
    let logs = env.json(&["logs", job, "--json"]);
    assert!(logs["stdout"].as_str().unwrap().contains(&want), "the job sees the same bytes: {logs}");
}

/// Issue 35: the upload keeps the submit's rules (umask 077, the trust checks, before anything is
/// written), its archive is 600, and an archive changed under its name (by a job, a neighbour with the
/// access, a broken copy) is not reused: it is sent again, and the job runs the code that was packed.
#[test]
fn workdir_archives_are_private_and_one_changed_under_its_name_is_sent_again() {
    let mut env = Env::new();
    // A base directory of this test's own: its workdirs directory is loosened below.
    let base = format!("{}/wd-{}", env.vars["SLURM_BASE_RESULTS_DIR"], uuid::Uuid::new_v4().simple());
    env.vars.insert("SLURM_BASE_RESULTS_DIR".into(), base.clone());
    let dir = tempfile::tempdir().unwrap();
    let token = uuid::Uuid::new_v4().to_string();
    std::fs::write(dir.path().join("train.py"), format!("print('{token}')\n")).unwrap();
    // The CLI opens the SSH master the library then shares (as a person's `login` would).
    let checked = env.run(&["check-path", "/tmp"]);
    assert!(checked.status.success(), "{}", String::from_utf8_lossy(&checked.stderr));
    let client = tao_slurm::Client::new(env.settings()).unwrap();
    let spec = tao_slurm::JobSpec {
        image: "ubuntu:22.04".into(),
        command: vec!["cat".into(), "train.py".into()],
        gpus: Some(0),
        workdir: Some(dir.path().display().to_string()),
        ..Default::default()
    };
    let (_, sent) = client.send_workdir(&spec).unwrap();
    let sent = sent.unwrap();
    assert!(sent.uploaded_bytes > 0);
    let archive = &sent.archive;
    let modes = env.ssh(&format!("stat -c %a {archive} \"$(dirname {archive})\""));
    assert_eq!(modes.split_whitespace().collect::<Vec<_>>(), ["600", "700"], "the archive and its directory");

    // The same name, another content: sent again, and the job sees the packed code.
    env.ssh(&format!("printf 'planted' | gzip >{archive}.x && mv {archive}.x {archive}"));
    let (_, again) = client.send_workdir(&spec).unwrap();
    assert_eq!(again.unwrap().uploaded_bytes, sent.packed_bytes, "a changed archive is sent again");
    let (_, reused) = client.send_workdir(&spec).unwrap();
    assert_eq!(reused.unwrap().uploaded_bytes, 0, "a whole one is reused");
    let job = client.create_job(&spec, &Default::default()).unwrap().job_id;
    let v = env.wait_terminal(&job, LIMIT);
    assert_eq!(v["status"], "Complete", "{v}");
    let logs = env.json(&["logs", &job, "--json"]);
    let out = logs["stdout"].as_str().unwrap();
    assert!(out.contains(&token) && !out.contains("planted"), "{out}");

    // A workdirs directory others can write is refused before anything is read or written there.
    env.ssh(&format!("chmod 777 \"$(dirname {archive})\""));
    std::fs::write(dir.path().join("train.py"), "print('changed')\n").unwrap();
    let refused = client.send_workdir(&spec).unwrap_err().to_string();
    assert!(refused.contains("refusing") && refused.contains("workdirs"), "{refused}");
    let listed = env.ssh(&format!("ls -A \"$(dirname {archive})\""));
    assert_eq!(listed.lines().count(), 1, "nothing written there: {listed}");
    env.ssh(&format!("rm -rf {base}"));
}
