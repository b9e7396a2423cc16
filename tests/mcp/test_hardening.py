"""Issue 21 through the official MCP client: the `logs` tool with an offset on a job that swapped its
main.out for a FIFO or a symlink answers in time without the linked file; `secret_env_file` must be
private and its bad lines are named by number only; a `--read-only` server watching a pipeline whose
first step failed cancels nothing."""

import os
import secrets
import stat
import subprocess
import time

import anyio
from conftest import connect, run_async
from tao_test_support import sandbox_settings

JOB = {"image": "ubuntu:22.04", "gpus": 0}


def ssh(script: str) -> str:
    """Run a command on the sandbox's login host as its user (only to look, never to act)."""
    s = sandbox_settings()
    host = s["SLURM_HOSTNAME"].split(",")[0]
    out = subprocess.run(["ssh", "-F", s["SSH_CONFIG"], host, script], capture_output=True, text=True, timeout=60)
    return out.stdout


def until(predicate, limit: float, what: str):
    start = time.monotonic()
    while not (value := predicate()):
        assert time.monotonic() - start < limit, f"{what}: not within {limit} s"
        time.sleep(0.5)
    return value


@run_async
async def test_logs_with_an_offset_on_a_fifo_or_a_symlink_answer_in_time_without_the_linked_file(server_env, tmp_path):
    base = sandbox_settings()["SLURM_BASE_RESULTS_DIR"]
    secret = "linked-content-" + secrets.token_hex(6)
    outside = f"{base}/outside-{secrets.token_hex(6)}"
    with open(outside, "w") as f:
        f.write(secret + "\n")
    os.chmod(outside, 0o644)
    swaps = {"fifo": 'mkfifo "$f"', "symlink": f'ln -s {outside} "$f"'}
    async with connect(server_env) as s:
        for kind, how in swaps.items():
            command = (
                f'echo before-swap; f={base}/slurm-logs/$SLURM_JOB_NAME-$SLURM_JOB_ID/main.out; rm -f "$f"; {how}; '
                "echo after-swap >&2; sleep 90"
            )
            sub = await s.ok("submit", {**JOB, "command": [command], "shell": True, "name": f"hostile-{kind}"})
            job_id = sub["job_id"]
            first = await s.ok("logs", {"job_id": job_id})
            path = first["stdout"]["path"]
            is_kind = stat.S_ISFIFO if kind == "fifo" else stat.S_ISLNK
            until(lambda: os.path.lexists(path) and is_kind(os.lstat(path).st_mode), 240, f"{kind} swap")
            started = time.monotonic()
            with anyio.fail_after(25):
                ranged = await s.ok("logs", {"job_id": job_id, "stream": "stdout", "offset": 0})
                tail = await s.ok("logs", {"job_id": job_id, "tail_lines": 5})
            assert time.monotonic() - started < 25
            assert ranged["range"]["text"] == "", ranged
            assert "(not shown" in tail["stdout"]["text"], tail
            await s.ok("cancel", {"job_ids": [job_id]})
    assert secret not in "\n".join(s.transcript)


@run_async
async def test_secret_env_file_must_be_private_and_its_errors_name_only_the_line(server_env, tmp_path):
    f = tmp_path / "secrets.env"
    f.write_text("GOOD=1\nthis line hides hunter2-value\n")
    async with connect(server_env) as s:
        args = {**JOB, "command": ["true"], "secret_env": ["GOOD"], "secret_env_file": str(f)}
        os.chmod(f, 0o644)
        loose = await s.call("submit", args)
        assert loose.is_error and loose.structured_content["field"] == "secret_env_file"
        assert f"chmod 600 {f}" in loose.structured_content["error"], loose.structured_content
        os.chmod(f, 0o600)
        bad = await s.call("submit", args)
        assert bad.is_error and "line 2" in bad.structured_content["error"], bad.structured_content
        assert "hunter2" not in "\n".join(s.transcript)
        assert (await s.ok("list"))["total"] == 0


@run_async
async def test_a_read_only_server_watching_a_failed_pipeline_cancels_nothing(server_env):
    steps = [{"name": "first", "command": ["exit 3"]}, {"name": "second", "command": ["true"]}]
    async with connect(server_env) as s:
        pipe = await s.ok("submit", {**JOB, "shell": True, "command": ["true"], "steps": steps})
    first, second = pipe["jobs"][0], pipe["jobs"][1]
    first_slurm, second_slurm = first["slurm_job_id"], second["slurm_job_id"]
    # The first step fails on the cluster (seen from the login host, not through tao-slurm).
    until(lambda: "FAILED" in ssh(f"sacct -n -X -P -j {first_slurm} -o State"), 240, "the first step fails")
    async with connect(server_env, "--read-only") as ro:
        for _ in range(2):
            await ro.ok("status", {"job_ids": [first["job_id"], second["job_id"]]})
        waited = await ro.ok("wait", {"job_ids": [second["job_id"]], "timeout_secs": 3})
        assert waited["jobs"][0]["status"] == "Pending", waited
    # Each status call ran a whole refresh cycle before it answered: a full cycle would have
    # cancelled the second step by now ("dependency ... ended Error"); the observer did not.
    assert ssh(f"squeue -h -j {second_slurm} -o %T").strip() == "PENDING"
    async with connect(server_env) as s:
        # A full cycle does: the second step is cancelled for its failed dependency.
        last, _ = await s.wait_terminal(second["job_id"])
        assert last["jobs"][0]["status"] == "Canceled", last
