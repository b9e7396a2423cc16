"""The `exec` tool through the official MCP client: a command in a running job's container, its exit
status and bounded output; `--read-only` does not offer it."""

import time

from conftest import connect, run_async

LONG_JOB = {"image": "ubuntu:22.04", "gpus": 0, "command": ["sleep", "300"]}


async def running(s, job_id: str, limit: float = 90) -> dict:
    start = time.monotonic()
    while time.monotonic() - start < limit:
        job = (await s.ok("status", {"job_ids": [job_id]}))["jobs"][0]
        if job["status"] == "Running":
            return job
        assert job["status"] == "Pending", job
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} not running after {limit} s")


@run_async
async def test_exec_answers_exit_status_and_bounded_output(server_env):
    async with connect(server_env) as s:
        job_id = (await s.ok("submit", LONG_JOB))["job_id"]
        try:
            await running(s, job_id)
            out = await s.ok("exec", {"job_id": job_id, "command": ["sh", "-c", "echo node=$SLURMD_NODENAME"]})
            assert out["exit_code"] == 0 and out["stdout"].startswith("node=node"), out
            failed = await s.ok("exec", {"job_id": job_id, "command": ["false"]})
            assert failed["exit_code"] == 1 and "exited 1" in failed["summary"], failed
            big = await s.ok("exec", {"job_id": job_id, "command": ["head", "-c", "5000", "/dev/zero"], "max_bytes": 100})
            assert big["truncated"] is True and big["stdout_bytes"] == 5000 and len(big["stdout"]) == 100, big
            # The words stay words: no shell reads them.
            word = await s.ok("exec", {"job_id": job_id, "command": ["echo", "$(id); `x`"]})
            assert word["stdout"].strip() == "$(id); `x`", word
            empty = await s.call("exec", {"job_id": job_id, "command": []})
            assert empty.is_error and empty.structured_content["field"] == "command"
        finally:
            await s.ok("cancel", {"job_ids": [job_id]})
    async with connect(server_env, "--read-only") as ro:
        refused = await ro.call("exec", {"job_id": job_id, "command": ["true"]})
        assert refused.is_error and "--read-only" in refused.structured_content["error"]
