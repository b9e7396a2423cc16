#!/usr/bin/env bash
# Bring up the second sandbox cluster, on Slurm 24.11 (Debian 13's packages in a Debian 13 root made
# by debootstrap, made the root of a mount namespace of its own), beside the 22.05 one and on its
# own ports. Idempotent.
# Called by `up.sh --slurm 24.11`; stopped by `down.sh` (which calls down-24.11.sh). See README.md.
#
# Why a root: Debian 12 ships 22.05 only, and a 22.05 client cannot talk to a 24.11 controller, so
# every Slurm command of this cluster, and its login sshd, runs inside the root. The root sees the
# state directory at the same path as the host (a bind mount), so every path below means the same
# thing inside and outside. Its slurmdbd uses a MariaDB of the host's (10.11, its own datadir and
# port): Debian 13's MariaDB 11.8 is refused by slurmdbd 24.11 at start.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SANDBOX_DIR="${SANDBOX_DIR_2411:-/var/lib/tao-slurm-sandbox-24.11}"
# shellcheck source=lib.sh
. "$HERE/lib.sh"
# shellcheck source=runtime.sh
. "$HERE/runtime.sh"

# ---- knobs -------------------------------------------------------------------
ROOT="${SANDBOX_ROOT_2411:-$SANDBOX_DIR.root}"
SUITE="${DEBIAN_SUITE_2411:-trixie}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SSH_PORT="${SSH_PORT_2411:-2224}"
SSH_USER="${SSH_USER:-slurmuser}"
NEIGHBOUR_USER="${NEIGHBOUR_USER:-neighbour}"
CLUSTER_NAME="${CLUSTER_NAME_2411:-ci2411}"
NODES="${NODES:-4}"
GPUS="${GPUS:-8}"
CPUS="${CPUS:-128}"
REAL_MEMORY="${REAL_MEMORY:-512000}"
SLURMCTLD_PORT="${SLURMCTLD_PORT_2411:-6827}"
SLURMDBD_PORT="${SLURMDBD_PORT_2411:-6829}"
SLURMD_PORT_BASE="${SLURMD_PORT_BASE_2411:-17100}"   # nodeN listens on BASE+N
DB_PORT="${DB_PORT_2411:-3308}"
UP_SMOKE="${UP_SMOKE:-1}"
REGISTRY_PORT="${REGISTRY_PORT_2411:-5111}"
REGISTRY_PRIVATE_PORT="${REGISTRY_PRIVATE_PORT_2411:-5112}"
UP_TIMEOUT="${UP_TIMEOUT:-90}"

export DEBIAN_FRONTEND=noninteractive
SD="$SANDBOX_DIR"
HOST="$(hostname -s)"
SSH_BIN_PATH="$SD/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
MUNGE_SOCKET="$RUN/munge/munge.socket"
DB_PASS="slurm-sandbox-db"   # only reachable on 127.0.0.1:$DB_PORT
USER_HOME="$SD/home/$SSH_USER"
# Debian 13's packages inside the root (procps/hostname: the commands tao-slurm's scripts use)
# Enroot's run-time needs (column: bsdextrautils), and make for Pyxis (built in the root against 24.11's spank.h)
ROOT_PKGS=(slurmctld slurmd slurm-client slurmdbd libslurm-dev munge openssh-server gcc libc6-dev
           procps hostname make squashfs-tools fuse-overlayfs parallel pigz jq curl zstd libcap2-bin file
           bsdextrautils squashfuse)

[[ $EUID -eq 0 ]] || { echo "up-24.11.sh must run as root" >&2; exit 1; }

T0="$(date +%s.%N)"; TP="$T0"; TIMINGS=()
phase_done() {
    local now; now="$(date +%s.%N)"
    TIMINGS+=("$(awk -v n="$1" -v a="$TP" -v b="$now" 'BEGIN{printf "%-24s %6.2f s", n, b-a}')")
    TP="$now"
}
die() {
    local msg="$1" f; shift
    echo "up-24.11.sh: ERROR: $msg" >&2
    for f in "$@"; do [[ -f "$f" ]] && { echo "----- tail -n 30 $f -----" >&2; tail -n 30 "$f" >&2; }; done
    exit 1
}
trap 'rc=$?; [[ $rc -eq 0 ]] || echo "up-24.11.sh: failed (rc=$rc) at line $LINENO: $BASH_COMMAND" >&2' ERR

