//! `--workdir`: where a packed directory lives on shared storage (one archive per content hash,
//! shared by every job and sweep variant that sends the same content) and the scripts that look for
//! it and upload it.

use crate::script::shell::quote;

/// Largest packed (gzip'd) directory tao-slurm sends.
pub const MAX_PACKED_BYTES: u64 = 64 * 1024 * 1024;

/// The archive of content `hash` (hex sha-256 of the tar) under the base directory.
pub fn archive_path(base_dir: &str, hash: &str) -> String {
    format!("{base_dir}/workdirs/{hash}.tar.gz")
}

/// What every workdir script starts with: the submit's own rules, before anything is read or written
/// on shared storage: umask 077, and the base directory and its `workdirs` trusted as the submit trusts
/// its directories (ours or root's above, ours and writable by no one else where we write).
fn preamble(archive: &str) -> String {
    let dir = archive.rsplit_once('/').map_or(".", |(d, _)| d);
    let base = dir.rsplit_once('/').map_or(dir, |(b, _)| b);
    format!(
        "set -u\numask 077\n{}tao_trust_dirs {} {}\n",
        crate::script::trust::trust_functions(),
        quote(base),
        quote(dir)
    )
}

/// Exit 0 when the archive is already there, a regular file whose content (the tar inside) has the
/// hash `hash` it is named by, now mode 600; 1 when it is not (missing, or changed: it is sent again).
pub fn present_script(archive: &str, hash: &str) -> String {
    let a = quote(archive);
    format!(
        "{}[ -f {a} ] && [ ! -L {a} ] || exit 1\n\
         [ \"$(gzip -dc <{a} 2>/dev/null | sha256sum | cut -d' ' -f1)\" = {h} ] || exit 1\n\
         chmod 600 -- {a}\n",
        preamble(archive),
        h = quote(hash)
    )
}

/// Write the base64 text `encoded` as the archive: into a temporary file beside it, then renamed, so
/// that a half-written archive is never taken for a whole one.
pub fn upload_script(archive: &str, encoded: &str) -> String {
    let a = quote(archive);
    format!(
        "{}set -e\nmkdir -p \"$(dirname {a})\"\nt=$(mktemp {a}.XXXXXX)\ntrap 'rm -f \"$t\"' EXIT\nbase64 -d >\"$t\" <<'TAO_WORKDIR_EOF'\n{encoded}\nTAO_WORKDIR_EOF\nchmod 600 \"$t\"\nmv \"$t\" {a}\ntrap - EXIT\n",
        preamble(archive)
    )
}

/// Archive bytes sent per remote call: a larger archive goes in parts (each a step of the progress
/// bar, each small enough for one script), then is assembled and checked.
pub const UPLOAD_PART_BYTES: usize = 2 * 1024 * 1024;

/// Write part `index` (base64 `encoded`) into `parts_dir` (made private), whole or not at all.
pub fn part_script(parts_dir: &str, index: usize, encoded: &str) -> String {
    let d = quote(parts_dir);
    format!(
        "{}set -e\nmkdir -p -m 700 {d}\nt=$(mktemp {d}/.part.XXXXXX)\ntrap 'rm -f \"$t\"' EXIT\nbase64 -d >\"$t\" <<'TAO_WORKDIR_EOF'\n{encoded}\nTAO_WORKDIR_EOF\nmv \"$t\" {d}/{index}\ntrap - EXIT\n",
        preamble(parts_dir)
    )
}

