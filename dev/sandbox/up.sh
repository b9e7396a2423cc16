#!/usr/bin/env bash
# Bring up the tao-slurm sandbox Slurm cluster (idempotent). See README.md.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
. "$HERE/lib.sh"
# shellcheck source=runtime.sh
. "$HERE/runtime.sh"

# --slurm 24.11: the second cluster, in a Debian 13 root (up-24.11.sh); plain up.sh is the 22.05 one
case "${1:-}" in
    "") ;;
    --slurm)
        case "${2:-}" in
            22.05) ;;
            24.11) exec bash "$HERE/up-24.11.sh" ;;
            *) echo "usage: up.sh [--slurm 22.05|24.11]" >&2; exit 2 ;;
        esac ;;
    *) echo "usage: up.sh [--slurm 22.05|24.11]" >&2; exit 2 ;;
esac

# ---- knobs -------------------------------------------------------------------
SSH_PORT="${SSH_PORT:-2222}"
SSH_PORT2="${SSH_PORT2:-2223}"
SSH_USER="${SSH_USER:-slurmuser}"
CLUSTER_NAME="${CLUSTER_NAME:-ci}"
NODES="${NODES:-4}"
GPUS="${GPUS:-8}"
CPUS="${CPUS:-128}"
REAL_MEMORY="${REAL_MEMORY:-512000}"
SLURMCTLD_PORT="${SLURMCTLD_PORT:-6817}"
SLURMDBD_PORT="${SLURMDBD_PORT:-6819}"
SLURMD_PORT_BASE="${SLURMD_PORT_BASE:-17000}"   # nodeN listens on BASE+N
DB_PORT="${DB_PORT:-3307}"
REGISTRY_PORT="${REGISTRY_PORT:-5101}"                   # the sandbox's registry (public images)
REGISTRY_PRIVATE_PORT="${REGISTRY_PRIVATE_PORT:-5102}"   # ... and its private org (credentials)
UP_SMOKE="${UP_SMOKE:-1}"
UP_TIMEOUT="${UP_TIMEOUT:-90}"

export DEBIAN_FRONTEND=noninteractive
export SLURM_CONF="$ETC/slurm.conf"
SD="$SANDBOX_DIR"
HOST="$(hostname -s)"
SSH_BIN_PATH="$SD/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
MUNGE_SOCKET="$RUN/munge/munge.socket"
DB_PASS="slurm-sandbox-db"   # only reachable on 127.0.0.1:$DB_PORT
# The PostgreSQL of the service's store tests (Debian's cluster, password auth on 127.0.0.1 only).
PG_USER="tao_slurm_test"; PG_DB="tao_slurm_test"; PG_PASS="tao-slurm-sandbox-pg"; PG_PORT=5432
USER_HOME="$SD/home/$SSH_USER"

[[ $EUID -eq 0 ]] || { echo "up.sh must run as root" >&2; exit 1; }

# ---- timing and failure reporting --------------------------------------------
T0="$(date +%s.%N)"
TP="$T0"
TIMINGS=()
phase_done() {
    local now; now="$(date +%s.%N)"
    TIMINGS+=("$(awk -v n="$1" -v a="$TP" -v b="$now" 'BEGIN{printf "%-24s %6.2f s", n, b-a}')")
    TP="$now"
}
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}'; }

tail_logs() {
    local f
    for f in "$@"; do
        [[ -f "$f" ]] || continue
        echo "----- tail -n 30 $f -----" >&2
        tail -n 30 "$f" >&2 || true
    done
}
die() {
    local msg="$1"; shift
    echo "up.sh: ERROR: $msg" >&2
    tail_logs "$@"
    exit 1
}
trap 'rc=$?; [[ $rc -eq 0 ]] || echo "up.sh: failed (rc=$rc) at line $LINENO: $BASH_COMMAND" >&2' ERR

# wait_for, port_listening, plugstack_set, slurmdbd_start, slurmctld_start: see lib.sh

# put_file SRC DEST MODE [OWNER]: move a freshly generated SRC into place; DEST is recorded in CHANGED if it differed
CHANGED=()
put_file() {
    local src="$1" dst="$2" mode="$3" owner="${4:-root:root}"
    if [[ -f "$dst" ]] && cmp -s "$src" "$dst"; then
        chmod "$mode" "$dst"; chown "$owner" "$dst"; rm -f "$src"
        return 0
    fi
    install -m "$mode" -o "${owner%%:*}" -g "${owner##*:}" "$src" "$dst"
    rm -f "$src"
    CHANGED+=("$dst")
}
changed() { local f; for f in "$@"; do [[ " ${CHANGED[*]:-} " == *" $f "* ]] && return 0; done; return 1; }