# The cluster runs in a mount namespace whose root is the root itself (pivot_root), not in a chroot:
# the kernel refuses a user namespace to a chrooted process, and Enroot starts every container in
# one. A holder process (run/ns.pid, `sleep infinity`) keeps the namespace; every daemon and command
# of the cluster enters it (in_ns), and so does every login, job and container.
ns_pid() {
    local p
    p="$(read_pidfile "$RUN/ns.pid")"
    [[ -n "$p" ]] && ! pid_gone "$p" && [[ "$(cat "/proc/$p/comm" 2>/dev/null)" == sleep ]] && printf '%s' "$p"
}
in_ns() { nsenter --mount="/proc/$(ns_pid)/ns/mnt" "$@"; }
# in_root CMD...: run a command inside the root, with this cluster's slurm.conf
in_root() { in_ns /usr/bin/env SLURM_CONF="$ETC/slurm.conf" PATH="$SSH_BIN_PATH" "$@"; }

# running_in_root NAME EXE: run/NAME.pid names a live process of the cluster's namespace whose
# binary is the root's EXE (seen from the host, a path in that namespace reads as the root's own)
running_in_root() {
    local pid exe
    pid="$(read_pidfile "$RUN/$1.pid")"
    [[ -n "$pid" ]] || return 1
    pid_gone "$pid" && return 1
    [[ "$(readlink "/proc/$pid/ns/mnt" 2>/dev/null)" == "$(readlink "/proc/$(ns_pid)/ns/mnt")" ]] || return 1
    exe="$(readlink "/proc/$pid/exe" 2>/dev/null)" || return 1
    [[ "${exe% (deleted)}" == "$(in_ns readlink -f "$2")" ]]
}

CHANGED=()
put_file() {   # put_file SRC DEST MODE [OWNER(numeric ok)]
    local src="$1" dst="$2" mode="$3" owner="${4:-0:0}"
    if [[ -f "$dst" ]] && cmp -s "$src" "$dst"; then
        chmod "$mode" "$dst"; chown "$owner" "$dst"; rm -f "$src"; return 0
    fi
    install -m "$mode" "$src" "$dst"; chown "$owner" "$dst"; rm -f "$src"
    CHANGED+=("$dst")
}
changed() { local f; for f in "$@"; do [[ " ${CHANGED[*]:-} " == *" $f "* ]] && return 0; done; return 1; }

mkdir -p "$SD"
exec 9>"$SD/.up.lock"
flock -w 300 9 || die "another up-24.11.sh holds $SD/.up.lock"

# ---- 1. the Debian 13 root and its packages (once) -----------------------------------------------
host_pkgs=()
command -v debootstrap >/dev/null || host_pkgs+=(debootstrap)
command -v mariadbd >/dev/null || host_pkgs+=(mariadb-server mariadb-client)
command -v ssh >/dev/null || host_pkgs+=(openssh-client)
if [[ ${#host_pkgs[@]} -gt 0 ]]; then
    echo "up-24.11.sh: installing on the host: ${host_pkgs[*]}"
    "$HERE/../apt-get" update -qq
    "$HERE/../apt-get" install -y -qq --no-install-recommends "${host_pkgs[@]}" >/tmp/tao-slurm-sandbox-2411-apt.log 2>&1 \
        || die "apt-get install on the host failed" /tmp/tao-slurm-sandbox-2411-apt.log
fi
if [[ ! -x "$ROOT/usr/bin/apt-get" ]]; then
    echo "up-24.11.sh: debootstrap $SUITE into $ROOT (about a minute)"
    debootstrap --variant=minbase --include=ca-certificates "$SUITE" "$ROOT" "$MIRROR" >"$SD/debootstrap.log" 2>&1 \
        || die "debootstrap failed" "$SD/debootstrap.log"
fi
phase_done "debootstrap"

# Daemons of this cluster running without its namespace (a cluster started in a chroot, or one whose
# holder died) are stopped first, mounts and all: each daemon starts again inside the namespace.
mkdir -p "$RUN"
if [[ -z "$(ns_pid)" ]] && compgen -G "$RUN/*.pid" >/dev/null; then
    echo "up-24.11.sh: the cluster runs outside its namespace: stopping it first"
    bash "$HERE/down-24.11.sh"
fi
# the root is a mount point of its own (pivot_root needs one)
is_mounted "$ROOT" || mount --rbind "$ROOT" "$ROOT"
# the root sees the host's devices, processes, name resolution, and the state dir at its own path
for m in proc sys dev dev/pts; do
    is_mounted "$ROOT/$m" && continue
    case "$m" in
        proc) mount -t proc proc "$ROOT/proc" ;;
        dev/pts) mount -t devpts -o newinstance,ptmxmode=0666 devpts "$ROOT/dev/pts" 2>/dev/null || mount --bind /dev/pts "$ROOT/dev/pts" ;;
        *) mount --rbind "/$m" "$ROOT/$m"; mount --make-rslave "$ROOT/$m" ;;
    esac
