# Shared helpers for up.sh / down.sh / sshd-ctl.sh (sourced, not executed).
# shellcheck shell=bash

SANDBOX_DIR="${SANDBOX_DIR:-/var/lib/tao-slurm-sandbox}"
SANDBOX_DIR="${SANDBOX_DIR%/}"
RUN="$SANDBOX_DIR/run"
LOG="$SANDBOX_DIR/log"
ETC="$SANDBOX_DIR/etc"
MARKER="$SANDBOX_DIR/.tao-slurm-sandbox"

# pid_state PID -> prints the one-letter state from /proc/PID/stat, or nothing
pid_state() {
    local s
    { read -r s <"/proc/$1/stat"; } 2>/dev/null || return 0
    s="${s##*) }"
    printf '%s' "${s%% *}"
}

# pid_ppid PID
pid_ppid() {
    local s
    { read -r s <"/proc/$1/stat"; } 2>/dev/null || return 0
    s="${s##*) }"
    s="${s#* }"
    printf '%s' "${s%% *}"
}

# pid_gone PID: true if the process does not exist or is a zombie
pid_gone() {
    local st
    st="$(pid_state "$1")"
    [[ -z "$st" || "$st" == Z || "$st" == X ]]
}

# pid_is PID EXE: alive (not zombie) and /proc/PID/exe resolves to readlink -f EXE
pid_is() {
    local pid="$1" exe want
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    pid_gone "$pid" && return 1
    exe="$(readlink "/proc/$pid/exe" 2>/dev/null)" || return 1
    exe="${exe% (deleted)}"
    want="$(readlink -f "$2")"
    [[ "$exe" == "$want" ]]
}

# pid_mine PID: its command line or environment mentions SANDBOX_DIR
pid_mine() {
    local pid="$1"
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$SANDBOX_DIR" && return 0
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qF -- "$SANDBOX_DIR" && return 0
    return 1
}

# read_pidfile FILE -> PID or nothing
read_pidfile() {
    local p=""
    [[ -r "$1" ]] && read -r p <"$1" 2>/dev/null || true
    [[ "$p" =~ ^[0-9]+$ ]] && printf '%s' "$p"
    return 0
}

# running NAME EXE: run/NAME.pid names a live process running EXE
running() {
    local pid
    pid="$(read_pidfile "$RUN/$1.pid")"
    [[ -n "$pid" ]] && pid_is "$pid" "$2"
}

# descendants PID... -> all descendants of the given processes (one pass over /proc)
descendants() {
    local -A kids=()
    local d pid pp
    for d in /proc/[0-9]*; do
        pid="${d#/proc/}"
        pp="$(pid_ppid "$pid")"
        [[ -n "$pp" ]] && kids[$pp]+=" $pid"
    done
    local queue=("$@") cur c
    while [[ ${#queue[@]} -gt 0 ]]; do
        cur="${queue[0]}"; queue=("${queue[@]:1}")
        for c in ${kids[$cur]:-}; do
            printf '%s\n' "$c"
            queue+=("$c")
        done
    done
}

# kill_and_wait TIMEOUT PID... : SIGTERM, wait until gone (zombies count as gone), then SIGKILL
kill_and_wait() {
    local timeout="$1"; shift
    local pids=("$@") p left deadline
    [[ ${#pids[@]} -gt 0 ]] || return 0
    kill -TERM "${pids[@]}" 2>/dev/null || true
    deadline=$(( $(date +%s%N) + timeout * 1000000000 ))
    while :; do
        left=()
        for p in "${pids[@]}"; do pid_gone "$p" || left+=("$p"); done
        [[ ${#left[@]} -eq 0 ]] && return 0
        if (( $(date +%s%N) > deadline )); then
            echo "  still alive after ${timeout}s, SIGKILL: ${left[*]}" >&2
            kill -KILL "${left[@]}" 2>/dev/null || true
            sleep 0.2
            return 0
        fi
        sleep 0.05
    done
}

# sshd_sessions PORT... -> PIDs of sshd processes holding a non-listening TCP socket whose
# local port is one of PORT (per-connection sshd processes of the sandbox login nodes,
# including ones orphaned by a listener that was stopped earlier)
sshd_sessions() {
    local -A inodes=()
    local port hex d pid fd l
    for port in "$@"; do
        hex="$(printf '%04X' "$port")"
        # fields: sl local rem st tx:rx tr:tm retrnsmt uid timeout inode
        for l in $(awk -v h=":$hex" 'substr($2, length($2) - 4) == h && $4 != "0A" && $10 != 0 { print $10 }' \
                   /proc/net/tcp /proc/net/tcp6 2>/dev/null); do
            inodes[$l]=1
        done
    done
    [[ ${#inodes[@]} -gt 0 ]] || return 0
    local sshd; sshd="$(readlink -f /usr/sbin/sshd)"
    local comm
    for d in /proc/[0-9]*; do
        comm=""; { read -r comm <"$d/comm"; } 2>/dev/null || continue
        [[ "$comm" == sshd ]] || continue
        [[ "$(readlink "$d/exe" 2>/dev/null)" == "$sshd" ]] || continue
        pid="${d#/proc/}"
        for fd in "$d"/fd/*; do
            l="$(readlink "$fd" 2>/dev/null)" || continue
            if [[ "$l" == socket:\[*\] ]]; then
                l="${l#socket:[}"; l="${l%]}"
                if [[ -n "${inodes[$l]:-}" ]]; then printf '%s\n' "$pid"; break; fi
            fi
        done
    done
}
