# Take the submission's lock on shared storage, or adopt what an earlier run of the same submission
# already submitted (its Slurm job id from the lock, else by the job's unique name), so that one
# submission never reaches sbatch twice. Needs `lock` set and the trust functions (tao_put). The id in
# the lock is only ever digits (a job can write there). A lock younger than @STALE_SECS@ s whose
# submission is not found means another run is in flight: it is given @AWAIT_TICKS@ tenths of a second
# to write the id it got (adopted then), else this run ends with exit @IN_FLIGHT@.
adopt() { case "$1" in ''|*[!0-9]*) return;; esac; tao_put "$lock/slurm_job_id" "$1"; @ON_ADOPT@echo "@SECTION@slurm_job_id $1"; echo '@SECTION@adopted'; exit 0; }
if ! mkdir "$lock" 2>/dev/null; then
  [ -d "$lock" ] && [ ! -L "$lock" ] && [ -O "$lock" ] || { echo "tao-slurm: refusing $lock: not a directory of yours" >&2; exit @UNTRUSTED@; }
  lock_id() { if [ -f "$lock/slurm_job_id" ] && [ ! -L "$lock/slurm_job_id" ]; then adopt "$(head -c 24 "$lock/slurm_job_id" | head -n 1)"; fi; }
  lock_id
@LOOKUP@
  if [ -n "$existing" ]; then adopt "$existing"; fi
  age=$(( $(date +%s) - $(stat -c %Y "$lock") ))
  if [ "$age" -lt @STALE_SECS@ ]; then
    for ((tick = 0; tick < @AWAIT_TICKS@; tick++)); do sleep 0.1; lock_id; done
    echo 'tao-slurm: another submission of this @WHAT@ is in flight' >&2; exit @IN_FLIGHT@; fi
  touch -h "$lock"
fi