done
mkdir -p "$ROOT$SD"
is_mounted "$ROOT$SD" || mount --bind "$SD" "$ROOT$SD"
cp -f /etc/resolv.conf "$ROOT/etc/resolv.conf" 2>/dev/null || true
cmp -s /etc/hosts "$ROOT/etc/hosts" || cp -f /etc/hosts "$ROOT/etc/hosts"
getent hosts "$HOST" >/dev/null || { echo "127.0.0.1 $HOST" >>/etc/hosts; cp -f /etc/hosts "$ROOT/etc/hosts"; }
# the namespace, made once every mount above is in place (it copies them): the root's own /proc, and
# the host's tree detached
if [[ -z "$(ns_pid)" ]]; then
    install -d -m 0755 "$ROOT/.host" "$LOG"
    setsid -f unshare --mount --propagation private --fork sh -c \
        'cd "$1" && pivot_root . .host && mount -t proc proc /proc && umount -l /.host && echo $$ >"$2" && exec sleep infinity' \
        ns "$ROOT" "$RUN/ns.pid" </dev/null >>"$LOG/ns.log" 2>&1 9>&-
    wait_for 10 "the cluster's namespace" ns_pid || die "the cluster's mount namespace did not start" "$LOG/ns.log"
fi

want_pkgs="${ROOT_PKGS[*]}"
if [[ "$(cat "$ROOT/.tao-slurm-packages" 2>/dev/null)" != "$want_pkgs" ]]; then
    echo "up-24.11.sh: installing Slurm 24.11 into the root: $want_pkgs"
    # no package may start a service inside the root
    printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"; chmod 755 "$ROOT/usr/sbin/policy-rc.d"
    { in_ns apt-get update -qq && in_ns apt-get install -y -qq --no-install-recommends "${ROOT_PKGS[@]}"; } \
        >"$SD/apt-root.log" 2>&1 || die "apt-get install in the root failed" "$SD/apt-root.log"
    in_ns apt-get clean
    printf '%s' "$want_pkgs" >"$ROOT/.tao-slurm-packages"
fi
SLURM_VERSION="$(in_ns dpkg-query -W -f='${Version}' slurm-client 2>/dev/null)"; SLURM_VERSION="${SLURM_VERSION%%-*}"
[[ "$SLURM_VERSION" == 24.11.* ]] || die "the root's Slurm is '$SLURM_VERSION', not 24.11"
phase_done "packages (root)"

# ---- 2. users (same uids as the host's, so files mean the same on both sides) --------------------
for u in "$SSH_USER" "$NEIGHBOUR_USER"; do
    getent passwd "$u" >/dev/null || die "user $u is missing on the host: run up.sh (the 22.05 cluster) once first"
    uid="$(id -u "$u")"; gid="$(id -g "$u")"
    in_ns getent group "$u" >/dev/null || in_ns groupadd -g "$gid" "$u"
    if ! in_ns getent passwd "$u" >/dev/null; then
        if [[ "$u" == "$SSH_USER" ]]; then
            in_ns useradd -M -u "$uid" -g "$gid" -d "$USER_HOME" -s /bin/bash "$u"
        else
            in_ns useradd -M -u "$uid" -g "$gid" -d /nonexistent -s /usr/sbin/nologin "$u"
        fi
    fi
done
[[ "$(in_ns getent shadow "$SSH_USER" | cut -d: -f2)" == "*" ]] || in_ns usermod -p '*' "$SSH_USER"
SLURM_IDS="$(in_ns id -u slurm):$(in_ns id -g slurm)"
MUNGE_IDS="$(in_ns id -u munge):$(in_ns id -g munge)"
USER_IDS="$(id -u "$SSH_USER"):$(id -g "$SSH_USER")"

