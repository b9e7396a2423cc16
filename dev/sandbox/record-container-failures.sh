#!/usr/bin/env bash
# Record the real Pyxis' and Enroot's failures (crates/core/src/container_errors.rs) on a sandbox
# cluster as the core's fixtures, crates/core/tests/fixtures/slurm-<version>/pyxis-*.txt: what srun
# prints (stdout and stderr, as a job's log holds them). Run as root on the sandbox's host (it mounts
# a small tmpfs over one node's Enroot paths and pushes a broken image to the loopback registry); the
# steps run as the sandbox user over SSH, on node1. Run it on an idle cluster. record-fixtures.sh
# runs it after the Slurm outputs.
#   bash dev/sandbox/record-container-failures.sh /var/lib/tao-slurm-sandbox/settings.env
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SETTINGS="${1:?usage: $0 SETTINGS_ENV}"
# shellcheck disable=SC1090
. "$SETTINGS"
HOSTALIAS="${SLURM_HOSTNAME%%,*}"
ssh_run() { timeout 300 ssh -F "$SSH_CONFIG" "$HOSTALIAS" "$@"; }
VERSION="$(ssh_run sinfo --version | awk '{print $2}')"
OUT="$HERE/../../crates/core/tests/fixtures/slurm-${VERSION%.*}"
mkdir -p "$OUT"
P="${SLURM_PARTITION%%,*}"
# shellcheck disable=SC1091
. "$SANDBOX_DIR/registry/ports.env"
pyxis_case() { ssh_run "cd \$HOME && { $1; } 2>&1" >"$OUT/pyxis-$2.txt" || true; }

# an image the registry does not have, a private image without the user's Enroot credentials (set
# aside for the step, then put back), a mount whose source does not exist
pyxis_case "srun -N1 -p $P --container-image=nvcr.io#nvidia/no-such-image:1.0 true" not-found
pyxis_case "c=\$HOME/.config/enroot/.credentials; mv \$c \$c.aside; srun -N1 -p $P --container-image=nvcr.io#${SANDBOX_PRIVATE_IMAGE#nvcr.io/} true; mv \$c.aside \$c" unauthorized
pyxis_case "srun -N1 -p $P --container-image=nvcr.io#nvidia/pytorch:24.01-py3 --container-mounts=/no/such/dir:/data true" missing-mount

# No space: a 4 MiB tmpfs (the image is about 29 MB as layers, more unpacked) over node1's Enroot
# data path (where Pyxis unpacks the container: `enroot create`), then over its cache path (where
# `enroot import` keeps the layers it downloads). Unmounted on the way out, whatever happened.
uid="$(id -u "$SLURM_USER")"; gid="$(id -g "$SLURM_USER")"
enroot_dir() { printf '%s/enroot-data/node1/user-%s/%s' "$SANDBOX_DIR" "$uid" "$1"; }
mounted=()
small() {
    install -d -o "$uid" -g "$gid" -m 0700 "$1"
    mount -t tmpfs -o "size=4m,mode=0700,uid=$uid,gid=$gid" tmpfs "$1"
    mounted+=("$1")
}
unmount_all() { local m; for m in "${mounted[@]}"; do umount "$m" 2>/dev/null || true; done; mounted=(); }
trap unmount_all EXIT
IMAGE='nvcr.io#nvidia/pytorch:24.01-py3'
small "$(enroot_dir data)"
pyxis_case "srun -w node1 -p $P --container-image=$IMAGE true" no-space-data
unmount_all
small "$(enroot_dir cache)"
pyxis_case "srun -w node1 -p $P --container-image=$IMAGE true" no-space-cache
unmount_all

# A squashfs image cut short (a copy that stopped half way): the image converted once, its first MiB
# kept.
pyxis_case "d=\$(mktemp -d \$HOME/corrupt.XXXXXX) && srun -w node1 -p $P enroot import -o \$d/whole.sqsh docker://$IMAGE >/dev/null 2>&1 && head -c 1048576 \$d/whole.sqsh >\$d/cut.sqsh && srun -w node1 -p $P --container-image=\$d/cut.sqsh true; rm -rf \$d" corrupt-squashfs

# A corrupt layer: an image in the public registry whose first layer is the sandbox's base layer cut
# short (a well-formed upload of a broken gzip stream: its digest matches, its content does not
# decompress).
reg="http://127.0.0.1:$REGISTRY_PORT"
tmp="$(mktemp -d)"
curl -fsS -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' "$reg/v2/nvidia/pytorch/manifests/24.01-py3" >"$tmp/manifest.json"
base="$(jq -r '.layers[0].digest' "$tmp/manifest.json")"
curl -fsS -o "$tmp/whole" "$reg/v2/nvidia/pytorch/blobs/$base"
head -c 2097152 "$tmp/whole" >"$tmp/layer"
cut_digest="sha256:$(sha256sum "$tmp/layer" | cut -d' ' -f1)"
cfg="$(jq -r '.config.digest' "$tmp/manifest.json")"
push() { # REPO FILE DIGEST
    local loc
    curl -fsS -o /dev/null -I "$reg/v2/$1/blobs/$3" 2>/dev/null && return 0
    loc="$(curl -fsS -D - -o /dev/null -X POST "$reg/v2/$1/blobs/uploads/" | awk 'tolower($1) == "location:" { sub(/\r$/, "", $2); print $2 }')"
    [[ "$loc" == http* ]] || loc="$reg$loc"
    [[ "$loc" == *\?* ]] && loc+="&" || loc+="?"
    curl -fsS -o /dev/null -X PUT -H 'Content-Type: application/octet-stream' --data-binary "@$2" "${loc}digest=$3"
}
curl -fsS "$reg/v2/nvidia/pytorch/blobs/$cfg" >"$tmp/config"
push nvidia/corrupt-layer "$tmp/layer" "$cut_digest"
push nvidia/corrupt-layer "$tmp/config" "$cfg"
# the image's other layers, as they are (the registry takes a manifest only with all of its blobs)
for d in $(jq -r '.layers[1:][].digest' "$tmp/manifest.json"); do
    curl -fsS -o "$tmp/other" "$reg/v2/nvidia/pytorch/blobs/$d"
    push nvidia/corrupt-layer "$tmp/other" "$d"
done
jq --arg d "$cut_digest" --argjson s "$(stat -c %s "$tmp/layer")" '.layers[0].digest = $d | .layers[0].size = $s' "$tmp/manifest.json" >"$tmp/cut.json"
curl -fsS -o /dev/null -X PUT -H 'Content-Type: application/vnd.docker.distribution.manifest.v2+json' \
    --data-binary "@$tmp/cut.json" "$reg/v2/nvidia/corrupt-layer/manifests/1"
rm -rf "$tmp"
pyxis_case "srun -w node1 -p $P --container-image=nvcr.io#nvidia/corrupt-layer:1 true" corrupt-layer
echo "recorded the container runtime's failures on Slurm $VERSION in $OUT"
