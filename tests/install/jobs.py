"""One job end to end through an installed `tao-slurm` (the wheel's or the archive's) in a clean root."""

import json
import uuid

from tao_test_support import TERMINAL


def preflight_passes(root) -> None:
    out = root.run("tao-slurm preflight").stdout
    assert out.rstrip().endswith("preflight: all required checks passed"), out
    assert "PASS  ssh login [sandbox-login1]" in out, out


def job_end_to_end(root) -> None:
    """Submit a job that prints a word of its own, follow it to the end, read the word in its log."""
    word = f"installed-{uuid.uuid4().hex[:12]}"
    submitted = json.loads(
        root.run(f"tao-slurm submit --json --image ubuntu:22.04 --gpus 0 --time-hours 0.25 -- echo {word}").stdout
    )
    job = submitted["job_id"]
    root.run(f"tao-slurm watch --interval 1 {job}", timeout=300)
    (status,) = json.loads(root.run(f"tao-slurm status --json {job}").stdout)
    assert status["status"] in TERMINAL and status["status"] == "Complete", status
    logs = root.run(f"tao-slurm logs {job}").stdout
    assert word in logs, logs