mkdir -p "$SD"
exec 9>"$SD/.up.lock"
flock -w 120 9 || die "another up.sh holds $SD/.up.lock"

# NB: every daemon below is started with 9>&- so it does not inherit (and hold) this lock.

# ---- 1. packages ---------------------------------------------------------------
PKGS=(slurm-wlm slurmctld slurmd slurm-client slurmdbd libslurm-dev munge
      mariadb-server mariadb-client openssh-server openssh-client gcc libc6-dev postgresql postgresql-client openssl
      "${RUNTIME_PKGS[@]}")
installed=" $({ dpkg-query -W -f='${db:Status-Abbrev}${Package} ' "${PKGS[@]}" 2>/dev/null || true; } | tr -s ' ' | sed 's/ii \([^ ]*\)/+\1/g') "
missing=()
for p in "${PKGS[@]}"; do
    [[ "$installed" == *" +$p "* ]] || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
    echo "up.sh: installing: ${missing[*]}"
    tmp_policy=""
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        tmp_policy=/usr/sbin/policy-rc.d
        printf '#!/bin/sh\n# temporary, from tao-slurm dev/sandbox/up.sh\nexit 101\n' >"$tmp_policy"
        chmod 755 "$tmp_policy"
        trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    fi
    "$HERE/../apt-get" update -qq
    "$HERE/../apt-get" install -y -qq --no-install-recommends "${missing[@]}" >"/tmp/tao-slurm-sandbox-apt.log" 2>&1 \
        || { tail -n 40 /tmp/tao-slurm-sandbox-apt.log >&2; die "apt-get install failed"; }
    if [[ -n "$tmp_policy" ]]; then rm -f "$tmp_policy"; trap - EXIT; fi
fi
for u in slurm munge mysql; do
    getent passwd "$u" >/dev/null || die "system user $u missing after package install"
done
phase_done packages

# ---- 2. directories, users, keys, configs ---------------------------------------
umask 022
install -d -m 0755 "$SD" "$ETC" "$RUN" "$LOG" "$SD/bin" "$SD/lib" "$SD/ssh" "$SD/home" \
    "$SD/spool" "$SD/fakegpu" "$SD/shared" "$SD/mysql" "$SD/gpu"
touch "$MARKER"
# the nodes' stand-in nvidia-smi (its readings per node: <sandbox>/gpu/<node>, which tests write)
install -m 0755 "$HERE/bin/nvidia-smi" "$SD/bin/nvidia-smi"
# and its stand-in dcgmi (DCGM answers only where <sandbox>/gpu/<node>.dcgm exists)
install -m 0755 "$HERE/bin/dcgmi" "$SD/bin/dcgmi"
install -d -m 0755 -o slurm -g slurm "$LOG/slurm" "$SD/spool/ctld"
install -d -m 0700 -o munge -g munge "$SD/munge" "$LOG/munge"
install -d -m 0755 -o munge -g munge "$RUN/munge"
install -d -m 0750 -o mysql -g mysql "$SD/mysql/data" "$LOG/mysql"
install -d -m 0755 -o mysql -g mysql "$RUN/mysql"
install -d -m 0755 /run/sshd
for n in $(node_names); do install -d -m 0755 "$SD/spool/$n"; done
for i in $(seq 0 $((GPUS - 1))); do
    [[ -L "$SD/fakegpu/nvidia$i" ]] || ln -sfn /dev/null "$SD/fakegpu/nvidia$i"
done

# hostname must resolve (Slurm looks up NodeHostname/SlurmctldHost)
getent hosts "$HOST" >/dev/null || echo "127.0.0.1 $HOST" >>/etc/hosts

# test user: password field '*' (not locked: sshd with UsePAM no refuses locked accounts)
if ! getent passwd "$SSH_USER" >/dev/null; then
    useradd -M -U -d "$USER_HOME" -s /bin/bash "$SSH_USER"
