//! Trust in shared storage, as shell functions that remote scripts include. Pure text.

/// Shell functions that make shared storage trustworthy before anything is written or sourced there,
/// the way sshd's StrictModes does for a home directory: every directory above the results base must
/// belong to root or to us and be writable by nobody else (unless sticky, like /tmp), and every
/// directory we write into must be a real directory (not a symlink) of ours that no one else can
/// write. A neighbour who could write there could plant a symlink, a script or a secrets file of their
/// own. Files are written to a fresh temporary name and renamed over their target, so a symlink
/// planted where a file goes is replaced, never followed. `tao_new` writes a file at a path nobody
/// could know before (a new job's, named by its fresh id) in place, with no process: created
/// exclusively (noclobber: O_EXCL, so a symlink there is never followed), and by `tao_put` if
/// anything is there already or the write fails.
const TRUST_FUNCTIONS: &str = r#"tao_trust_dirs() {
  local base="$1" d="$1" here="$PWD" p u m t n
  local -a parts=() ; local -A is_part=() is_dir=()
  shift
  if [ -n "$base" ]; then
    while [ ! -e "$d" ] && [ ! -L "$d" ] && [ "$d" != / ]; do d="${d%/*}"; [ -n "$d" ] || d=/; done
    if [ -d "$d" ] && cd -P -- "$d" 2>/dev/null; then d="$PWD"; cd -- "$here" 2>/dev/null
    else d="$(realpath -e -- "$d")" || { echo "tao-slurm: cannot resolve $base" >&2; exit @UNTRUSTED@; }; fi
    p="$d"; while [ -n "$p" ]; do parts+=("$p"); is_part["$p"]=1; p="${p%/*}"; done; parts+=(/); is_part[/]=1
  fi
  for p in "$@"; do is_dir["$p"]=1; done
  while IFS='|' read -r u m t n; do
    if [ -n "${is_part["$n"]:-}" ]; then
      if [ "$u" != 0 ] && [ "$u" != "$EUID" ]; then
        echo "tao-slurm: refusing $base: $n belongs to another user (uid $u), who could replace what tao-slurm writes below it; choose a SLURM_BASE_RESULTS_DIR under directories only you and root control" >&2; exit @UNTRUSTED@
      fi
      if (( 8#$m & 8#022 )) && ! (( 8#$m & 8#1000 )); then
        echo "tao-slurm: refusing $base: $n is writable by group or others (mode $m), so another user could replace what tao-slurm writes below it; fix it with: chmod go-w $n (or choose another SLURM_BASE_RESULTS_DIR)" >&2; exit @UNTRUSTED@
      fi
    fi
    if [ -n "${is_dir["$n"]:-}" ] && { [ "$t" != directory ] || [ "$u" != "$EUID" ] || (( 8#$m & 8#022 )); }; then
      echo "tao-slurm: refusing $n: it is a $t of uid $u with mode $m, not a directory of yours that only you can write; remove it (or fix it with chmod go-w) and submit again" >&2; exit @UNTRUSTED@
    fi
  done < <(stat -c '%u|%a|%F|%n' -- ${parts[@]+"${parts[@]}"} "$@" 2>/dev/null)
}
tao_trust_base() { tao_trust_dirs "$1"; }
tao_own_dirs() { tao_trust_dirs "" "$@"; }
tao_put() {
  local t="$1.tmp.$$.$RANDOM" rc noclobber=
  case $- in *C*) noclobber=1;; esac
  set -C; { printf '%s' "$2" > "$t"; } 2>/dev/null; rc=$?; [ -n "$noclobber" ] || set +C
  [ "$rc" = 0 ] && mv -fT -- "$t" "$1" || { rm -f -- "$t"; return 1; }
}
tao_new() {
  [ -e "$1" ] || [ -L "$1" ] && { tao_put "$1" "$2"; return; }
  local rc noclobber=
  case $- in *C*) noclobber=1;; esac
  set -C; { printf '%s' "$2" > "$1"; } 2>/dev/null; rc=$?; [ -n "$noclobber" ] || set +C
  [ "$rc" = 0 ] || tao_put "$1" "$2"
}
"#;

/// The trust functions, with their exit code filled in: what remote scripts include. One `stat` (and
/// no other process, but for a base that `cd -P` cannot enter) checks the base's ancestors and the
/// directories that already exist; directories made afterwards are ours, mode 700 (umask 077).
pub fn trust_functions() -> String {
    TRUST_FUNCTIONS.replace("@UNTRUSTED@", &crate::exit_codes::UNTRUSTED_STORAGE.to_string())
}

#[cfg(test)]
mod tests {
    use super::trust_functions;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    fn run(body: &str) -> (i32, String) {
        let out =
            std::process::Command::new("bash").arg("-c").arg(format!("{}{body}", trust_functions())).output().unwrap();
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

    /// `tao_new` writes a new file in place, and anything already there (a planted symlink, to a
    /// file or to a FIFO, or a file) is replaced by rename, never followed or opened.
    #[test]
    fn a_new_file_is_written_in_place_and_anything_already_there_is_replaced() {
        let top = tempfile::tempdir().unwrap();
        let fresh = top.path().join("fresh.json");
        let (rc, err) = run(&format!("tao_new {} 'one'; tao_new {} 'two'", fresh.display(), fresh.display()));
        assert_eq!((rc, std::fs::read_to_string(&fresh).unwrap()), (0, "two".to_string()), "{err}");
        let victim = top.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let fifo = top.path().join("fifo");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        for (name, to) in [("to-file", &victim), ("to-fifo", &fifo)] {
            let target = top.path().join(name);
            std::os::unix::fs::symlink(to, &target).unwrap();
            let (rc, err) = run(&format!("tao_new {} 'new text'", target.display()));
            assert_eq!(rc, 0, "{name}: {err}");
            assert!(!std::fs::symlink_metadata(&target).unwrap().file_type().is_symlink(), "{name}");
            assert_eq!(std::fs::read_to_string(&target).unwrap(), "new text", "{name}");
        }
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    }
}
