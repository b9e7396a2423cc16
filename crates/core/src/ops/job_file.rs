//! The one way a remote script reads a file a job can write (its logs, its roles' logs, the file that
//! names its failed role). A job owns its log directory: it can swap a log for a FIFO (a reader would
//! block forever) or for a symlink to any file the login user can read, outside the container's
//! mounts (a reader would hand it out). So every such read goes through [`FUNCTIONS`]:
//!
//! - `tao_jf_stat PATH` prints `regular SIZE`, `notregular` or `missing`, never following a symlink;
//! - `tao_jf_read PATH OFFSET COUNT` prints at most COUNT bytes from OFFSET of a regular file that is
//!   not a symlink and whose directory is not one, opened with `O_NOFOLLOW | O_NONBLOCK` (a file
//!   swapped between the check and the open is refused or yields nothing, never blocks), under
//!   [`READ_SECS`] and never more than [`READ_CAP`] bytes.
//!
//! A script that reads a job's file starts with [`FUNCTIONS`] (see [`with_functions`]) and calls
//! them; nothing else in a script opens a job-written file.

/// Seconds one read of a job's file may take.
pub const READ_SECS: u32 = 30;

/// Most bytes one read returns, whatever COUNT asks.
pub const READ_CAP: u64 = 32 << 20;

/// The shell functions (bash or POSIX sh with GNU coreutils' `stat`, `timeout` and `dd`).
pub const FUNCTIONS: &str = concat!(
    "tao_jf_stat() { if [ -L \"$1\" ] || [ -L \"${1%/*}\" ]; then echo notregular; ",
    "elif [ -f \"$1\" ]; then echo \"regular $(stat -c %s -- \"$1\" 2>/dev/null || echo 0)\"; ",
    "elif [ -e \"$1\" ]; then echo notregular; else echo missing; fi; }\n",
    // The open itself, after the checks: what was checked may have been swapped since.
    "tao_jf_open() { local n=\"$3\"; [ \"$n\" -gt @CAP@ ] && n=@CAP@; ",
    "timeout -k 2 @SECS@ dd if=\"$1\" iflag=nofollow,nonblock,skip_bytes,count_bytes skip=\"$2\" count=\"$n\" ",
    "bs=65536 status=none 2>/dev/null; }\n",
    "tao_jf_read() { [ -f \"$1\" ] && [ ! -L \"$1\" ] && [ ! -L \"${1%/*}\" ] || return 3; tao_jf_open \"$@\"; }\n",
);

/// [`FUNCTIONS`] with the limits filled in, followed by `script`. Pure.
pub fn with_functions(script: &str) -> String {
    let functions = FUNCTIONS.replace("@CAP@", &READ_CAP.to_string()).replace("@SECS@", &READ_SECS.to_string());
    format!("{functions}{script}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::shell::quote;
    use std::time::{Duration, Instant};

    fn bash(script: &str) -> (String, Duration) {
        let started = Instant::now();
        let out = std::process::Command::new("bash").arg("-c").arg(with_functions(script)).output().unwrap();
        (String::from_utf8_lossy(&out.stdout).into_owned(), started.elapsed())
    }

    fn mkfifo(path: &std::path::Path) {
        let st = std::process::Command::new("mkfifo").arg(path).status().unwrap();
        assert!(st.success());
    }

    #[test]
    fn only_regular_files_are_read_and_never_block() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("outside");
        std::fs::write(&secret, "the linked file's content\n").unwrap();
        let logs = dir.path().join("logs");
        std::fs::create_dir(&logs).unwrap();
        let p = |name: &str| logs.join(name).display().to_string();
        std::fs::write(p("plain"), "0123456789").unwrap();
        std::os::unix::fs::symlink(&secret, p("link")).unwrap();
        mkfifo(&logs.join("fifo"));
        let linked_dir = dir.path().join("linked");
        std::os::unix::fs::symlink(&logs, &linked_dir).unwrap();
        let via_link = linked_dir.join("plain").display().to_string();
        // (path, stat, read of bytes 2..7)
        let cases = [
            (p("plain"), "regular 10", "23456"),
            (p("link"), "notregular", ""),
            (p("fifo"), "notregular", ""),
            (p("absent"), "missing", ""),
            (via_link, "notregular", ""),
        ];
        for (path, stat, read) in cases {
            let (out, took) = bash(&format!("tao_jf_stat {q}; tao_jf_read {q} 2 5; echo \" rc=$?\"", q = quote(&path)));
            let expected_rc = if read.is_empty() { 3 } else { 0 };
            assert_eq!(out, format!("{stat}\n{read} rc={expected_rc}\n"), "{path}");
            assert!(took < Duration::from_secs(10), "{path} took {took:?}");
        }
    }

    #[test]
    fn a_file_swapped_after_the_check_is_refused_at_the_open() {
        // The check passed on a regular file; by the open it is a symlink or a FIFO.
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("outside");
        std::fs::write(&secret, "the linked file's content\n").unwrap();
        let link = dir.path().join("main.out");
        std::os::unix::fs::symlink(&secret, &link).unwrap();
        let fifo = dir.path().join("fifo");
        mkfifo(&fifo);
        let open = |path: &std::path::Path| {
            bash(&format!("tao_jf_open {} 0 100; echo \"rc=$?\"", quote(&path.display().to_string())))
        };
        let (out, _) = open(&link);
        assert!(
            !out.contains("linked file") && out.starts_with("rc=") && out != "rc=0\n",
            "refused at the open: {out}"
        );
        let (out, took) = open(&fifo);
        assert_eq!(out, "rc=0\n", "a FIFO without a writer reads as empty at once");
        assert!(took < Duration::from_secs(10), "{took:?}");
    }

    #[test]
    fn reads_are_capped() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("big");
        std::fs::write(&f, vec![b'x'; 4096]).unwrap();
        let script = FUNCTIONS.replace("@CAP@", "100").replace("@SECS@", "5")
            + &format!("tao_jf_read {} 0 1000 | wc -c", quote(&f.display().to_string()));
        let out = std::process::Command::new("bash").arg("-c").arg(script).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "100");
    }
}