fi
cur_home="$(getent passwd "$SSH_USER" | cut -d: -f6)"
if [[ "$cur_home" != "$USER_HOME" ]]; then
    # never take the user from another sandbox on this host (its logins would stop working)
    other="$(dirname "$(dirname "$cur_home")")"
    if [[ -e "$other/.tao-slurm-sandbox" && "$other" != "$SD" ]]; then
        die "$SSH_USER's home is in the sandbox $other: a second sandbox on this host needs its own SSH_USER (and TENANT_USER)"
    fi
    usermod -d "$USER_HOME" "$SSH_USER"
fi
# ...and a password, which only a test's own keyboard-interactive sshd asks for (the `login` tests of
# a host that prompts); the sandbox's login sshds take keys only. Readable by root only.
[[ -s "$SD/login-password" ]] || (umask 077; head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$SD/login-password")
echo "$SSH_USER:$(cat "$SD/login-password")" | chpasswd
install -d -m 0755 -o "$SSH_USER" -g "$SSH_USER" "$USER_HOME" "$SD/shared/$SSH_USER"
# a second user with no login: the hostile neighbour on shared storage in the trust tests
NEIGHBOUR_USER="${NEIGHBOUR_USER:-neighbour}"
getent passwd "$NEIGHBOUR_USER" >/dev/null || useradd -M -U -d /nonexistent -s /usr/sbin/nologin "$NEIGHBOUR_USER"
install -d -m 0700 -o "$SSH_USER" -g "$SSH_USER" "$USER_HOME/.ssh"
# a third user who can log in: the Unix identity of a second org's workspace in the service's tenancy
# tests. Its authorized_keys starts empty and is kept across runs: those tests authorise the key the
# service made for that org, and take it out again.
TENANT_USER="${TENANT_USER:-tenant2}"
TENANT_HOME="$SD/home/$TENANT_USER"
getent passwd "$TENANT_USER" >/dev/null || useradd -M -U -d "$TENANT_HOME" -s /bin/bash "$TENANT_USER"
[[ "$(getent shadow "$TENANT_USER" | cut -d: -f2)" == "*" ]] || usermod -p '*' "$TENANT_USER"
install -d -m 0755 -o "$TENANT_USER" -g "$TENANT_USER" "$TENANT_HOME"
install -d -m 0700 -o "$TENANT_USER" -g "$TENANT_USER" "$TENANT_HOME/.ssh" "$SD/shared/$TENANT_USER"
[[ -f "$TENANT_HOME/.ssh/authorized_keys" ]] \
    || install -m 0600 -o "$TENANT_USER" -g "$TENANT_USER" /dev/null "$TENANT_HOME/.ssh/authorized_keys"
user_rc up.sh "$TENANT_USER:$TENANT_USER" "$TENANT_HOME"
# two people of one org, each their own Unix user, who log in only with a certificate of a CA the
# login hosts trust (sshd's TrustedUserCAKeys, a file the service's tests write their CA into, and
# AuthorizedPrincipalsFile: each user's principal is their name); no authorized_keys
PERSON_USERS="${PERSON_USERS:-ada bo}"
install -d -m 0755 "$SD/ssh/principals"
[[ -f "$SD/ssh/trusted_user_ca_keys" ]] || install -m 0644 /dev/null "$SD/ssh/trusted_user_ca_keys"
for u in $PERSON_USERS; do
    getent passwd "$u" >/dev/null || useradd -M -U -d "$SD/home/$u" -s /bin/bash "$u"
    [[ "$(getent shadow "$u" | cut -d: -f2)" == "*" ]] || usermod -p '*' "$u"
    install -d -m 0755 -o "$u" -g "$u" "$SD/home/$u"
    install -d -m 0700 -o "$u" -g "$u" "$SD/shared/$u"
    user_rc up.sh "$u:$u" "$SD/home/$u"
    T="$(mktemp)"; echo "$u" >"$T"; put_file "$T" "$SD/ssh/principals/$u" 0644
done
# enroot credentials (the key of the sandbox registry's private org), as a user installs once;
# a workspace's preflight needs them (tests/sandbox/preflight.rs removes and reinstalls slurmuser's)
ngc_key="$(registry_key)"
for who in "$SSH_USER:$USER_HOME" "$TENANT_USER:$TENANT_HOME" $(for u in $PERSON_USERS; do echo "$u:$SD/home/$u"; done); do
    u="${who%%:*}"; h="${who#*:}"
    [[ -f "$h/.config/enroot/.credentials" ]] && continue
    install -d -m 0700 -o "$u" -g "$u" "$h/.config" "$h/.config/enroot"
    T="$(mktemp)"; printf 'machine nvcr.io login $oauthtoken password %s\n' "$ngc_key" >"$T"
    install -m 0600 -o "$u" -g "$u" "$T" "$h/.config/enroot/.credentials"; rm -f "$T"
done

# keys (kept across runs)
[[ -f "$SD/ssh/id_ed25519" ]] || ssh-keygen -q -t ed25519 -N '' -C "tao-slurm-sandbox-client" -f "$SD/ssh/id_ed25519"
chmod 600 "$SD/ssh/id_ed25519"; chown root:root "$SD/ssh/id_ed25519"
[[ -f "$SD/ssh/ssh_host_ed25519_key" ]] || ssh-keygen -q -t ed25519 -N '' -C "tao-slurm-sandbox-host" -f "$SD/ssh/ssh_host_ed25519_key"
chmod 600 "$SD/ssh/ssh_host_ed25519_key"
if [[ ! -s "$SD/munge/munge.key" ]]; then
    dd if=/dev/urandom of="$SD/munge/munge.key" bs=1024 count=1 status=none
fi
chown munge:munge "$SD/munge/munge.key"; chmod 0400 "$SD/munge/munge.key"

# user files
T="$(mktemp)"; cp "$SD/ssh/id_ed25519.pub" "$T"
put_file "$T" "$USER_HOME/.ssh/authorized_keys" 0600 "$SSH_USER:$SSH_USER"

# env.sh (local use and login shells)
T="$(mktemp)"
cat >"$T" <<EOF
# tao-slurm sandbox environment (generated by up.sh)
export SLURM_CONF=$ETC/slurm.conf
case ":\$PATH:" in *":$SD/bin:"*) ;; *) export PATH="$SD/bin:\$PATH" ;; esac
EOF
put_file "$T" "$SD/env.sh" 0644
user_rc up.sh "$SSH_USER:$SSH_USER" "$USER_HOME"