# ---- 3. directories, keys, configs -------------------------------------------------------------------
umask 022
install -d -m 0755 "$SD" "$ETC" "$RUN" "$LOG" "$SD/bin" "$SD/lib" "$SD/ssh" "$SD/home" "$SD/spool" "$SD/fakegpu" \
    "$SD/shared" "$SD/mysql" "$SD/gpu" "$ROOT/run/sshd"
touch "$MARKER"
# the nodes' stand-in nvidia-smi (its readings per node: <sandbox>/gpu/<node>, which tests write)
install -m 0755 "$HERE/bin/nvidia-smi" "$SD/bin/nvidia-smi"
# and its stand-in dcgmi (DCGM answers only where <sandbox>/gpu/<node>.dcgm exists)
install -m 0755 "$HERE/bin/dcgmi" "$SD/bin/dcgmi"
install -d -m 0755 "$LOG/slurm" "$SD/spool/ctld"; chown "$SLURM_IDS" "$LOG/slurm" "$SD/spool/ctld"
install -d -m 0700 "$SD/munge" "$LOG/munge"; chown "$MUNGE_IDS" "$SD/munge" "$LOG/munge"
install -d -m 0755 "$RUN/munge"; chown "$MUNGE_IDS" "$RUN/munge"
install -d -m 0750 -o mysql -g mysql "$SD/mysql/data" "$LOG/mysql"
install -d -m 0755 -o mysql -g mysql "$RUN/mysql"
for n in $(node_names); do install -d -m 0755 "$SD/spool/$n"; done
for i in $(seq 0 $((GPUS - 1))); do [[ -L "$SD/fakegpu/nvidia$i" ]] || ln -sfn /dev/null "$SD/fakegpu/nvidia$i"; done
install -d -m 0755 "$USER_HOME" "$SD/shared/$SSH_USER"; chown "$USER_IDS" "$USER_HOME" "$SD/shared/$SSH_USER"
install -d -m 0700 "$USER_HOME/.ssh"; chown "$USER_IDS" "$USER_HOME/.ssh"
# enroot credentials: the key of this cluster's private registry org, as a user installs once
if [[ ! -f "$USER_HOME/.config/enroot/.credentials" ]]; then
    install -d -m 0700 "$USER_HOME/.config" "$USER_HOME/.config/enroot"; chown "$USER_IDS" "$USER_HOME/.config" "$USER_HOME/.config/enroot"
    T="$(mktemp)"; printf 'machine nvcr.io login $oauthtoken password %s\n' "$(registry_key)" >"$T"
    put_file "$T" "$USER_HOME/.config/enroot/.credentials" 0600 "$USER_IDS"
fi

[[ -f "$SD/ssh/id_ed25519" ]] || ssh-keygen -q -t ed25519 -N '' -C "tao-slurm-sandbox-2411-client" -f "$SD/ssh/id_ed25519"
chmod 600 "$SD/ssh/id_ed25519"
[[ -f "$SD/ssh/ssh_host_ed25519_key" ]] || ssh-keygen -q -t ed25519 -N '' -C "tao-slurm-sandbox-2411-host" -f "$SD/ssh/ssh_host_ed25519_key"
chmod 600 "$SD/ssh/ssh_host_ed25519_key"
[[ -s "$SD/munge/munge.key" ]] || dd if=/dev/urandom of="$SD/munge/munge.key" bs=1024 count=1 status=none
chown "$MUNGE_IDS" "$SD/munge/munge.key"; chmod 0400 "$SD/munge/munge.key"

