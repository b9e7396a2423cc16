#!/usr/bin/env bash
# Stop the Slurm 24.11 sandbox cluster (up-24.11.sh): every process running in its namespace (slurmctld,
# slurmd, slurmstepd and job tasks and their containers, slurmdbd, munged, the login sshd and its
# sessions), the namespace's holder, and its MariaDB; then unmount what up-24.11.sh mounted into the root. The 22.05 cluster is not touched.
#   down-24.11.sh               stop, keep state (DB, keys, spool, logs) and the root
#   down-24.11.sh --purge       ... and delete the state directory (the root is kept: it takes minutes)
#   down-24.11.sh --purge-root  ... and delete the root too
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SANDBOX_DIR="${SANDBOX_DIR_2411:-/var/lib/tao-slurm-sandbox-24.11}"
# shellcheck source=lib.sh
. "$HERE/lib.sh"
ROOT="${SANDBOX_ROOT_2411:-$SANDBOX_DIR.root}"

purge=0
case "${1:-}" in
    --purge) purge=1 ;;
    --purge-root) purge=2 ;;
    "") ;;
    *) echo "usage: $0 [--purge|--purge-root]" >&2; exit 2 ;;
esac
[[ $EUID -eq 0 ]] || { echo "down-24.11.sh must run as root" >&2; exit 1; }
T0="$(date +%s%N)"

# The cluster's mount namespace (up-24.11.sh): its holder, and the namespace's id
ns_holder="$(read_pidfile "$RUN/ns.pid")"
ns_id=""
if [[ -n "$ns_holder" ]] && ! pid_gone "$ns_holder" && [[ "$(cat "/proc/$ns_holder/comm" 2>/dev/null)" == sleep ]]; then
    ns_id="$(readlink "/proc/$ns_holder/ns/mnt")"
else
    ns_holder=""
fi

# in_root_pids [EXCEPT_COMM...] -> processes of the cluster's namespace but its holder (or, from a
# cluster of earlier versions, whose root directory is ROOT): everything this cluster runs
in_root_pids() {
    local d p comm skip c
    for d in /proc/[0-9]*; do
        p="${d#/proc/}"
        [[ "$p" == "$ns_holder" ]] && continue
        if [[ -n "$ns_id" && "$(readlink "$d/ns/mnt" 2>/dev/null)" == "$ns_id" ]]; then :
        elif [[ "$(readlink "$d/root" 2>/dev/null)" == "$ROOT" ]]; then :
        else continue; fi
        pid_gone "$p" && continue
        comm=""; { read -r comm <"$d/comm"; } 2>/dev/null || true
        skip=0
        for c in "$@"; do [[ "$comm" == "$c" ]] && skip=1; done
        [[ $skip == 0 ]] && printf '%s\n' "$p"
    done
    return 0
}

if [[ -n "$ns_id" ]] || is_mounted "$ROOT/proc"; then
    # running jobs would stay RUNNING in the controller after their steps are killed
    if [[ -n "$ns_id" ]]; then enter=(nsenter --mount="/proc/$ns_holder/ns/mnt"); else enter=(chroot "$ROOT"); fi
    "${enter[@]}" env SLURM_CONF="$ETC/slurm.conf" timeout 5 scancel --state=RUNNING >/dev/null 2>&1 || true
    # wave 1: job steps (SIGKILL: slurmstepd ignores SIGTERM) and their tasks, then everything else
    # but accounting and munge; wave 2: those
    mapfile -t steps < <(in_root_pids | while read -r p; do [[ "$(cat "/proc/$p/comm" 2>/dev/null)" == slurmstepd ]] && echo "$p"; done)
    if [[ ${#steps[@]} -gt 0 ]]; then
        echo "down-24.11.sh: SIGKILL job steps and their tasks"
        kill -KILL "${steps[@]}" $(descendants "${steps[@]}") 2>/dev/null || true
    fi
    mapfile -t w1 < <(in_root_pids slurmdbd munged)
    [[ ${#w1[@]} -gt 0 ]] && { echo "down-24.11.sh: stopping sshd, slurmd, slurmctld: ${w1[*]}"; kill_and_wait 15 "${w1[@]}"; }
    mapfile -t w2 < <(in_root_pids)
    [[ ${#w2[@]} -gt 0 ]] && { echo "down-24.11.sh: stopping slurmdbd, munged: ${w2[*]}"; kill_and_wait 15 "${w2[@]}"; }
fi
# its MariaDB runs on the host (the host's 10.11), from its own my.cnf
p="$(read_pidfile "$RUN/mariadbd.pid")"
if [[ -n "$p" ]] && pid_is "$p" /usr/sbin/mariadbd && pid_mine "$p"; then
    echo "down-24.11.sh: stopping mariadbd: $p"; kill_and_wait 30 "$p"
fi
# the image registries (runtime.sh), on the host
for r in public private; do
    p="$(read_pidfile "$RUN/registry-$r.pid")"
    if [[ -n "$p" ]] && pid_is "$p" "${RUNTIME_CACHE:-/var/cache/tao-slurm-sandbox}/docker-registry/usr/bin/docker-registry" && pid_mine "$p"; then
        echo "down-24.11.sh: stopping the $r registry: $p"; kill_and_wait 10 "$p"
    fi
done
# the namespace goes last, with nothing left in it
if [[ -n "$ns_holder" ]]; then echo "down-24.11.sh: ending the cluster's namespace: $ns_holder"; kill_and_wait 10 "$ns_holder"; fi
rm -f "$RUN"/*.pid "$RUN"/munge/munged.pid "$RUN"/mysql/mariadbd.pid "$RUN/.root-mounted" 2>/dev/null || true

# everything mounted into the root, whichever version of up-24.11.sh mounted it (stacked ones too)
unmount_under "$ROOT"

refuse() { case "$1" in ""|/|/var|/var/lib|/tmp|/root|/home|/usr|/etc) echo "down-24.11.sh: refusing to purge '$1'" >&2; exit 1 ;; esac; }
if [[ $purge -ge 1 && -e "$SANDBOX_DIR" ]]; then
    refuse "$SANDBOX_DIR"
    [[ -e "$MARKER" || -z "$(ls -A "$SANDBOX_DIR" 2>/dev/null)" ]] || { echo "down-24.11.sh: $SANDBOX_DIR has no marker; refusing to purge" >&2; exit 1; }
    echo "down-24.11.sh: purging $SANDBOX_DIR"
    rm -rf --one-file-system "${SANDBOX_DIR:?}"
fi
if [[ $purge -ge 2 && -e "$ROOT" ]]; then
    refuse "$ROOT"
    [[ -f "$ROOT/.tao-slurm-packages" || ! -e "$ROOT/etc" ]] || { echo "down-24.11.sh: $ROOT is not a sandbox root; refusing" >&2; exit 1; }
    echo "down-24.11.sh: purging $ROOT"
    rm -rf --one-file-system "${ROOT:?}"
fi
echo "down-24.11.sh: done in $(awk -v a="$T0" -v b="$(date +%s%N)" 'BEGIN{printf "%.2f", (b-a)/1e9}') s"
