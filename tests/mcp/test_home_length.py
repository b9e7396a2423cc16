"""The MCP server with a HOME of 80 characters (issue 55): preflight, submit, logs and cancel work, the
SSH control sockets in $XDG_RUNTIME_DIR/tao-slurm."""

import pathlib
import stat
import time

from conftest import connect, run_async
from tao_test_support import long_home_env


@run_async
async def test_a_home_of_80_characters_runs_preflight_submit_logs_and_cancel(tmp_path):
    env = long_home_env(tmp_path)
    async with connect(env) as s:
        pre = await s.ok("preflight")
        assert pre["ok"] is True, pre
        control = pathlib.Path(env["XDG_RUNTIME_DIR"]) / "tao-slurm"
        assert any(stat.S_ISSOCK(p.lstat().st_mode) for p in control.iterdir()), "the masters' sockets are there"
        sub = await s.ok(
            "submit", {"image": "ubuntu:22.04", "gpus": 0, "shell": True, "command": ["echo from-a-long-home; sleep 300"]}
        )
        job_id = sub["job_id"]
        start = time.monotonic()
        while "from-a-long-home" not in (await s.ok("logs", {"job_id": job_id}))["stdout"]["text"]:
            assert time.monotonic() - start < 240, "the job's first line: not within 240 s"
            time.sleep(0.5)
        cancelled = await s.ok("cancel", {"job_ids": [job_id]})
        assert cancelled["jobs"][0]["status"] == "Canceled", cancelled
        assert (await s.ok("status", {"job_ids": [job_id]}))["jobs"][0]["status"] == "Canceled"
