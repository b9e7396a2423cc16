#!/usr/bin/env bash
# Stop or start one sandbox daemon, for outage tests. Only slurmdbd for now.
#   service-ctl.sh stop slurmdbd     SIGTERM the sandbox's slurmdbd (recorded PID, verified), wait until gone
#   service-ctl.sh start slurmdbd    start it as up.sh does (config from the last up.sh), wait until it listens
#   service-ctl.sh status slurmdbd   exit 0 if running
# While slurmdbd is down, slurmctld queues accounting records and sends them when it reconnects;
# sacct/sacctmgr fail, squeue/sbatch/srun keep working.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
. "$HERE/lib.sh"

usage() { echo "usage: $0 stop|start|status slurmdbd" >&2; exit 2; }
[[ $# -eq 2 ]] || usage
action="$1" svc="$2"
[[ "$svc" == slurmdbd ]] || usage
conf="$ETC/slurmdbd.conf"
[[ -f "$conf" ]] || { echo "service-ctl.sh: no $conf (up.sh not run)" >&2; exit 1; }
[[ $EUID -eq 0 ]] || { echo "service-ctl.sh must run as root" >&2; exit 1; }
port="$(sed -n 's/^DbdPort=\([0-9][0-9]*\)$/\1/p' "$conf" | tail -n1)"
[[ -n "$port" ]] || { echo "service-ctl.sh: no DbdPort in $conf" >&2; exit 1; }

case "$action" in
    status)
        pid="$(slurmdbd_pid)"
        if [[ -n "$pid" ]]; then echo "slurmdbd running (pid $pid, port $port)"; exit 0; fi
        echo "slurmdbd stopped"; exit 1 ;;
    stop)
        lock_sandbox
        pid="$(slurmdbd_pid)"
        if [[ -z "$pid" ]]; then echo "slurmdbd already stopped"; rm -f "$RUN/slurmdbd.pid"; exit 0; fi
        kill_and_wait 15 "$pid"
        rm -f "$RUN/slurmdbd.pid"
        echo "slurmdbd stopped (pid $pid)" ;;
    start)
        lock_sandbox
        pid="$(slurmdbd_pid)"
        if [[ -n "$pid" ]]; then echo "slurmdbd already running (pid $pid)"; exit 0; fi
        rc=0; slurmdbd_start "$port" || rc=$?
        pid="$(slurmdbd_pid)"
        if [[ $rc != 0 || -z "$pid" ]]; then
            echo "service-ctl.sh: slurmdbd did not start (rc=$rc) or is not listening on $port" >&2
            tail -n 20 "$LOG/slurm/slurmdbd.log" >&2 || true
            exit 1
        fi
        echo "slurmdbd started (pid $pid, port $port)" ;;
    *) usage ;;
esac
