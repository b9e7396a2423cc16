#!/usr/bin/env bash
# Switch the Pyxis SPANK plugin off/on, for tests of a cluster without Pyxis. Takes effect for every
# srun/sbatch/salloc started afterwards and every job step launched afterwards (they read
# plugstack.conf then); no daemon restart. up.sh always turns it on.
#   pyxis-ctl.sh off      plugstack.conf (and every node's) without the plugin: --container-* are unknown options
#   pyxis-ctl.sh on       plugstack.conf as up.sh writes it
#   pyxis-ctl.sh status   prints on|off|..., exit 0 if on, 1 otherwise
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
. "$HERE/lib.sh"

usage() { echo "usage: $0 off|on|status" >&2; exit 2; }
[[ $# -eq 1 ]] || usage
[[ -d "$ETC" && -f "$ETC/slurm.conf" ]] || { echo "pyxis-ctl.sh: no $ETC/slurm.conf (up.sh not run)" >&2; exit 1; }

case "$1" in
    status)
        st="$(plugstack_state)"
        echo "pyxis $st ($PLUGSTACK)"
        [[ "$st" == on ]] ;;
    on|off)
        [[ $EUID -eq 0 ]] || { echo "pyxis-ctl.sh must run as root" >&2; exit 1; }
        lock_sandbox
        plugstack_set "$1"
        if [[ $PLUGSTACK_CHANGED == 1 ]]; then echo "pyxis $1"; else echo "pyxis already $1"; fi ;;
    *) usage ;;
esac
