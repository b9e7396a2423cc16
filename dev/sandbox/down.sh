#!/usr/bin/env bash
# Stop the tao-slurm sandbox cluster: only processes whose PIDs up.sh recorded under
# $SANDBOX_DIR/run (checked against /proc/PID/exe and cmdline/environ first).
#   down.sh           stop, keep state (DB, keys, spool, logs)
#   down.sh --purge   stop and delete $SANDBOX_DIR
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
. "$HERE/lib.sh"

purge=0
case "${1:-}" in
    --purge) purge=1 ;;
    "") ;;
    *) echo "usage: $0 [--purge]" >&2; exit 2 ;;
esac
[[ $EUID -eq 0 ]] || { echo "down.sh must run as root" >&2; exit 1; }
T0="$(date +%s%N)"

# verified NAME EXE -> PID if run/NAME.pid names a live EXE process that belongs to the sandbox
verified() {
    local pid
    pid="$(read_pidfile "$RUN/$1.pid")"
    [[ -n "$pid" ]] || return 0
    if pid_is "$pid" "$2" && pid_mine "$pid"; then
        printf '%s\n' "$pid"
    fi
    return 0
}

stop_group() {   # stop_group LABEL PID...
    local label="$1"; shift
    [[ $# -gt 0 ]] || return 0
    echo "down.sh: stopping $label: $*"
    kill_and_wait 15 "$@"
}

if [[ -d "$RUN" ]]; then
    # running jobs would otherwise stay RUNNING in the controller after their steps are killed
    # (all slurmd share one host, so the controller's reboot check never purges them)
    if [[ -n "$(verified slurmctld /usr/sbin/slurmctld)" ]]; then
        SLURM_CONF="$ETC/slurm.conf" timeout 5 scancel --state=RUNNING >/dev/null 2>&1 || true
    fi

    # wave 1: login nodes (listener + every sshd process serving a connection on its port),
    # compute nodes, controller. Job steps get SIGKILL (slurmstepd ignores SIGTERM).
    w1=() ports=()
    for f in "$ETC"/sshd_config-*; do
        [[ -e "$f" ]] && ports+=("${f##*-}")
    done
    for f in "$RUN"/sshd-*.pid; do
        [[ -e "$f" ]] || continue
        p="$(verified "$(basename "$f" .pid)" /usr/sbin/sshd)"
        [[ -n "$p" ]] && w1+=("$p")
    done
    if [[ ${#ports[@]} -gt 0 ]]; then
        for c in $(sshd_sessions "${ports[@]}"); do w1+=("$c"); done
    fi
    for f in "$RUN"/slurmd-*.pid; do
        [[ -e "$f" ]] || continue
        p="$(verified "$(basename "$f" .pid)" /usr/sbin/slurmd)"
        [[ -n "$p" ]] && w1+=("$p")
    done
    # leftover job steps of this sandbox (slurmstepd started by our slurmd: SLURM_CONF in its
    # environment points into SANDBOX_DIR) and the tasks below them
    steps=()
    stepd="$(readlink -f /usr/sbin/slurmstepd 2>/dev/null || true)"
    if [[ -n "$stepd" ]]; then
        for d in /proc/[0-9]*; do
            p="${d#/proc/}"
            comm=""; { read -r comm <"$d/comm"; } 2>/dev/null || continue
            [[ "$comm" == slurmstepd ]] || continue
            [[ "$(readlink "$d/exe" 2>/dev/null)" == "$stepd" ]] || continue
            pid_gone "$p" && continue
            tr '\0' '\n' <"$d/environ" 2>/dev/null | grep -qxF "SLURM_CONF=$ETC/slurm.conf" || continue
            steps+=("$p")
        done
    fi
    if [[ ${#steps[@]} -gt 0 ]]; then
        kill_list=("${steps[@]}" $(descendants "${steps[@]}"))
        echo "down.sh: SIGKILL job steps and their tasks: ${kill_list[*]}"
        kill -KILL "${kill_list[@]}" 2>/dev/null || true
    fi
    p="$(verified slurmctld /usr/sbin/slurmctld)"; [[ -n "$p" ]] && w1+=("$p")
    stop_group "sshd, slurmd, slurmctld" ${w1[@]+"${w1[@]}"}

    # wave 2: accounting, database, munge
    w2=()
    p="$(verified slurmdbd /usr/sbin/slurmdbd)"; [[ -n "$p" ]] && w2+=("$p")
    p="$(verified mariadbd /usr/sbin/mariadbd)"; [[ -n "$p" ]] && w2+=("$p")
    p="$(verified munged /usr/sbin/munged)"; [[ -n "$p" ]] && w2+=("$p")
    for r in public private; do   # the image registries (runtime.sh)
        p="$(verified "registry-$r" "${RUNTIME_CACHE:-/var/cache/tao-slurm-sandbox}/docker-registry/usr/bin/docker-registry")"
        [[ -n "$p" ]] && w2+=("$p")
    done
    stop_group "slurmdbd, mariadbd, munged, registries" ${w2[@]+"${w2[@]}"}

    rm -f "$RUN"/*.pid "$RUN"/munge/munged.pid "$RUN"/mysql/mariadbd.pid
fi

if [[ $purge == 1 && -e "$SANDBOX_DIR" ]]; then
    case "$SANDBOX_DIR" in
        ""|/|/var|/var/lib|/tmp|/root|/home|/usr|/etc) echo "down.sh: refusing to purge '$SANDBOX_DIR'" >&2; exit 1 ;;
    esac
    if [[ ! -e "$MARKER" ]] && [[ -n "$(ls -A "$SANDBOX_DIR" 2>/dev/null)" ]]; then
        echo "down.sh: $SANDBOX_DIR has no $(basename "$MARKER") marker; refusing to purge" >&2
        exit 1
    fi
    echo "down.sh: purging $SANDBOX_DIR"
    rm -rf --one-file-system "${SANDBOX_DIR:?}"
fi
# the Slurm 24.11 cluster too, if it was ever brought up (up.sh --slurm 24.11)
if [[ -e "${SANDBOX_DIR_2411:-/var/lib/tao-slurm-sandbox-24.11}" ]]; then
    bash "$HERE/down-24.11.sh" ${1:+"$1"}
fi
echo "down.sh: done in $(awk -v a="$T0" -v b="$(date +%s%N)" 'BEGIN{printf "%.2f", (b-a)/1e9}') s"
