#!/usr/bin/env bash
# Stop or start one sandbox daemon, for outage tests: slurmdbd or slurmctld.
#   service-ctl.sh stop SVC      SIGTERM the sandbox's SVC (recorded PID, verified as down.sh does), wait until gone
#   service-ctl.sh start SVC     start it as up.sh does (config from the last up.sh), wait until it is usable:
#                                slurmdbd listens on DbdPort / slurmctld answers scontrol ping
#   service-ctl.sh restart SVC   stop + start (one lock held throughout)
#   service-ctl.sh status SVC    exit 0 if running
# While slurmdbd is down, slurmctld queues accounting records and sends them when it reconnects;
# sacct/sacctmgr fail, squeue/sbatch/srun keep working.
# While slurmctld is down, squeue/sbatch/srun fail (exit 1, "Unable to contact slurm controller")
# after retrying the connect once a second for ~9 s per RPC; scontrol ping says DOWN at once; sacct
# keeps working (it talks to slurmdbd). Running jobs keep running (slurmd/slurmstepd are untouched)
# and slurmctld recovers them from StateSaveLocation on start, so they survive a restart.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
. "$HERE/lib.sh"

usage() { echo "usage: $0 stop|start|restart|status slurmdbd|slurmctld" >&2; exit 2; }
[[ $# -eq 2 ]] || usage
action="$1" svc="$2"
case "$action" in stop|start|restart|status) ;; *) usage ;; esac
case "$svc" in
    slurmdbd)  conf="$ETC/slurmdbd.conf" key=DbdPort ;;
    slurmctld) conf="$ETC/slurm.conf" key=SlurmctldPort ;;
    *) usage ;;
esac
[[ -f "$conf" ]] || { echo "service-ctl.sh: no $conf (up.sh not run)" >&2; exit 1; }
[[ $EUID -eq 0 ]] || { echo "service-ctl.sh must run as root" >&2; exit 1; }
port="$(sed -n "s/^$key=\([0-9][0-9]*\)\$/\1/p" "$conf" | tail -n1)"
[[ -n "$port" ]] || { echo "service-ctl.sh: no $key in $conf" >&2; exit 1; }
export SLURM_CONF="$ETC/slurm.conf"

svc_pid() { "${svc}_pid"; }   # slurmdbd_pid / slurmctld_pid (lib.sh)

now_ns() { date +%s%N; }
since() { awk -v a="$1" -v b="$(now_ns)" 'BEGIN{printf "%.2f", (b-a)/1e9}'; }

do_stop() {
    local pid t0; t0="$(now_ns)"
    pid="$(svc_pid)"
    if [[ -z "$pid" ]]; then echo "$svc already stopped"; rm -f "$RUN/$svc.pid"; return 0; fi
    # slurmctld saves its state (jobs, nodes) to StateSaveLocation on SIGTERM; give it time before SIGKILL
    kill_and_wait 30 "$pid"
    rm -f "$RUN/$svc.pid"
    echo "$svc stopped (pid $pid) in $(since "$t0") s"
}

do_start() {
    local pid rc=0 t0; t0="$(now_ns)"
    pid="$(svc_pid)"
    if [[ -n "$pid" ]]; then echo "$svc already running (pid $pid)"; return 0; fi
    case "$svc" in
        slurmdbd)  slurmdbd_start "$port" || rc=$? ;;
        slurmctld) slurmctld_start || rc=$? ;;
    esac
    pid="$(svc_pid)"
    if [[ $rc != 0 || -z "$pid" ]]; then
        if [[ $svc == slurmdbd ]]; then
            echo "service-ctl.sh: slurmdbd did not start (rc=$rc) or is not listening on $port" >&2
        else
            echo "service-ctl.sh: slurmctld did not start (rc=$rc) or does not answer scontrol ping" >&2
        fi
        tail -n 20 "$LOG/slurm/$svc.log" >&2 || true
        exit 1
    fi
    echo "$svc started (pid $pid, port $port) in $(since "$t0") s"
}

case "$action" in
    status)
        pid="$(svc_pid)"
        if [[ -z "$pid" ]]; then echo "$svc stopped"; exit 1; fi
        extra=""
        if [[ $svc == slurmctld ]] && ! slurmctld_answers; then extra=", not answering scontrol ping"; fi
        echo "$svc running (pid $pid, port $port$extra)"; exit 0 ;;
    stop)    lock_sandbox; do_stop ;;
    start)   lock_sandbox; do_start ;;
    restart) lock_sandbox; do_stop; do_start ;;
esac
