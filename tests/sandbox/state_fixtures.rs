//! State files written by earlier builds open in this one: every migration runs on a real file (not
//! one made by this build's own code), the jobs keep their statuses, exit codes and history, and the
//! file is usable afterwards. The fixtures were written by the builds named in their file names
//! (`tao-slurm submit` then `watch` on the sandbox, two jobs: one Complete, one Error with exit 3); no
//! cluster is needed to read them.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/state").join(name)
}

/// Run the CLI on a copy of the fixture (the committed file is never written), offline.
struct Copy {
    _dir: tempfile::TempDir,
    state: PathBuf,
}

impl Copy {
    fn of(name: &str) -> Copy {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state.db");
        std::fs::copy(fixture(name), &state).unwrap();
        Copy { _dir: dir, state }
    }

    fn json(&self, args: &[&str]) -> Value {
        let out = Command::new(env!("CARGO_BIN_EXE_tao-slurm"))
            .args(args)
            .env_clear()
            .env("HOME", self.state.parent().unwrap())
            .env("PATH", "/usr/bin:/bin")
            .env("TAO_SLURM_STATE", &self.state)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{args:?}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {stdout}"))
    }

    fn user_version(&self) -> i64 {
        rusqlite::Connection::open(&self.state).unwrap().query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap()
    }
}

fn job<'a>(jobs: &'a Value, name: &str) -> &'a Value {
    jobs.as_array().unwrap().iter().find(|j| j["name"] == name).unwrap_or_else(|| panic!("no job {name}: {jobs}"))
}

fn check_two_jobs(copy: &Copy) {
    let jobs = copy.json(&["list", "--json"]);
    assert_eq!(jobs.as_array().unwrap().len(), 2, "{jobs}");
    let ok = job(&jobs, "fixture-ok");
    assert_eq!((ok["status"].as_str(), ok["exit_code"].as_i64()), (Some("Complete"), Some(0)), "{ok}");
    let failed = job(&jobs, "fixture-fail");
    assert_eq!((failed["status"].as_str(), failed["exit_code"].as_i64()), (Some("Error"), Some(3)), "{failed}");
    // A terminal job's status is answered from the state file, with its one attempt.
    let id = failed["job_id"].as_str().unwrap();
    let status = copy.json(&["status", id, "--json"])[0].clone();
    assert_eq!(status["status"], "Error", "{status}");
    assert_eq!(status["slurm_job_id"], failed["slurm_job_id"], "{status}");
    let attempts = status["attempts"].as_array().unwrap_or_else(|| panic!("attempts: {status}"));
    assert_eq!(attempts.len(), 1, "the first attempt is recorded from the old row: {status}");
    assert_eq!(attempts[0]["slurm_job_id"], failed["slurm_job_id"], "{status}");
    let events = copy.json(&["events", id, "--json"]);
    assert!(!events.as_array().unwrap().is_empty(), "the history is kept: {events}");
    // No active job: nothing needs the cluster, so this works without any setting.
    assert_eq!(copy.json(&["list", "--json", "--active"]).as_array().unwrap().len(), 0);
}

#[test]
fn a_state_file_of_the_first_build_migrates_and_keeps_its_jobs() {
    let copy = Copy::of("v1-adb8d57.db");
    assert_eq!(copy.user_version(), 1, "the fixture is of the first schema");
    check_two_jobs(&copy);
    let migrated = copy.user_version();
    assert!(migrated > 1, "every migration ran: version {migrated}");
    // Opened again (the migrations already ran), it reads the same.
    check_two_jobs(&copy);
    assert_eq!(copy.user_version(), migrated);
}

#[test]
fn a_state_file_with_attempts_and_plan_columns_migrates_and_keeps_its_failure_evidence() {
    let copy = Copy::of("v4-c7f1618.db");
    assert_eq!(copy.user_version(), 4, "the fixture is of the fourth schema (attempts, plan columns)");
    check_two_jobs(&copy);
    assert!(copy.user_version() > 4, "the later migrations ran");
    // That build classified the failure; its class and evidence are kept on the attempt.
    let jobs = copy.json(&["list", "--json"]);
    let id = job(&jobs, "fixture-fail")["job_id"].as_str().unwrap().to_string();
    let status = copy.json(&["status", &id, "--json"])[0].clone();
    let attempt = &status["attempts"][0];
    assert_eq!(attempt["failure_class"], "user", "{status}");
    assert!(attempt["evidence"].to_string().contains("exit code 3"), "{status}");
}
