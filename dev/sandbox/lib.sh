# Shared helpers for up.sh / down.sh / sshd-ctl.sh / pyxis-ctl.sh / service-ctl.sh (sourced, not executed).
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

# is_mounted PATH: PATH is a mount point in the kernel's table. (`mountpoint` falls back on comparing
# st_dev with the parent, which some filesystems report differently for plain directories.)
is_mounted() { findmnt -rn --mountpoint "$1" >/dev/null 2>&1; }

# unmount_under PATH: unmount PATH and every mount below it, deepest first, stacked mounts included;
# lazily where a mount is busy. Never fails: a mount that stays is named on stderr.
unmount_under() {
    local root="$1" m left pass
    for pass in 1 2 3 4; do
        mapfile -t left < <(findmnt -rn -o TARGET 2>/dev/null | awk -v r="$root" '$0 == r || index($0, r "/") == 1' | sort -r)
        [[ ${#left[@]} -eq 0 ]] && return 0
        for m in "${left[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
    done
    mapfile -t left < <(findmnt -rn -o TARGET 2>/dev/null | awk -v r="$root" '$0 == r || index($0, r "/") == 1')
    [[ ${#left[@]} -eq 0 ]] || echo "unmount_under: still mounted: ${left[*]}" >&2
    return 0
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

# wait_for SECONDS DESCRIPTION COMMAND...: poll COMMAND (output discarded) every 50 ms until it succeeds
wait_for() {
    local t="$1" what="$2"; shift 2
    local deadline=$(( $(date +%s%N) + t * 1000000000 ))
    until "$@" >/dev/null 2>&1; do
        (( $(date +%s%N) < deadline )) || return 1
        sleep 0.05
    done
}

# port_listening PORT: some socket is LISTENing on it (tcp or tcp6)
port_listening() {
    local hex; hex="$(printf ':%04X ' "$1")"
    grep -qE "^ *[0-9]+: [0-9A-F]+${hex}[0-9A-F]+:[0-9A-F]+ 0A " /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# lock_sandbox: take $SANDBOX_DIR/.up.lock on fd 9 (the lock up.sh holds for its whole run), so the
# ctl scripts do not race with up.sh. Anything started afterwards must get 9>&-.
lock_sandbox() {
    exec 9>"$SANDBOX_DIR/.up.lock"
    flock -w "${1:-120}" 9 || { echo "$(basename "$0"): another up.sh / ctl script holds $SANDBOX_DIR/.up.lock" >&2; exit 1; }
}

# node_names -> every slurmd's name: the GPU nodes node1..NODES, then cpu1, the CPU-only node of
# partition `cpu`, where tao-slurm's image conversions run (its TAO_SLURM_SQSH_PARTITION default), as
# on a cluster with a CPU partition: on the GPU nodes they waited behind the tests' exclusive jobs
node_names() { seq -f 'node%g' 1 "$NODES"; echo cpu1; }

# node_set FILE -> the NodeName= words of a slurm.conf (nothing if there is none)
node_set() { grep -o '^NodeName=[^ ]*' "$1" 2>/dev/null || true; }

# stop_slurm_daemons WHY: stop slurmctld and every slurmd of this sandbox (PID files, checked), so
# that the start script starts them again: Slurm takes a node added to slurm.conf only on a restart of
# them all. Running jobs survive (their slurmstepd keep running, slurmctld recovers its state).
stop_slurm_daemons() {
    local f pid pids=()
    for f in "$RUN/slurmctld.pid" "$RUN"/slurmd-*.pid; do
        pid="$(read_pidfile "$f")"
        [[ -n "$pid" ]] && ! pid_gone "$pid" && pid_mine "$pid" && pids+=("$pid")
    done
    [[ ${#pids[@]} -eq 0 ]] && return 0
    echo "$(basename "$0"): $1: restarting slurmctld and every slurmd"
    kill_and_wait 30 "${pids[@]}"
}

# ---- Pyxis: plugstack.conf -------------------------------------------------------------------------
# srun/sbatch/salloc read PlugStackConfig at every invocation and slurmstepd at every step launch,
# so rewriting the file switches the plugin for new invocations; no daemon restart/reconfigure.
# The clients read plugstack.conf; each slurmd reads its own plugstack-NODE.conf (slurm-NODE.conf
# names it): Pyxis' runtime_path, where a step's image is imported to, must be the node's own.
# container_scope=job: a job's named containers are removed when it ends (Pyxis 0.24's default,
# global, kept every job's `tao-JOB` container on its nodes: 36 GB after one test run).
PLUGSTACK="$ETC/plugstack.conf"

# plugstack_content on|off [NODE] -> the content of plugstack.conf (or NODE's) for that state
plugstack_content() {
    case "$1" in
        on)  printf 'required %s/lib/spank_pyxis.so runtime_path=%s/pyxis/%s container_scope=job\n' "$SANDBOX_DIR" "$SANDBOX_DIR" "${2:-login}" ;;
        off) printf '# Pyxis OFF (dev/sandbox/pyxis-ctl.sh off); pyxis-ctl.sh on or up.sh restores it\n' ;;
        *)       return 1 ;;
    esac
}

# plugstack_state -> on | off | missing | custom
plugstack_state() {
    local cur
    [[ -f "$PLUGSTACK" ]] || { echo missing; return 0; }
    cur="$(cat "$PLUGSTACK")"
    if [[ "$cur" == "$(plugstack_content on)" ]]; then echo on
    elif [[ "$cur" == "$(plugstack_content off)" || -z "${cur//[[:space:]]/}" ]]; then echo off
    else echo custom
    fi
}

# plugstack_set on|off [NODE...]: replace plugstack.conf and every node's (NODEs given, else the
# plugstack-*.conf there are) atomically (temp file in $ETC + mv, so a concurrent srun sees either
# the old or the new file, never a partial one) where the content differs.
# Sets PLUGSTACK_CHANGED=1 if a file was replaced, 0 if all already had that content.
PLUGSTACK_CHANGED=0
plugstack_set() {
    local state="$1" tmp f node nodes=("${@:2}")
    PLUGSTACK_CHANGED=0
    if [[ ${#nodes[@]} -eq 0 ]]; then
        for f in "$ETC"/plugstack-*.conf; do [[ -e "$f" ]] && f="${f##*/plugstack-}" && nodes+=("${f%.conf}"); done
    fi
    for node in "" ${nodes[@]+"${nodes[@]}"}; do
        f="$ETC/plugstack${node:+-$node}.conf"
        tmp="$(mktemp "$ETC/.plugstack.conf.XXXXXX")"
        plugstack_content "$state" "$node" >"$tmp" || { rm -f "$tmp"; return 1; }
        chmod 0644 "$tmp"; chown root:root "$tmp"
        if [[ -f "$f" ]] && cmp -s "$tmp" "$f"; then rm -f "$tmp"; chmod 0644 "$f"; chown root:root "$f"; continue; fi
        mv -f "$tmp" "$f"
        PLUGSTACK_CHANGED=1
    done
}

# ---- slurmdbd ------------------------------------------------------------------------------------
# slurmdbd_pid -> PID of the sandbox's slurmdbd (run/slurmdbd.pid, checked against exe and
# environment), or nothing
slurmdbd_pid() {
    local pid
    pid="$(read_pidfile "$RUN/slurmdbd.pid")"
    if [[ -n "$pid" ]] && pid_is "$pid" /usr/sbin/slurmdbd && pid_mine "$pid"; then printf '%s' "$pid"; fi
    return 0
}

# slurmdbd_start PORT: start slurmdbd (it daemonizes; reads slurmdbd.conf next to $SLURM_CONF, which
# sets PidFile=run/slurmdbd.pid) and wait up to 30 s until it listens on PORT.
# Returns 1 if it failed to start, 2 if it is not listening.
slurmdbd_start() {
    SLURM_CONF="$ETC/slurm.conf" /usr/sbin/slurmdbd 9>&- || return 1
    wait_for 30 "slurmdbd" port_listening "$1" || return 2
}

# ---- slurmctld -----------------------------------------------------------------------------------
# slurmctld_pid -> PID of the sandbox's slurmctld (run/slurmctld.pid, checked against exe and
# command line), or nothing
slurmctld_pid() {
    local pid
    pid="$(read_pidfile "$RUN/slurmctld.pid")"
    if [[ -n "$pid" ]] && pid_is "$pid" /usr/sbin/slurmctld && pid_mine "$pid"; then printf '%s' "$pid"; fi
    return 0
}

# slurmctld_answers: scontrol ping reports the controller UP
slurmctld_answers() {
    local out
    out="$(SLURM_CONF="$ETC/slurm.conf" timeout 10 scontrol ping 2>/dev/null)" || true
    [[ "$out" == *"is UP"* ]]
}

# slurmctld_start: start slurmctld (it daemonizes and writes run/slurmctld.pid; without -c/-i it
# recovers jobs, nodes and reservations from StateSaveLocation) and wait up to 30 s until
# scontrol ping answers. Returns 1 if it failed to start, 2 if it does not answer.
slurmctld_start() {
    /usr/sbin/slurmctld -f "$ETC/slurm.conf" 9>&- || return 1
    wait_for 30 "slurmctld" slurmctld_answers || return 2
}

# slurm_conf GENERATOR: the cluster's slurm.conf on stdout, from the calling script's variables
# (CLUSTER_NAME, HOST, the ports, SD, RUN, LOG, ETC, MUNGE_SOCKET, NODES, CPUS, REAL_MEMORY, GPUS);
# both sandboxes (22.05 and 24.11) run the same cluster shape.
slurm_conf() {
cat <<EOF
# generated by tao-slurm dev/sandbox/$1 -- rewritten on every run
ClusterName=$CLUSTER_NAME
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$SLURMCTLD_PORT
SlurmUser=slurm
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
CredType=cred/munge
CommunicationParameters=NoInAddrAny
StateSaveLocation=$SD/spool/ctld
SlurmdSpoolDir=$SD/spool/%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmctldLogFile=$LOG/slurm/slurmctld.log
SlurmdLogFile=$LOG/slurm/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
# Preemption (issue 23): a job of a higher-PriorityTier partition (urgent) ends the jobs of the others
# on the nodes it needs, as PREEMPTED (CANCEL: tao-slurm resubmits it itself, see README)
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
EnforcePartLimits=ALL
KillWait=5
JobRequeue=1
ReturnToService=2
MinJobAge=10
InactiveLimit=0
SlurmdTimeout=300
MpiDefault=none
MailProg=/bin/true
PlugStackConfig=$ETC/plugstack.conf
# each slurmd reads a copy of this file naming its own plugstack (slurm-nodeN.conf): no hash warning
DebugFlags=NO_CONF_HASH
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$SLURMDBD_PORT
# the slurmdbd connection takes its munge socket from here (AuthInfo is not used for it)
AccountingStoragePass=$MUNGE_SOCKET
AccountingStorageTRES=gres/gpu
EOF
for i in $(seq 1 "$NODES"); do
    echo "NodeName=node$i NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$((SLURMD_PORT_BASE + i)) CPUs=$CPUS RealMemory=$REAL_MEMORY Gres=gpu:$GPUS State=UNKNOWN"
done
echo "NodeName=cpu1 NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$((SLURMD_PORT_BASE + NODES + 1)) CPUs=16 RealMemory=64000 State=UNKNOWN"
cat <<EOF
PartitionName=polar Nodes=node[1-$NODES] Default=YES MaxTime=04:00:00 DefaultTime=01:00:00 State=UP
PartitionName=long Nodes=node[1-$NODES] MaxTime=12:00:00 DefaultTime=01:00:00 State=UP
PartitionName=debug Nodes=node[1-$NODES] MaxTime=00:30:00 DefaultTime=00:10:00 State=UP
PartitionName=urgent Nodes=node[1-$NODES] PriorityTier=10 MaxTime=04:00:00 DefaultTime=00:10:00 State=UP
PartitionName=cpu Nodes=cpu1 MaxTime=01:00:00 DefaultTime=00:30:00 State=UP
EOF
}

# gres_conf_file: the fake GPUs of every node, as gres.conf, into $ETC.
gres_conf_file() {
    local t; t="$(mktemp)"
    printf 'AutoDetect=off\nNodeName=node[1-%s] Name=gpu File=%s/fakegpu/nvidia[0-%s]\n' "$NODES" "$SD" "$((GPUS - 1))" >"$t"
    put_file "$t" "$ETC/gres.conf" 0644
}

# user_rc GENERATOR OWNER HOME: the user's .profile and .bashrc read the sandbox's env.sh.
user_rc() {
    local rc t
    for rc in .profile .bashrc; do
        t="$(mktemp)"
        printf '# generated by tao-slurm dev/sandbox/%s\n[ -r %s ] && . %s\n' "$1" "$SD/env.sh" "$SD/env.sh" >"$t"
        put_file "$t" "$3/$rc" 0644 "$2"
    done
}

# stand_in_tools TOOL...: the sandbox's stand-ins (dev/sandbox/bin) into $SD/bin.
stand_in_tools() {
    local tool t
    for tool in "$@"; do
        t="$(mktemp)"; cp "$HERE/bin/$tool" "$t"; put_file "$t" "$SD/bin/$tool" 0755
    done
}

# slurmdbd_conf GENERATOR: slurmdbd.conf on stdout (LOG, RUN, the ports, DB_PASS, MUNGE_SOCKET).
slurmdbd_conf() {
cat <<EOF
# generated by tao-slurm dev/sandbox/$1
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$SLURMDBD_PORT
SlurmUser=slurm
DebugLevel=info
LogFile=$LOG/slurm/slurmdbd.log
PidFile=$RUN/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
EOF
}

# my_cnf GENERATOR BUFFER_POOL: the accounting database's MariaDB config on stdout.
my_cnf() {
cat <<EOF
# generated by tao-slurm dev/sandbox/$1
[mysqld]
user=mysql
datadir=$SD/mysql/data
socket=$RUN/mysql/mysqld.sock
pid-file=$RUN/mysql/mariadbd.pid
port=$DB_PORT
bind-address=127.0.0.1
skip-name-resolve
log-error=$LOG/mysql/error.log
innodb_buffer_pool_size=$2
innodb_log_file_size=64M
innodb_lock_wait_timeout=900
[client]
socket=$RUN/mysql/mysqld.sock
user=root
EOF
}

# sshd_config GENERATOR PORT USERS: a login node's sshd config on stdout.
sshd_config() {
cat <<EOF
# generated by tao-slurm dev/sandbox/$1
ListenAddress 127.0.0.1
Port $2
HostKey $SD/ssh/ssh_host_ed25519_key
PidFile $RUN/sshd-$2.pid
LogLevel INFO
SyslogFacility AUTH
PubkeyAuthentication yes
AuthorizedKeysFile .ssh/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PermitRootLogin no
AllowUsers $3
StrictModes yes
MaxSessions 64
MaxStartups 64:30:128
PrintMotd no
PrintLastLog no
X11Forwarding no
AllowTcpForwarding yes
AllowStreamLocalForwarding yes
ClientAliveInterval 30
SetEnv SLURM_CONF=$ETC/slurm.conf PATH=$SSH_BIN_PATH
Subsystem sftp internal-sftp
EOF
}

# postgres_up USER PASSWORD DATABASE PORT: Debian's newest PostgreSQL cluster running (pg_ctlcluster:
# no systemd here), a role that logs in with PASSWORD over 127.0.0.1 (scram, Debian's pg_hba) and its
# own DATABASE. Idempotent: a running cluster is left as it is, the role's password is set again.
postgres_up() {
    local user="$1" pass="$2" db="$3" port="$4" ver
    ver="$(ls /usr/lib/postgresql | sort -V | tail -n1)"
    [[ -n "$ver" ]] || die "no PostgreSQL under /usr/lib/postgresql"
    if ! pg_lsclusters -h "$ver" main >/dev/null 2>&1 || [[ -z "$(pg_lsclusters -h "$ver" main)" ]]; then
        pg_createcluster -p "$port" "$ver" main >/dev/null || die "pg_createcluster $ver main failed"
    fi
    if [[ "$(pg_lsclusters -h "$ver" main | awk '{print $4}')" != online ]]; then
        pg_ctlcluster "$ver" main start 9>&- || die "PostgreSQL $ver did not start" "/var/log/postgresql/postgresql-$ver-main.log"
    fi
    wait_for 30 "postgresql" runuser -u postgres -- psql -p "$port" -Atqc 'SELECT 1' \
        || die "PostgreSQL does not answer on port $port" "/var/log/postgresql/postgresql-$ver-main.log"
    # The password is passed as a psql variable (:'pass' quotes it), never on a command line.
    runuser -u postgres -- psql -p "$port" -v ON_ERROR_STOP=1 -qAt -v user="$user" -v pass="$pass" -v db="$db" <<'SQL' \
        || die "PostgreSQL role/database setup failed"
SELECT format('CREATE ROLE %I LOGIN', :'user') WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'user') \gexec
SELECT format('ALTER ROLE %I PASSWORD %L', :'user', :'pass') \gexec
SELECT format('CREATE DATABASE %I OWNER %I', :'db', :'user') WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = :'db') \gexec
SQL
    PGPASSWORD="$pass" psql -h 127.0.0.1 -p "$port" -U "$user" -d "$db" -Atqc 'SELECT 1' >/dev/null \
        || die "PostgreSQL: $user cannot log in to $db over 127.0.0.1"
}

# smoke_test SSH_CONFIG LOGIN SACCT_RUNNER [LOGIN2]: the check that ends up.sh and up-24.11.sh. Over ssh
# as the sandbox user: a 2-node srun in real, named containers (Enroot lists them: each rank prints its node id and the image's
# os-release ID; the shared storage mounted read-only), then a batch job that must end COMPLETED in
# sacct (run as `SACCT_RUNNER sacct ...`: env on the host, in_root for 24.11); LOGIN2 must answer too.
# Dies (the caller's die) with the logs' tails if anything is off; prints what passed.
smoke_test() {
    local cfg="$1" login="$2" runner="$3" login2="${4:-}" errf="$RUN/smoke.err" out jid state l2pid="" l2out
    local ssh=(ssh -F "$cfg")
    if [[ -n "$login2" ]]; then
        l2out="$(mktemp)"; "${ssh[@]}" "$login2" true >"$l2out" 2>&1 & l2pid=$!
    fi
    # one ssh session: the 2-node srun, then a batch job (sbatch first would make srun queue behind it)
    # the image's os-release names it
    local shows='$(. /etc/os-release; echo $ID)' want="0 tao-slurm-sandbox;1 tao-slurm-sandbox;"
    out="$(timeout 120 "${ssh[@]}" "$login" \
        "srun --nodes=2 --ntasks-per-node=1 --gres=gpu:8 --container-image=nvcr.io#nvidia/pytorch:24.01-py3 --container-name=smoke --container-mounts=$SD/shared:$SD/shared:ro sh -c 'echo \$SLURM_NODEID $shows' && sbatch --parsable --wrap true" 2>"$errf")" \
        || die "smoke srun/sbatch over ssh failed: $out $(cat "$errf")" "$LOG/slurm/slurmctld.log" "$LOG/slurm/slurmd-node1.log"
    jid="$(tail -n1 <<<"$out")"
    [[ "$jid" =~ ^[0-9]+$ ]] || die "smoke sbatch printed: $out $(cat "$errf")" "$LOG/slurm/slurmctld.log"
    [[ "$(head -n -1 <<<"$out" | grep -v '^pyxis: ' | sort | tr '\n' ';')" == "$want" ]] \
        || die "smoke srun printed unexpected output: $out $(cat "$errf")" "$LOG/slurm/slurmd-node1.log"
    state=""
    for _ in $(seq 1 200); do
        state="$("$runner" sacct -X -n -P -j "$jid" -o State 2>/dev/null | head -n1)"
        [[ "$state" == COMPLETED || "$state" =~ ^(FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL) ]] && break
        sleep 0.1
    done
    [[ "$state" == COMPLETED ]] || die "smoke job $jid: sacct state '$state' (want COMPLETED)" "$LOG/slurm/slurmdbd.log" "$LOG/slurm/slurmctld.log"
    if [[ -n "$l2pid" ]]; then
        wait "$l2pid" || die "ssh $login2 failed: $(cat "$l2out")"
        rm -f "$l2out"
    fi
    rm -f "$errf"
    echo "$(basename "$0"): smoke OK (2-node srun in real containers over ssh; sbatch job $jid COMPLETED in sacct${login2:+; $login2 reachable})"
}