# stand-ins: the download tools that auxiliary inputs use (aws, huggingface-cli), torchrun, tensorboard
# (prints the rendezvous and ranks it was given; for multi-node launch tests), and a TAO container's
# `python` with a stand-in of TAO's container entrypoint (nvidia_tao_core...container_handler) in
# $SD/pylib, for the TAO-job tests (tests/tao_client)
stand_in_tools aws huggingface-cli torchrun python tensorboard
TAO_PKG="$SD/pylib/nvidia_tao_core/microservices/handlers"
install -d -m 0755 "$TAO_PKG"
for d in nvidia_tao_core nvidia_tao_core/microservices nvidia_tao_core/microservices/handlers; do
    T="$(mktemp)"; echo '# tao-slurm sandbox stand-in (dev/sandbox/tao_stand_in)' >"$T"
    put_file "$T" "$SD/pylib/$d/__init__.py" 0644
done
T="$(mktemp)"; cp "$HERE/tao_stand_in/container_handler.py" "$T"; put_file "$T" "$TAO_PKG/container_handler.py" 0644

# what the retired stand-ins (the recording SPANK plugin and the fake enroot) left behind
rm -f "$SD/lib/container_stub.so" "$ETC/pyxis-plugin"
# the real container runtime (runtime.sh): Enroot and Pyxis from the vendored archives, built once
runtime_verify
enroot_install
pyxis_install "$(dpkg-query -W -f='${Version}' libslurm-dev)" "$SD/.pyxis-build"

# slurm.conf
old_nodes="$(node_set "$ETC/slurm.conf")"
T="$(mktemp)"; slurm_conf up.sh >"$T"; put_file "$T" "$ETC/slurm.conf" 0644
# ... and each slurmd's copy, naming its own plugstack (lib.sh)
for n in $(node_names); do
    T="$(mktemp)"; sed "s;^PlugStackConfig=.*;PlugStackConfig=$ETC/plugstack-$n.conf;" "$ETC/slurm.conf" >"$T"
    put_file "$T" "$ETC/slurm-$n.conf" 0644
done

gres_conf_file
T="$(mktemp)"
printf 'CgroupPlugin=autodetect\nConstrainCores=no\nConstrainRAMSpace=no\nConstrainDevices=no\n' >"$T"
put_file "$T" "$ETC/cgroup.conf" 0644
# Pyxis always back ON (heals a test that left it off with pyxis-ctl.sh off)
plugstack_set on $(node_names)
if [[ $PLUGSTACK_CHANGED == 1 ]]; then CHANGED+=("$ETC/plugstack.conf"); fi

