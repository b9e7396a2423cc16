#!/usr/bin/env bash
# Run a command inside a clean root (tests/install/clean-root.sh) in a mount namespace of its own, so
# nothing outlives it and the cached root stays clean: the test's WORK directory at /work (the release
# files, the venv, HOME), a fresh /tmp, the host's /dev and /etc/hosts, and the sandbox's settings
# directory read-only at its own path (its SSH config, key and known hosts). The root shares the host's
# network namespace: the sandbox's login hosts are sshd on loopback. The environment passes through.
#   in-root.sh ROOT WORK CMD [ARG...]
set -euo pipefail
root="$1" work="$2"; shift 2
# The caller's PATH is the command's, inside the root; this script's own tools are the host's.
inner_path="$PATH"
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
sandbox="${SANDBOX_DIR:-/var/lib/tao-slurm-sandbox}"
for d in work tmp proc dev "${sandbox#/}"; do [ -d "$root/$d" ] || mkdir -p "$root/$d"; done
[ -e "$root/etc/hosts" ] || touch "$root/etc/hosts"   # (the mount point of the host's)
exec unshare --mount --propagation private -- bash -c '
set -e
root="$1" work="$2" sandbox="$3" inner_path="$4"; shift 4
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
mount --bind "$work" "$root/work"
mount --bind /etc/hosts "$root/etc/hosts"
mount --bind "$sandbox" "$root$sandbox"
mount -o remount,bind,ro "$root$sandbox"
cd "$root/work"
exec chroot "$root" /usr/bin/env PATH="$inner_path" /bin/bash -c "cd /work && exec \"\$@\"" bash "$@"
' bash "$root" "$work" "$sandbox" "$inner_path" "$@"