T="$(mktemp)"; cp "$SD/ssh/id_ed25519.pub" "$T"; put_file "$T" "$USER_HOME/.ssh/authorized_keys" 0600 "$USER_IDS"
T="$(mktemp)"
cat >"$T" <<EOF
# tao-slurm sandbox (Slurm 24.11) environment, for use inside its root (generated by up-24.11.sh)
export SLURM_CONF=$ETC/slurm.conf
case ":\$PATH:" in *":$SD/bin:"*) ;; *) export PATH="$SD/bin:\$PATH" ;; esac
EOF
put_file "$T" "$SD/env.sh" 0644
user_rc up-24.11.sh "$USER_IDS" "$USER_HOME"
stand_in_tools aws huggingface-cli torchrun tensorboard
rm -f "$SD/lib/container_stub.so" "$SD/lib/container_stub.c" "$ETC/pyxis-plugin"   # the stand-in of earlier versions
# the real runtime (runtime.sh): Pyxis built inside the root, against 24.11's slurm/spank.h
runtime_verify
enroot_install
pyxis_install "$SLURM_VERSION" "$SD/.pyxis-build" in_root
# Pyxis' job epilog runs /usr/local/bin/enroot: the root's copy of the host-wide one (runtime.sh)
T="$(mktemp)"; cp /usr/local/bin/enroot "$T"; put_file "$T" "$ROOT/usr/local/bin/enroot" 0755

old_nodes="$(node_set "$ETC/slurm.conf")"
T="$(mktemp)"; slurm_conf up-24.11.sh >"$T"; put_file "$T" "$ETC/slurm.conf" 0644
for n in $(node_names); do   # each slurmd's copy, naming its own plugstack (lib.sh)
    T="$(mktemp)"; sed "s;^PlugStackConfig=.*;PlugStackConfig=$ETC/plugstack-$n.conf;" "$ETC/slurm.conf" >"$T"
    put_file "$T" "$ETC/slurm-$n.conf" 0644
done
gres_conf_file
# 24.11's slurmd loads its cgroup plugin even with proctrack/linuxproc; the root has no cgroup tree
T="$(mktemp)"; printf 'CgroupPlugin=disabled\n' >"$T"; put_file "$T" "$ETC/cgroup.conf" 0644
plugstack_set on $(node_names)

T="$(mktemp)"; slurmdbd_conf up-24.11.sh >"$T"; put_file "$T" "$ETC/slurmdbd.conf" 0600 "$SLURM_IDS"

T="$(mktemp)"; my_cnf "up-24.11.sh (the host's MariaDB 10.11, its own datadir and port)" 256M >"$T"; put_file "$T" "$ETC/my.cnf" 0644

T="$(mktemp)"
sshd_config "up-24.11.sh -- the 24.11 cluster's login node, inside its root" "$SSH_PORT" "$SSH_USER" >"$T"
put_file "$T" "$ETC/sshd_config-$SSH_PORT" 0644

read -r kt kb _ <"$SD/ssh/ssh_host_ed25519_key.pub"
T="$(mktemp)"; printf '[127.0.0.1]:%s %s %s\n' "$SSH_PORT" "$kt" "$kb" >"$T"; put_file "$T" "$SD/ssh/known_hosts" 0644
T="$(mktemp)"
cat >"$T" <<EOF
# generated by tao-slurm dev/sandbox/up-24.11.sh (sandbox-login1: the name the tests' harness logs in by)
Host sandbox2411-login1 sandbox-login1
    HostName 127.0.0.1
    Port $SSH_PORT
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
SLURM_HOSTNAME=sandbox2411-login1
SSH_CONFIG=$SD/ssh/config
SSH_KNOWN_HOSTS=$SD/ssh/known_hosts
SSH_KEY_PATH=$SD/ssh/id_ed25519
SLURM_PARTITION=polar
SLURM_BASE_RESULTS_DIR=$SD/shared/$SSH_USER
SANDBOX_NEIGHBOUR=$NEIGHBOUR_USER
SANDBOX_DIR=$SD
SANDBOX_SSHD_LOGS=$LOG/sshd-$SSH_PORT.log
SANDBOX_SSH_PORTS=$SSH_PORT
SANDBOX_SLURM_VERSION=$SLURM_VERSION
SANDBOX_ROOT=$ROOT
SANDBOX_REGISTRY_PORTS=$REGISTRY_PORT,$REGISTRY_PRIVATE_PORT
SANDBOX_PRIVATE_IMAGE=nvcr.io/$PRIVATE_ORG/tao-toolkit:6.26.3-pyt
SANDBOX_PYXIS=real
SLURM_CONTAINER_MOUNTS=$SD/shared
EOF
put_file "$T" "$SD/settings.env" 0644
phase_done "configs + spank build"

