"""tao_slurm with a HOME of 80 characters (issue 55): preflight, submit, logs and cancel work, the SSH
control sockets in $XDG_RUNTIME_DIR/tao-slurm and the state under HOME."""

from __future__ import annotations

import pathlib
import stat

from tao_test_support import long_home_env, use_env, wait_until

IMAGE = "ubuntu:22.04"


def test_a_home_of_80_characters_runs_preflight_submit_logs_and_cancel(tmp_path, monkeypatch, sdks):
    env = long_home_env(tmp_path, inherit=True)
    use_env(monkeypatch, env)
    sdk = sdks()
    checks = sdk.preflight()
    failed = [c for c in checks if not c["ok"] and c["required"]]
    assert not failed, failed
    control = pathlib.Path(env["XDG_RUNTIME_DIR"]) / "tao-slurm"
    assert stat.S_IMODE(control.stat().st_mode) == 0o700
    assert any(stat.S_ISSOCK(p.lstat().st_mode) for p in control.iterdir()), "the masters' sockets are there"
    job = sdk.create_job(image=IMAGE, command="echo from-a-long-home; sleep 300", gpu_count=0)
    wait_until(lambda: "from-a-long-home" in sdk.get_job_logs(job.id), 240, "the job's first line")
    assert sdk.cancel_job(job.id) is True
    assert sdk.get_job_status(job.id).status == "Canceled"
    assert (pathlib.Path(env["HOME"]) / ".local/share/tao-slurm/state.db").is_file(), "the state under HOME"
