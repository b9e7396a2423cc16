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
