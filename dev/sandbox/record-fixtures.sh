#!/usr/bin/env bash
# Record what the Slurm commands tao-slurm reads print on a sandbox cluster, as the core's table-test
# fixtures (crates/core/tests/fixtures/slurm-<version>/). Runs as the sandbox user over SSH.
#   bash dev/sandbox/record-fixtures.sh /var/lib/tao-slurm-sandbox-24.11/settings.env
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SETTINGS="${1:?usage: $0 SETTINGS_ENV}"
# shellcheck disable=SC1090
. "$SETTINGS"
HOSTALIAS="${SLURM_HOSTNAME%%,*}"
ssh_run() { timeout 120 ssh -F "$SSH_CONFIG" "$HOSTALIAS" "$@"; }
VERSION="$(ssh_run sinfo --version | awk '{print $2}')"
OUT="$HERE/../../crates/core/tests/fixtures/slurm-${VERSION%.*}"
mkdir -p "$OUT"
SQUEUE_FORMAT="$(sed -n 's/^pub const SQUEUE_FORMAT: &str = "\(.*\)";/\1/p' "$HERE/../../crates/core/src/slurm/query.rs")"
SACCT_FIELDS="$(sed -n 's/^pub const SACCT_FIELDS: &str = "\(.*\)";/\1/p' "$HERE/../../crates/core/src/slurm/query.rs")"
SINFO_ARGS="$(sed -n 's/^pub const SINFO_NODES_ARGS: &str = "\(.*\)";/\1/p' "$HERE/../../crates/core/src/slurm/usage.rs")"
# jobs whose every way of ending is recorded: exit 0, exit 3, killed by SIGKILL, cancelled while
# running, held then cancelled, a 2-task array, and one still pending (held)
ssh_run bash -s >"$OUT/submit.txt" <<'SCRIPT'
set -e
cd "$HOME"
echo "ok $(sbatch --parsable -J tao-fixture-ok --wrap 'true')"
echo "exit3 $(sbatch --parsable -J tao-fixture-exit3 --wrap 'exit 3')"
echo "signal $(sbatch --parsable -J tao-fixture-signal --wrap 'kill -9 $$')"
echo "cancelled $(sbatch --parsable -J tao-fixture-cancelled --wrap 'sleep 60')"
echo "array $(sbatch --parsable -J tao-fixture-array --array=0-1 --wrap 'exit $SLURM_ARRAY_TASK_ID')"
echo "held $(sbatch --parsable -J tao-fixture-held --hold --wrap 'true')"
SCRIPT
id() { awk -v k="$1" '$1 == k { print $2 }' "$OUT/submit.txt"; }
ids="$(awk '{ printf "%s%s", sep, $2; sep = "," }' "$OUT/submit.txt")"
sleep 3
ssh_run "scancel $(id cancelled)"
sleep 2
ssh_run "squeue --me -r -t all -h -O '$SQUEUE_FORMAT'" | grep tao-fixture >"$OUT/squeue.txt"
sleep 2
ssh_run "sacct -X -P -n -S now-1hour -j $ids --format=$SACCT_FIELDS" >"$OUT/sacct.txt"
ssh_run "sacct -P -n -S now-1hour -j $(id exit3) --format=$SACCT_FIELDS" >"$OUT/sacct-steps.txt"
ssh_run "scancel $(id held)"
ssh_run sdiag >"$OUT/sdiag.txt"
ssh_run "scontrol show partition -o" >"$OUT/scontrol-show-partition.txt"
ssh_run "sinfo $(printf '%q ' $SINFO_ARGS)" >"$OUT/sinfo-nodes.txt"
# `-M <cluster>` (federation/multi-cluster form): `ID;CLUSTER`
cluster="$(ssh_run "scontrol show config" | awk '$1 == "ClusterName" { print $3 }')"
ssh_run "sbatch --parsable --hold -J tao-fixture-parsable --wrap true; sbatch --parsable -M $cluster --hold -J tao-fixture-parsable --wrap true" >"$OUT/sbatch-parsable.txt"
ssh_run "scancel --me -n tao-fixture-parsable" || true
ssh_run "sinfo --version" >"$OUT/version.txt"
# the real Pyxis' and Enroot's failures (container_errors.rs), in a script of their own
bash "$HERE/record-container-failures.sh" "$SETTINGS"
echo "recorded Slurm $VERSION outputs in $OUT"
