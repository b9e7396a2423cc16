#!/usr/bin/env bash
# Recreate the vendored release archives from git clones (run where github.com is reachable, or
# against local mirrors): make-archives.sh ENROOT_GIT PYXIS_GIT MAKESELF_GIT MUSL_GIT HEADERS_GIT.
# Each argument is a git directory (a clone or a bare repository) of, in order: NVIDIA/enroot,
# NVIDIA/pyxis, megastep/makeself, a musl mirror (bminor/musl), sabotage-linux/kernel-headers.
# Enroot's deps/ are git submodules: their trees at the commits pinned in enroot's tree are put under
# deps/ so that the archive builds offline. Output: the two archives here and SHA256SUMS.
set -euo pipefail
[[ $# -eq 5 ]] || { sed -n '2,7p' "$0" >&2; exit 2; }
here="$(cd "$(dirname "$0")" && pwd)"
enroot="$1" pyxis="$2"
declare -A sub=([makeself]="$3" [musl]="$4" [linux-headers]="$5")
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
git -C "$enroot" archive --format=tar --prefix=enroot-4.1.2/ v4.1.2 >"$tmp/enroot.tar"
for name in makeself musl linux-headers; do
    commit="$(git -C "$enroot" ls-tree v4.1.2 "deps/$name" | awk '$2 == "commit" { print $3 }')"
    [[ -n "$commit" ]] || { echo "enroot v4.1.2 pins no deps/$name" >&2; exit 1; }
    git -C "${sub[$name]}" archive --format=tar --prefix="enroot-4.1.2/deps/$name/" "$commit" >"$tmp/$name.tar"
    tar --concatenate -f "$tmp/enroot.tar" "$tmp/$name.tar"
done
xz -9 -c "$tmp/enroot.tar" >"$here/enroot-4.1.2.tar.xz"
git -C "$pyxis" archive --format=tar.gz --prefix=pyxis-0.24.0/ v0.24.0 >"$here/pyxis-0.24.0.tar.gz"
(cd "$here" && sha256sum enroot-4.1.2.tar.xz pyxis-0.24.0.tar.gz >SHA256SUMS)
cat "$here/SHA256SUMS"
