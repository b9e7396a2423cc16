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

#[cfg(test)]
mod tests {
    use super::*;

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