T="$(mktemp)"; slurmdbd_conf up.sh >"$T"; put_file "$T" "$ETC/slurmdbd.conf" 0600 slurm:slurm

T="$(mktemp)"; my_cnf "up.sh" 1024M >"$T"; put_file "$T" "$ETC/my.cnf" 0644

for port in "$SSH_PORT" "$SSH_PORT2"; do
    T="$(mktemp)"
    sshd_config "up.sh -- sandbox login node on port $port" "$port" "$SSH_USER $TENANT_USER $PERSON_USERS" >"$T"
    printf 'TrustedUserCAKeys %s\nAuthorizedPrincipalsFile %s\n' "$SD/ssh/trusted_user_ca_keys" "$SD/ssh/principals/%u" >>"$T"
    put_file "$T" "$ETC/sshd_config-$port" 0644
done

# client side: known_hosts, ssh config
read -r kt kb _ <"$SD/ssh/ssh_host_ed25519_key.pub"
T="$(mktemp)"
printf '[127.0.0.1]:%s %s %s\n[127.0.0.1]:%s %s %s\n' "$SSH_PORT" "$kt" "$kb" "$SSH_PORT2" "$kt" "$kb" >"$T"
put_file "$T" "$SD/ssh/known_hosts" 0644
T="$(mktemp)"
cat >"$T" <<EOF
# generated by tao-slurm dev/sandbox/up.sh
Host sandbox-login1
    HostName 127.0.0.1
    Port $SSH_PORT
Host sandbox-login2
    HostName 127.0.0.1
    Port $SSH_PORT2
Host sandbox-login1 sandbox-login2
    User $SSH_USER
    IdentityFile $SD/ssh/id_ed25519
    IdentitiesOnly yes
    UserKnownHostsFile $SD/ssh/known_hosts
    GlobalKnownHostsFile /dev/null
    StrictHostKeyChecking yes
    BatchMode yes
    LogLevel ERROR
EOF
put_file "$T" "$SD/ssh/config" 0644

# settings.env; SLURM_CONTAINER_MOUNTS: the contract's default mount is /lustre, which does not exist
# here, and Pyxis fails a step whose mount source does not exist: the shared storage is $SD/shared
T="$(mktemp)"
cat >"$T" <<EOF
SLURM_USER=$SSH_USER
SLURM_HOSTNAME=sandbox-login1,sandbox-login2
SSH_CONFIG=$SD/ssh/config
SSH_KNOWN_HOSTS=$SD/ssh/known_hosts
SSH_KEY_PATH=$SD/ssh/id_ed25519
SLURM_PARTITION=polar
SLURM_BASE_RESULTS_DIR=$SD/shared/$SSH_USER
SANDBOX_NEIGHBOUR=$NEIGHBOUR_USER
SANDBOX_TENANT=$TENANT_USER
SANDBOX_PERSONS=$(tr ' ' ',' <<<"$PERSON_USERS")
SANDBOX_TRUSTED_USER_CA_KEYS=$SD/ssh/trusted_user_ca_keys
SANDBOX_DIR=$SD
SANDBOX_SSHD_LOGS=$LOG/sshd-$SSH_PORT.log,$LOG/sshd-$SSH_PORT2.log
SANDBOX_SSH_PORTS=$SSH_PORT,$SSH_PORT2
SANDBOX_REGISTRY_PORTS=$REGISTRY_PORT,$REGISTRY_PRIVATE_PORT
SLURM_CONTAINER_MOUNTS=$SD/shared
SANDBOX_PRIVATE_IMAGE=nvcr.io/$PRIVATE_ORG/tao-toolkit:6.26.3-pyt
TAO_SLURM_TEST_DATABASE_URL=postgresql://$PG_USER:$PG_PASS@127.0.0.1:$PG_PORT/$PG_DB
EOF
put_file "$T" "$SD/settings.env" 0644
phase_done "configs + spank build"

# ---- 3. munged --------------------------------------------------------------------
if ! running munged /usr/sbin/munged; then
    rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
    runuser -u munge -- /usr/sbin/munged --key-file="$SD/munge/munge.key" --socket="$MUNGE_SOCKET" \
        --pid-file="$RUN/munge/munged.pid" --log-file="$LOG/munge/munged.log" --seed-file="$SD/munge/munged.seed" 9>&- \
        || die "munged failed to start" "$LOG/munge/munged.log"
    wait_for 10 "munge socket" test -S "$MUNGE_SOCKET" || die "munged socket did not appear" "$LOG/munge/munged.log"
    wait_for 5 "munged pid" test -s "$RUN/munge/munged.pid" || die "munged wrote no pid file" "$LOG/munge/munged.log"
    cp "$RUN/munge/munged.pid" "$RUN/munged.pid"
