#!/usr/bin/env bash
# A clean Debian root for the install checks (tests/install): debootstrap's minbase from the Debian
# mirror plus Python (with venv), the OpenSSH client and uv, and nothing that compiles (no cc, no Rust).
# Kept under /var/cache/tao-slurm-install/roots/SUITE across runs (rebuilt when the package list
# changes). Prints the root's path. Usage: clean-root.sh SUITE   (trixie, bullseye, ...)
set -euo pipefail
suite="${1:?usage: clean-root.sh SUITE}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
cache=/var/cache/tao-slurm-install/roots
root="$cache/$suite"
# uv from PyPI (downloaded on the host), pinned: `uvx --offline --from WHEEL` in the root (the MCP check).
uv_pin="uv==0.13.9"
want="python3 python3-venv openssh-client ca-certificates $uv_pin"
mkdir -p "$cache"
exec 9>"$cache/.$suite.lock"
flock -w 900 9 || { echo "clean-root.sh: another run holds $cache/.$suite.lock" >&2; exit 1; }
if [[ "$(cat "$root/.tao-slurm-root" 2>/dev/null)" == "$want" ]]; then
    echo "$root"; exit 0
fi
command -v debootstrap >/dev/null || { "$(dirname "$0")/../../dev/apt-get" install -y -qq debootstrap >&2; }
rm -rf "$root"
# A root left half-made by an interrupted run is made again, unless its debootstrap had finished.
[ -f "$root.new/.debootstrap-done" ] || rm -rf "$root.new"
if [ ! -d "$root.new" ]; then
    echo "clean-root.sh: debootstrap $suite into $root" >&2
    debootstrap --variant=minbase --include=python3,python3-venv,openssh-client,ca-certificates \
        "$suite" "$root.new" "$mirror" >"$cache/$suite.debootstrap.log" 2>&1 \
        || { tail -n 20 "$cache/$suite.debootstrap.log" >&2; echo "clean-root.sh: debootstrap $suite failed" >&2; exit 1; }
    touch "$root.new/.debootstrap-done"
fi
# uv's wheel is fetched on the host (the repository's .venv's pip) and installed in the root from the file.
mkdir -p "$root.new/opt/wheels"
"$(dirname "$(bash "$(dirname "$0")/../../dev/python-env.sh")")/pip" download -q --disable-pip-version-check --no-deps --only-binary :all: \
    --platform manylinux_2_17_x86_64 -d "$root.new/opt/wheels" "$uv_pin" >&2
chroot "$root.new" python3 -m venv /opt/uv >&2
uv_wheel="$(basename "$(ls "$root.new"/opt/wheels/uv-*.whl)")"
chroot "$root.new" /opt/uv/bin/pip install -q --disable-pip-version-check --no-index "/opt/wheels/$uv_wheel" >&2
rm -rf "$root.new/opt/wheels"
ln -sf /opt/uv/bin/uv /opt/uv/bin/uvx "$root.new/usr/local/bin/"
chroot "$root.new" apt-get clean
rm -f "$root.new/.debootstrap-done"
printf '%s' "$want" >"$root.new/.tao-slurm-root"
mv "$root.new" "$root"
echo "$root"
