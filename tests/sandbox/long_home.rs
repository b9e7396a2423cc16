//! A home directory of any length (issue 55, item 1). ssh's control socket must fit a Unix socket's
//! path (107 bytes, and ssh adds 17 while it binds): under a home of 35 characters the old
//! `~/.cache/tao-slurm/cm/<12 hex>-<40 hex>` made every command fail. The sockets now live in a short
//! directory of tao-slurm's own (`$XDG_RUNTIME_DIR/tao-slurm`, else `/tmp/tao-slurm-<uid>`); a control
//! directory that is still too long is refused naming its path, its length and the setting.

use crate::common::wait::{wait_for, when};
use crate::common::Env;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A user whose HOME is exactly `len` characters long, with the state file and the control
/// directory at their defaults (none of the harness's short paths).
pub fn long_home_user(len: usize) -> (Env, PathBuf) {
    let mut env = Env::isolated();
    let base = env.dir.path().display().to_string();
    let home = PathBuf::from(format!("{base}/{}", "h".repeat(len - base.len() - 1)));
    std::fs::create_dir_all(&home).unwrap();
    assert_eq!(home.as_os_str().len(), len);
    env.vars.insert("HOME".into(), home.display().to_string());
    env.vars.remove("TAO_SLURM_STATE");
    env.vars.remove("TAO_SLURM_CONTROL_DIR");
    (env, home)
}

fn sockets(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|r| {
            r.map(|e| e.unwrap().path()).filter(|p| p.symlink_metadata().unwrap().file_type().is_socket()).collect()
        })
        .unwrap_or_default()
}

fn text(out: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn a_home_of_80_characters_runs_preflight_submit_logs_and_cancel() {
    let (mut env, home) = long_home_user(80);
    // Its own runtime directory (short, as /run/user/<uid> is), so that its master is its own.
    let runtime = tempfile::Builder::new().prefix("rt").tempdir_in("/tmp").unwrap();
    env.vars.insert("XDG_RUNTIME_DIR".into(), runtime.path().display().to_string());

    let pre = env.run(&["preflight"]);
    assert_eq!(pre.status.code(), Some(0), "{}", text(&pre));
    assert!(!text(&pre).contains("FAIL"), "{}", text(&pre));
    let control = runtime.path().join("tao-slurm");
    assert_eq!(sockets(&control).len(), 2, "one master per login host, in $XDG_RUNTIME_DIR/tao-slurm");
    assert_eq!(std::fs::metadata(&control).unwrap().permissions().mode() & 0o777, 0o700);

    let (job, _) =
        env.submit(&["--image", "ubuntu:22.04", "--gpus", "0", "--shell", "--", "echo from-a-long-home; sleep 300"]);
    let logs = wait_for("the job's first line", Duration::from_secs(240), Duration::from_millis(500), || {
        when(env.ok(&["logs", &job]), |l| l.contains("from-a-long-home"))
    });
    assert!(logs.contains("from-a-long-home"), "{logs}");
    assert!(home.join(".local/share/tao-slurm/state.db").is_file(), "the state stays in the home");
    env.ok(&["cancel", &job]);
    let done = env.wait_terminal(&job, Duration::from_secs(300));
    assert_eq!(done["status"], "Canceled", "{done}");

    // Without XDG_RUNTIME_DIR: the user's own directory in /tmp, mode 700.
    let mut bare = Env::isolated();
    bare.vars = env.vars.clone();
    bare.vars.remove("XDG_RUNTIME_DIR");
    let pre = bare.run(&["preflight"]);
    assert_eq!(pre.status.code(), Some(0), "{}", text(&pre));
    let uid = tao_slurm_engine::private::current_uid();
    let tmp = PathBuf::from(format!("/tmp/tao-slurm-{uid}"));
    let meta = std::fs::symlink_metadata(&tmp).unwrap();
    assert!(meta.is_dir() && meta.uid() == uid && meta.mode() & 0o777 == 0o700, "{meta:?}");
    assert!(!sockets(&tmp).is_empty(), "the masters' sockets are in {}", tmp.display());

    // A control directory that is still too long: refused before any ssh runs, naming the path, its
    // length and the setting; never the key set-up steps.
    let mut long = Env::isolated();
    long.vars = env.vars.clone();
    let dir = home.join("cm");
    long.vars.insert("TAO_SLURM_CONTROL_DIR".into(), dir.display().to_string());
    let out = long.run(&["submit", "--image", "ubuntu:22.04", "--gpus", "0", "--", "true"]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(3), "a settings error: {said}");
    for part in ["TAO_SLURM_CONTROL_DIR", &dir.display().to_string(), "now 83", "at most 73 characters"] {
        assert!(said.contains(part), "{part:?} in: {said}");
    }
    let pre = long.run(&["preflight"]);
    assert!(text(&pre).contains("FAIL  ssh settings"), "{}", text(&pre));
    assert!(!text(&pre).contains("passwordless"), "{}", text(&pre));

    // A control directory another user owns (here: made so, as root): refused, naming the setting.
    let theirs = tempfile::Builder::new().prefix("cm").tempdir_in("/tmp").unwrap();
    std::os::unix::fs::chown(theirs.path(), Some(65534), Some(65534)).unwrap();
    let mut hijacked = Env::isolated();
    hijacked.vars = env.vars.clone();
    hijacked.vars.insert("TAO_SLURM_CONTROL_DIR".into(), theirs.path().display().to_string());
    let pre = hijacked.run(&["preflight"]);
    let said = text(&pre);
    assert_ne!(pre.status.code(), Some(0), "{said}");
    assert!(said.contains("belongs to user id 65534") && said.contains("TAO_SLURM_CONTROL_DIR"), "{said}");
    assert!(!said.contains("passwordless"), "{said}");
}