fi
phase_done munged

# ---- 4. MariaDB ------------------------------------------------------------------------
if ! running mariadbd /usr/sbin/mariadbd; then
    if [[ ! -d "$SD/mysql/data/mysql" ]]; then
        mariadb-install-db --defaults-file="$ETC/my.cnf" --user=mysql --auth-root-authentication-method=socket \
            --skip-test-db >"$LOG/mysql/install.log" 2>&1 || die "mariadb-install-db failed" "$LOG/mysql/install.log"
    fi
    rm -f "$RUN/mysql/mysqld.sock"
    setsid -f /usr/sbin/mariadbd --defaults-file="$ETC/my.cnf" </dev/null >>"$LOG/mysql/stdout.log" 2>&1 9>&-
    wait_for 30 "mariadb" mariadb-admin --defaults-file="$ETC/my.cnf" ping \
        || die "MariaDB did not come up" "$LOG/mysql/error.log" "$LOG/mysql/stdout.log"
    wait_for 5 "mariadb pid" test -s "$RUN/mysql/mariadbd.pid" || die "mariadbd wrote no pid file" "$LOG/mysql/error.log"
    cp "$RUN/mysql/mariadbd.pid" "$RUN/mariadbd.pid"
fi
mariadb --defaults-file="$ETC/my.cnf" <<EOF || die "MariaDB user setup failed" "$LOG/mysql/error.log"
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
EOF
phase_done "mariadb"

# ---- 4b. PostgreSQL (the service's second store backend; its tests' database) ------------------
postgres_up "$PG_USER" "$PG_PASS" "$PG_DB" "$PG_PORT"
phase_done "postgresql"

# ---- 5. slurmdbd + registration --------------------------------------------------------------
if running slurmdbd /usr/sbin/slurmdbd; then
    if changed "$ETC/slurmdbd.conf"; then kill -HUP "$(read_pidfile "$RUN/slurmdbd.pid")"; fi
else
    rc=0; slurmdbd_start "$SLURMDBD_PORT" || rc=$?
    if [[ $rc == 1 ]]; then die "slurmdbd failed to start" "$LOG/slurm/slurmdbd.log"; fi
    if [[ $rc == 2 ]]; then die "slurmdbd is not listening on $SLURMDBD_PORT" "$LOG/slurm/slurmdbd.log"; fi
fi
assoc="$(timeout 30 sacctmgr -n -P show assoc format=cluster,account,user 2>&1)" \
    || die "sacctmgr cannot talk to slurmdbd: $assoc" "$LOG/slurm/slurmdbd.log"
if ! grep -qx "$CLUSTER_NAME|default|root" <<<"$assoc" || ! grep -qx "$CLUSTER_NAME|default|$SSH_USER" <<<"$assoc"; then
    cmds=""
    grep -q "^$CLUSTER_NAME|" <<<"$assoc" || cmds+="add cluster $CLUSTER_NAME"$'\n'
    cmds+="add account default cluster=$CLUSTER_NAME description=default organization=sandbox"$'\n'
    cmds+="add user root,$SSH_USER account=default defaultaccount=default cluster=$CLUSTER_NAME"$'\n'
    out="$(printf '%s' "$cmds" | timeout 60 sacctmgr -i 2>&1)" || true
    assoc="$(timeout 30 sacctmgr -n -P show assoc format=cluster,account,user 2>&1)" || true
    grep -qx "$CLUSTER_NAME|default|$SSH_USER" <<<"$assoc" \
        || die "accounting registration failed: $out" "$LOG/slurm/slurmdbd.log"
fi
phase_done "slurmdbd + sacctmgr"

# ---- 6. slurmctld ------------------------------------------------------------------------------
reconf=0
[[ "$old_nodes" == "$(node_set "$ETC/slurm.conf")" ]] || stop_slurm_daemons "the node set changed"
if running slurmctld /usr/sbin/slurmctld; then
    # plugstack.conf is not a trigger: srun/sbatch and slurmstepd read it at each invocation / step
    # launch (pyxis-ctl.sh relies on that), so healing a pyxis-ctl.sh off needs no reconfigure
    if changed "$ETC/slurm.conf" "$ETC/gres.conf" "$ETC"/slurm-node*.conf; then reconf=1; fi
    wait_for 30 "slurmctld" slurmctld_answers || die "slurmctld does not answer" "$LOG/slurm/slurmctld.log"
