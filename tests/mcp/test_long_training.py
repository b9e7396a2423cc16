"""Training longer than the queue allows, through the MCP server: `retry` of a job that ended Error
runs it again from its newest checkpoint (which `checkpoints` lists); a graceful `pause` and a `resume`
go on from the checkpoint it saved; a read-only server offers none of them."""

import time

import anyio
from conftest import connect, run_async
from tao_test_support import TRAINING as TRAINING_EPOCHS
from tao_test_support import finished_epochs

JOB = {"image": "ubuntu:22.04", "gpus": 1}
TRAINING = """dir="$TAO_API_RESULTS_DIR/$TAO_JOB_ID/train"; mkdir -p "$dir"
if [ -z "${TAO_RESUME_CHECKPOINT:-}" ]; then echo x > "$dir/epoch-1.pth"; echo "failing after epoch 1"; exit 3; fi
echo "resumed from $TAO_RESUME_CHECKPOINT\""""


@run_async
async def test_retry_resumes_an_error_job_from_its_checkpoint(server_env):
    async with connect(server_env) as s:
        job_id = (await s.ok("submit", {**JOB, "command": [TRAINING], "shell": True}))["job_id"]
        last, _ = await s.wait_terminal(job_id)
        assert last["jobs"][0]["status"] == "Error", last
        cks = await s.ok("checkpoints", {"job_id": job_id})
        assert [c["path"] for c in cks["checkpoints"]] == ["train/epoch-1.pth"], cks
        retried = await s.ok("retry", {"job_id": job_id})
        assert retried["job"]["job_id"] == job_id and retried["job"]["status"] != "Error", retried
        last, _ = await s.wait_terminal(job_id)
        assert last["jobs"][0]["status"] == "Complete", last
        logs = await s.ok("logs", {"job_id": job_id, "stream": "stdout"})
        assert "resumed from " in logs["stdout"]["text"] and "/train/epoch-1.pth" in logs["stdout"]["text"], logs


@run_async
async def test_a_read_only_server_offers_checkpoints_but_not_retry(server_env):
    async with connect(server_env, "--read-only") as s:
        names = {t.name for t in (await s.client.list_tools()).tools}
        assert "checkpoints" in names and "retry" not in names, names


@run_async
async def test_a_graceful_pause_and_a_resume_go_on_from_the_checkpoint(server_env):
    async with connect(server_env) as s:
        spec = {**JOB, "command": [TRAINING_EPOCHS], "shell": True, "checkpoint_grace_seconds": 4,
                "env": {"EPOCHS": "6", "SECONDS": "2"}}
        job_id = (await s.ok("submit", spec))["job_id"]

        async def epochs() -> list:
            logs = await s.ok("logs", {"job_id": job_id, "stream": "stdout"})
            return finished_epochs(logs["stdout"]["text"])

        start = time.monotonic()
        while len(await epochs()) < 2:
            assert time.monotonic() - start < 180, "two epochs"
            await anyio.sleep(1)
        paused = await s.ok("pause", {"job_id": job_id, "graceful": True})
        assert paused["job"]["status"] == "Pausing", paused
        start = time.monotonic()
        while (status := (await s.ok("status", {"job_ids": [job_id]}))["jobs"][0])["status"] != "Paused":
            assert status["status"] == "Pausing" and time.monotonic() - start < 120, status
            await anyio.sleep(1)
        done = await epochs()
        assert done and done[-1] < 6, done
        hint = (await s.ok("status", {"job_ids": [job_id]}))["next"]
        assert "resume" in hint and "call wait" not in hint, hint
        # A wait on it ends at once: nothing changes until it is resumed.
        waited = await s.ok("wait", {"job_ids": [job_id], "timeout_secs": 60})
        assert not waited["timed_out"] and f"{job_id} paused" in waited["summary"], waited
        resumed = await s.ok("resume", {"job_id": job_id})
        assert resumed["job"]["status"] in ("Resuming", "Running", "Complete"), resumed
        assert (await s.ok("resume", {"job_id": job_id}))["job"]["attempt"] == 2, "idempotent"
        last, _ = await s.wait_terminal(job_id)
        assert last["jobs"][0]["status"] == "Complete", last
        logs = await s.ok("logs", {"job_id": job_id, "stream": "stdout"})
        text = logs["stdout"]["text"]
        assert f"training: resuming at epoch {done[-1] + 1}" in text, text
        assert finished_epochs(text) == list(range(done[-1] + 1, 7)), text


@run_async
async def test_a_read_only_server_offers_no_pause_or_resume(server_env):
    async with connect(server_env, "--read-only") as s:
        names = {t.name for t in (await s.client.list_tools()).tools}
        assert not {"pause", "resume"} & names, names
