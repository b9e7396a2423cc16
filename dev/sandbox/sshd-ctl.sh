#!/usr/bin/env bash
# Stop or start one of the sandbox login nodes (sshd instances), for failover tests.
#   sshd-ctl.sh stop PORT            stop the listener AND drop its open connections (login node "dies")
#   sshd-ctl.sh stop-listener PORT   stop only the listener; established sessions/ControlMasters survive
#   sshd-ctl.sh start PORT           start it again (config from the last up.sh)
#   sshd-ctl.sh status PORT          exit 0 if running
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
. "$HERE/lib.sh"

usage() { echo "usage: $0 stop|stop-listener|start|status PORT" >&2; exit 2; }
[[ $# -eq 2 && "$2" =~ ^[0-9]+$ ]] || usage
action="$1" port="$2"
conf="$ETC/sshd_config-$port"
[[ -f "$conf" ]] || { echo "sshd-ctl.sh: no $conf (not a sandbox sshd port, or up.sh not run)" >&2; exit 1; }

listener() {
    local pid
    pid="$(read_pidfile "$RUN/sshd-$port.pid")"
    if [[ -n "$pid" ]] && pid_is "$pid" /usr/sbin/sshd && pid_mine "$pid"; then printf '%s' "$pid"; fi
    return 0
}

case "$action" in
    status)
        pid="$(listener)"
        if [[ -n "$pid" ]]; then echo "sshd on $port running (pid $pid)"; exit 0; fi
        echo "sshd on $port stopped"; exit 1 ;;
    stop|stop-listener)
        pid="$(listener)"
        pids=()
        [[ -n "$pid" ]] && pids+=("$pid")
        if [[ "$action" == stop ]]; then
            # every sshd process serving a connection on this port (children, and orphans of an
            # earlier stop-listener)
            for c in $(sshd_sessions "$port"); do pids+=("$c"); done
        fi
        if [[ ${#pids[@]} -eq 0 ]]; then echo "sshd on $port already stopped"; rm -f "$RUN/sshd-$port.pid"; exit 0; fi
        kill_and_wait 10 "${pids[@]}"
        rm -f "$RUN/sshd-$port.pid"
        echo "sshd on $port stopped (${#pids[@]} process(es))" ;;
    start)
        pid="$(listener)"
        if [[ -n "$pid" ]]; then echo "sshd on $port already running (pid $pid)"; exit 0; fi
        install -d -m 0755 /run/sshd
        /usr/sbin/sshd -f "$conf" -E "$LOG/sshd-$port.log"
        for _ in $(seq 1 100); do
            pid="$(listener)"
            [[ -n "$pid" ]] && { echo "sshd on $port started (pid $pid)"; exit 0; }
            sleep 0.05
        done
        echo "sshd-ctl.sh: sshd on $port did not start" >&2; tail -n 20 "$LOG/sshd-$port.log" >&2; exit 1 ;;
    *) usage ;;
esac