else
    rc=0; slurmctld_start || rc=$?   # shared with service-ctl.sh start slurmctld
    if [[ $rc == 1 ]]; then die "slurmctld failed to start" "$LOG/slurm/slurmctld.log"; fi
    if [[ $rc == 2 ]]; then die "slurmctld does not answer" "$LOG/slurm/slurmctld.log"; fi
fi
phase_done slurmctld

# ---- 7. slurmd x NODES -------------------------------------------------------------------------
for n in $(node_names); do
    if ! running "slurmd-$n" /usr/sbin/slurmd; then
        # Pyxis runs enroot from slurmstepd's PATH: the node's own (runtime.sh)
        env PATH="$SD/enroot/node/$n:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
            /usr/sbin/slurmd -f "$ETC/slurm-$n.conf" -N "$n" 9>&- || die "slurmd $n failed to start" "$LOG/slurm/slurmd-$n.log"
    fi
done
if [[ $reconf == 1 ]]; then
    echo "up.sh: slurm config changed, scontrol reconfigure"
    scontrol reconfigure || die "scontrol reconfigure failed" "$LOG/slurm/slurmctld.log"
fi
nodes_idle() {   # every node responding and usable (idle, or busy with jobs from an earlier run)
    local s
    s="$(sinfo -h -N -p polar,cpu -o '%N %T' 2>/dev/null)" || return 1
    [[ "$(grep -cE ' (idle|mixed|allocated|completing)$' <<<"$s")" -eq "$((NODES + 1))" ]]
}
deadline=$(( $(date +%s) + UP_TIMEOUT ))
resumed=0
until nodes_idle; do
    if (( $(date +%s) > deadline )); then
        sinfo -N -l >&2 || true
        die "nodes not idle after ${UP_TIMEOUT}s" "$LOG/slurm/slurmctld.log" "$LOG/slurm/slurmd-node1.log"
    fi
    # nodes drained/down from an earlier run: resume them once
    if [[ $resumed == 0 ]] && sinfo -h -N -o '%T' 2>/dev/null | grep -qE '^(down|drain|drained|draining)'; then
        sleep 1
        scontrol update nodename="node[1-$NODES],cpu1" state=resume 2>/dev/null || true
        resumed=1
    fi
    sleep 0.1
done
phase_done "slurmd x$NODES idle"

# ---- 8. sshd x2 ---------------------------------------------------------------------------------
for port in "$SSH_PORT" "$SSH_PORT2"; do
    if running "sshd-$port" /usr/sbin/sshd; then
        if changed "$ETC/sshd_config-$port"; then kill -HUP "$(read_pidfile "$RUN/sshd-$port.pid")"; fi
    else
        /usr/sbin/sshd -t -f "$ETC/sshd_config-$port" || die "sshd config test failed for port $port"
        /usr/sbin/sshd -f "$ETC/sshd_config-$port" -E "$LOG/sshd-$port.log" 9>&- || die "sshd on $port failed to start" "$LOG/sshd-$port.log"
        wait_for 10 "sshd $port" port_listening "$port" || die "sshd is not listening on $port" "$LOG/sshd-$port.log"
    fi
done
phase_done "sshd x2"

# ---- 8b. the image registries ------------------------------------------------------------------
registries_up
phase_done "registries + images"

# ---- 9. smoke test --------------------------------------------------------------------------------
if [[ "$UP_SMOKE" != 0 ]]; then
    smoke_test "$SD/ssh/config" sandbox-login1 env sandbox-login2   # lib.sh
    phase_done "smoke test"
fi

total="$(elapsed "$T0")"
{
    echo "=== $(date -Is) up.sh total ${total} s"
    printf '%s\n' "${TIMINGS[@]}"
} >>"$LOG/up-timings.txt"
printf '%s\n' "${TIMINGS[@]}"
echo "up.sh: cluster '$CLUSTER_NAME' up in ${total} s ($NODES nodes x $GPUS fake GPUs, ssh on 127.0.0.1:$SSH_PORT,$SSH_PORT2)"
echo "up.sh: settings: $SD/settings.env"
