"""Training longer than the queue allows, through the MCP server: `retry` of a job that ended Error
runs it again from its newest checkpoint (which `checkpoints` lists); a read-only server offers no
`retry`."""

from conftest import connect, run_async

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