/// Join `parts` parts of `parts_dir` into the archive if their whole is `size` bytes with sha-256
/// `sha256` (else exit 1 saying so), then remove the parts.
pub fn assemble_script(archive: &str, parts_dir: &str, parts: usize, size: u64, sha256: &str) -> String {
    let (a, d) = (quote(archive), quote(parts_dir));
    format!(
        "{}set -e\nt=$(mktemp {a}.XXXXXX)\ntrap 'rm -f \"$t\"; rm -rf {d}' EXIT\n\
         for i in $(seq 0 {last}); do cat {d}/\"$i\"; done >\"$t\"\n\
         got=$(stat -c %s \"$t\")\n\
         if [ \"$got\" != {size} ] || [ \"$(sha256sum <\"$t\" | cut -d' ' -f1)\" != {sha256} ]; then\n\
         \x20 echo \"the uploaded workdir does not match what was sent ($got of {size} bytes); submit again\" >&2; exit 1\nfi\n\
         chmod 600 \"$t\"\nmv \"$t\" {a}\n",
        preamble(archive),
        last = parts.saturating_sub(1),
        sha256 = quote(sha256),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parts written by their scripts and assembled give the archive back, byte for byte; a part
    /// missing or changed leaves no archive and says so.
    #[test]
    fn parts_assemble_into_the_archive_only_when_whole() {
        use base64::Engine;
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("w/ab.tar.gz").display().to_string();
        let parts_dir = format!("{archive}.parts-1");
        std::fs::create_dir_all(dir.path().join("w")).unwrap();
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
        let sha: String = sha2::Digest::finalize(<sha2::Sha256 as sha2::Digest>::new_with_prefix(&data))
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let run = |script: String| std::process::Command::new("bash").arg("-c").arg(script).output().unwrap();
        let chunks: Vec<&[u8]> = data.chunks(2048).collect();
        for (i, c) in chunks.iter().enumerate() {
            let out = run(part_script(&parts_dir, i, &base64::engine::general_purpose::STANDARD.encode(c)));
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        }
        let bad = run(assemble_script(&archive, &parts_dir, chunks.len(), data.len() as u64, &"0".repeat(64)));
        assert!(!bad.status.success());
        assert!(String::from_utf8_lossy(&bad.stderr).contains("does not match"), "{bad:?}");
        assert!(!std::path::Path::new(&archive).exists() && !std::path::Path::new(&parts_dir).exists());
        for (i, c) in chunks.iter().enumerate() {
            run(part_script(&parts_dir, i, &base64::engine::general_purpose::STANDARD.encode(c)));
        }
        let out = run(assemble_script(&archive, &parts_dir, chunks.len(), data.len() as u64, &sha));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(std::fs::read(&archive).unwrap(), data);
        assert!(!std::path::Path::new(&parts_dir).exists(), "the parts are removed");
    }

    /// An archive is reused only when it holds the content its name says (a changed one is sent
    /// again); one reused is made 600; scripts run under umask 077.
    #[test]
    fn a_reused_archive_is_checked_against_its_hash_and_kept_private() {
        use std::io::Write;
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("base/workdirs/h.tar.gz");
        std::fs::create_dir_all(archive.parent().unwrap()).unwrap();
        let tar = b"the tar's bytes".to_vec();
        let hash: String = sha2::Digest::finalize(<sha2::Sha256 as sha2::Digest>::new_with_prefix(&tar))
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let gz = |data: &[u8]| {
            let mut c = std::process::Command::new("gzip")
                .arg("-c")
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            c.stdin.take().unwrap().write_all(data).unwrap();
            c.wait_with_output().unwrap().stdout
        };
        let a = archive.display().to_string();
        let present =
            || std::process::Command::new("bash").arg("-c").arg(present_script(&a, &hash)).status().unwrap().code();
        assert_eq!(present(), Some(1), "missing");
        std::fs::write(&archive, gz(b"something else")).unwrap();
        std::fs::set_permissions(&archive, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(present(), Some(1), "another content under the name is not reused");
        std::fs::write(&archive, gz(&tar)).unwrap();
        assert_eq!(present(), Some(0));
        assert_eq!(std::fs::metadata(&archive).unwrap().permissions().mode() & 0o777, 0o600);
        // An upload's archive is 600 too.
        use base64::Engine;
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(upload_script(&a, &base64::engine::general_purpose::STANDARD.encode(gz(&tar))))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(std::fs::metadata(&archive).unwrap().permissions().mode() & 0o777, 0o600);
        // A workdirs directory others can write is refused before anything is read or written there.
        std::fs::set_permissions(archive.parent().unwrap(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let out = std::process::Command::new("bash").arg("-c").arg(present_script(&a, &hash)).output().unwrap();
        assert_eq!(out.status.code(), Some(crate::exit_codes::UNTRUSTED_STORAGE), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("refusing"), "{out:?}");
    }

    #[test]
    fn the_archive_is_named_by_its_content() {
        assert_eq!(archive_path("/lustre/u", "ab12"), "/lustre/u/workdirs/ab12.tar.gz");
        let s = upload_script("/lustre/u/workdirs/ab12.tar.gz", "QUJD");
        assert!(
            s.contains("base64 -d") && s.contains("\nQUJD\n") && s.contains("mv \"$t\" /lustre/u/workdirs/ab12.tar.gz")
        );
        let p = present_script("/a b/workdirs/ab12.tar.gz", "ab12");
        assert!(p.starts_with("set -u\numask 077\n") && p.contains("\ntao_trust_dirs '/a b' '/a b/workdirs'\n"), "{p}");
    }
}