# ---- 4. munged, MariaDB, slurmdbd -------------------------------------------------------------------
if ! running_in_root munged /usr/sbin/munged; then
    rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
    in_ns runuser -u munge -- /usr/sbin/munged --key-file="$SD/munge/munge.key" --socket="$MUNGE_SOCKET" \
        --pid-file="$RUN/munge/munged.pid" --log-file="$LOG/munge/munged.log" --seed-file="$SD/munge/munged.seed" 9>&- \
        || die "munged failed to start" "$LOG/munge/munged.log"
    wait_for 10 "munge socket" test -S "$MUNGE_SOCKET" || die "munged socket did not appear" "$LOG/munge/munged.log"
    wait_for 5 "munged pid" test -s "$RUN/munge/munged.pid" || die "munged wrote no pid file"
    cp "$RUN/munge/munged.pid" "$RUN/munged.pid"
fi
if ! running mariadbd /usr/sbin/mariadbd; then
    if [[ ! -d "$SD/mysql/data/mysql" ]]; then
        mariadb-install-db --defaults-file="$ETC/my.cnf" --user=mysql --auth-root-authentication-method=socket \
            --skip-test-db >"$LOG/mysql/install.log" 2>&1 || die "mariadb-install-db failed" "$LOG/mysql/install.log"
    fi
    rm -f "$RUN/mysql/mysqld.sock"
    setsid -f /usr/sbin/mariadbd --defaults-file="$ETC/my.cnf" </dev/null >>"$LOG/mysql/stdout.log" 2>&1 9>&-
    wait_for 30 "mariadb" mariadb-admin --defaults-file="$ETC/my.cnf" ping || die "MariaDB did not come up" "$LOG/mysql/error.log"
    wait_for 5 "mariadb pid" test -s "$RUN/mysql/mariadbd.pid" || die "mariadbd wrote no pid file"
    cp "$RUN/mysql/mariadbd.pid" "$RUN/mariadbd.pid"
fi
mariadb --defaults-file="$ETC/my.cnf" <<EOF || die "MariaDB user setup failed" "$LOG/mysql/error.log"
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
EOF
phase_done "munged + mariadb"

if running_in_root slurmdbd /usr/sbin/slurmdbd; then
    changed "$ETC/slurmdbd.conf" && kill -HUP "$(read_pidfile "$RUN/slurmdbd.pid")"
else
    in_root /usr/sbin/slurmdbd 9>&- || die "slurmdbd failed to start" "$LOG/slurm/slurmdbd.log"
    wait_for 30 "slurmdbd" port_listening "$SLURMDBD_PORT" || die "slurmdbd is not listening on $SLURMDBD_PORT" "$LOG/slurm/slurmdbd.log"
fi
assoc="$(in_root timeout 30 sacctmgr -n -P show assoc format=cluster,account,user 2>&1)" \
    || die "sacctmgr cannot talk to slurmdbd: $assoc" "$LOG/slurm/slurmdbd.log"
if ! grep -qx "$CLUSTER_NAME|default|$SSH_USER" <<<"$assoc"; then
    cmds=""
    grep -q "^$CLUSTER_NAME|" <<<"$assoc" || cmds+="add cluster $CLUSTER_NAME"$'\n'
    cmds+="add account default cluster=$CLUSTER_NAME description=default organization=sandbox"$'\n'
    cmds+="add user root,$SSH_USER account=default defaultaccount=default cluster=$CLUSTER_NAME"$'\n'
    out="$(printf '%s' "$cmds" | in_root timeout 60 sacctmgr -i 2>&1)" || true
    assoc="$(in_root timeout 30 sacctmgr -n -P show assoc format=cluster,account,user 2>&1)" || true
    grep -qx "$CLUSTER_NAME|default|$SSH_USER" <<<"$assoc" || die "accounting registration failed: $out" "$LOG/slurm/slurmdbd.log"
fi
phase_done "slurmdbd + sacctmgr"

# ---- 5. slurmctld, slurmd x NODES ----------------------------------------------------------------------
ctld_answers() { [[ "$(in_root timeout 10 scontrol ping 2>/dev/null)" == *"is UP"* ]]; }
reconf=0
[[ "$old_nodes" == "$(node_set "$ETC/slurm.conf")" ]] || stop_slurm_daemons "the node set changed"
if running_in_root slurmctld /usr/sbin/slurmctld; then
    changed "$ETC/slurm.conf" "$ETC/gres.conf" "$ETC/cgroup.conf" "$ETC"/slurm-node*.conf && reconf=1
    wait_for 30 "slurmctld" ctld_answers || die "slurmctld does not answer" "$LOG/slurm/slurmctld.log"
