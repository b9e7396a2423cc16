//! Trust in shared storage, as shell functions that remote scripts include. Pure text.

/// Shell functions that make shared storage trustworthy before anything is written or sourced there,
/// the way sshd's StrictModes does for a home directory: every directory above the results base must
/// belong to root or to us and be writable by nobody else (unless sticky, like /tmp), and every
/// directory we write into must be a real directory (not a symlink) of ours that no one else can
/// write. A neighbour who could write there could plant a symlink, a script or a secrets file of their
/// own. Files are written to a fresh temporary name and renamed over their target, so a symlink
/// planted where a file goes is replaced, never followed.
pub const TRUST_FUNCTIONS: &str = r#"tao_trust_base() {
  local d="$1" p u m n parts=()
  while [ ! -e "$d" ] && [ ! -L "$d" ] && [ "$d" != / ]; do d="${d%/*}"; [ -n "$d" ] || d=/; done
  d="$(realpath -e -- "$d")" || { echo "tao-slurm: cannot resolve $1" >&2; exit 14; }
  p="$d"; while [ -n "$p" ]; do parts+=("$p"); p="${p%/*}"; done; parts+=(/)
  while read -r u m n; do
    if [ "$u" != 0 ] && [ "$u" != "$EUID" ]; then
      echo "tao-slurm: refusing $1: $n belongs to another user (uid $u), who could replace what tao-slurm writes below it; choose a SLURM_BASE_RESULTS_DIR under directories only you and root control" >&2; exit 14
    fi
    if (( 8#$m & 8#022 )) && ! (( 8#$m & 8#1000 )); then
      echo "tao-slurm: refusing $1: $n is writable by group or others (mode $m), so another user could replace what tao-slurm writes below it; fix it with: chmod go-w $n (or choose another SLURM_BASE_RESULTS_DIR)" >&2; exit 14
    fi
  done < <(stat -c '%u %a %n' -- "${parts[@]}")
}
tao_own_dirs() {
  local u m t n
  while IFS='|' read -r u m t n; do
    if [ "$t" != directory ] || [ "$u" != "$EUID" ] || (( 8#$m & 8#022 )); then
      echo "tao-slurm: refusing $n: it is a $t of uid $u with mode $m, not a directory of yours that only you can write; remove it (or fix it with chmod go-w) and submit again" >&2; exit 14
    fi
  done < <(stat -c '%u|%a|%F|%n' -- "$@")
}
tao_put() {
  local t="$1.tmp.$$.$RANDOM"
  ( set -C; printf '%s' "$2" > "$t" ) 2>/dev/null && mv -fT -- "$t" "$1" || { rm -f -- "$t"; return 1; }
}
"#;

#[cfg(test)]
mod tests {
    use super::TRUST_FUNCTIONS;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    fn run(body: &str) -> (i32, String) {
        let out =
            std::process::Command::new("bash").arg("-c").arg(format!("{TRUST_FUNCTIONS}{body}")).output().unwrap();
        (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
    }

    fn mode(p: &Path, m: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    }

    #[test]
    fn a_base_below_a_directory_others_can_write_is_refused() {
        let top = tempfile::tempdir().unwrap();
        let open = top.path().join("open");
        std::fs::create_dir(&open).unwrap();
        mode(&open, 0o777);
        let base = open.join("me/tao");
        let (rc, err) = run(&format!("tao_trust_base {}; echo passed", base.display()));
        assert_eq!(rc, 14, "{err}");
        assert!(err.contains(&format!("{} is writable by group or others", open.display())), "{err}");
        assert!(err.contains(&format!("chmod go-w {}", open.display())), "{err}");
        // Sticky, like /tmp: others cannot replace what is ours there.
        mode(&open, 0o1777);
        assert_eq!(run(&format!("tao_trust_base {}", base.display())).0, 0);
        // Another user's directory on the way.
        std::fs::create_dir_all(open.join("theirs")).unwrap();
        std::os::unix::fs::chown(open.join("theirs"), Some(65534), Some(65534)).unwrap();
        let (rc, err) = run(&format!("tao_trust_base {}", open.join("theirs/tao").display()));
        assert_eq!(rc, 14);
        assert!(err.contains("belongs to another user (uid 65534)"), "{err}");
    }

    #[test]
    fn only_real_directories_of_ours_are_written_into() {
        let top = tempfile::tempdir().unwrap();
        let mine = top.path().join("mine");
        std::fs::create_dir(&mine).unwrap();
        mode(&mine, 0o700);
        assert_eq!(run(&format!("tao_own_dirs {}", mine.display())).0, 0);
        let link = top.path().join("link");
        std::os::unix::fs::symlink(&mine, &link).unwrap();
        let (rc, err) = run(&format!("tao_own_dirs {} {}", mine.display(), link.display()));
        assert_eq!(rc, 14);
        assert!(err.contains("symbolic link"), "{err}");
        mode(&mine, 0o770);
        assert_eq!(run(&format!("tao_own_dirs {}", mine.display())).0, 14);
    }

    #[test]
    fn a_file_is_written_by_rename_never_through_a_planted_symlink() {
        let top = tempfile::tempdir().unwrap();
        let victim = top.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let target = top.path().join("job.sbatch");
        std::os::unix::fs::symlink(&victim, &target).unwrap();
        let (rc, err) = run(&format!("tao_put {} 'new text'", target.display()));
        assert_eq!(rc, 0, "{err}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert!(!std::fs::symlink_metadata(&target).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "new text");
    }
}
