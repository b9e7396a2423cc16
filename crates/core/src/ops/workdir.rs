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

/// Exit 0 when the archive is already there (nothing to upload), 1 when it is not.
pub fn present_script(archive: &str) -> String {
    format!("[ -f {} ]\n", quote(archive))
}

/// Write the base64 text `encoded` as the archive: into a temporary file beside it, then renamed, so
/// that a half-written archive is never taken for a whole one.
pub fn upload_script(archive: &str, encoded: &str) -> String {
    let a = quote(archive);
    format!(
        "set -e\nmkdir -p \"$(dirname {a})\"\nt=$(mktemp {a}.XXXXXX)\ntrap 'rm -f \"$t\"' EXIT\nbase64 -d >\"$t\" <<'TAO_WORKDIR_EOF'\n{encoded}\nTAO_WORKDIR_EOF\nchmod 644 \"$t\"\nmv \"$t\" {a}\ntrap - EXIT\n"
    )
}

/// Archive bytes sent per remote call: a larger archive goes in parts (each a step of the progress
/// bar, each small enough for one script), then is assembled and checked.
pub const UPLOAD_PART_BYTES: usize = 2 * 1024 * 1024;

/// Write part `index` (base64 `encoded`) into `parts_dir` (made private), whole or not at all.
pub fn part_script(parts_dir: &str, index: usize, encoded: &str) -> String {
    let d = quote(parts_dir);
    format!(
        "set -e\nmkdir -p -m 700 {d}\nt=$(mktemp {d}/.part.XXXXXX)\ntrap 'rm -f \"$t\"' EXIT\nbase64 -d >\"$t\" <<'TAO_WORKDIR_EOF'\n{encoded}\nTAO_WORKDIR_EOF\nmv \"$t\" {d}/{index}\ntrap - EXIT\n"
    )
}

/// Join `parts` parts of `parts_dir` into the archive if their whole is `size` bytes with sha-256
/// `sha256` (else exit 1 saying so), then remove the parts.
pub fn assemble_script(archive: &str, parts_dir: &str, parts: usize, size: u64, sha256: &str) -> String {
    let (a, d) = (quote(archive), quote(parts_dir));
    format!(
        "set -e\nt=$(mktemp {a}.XXXXXX)\ntrap 'rm -f \"$t\"; rm -rf {d}' EXIT\n\
         for i in $(seq 0 {last}); do cat {d}/\"$i\"; done >\"$t\"\n\
         got=$(stat -c %s \"$t\")\n\
         if [ \"$got\" != {size} ] || [ \"$(sha256sum <\"$t\" | cut -d' ' -f1)\" != {sha256} ]; then\n\
         \x20 echo \"the uploaded workdir does not match what was sent ($got of {size} bytes); submit again\" >&2; exit 1\nfi\n\
         chmod 644 \"$t\"\nmv \"$t\" {a}\n",
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

    #[test]
    fn the_archive_is_named_by_its_content() {
        assert_eq!(archive_path("/lustre/u", "ab12"), "/lustre/u/workdirs/ab12.tar.gz");
        let s = upload_script("/lustre/u/workdirs/ab12.tar.gz", "QUJD");
        assert!(
            s.contains("base64 -d") && s.contains("\nQUJD\n") && s.contains("mv \"$t\" /lustre/u/workdirs/ab12.tar.gz")
        );
        assert_eq!(present_script("/a b"), "[ -f '/a b' ]\n");
    }
}