else
    in_root /usr/sbin/slurmctld -f "$ETC/slurm.conf" 9>&- || die "slurmctld failed to start" "$LOG/slurm/slurmctld.log"
    wait_for 30 "slurmctld" ctld_answers || die "slurmctld does not answer" "$LOG/slurm/slurmctld.log"
fi
for n in $(node_names); do
    if ! running_in_root "slurmd-$n" /usr/sbin/slurmd; then
        # Pyxis runs enroot from slurmstepd's PATH: the node's own (runtime.sh)
        in_ns /usr/bin/env SLURM_CONF="$ETC/slurm.conf" PATH="$SD/enroot/node/$n:$SSH_BIN_PATH" \
            /usr/sbin/slurmd -f "$ETC/slurm-$n.conf" -N "$n" 9>&- || die "slurmd $n failed to start" "$LOG/slurm/slurmd-$n.log"
    fi
done
if [[ $reconf == 1 ]]; then in_root scontrol reconfigure || die "scontrol reconfigure failed" "$LOG/slurm/slurmctld.log"; fi
nodes_idle() {
    local s
    s="$(in_root sinfo -h -N -p polar,cpu -o '%N %T' 2>/dev/null)" || return 1
    [[ "$(grep -cE ' (idle|mixed|allocated|completing)$' <<<"$s")" -eq "$((NODES + 1))" ]]
}
deadline=$(( $(date +%s) + UP_TIMEOUT )); resumed=0
until nodes_idle; do
    if (( $(date +%s) > deadline )); then
        in_root sinfo -N -l >&2 || true
        die "nodes not idle after ${UP_TIMEOUT}s" "$LOG/slurm/slurmctld.log" "$LOG/slurm/slurmd-node1.log"
    fi
    if [[ $resumed == 0 ]] && in_root sinfo -h -N -o '%T' 2>/dev/null | grep -qE '^(down|drain|drained|draining)'; then
        sleep 1; in_root scontrol update nodename="node[1-$NODES],cpu1" state=resume 2>/dev/null || true; resumed=1
    fi
    sleep 0.1
done
phase_done "slurmctld + slurmd x$NODES"

# ---- 6. the login sshd, inside the root ------------------------------------------------------------------
if running_in_root "sshd-$SSH_PORT" /usr/sbin/sshd; then
    changed "$ETC/sshd_config-$SSH_PORT" && kill -HUP "$(read_pidfile "$RUN/sshd-$SSH_PORT.pid")"
else
    in_ns /usr/sbin/sshd -t -f "$ETC/sshd_config-$SSH_PORT" || die "sshd config test failed"
    in_ns /usr/sbin/sshd -f "$ETC/sshd_config-$SSH_PORT" -E "$LOG/sshd-$SSH_PORT.log" 9>&- \
        || die "sshd on $SSH_PORT failed to start" "$LOG/sshd-$SSH_PORT.log"
    wait_for 10 "sshd $SSH_PORT" port_listening "$SSH_PORT" || die "sshd is not listening on $SSH_PORT" "$LOG/sshd-$SSH_PORT.log"
fi
phase_done "sshd"

registries_up   # on the host (the root shares its network)
phase_done "registries + images"

# ---- 7. smoke test over ssh -------------------------------------------------------------------------------
if [[ "$UP_SMOKE" != 0 ]]; then
    smoke_test "$SD/ssh/config" sandbox2411-login1 in_root   # lib.sh
    phase_done "smoke test"
fi

total="$(awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}')"
{ echo "=== $(date -Is) up-24.11.sh total ${total} s"; printf '%s\n' "${TIMINGS[@]}"; } >>"$LOG/up-timings.txt"
printf '%s\n' "${TIMINGS[@]}"
echo "up-24.11.sh: cluster '$CLUSTER_NAME' (Slurm $SLURM_VERSION) up in ${total} s ($NODES nodes x $GPUS fake GPUs, ssh on 127.0.0.1:$SSH_PORT)"
echo "up-24.11.sh: settings: $SD/settings.env"
