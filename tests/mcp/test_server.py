"""`tao-slurm mcp` driven by the official MCP Python client over stdio, against the sandbox cluster."""

import hashlib
import secrets
import subprocess
import tempfile
import time

import anyio
from conftest import KEEP_WAITING, connect, run_async
from tao_test_support import binary, run_json, ssh_ports

ALL_TOOLS = {
    "preflight", "check_paths", "submit", "status", "wait", "events", "logs",
    "cancel", "list", "explain", "image_import", "credentials_status", "exec", "retry", "checkpoints",
    "pause", "resume", "init",
}
MUTATING = {"init", "submit", "cancel", "image_import", "exec", "retry", "pause", "resume"}
# A small job of the sandbox (its Pyxis stand-in runs the command on the node).
JOB = {"image": "ubuntu:22.04", "gpus": 1}


@run_async
async def test_initialize_handshake_and_current_revision(server_env):
    # The handshake revision (clients that still send initialize)...
    async with connect(server_env, mode="legacy") as s:
        assert s.client.protocol_version == "2025-11-25"
        assert s.client.server_info.name == "tao-slurm"
        assert "wait" in s.client.instructions and "detach" in s.client.instructions
        assert (await s.ok("list"))["jobs"] == []
    # ...and the current one, negotiated by discovery (no initialize).
    async with connect(server_env, mode="auto") as s:
        assert s.client.protocol_version == "2026-07-28"
        assert (await s.ok("list"))["total"] == 0


@run_async
async def test_tools_are_listed_with_schemas_and_annotations(server_env):
    async with connect(server_env) as s:
        tools = {t.name: t for t in (await s.client.list_tools()).tools}
    assert set(tools) == ALL_TOOLS
    for name, tool in tools.items():
        schema = tool.input_schema
        assert schema["type"] == "object" and schema.get("additionalProperties") is False, (name, schema)
        assert tool.output_schema["properties"]["summary"]["type"] == "string", name
        assert tool.description, name
        hints = tool.annotations
        assert hints.read_only_hint is (name not in MUTATING), (name, hints)
    assert tools["cancel"].annotations.destructive_hint is True
    assert tools["cancel"].annotations.idempotent_hint is True
    assert tools["submit"].annotations.destructive_hint is False
    assert tools["logs"].input_schema["required"] == ["job_id"]
    submit = tools["submit"].input_schema["properties"]
    for field in ("image", "command", "gpus", "nodes", "partition", "secret_env", "sbatch_options", "dry_run"):
        assert field in submit, field
    assert "stderr" in str(tools["logs"].input_schema), "stream's allowed values are in the schema"


@run_async
async def test_submit_wait_until_complete_then_logs(server_env):
    async with connect(server_env) as s:
        dry = await s.ok("submit", {**JOB, "command": ["echo", "dry"], "dry_run": True})
        assert dry["dry_run"] is True and "slurm_job_id" not in dry
        assert "#SBATCH" in dry["script"] and "srun" in dry["script"]
        assert (await s.ok("list"))["total"] == 0, "a dry run records nothing"

        # A sweep's and a pipeline's dry runs are the client's one preview: the command line's
        # `submit --dry-run` shows the same array script and the same steps.
        grid = {"grid": {"A": ["1", "2", "3"]}, "max_concurrent": 2}
        swept = await s.ok("submit", {**JOB, "command": ["echo", "v"], "sweep": grid, "nodelist": "node2", "dry_run": True})
        assert [j["values"] for j in swept["jobs"]] == ["A=1", "A=2", "A=3"], swept
        assert "#SBATCH --array=0-2%2" in swept["script"] and "3 variants" in swept["summary"], swept
        assert "\n#SBATCH --nodelist=node2\n" in swept["script"], swept["script"]
        flags = ["--image", JOB["image"], "--gpus", str(JOB["gpus"]), "--grid", "A=1,2,3", "--max-concurrent", "2"]
        flags += ["--nodelist", "node2"]
        cli = run_json(server_env, "submit", "--dry-run", "--json", *flags, "--", "echo", "v")
        assert cli["files"][-1]["contents"] == swept["script"] and cli["array"] == "0-2%2", cli
        assert [v["values"] for v in cli["variants"]] == ["A=1", "A=2", "A=3"]
        steps = [{"name": "prep", "command": ["echo", "p"]}, {"name": "train", "command": ["echo", "t"], "after": ["prep"]}]
        piped = await s.ok("submit", {**JOB, "command": ["true"], "steps": steps, "dry_run": True})
        assert [(j["name"], j["command"]) for j in piped["jobs"]] == [("prep", "echo p"), ("train", "echo t")], piped
        assert (await s.ok("list"))["total"] == 0, "dry runs record nothing"

        lines = "for i in 1 2 3; do echo line-$i; done; echo to-stderr >&2"
        sub = await s.ok("submit", {**JOB, "command": [lines], "shell": True, "name": "mcp-complete"})
        job_id = sub["job_id"]
        assert sub["slurm_job_id"] and "call wait" in sub["next"] and KEEP_WAITING in sub["next"]

        last, changes = await s.wait_terminal(job_id)
        job = last["jobs"][0]
        assert job["status"] == "Complete", last
        assert changes and changes[-1]["to"] == "Complete", changes
        assert "logs" in last["next"] and "wait" not in last["next"], last["next"]

        logs = await s.ok("logs", {"job_id": job_id})
        assert logs["stdout"]["text"] == "line-1\nline-2\nline-3\n", logs
        assert "to-stderr" in logs["stderr"]["text"]
        tail = await s.ok("logs", {"job_id": job_id, "stream": "stdout", "tail_lines": 1})
        assert tail["stdout"]["text"] == "line-3\n" and "stderr" not in tail

        # A byte range, continued from its next offset, cut at whole lines.
        first = await s.ok("logs", {"job_id": job_id, "stream": "stdout", "offset": 0, "max_bytes": 10})
        assert first["range"]["text"] == "line-1\n" and first["range"]["next_offset"] == 7
        assert "offset 7" in first["next"]
        rest = await s.ok("logs", {"job_id": job_id, "stream": "stdout", "offset": 7})
        assert rest["range"]["text"] == "line-2\nline-3\n" and rest["range"]["at_end"] is True

        status = await s.ok("status", {"job_ids": [job_id[:8]]})
        assert status["jobs"][0]["status"] == "Complete" and "logs" in status["next"]
        events = await s.ok("events", {"job_ids": [job_id]})
        kinds = [e["kind"] for e in events["events"]]
        assert kinds[:2] == ["created", "submitted"] and "status" in kinds, kinds
        assert (await s.ok("events", {"job_ids": [job_id], "cursor": events["cursor"]}))["events"] == []
        # One vocabulary: TAO's Done is Complete, as on the command line and in the service.
        done = await s.ok("list", {"status": "Done"})
        assert [j["job_id"] for j in done["jobs"]] == [job_id], done
        assert (await s.ok("list", {"status": "Error"}))["total"] == 0


@run_async
async def test_a_sweep_and_a_pipeline_through_the_submit_tool(server_env):
    async with connect(server_env) as s:
        sweep = {"grid": {"I": ["0", "1", "2"]}, "max_concurrent": 2}
        sub = await s.ok("submit", {**JOB, "command": ['echo "i=$I index=$TAO_SWEEP_INDEX"'], "shell": True, "sweep": sweep})
        sweep_id, variants = sub["sweep_id"], sub["jobs"]
        assert len(variants) == 3 and variants[2]["slurm_job_id"].endswith("_2"), sub
        start = time.monotonic()
        while True:
            data = await s.ok("wait", {"job_ids": [sweep_id], "timeout_secs": 20})
            if all(j["status"] in ("Complete", "Error", "Canceled") for j in data["jobs"]):
                break
            assert time.monotonic() - start < 120, data
        assert [j["status"] for j in data["jobs"]] == ["Complete"] * 3, data
        listed = await s.ok("list", {"sweep_id": sweep_id[:8]})
        assert listed["total"] == 3, listed
        logs = await s.ok("logs", {"job_id": variants[1]["job_id"]})
        assert logs["stdout"]["text"] == "i=1 index=1\n", logs

        steps = [{"name": "first", "command": ["exit 3"]}, {"name": "second", "command": ["true"]}]
        pipe = await s.ok("submit", {**JOB, "shell": True, "command": ["true"], "steps": steps})
        second = pipe["jobs"][1]["job_id"]
        last, _ = await s.wait_terminal(second)
        job = last["jobs"][0]
        assert job["status"] == "Canceled" and job["message"] == f"dependency {pipe['jobs'][0]['job_id']} ended Error", job
        bad = await s.call("submit", {**JOB, "command": ["true"], "sweep": {"grid": {"I": []}}})
        assert bad.is_error and "sweep.grid" in str(bad.content), bad


@run_async
async def test_a_pending_job_keeps_wait_waiting_until_cancelled(server_env):
    async with connect(server_env) as s:
        sub = await s.ok("submit", {**JOB, "command": ["true"], "sbatch_options": {"begin": "now+10days"}})
        job_id = sub["job_id"]
        first = await s.ok("status", {"job_ids": [job_id]})
        cursor, progress = None, []

        async def on_progress(done, total, message):
            progress.append((done, total, message))

        # wait returns at its timeout, saying to keep waiting (more than once: it never gives up).
        for _ in range(2):
            started = time.monotonic()
            args = {"job_ids": [job_id], "timeout_secs": 3}
            if cursor is not None:
                args["cursor"] = cursor
            data = await s.ok("wait", args, progress_callback=on_progress)
            took = time.monotonic() - started
            assert data["timed_out"] is True and data["changed"] is False and data["changes"] == [], data
            assert 3 <= took < 10, took
            assert data["jobs"][0]["status"] == "Pending"
            assert data["next"].startswith("still Pending: " + job_id), data["next"]
            assert KEEP_WAITING in data["next"] and f'"cursor": {data["cursor"]}' in data["next"]
            cursor = data["cursor"]
        assert first["jobs"][0]["status"] == "Pending"
        # While it blocks, wait reports progress to a client that asked for it.
        assert progress and all(total == 3 and "Pending" in message for _, total, message in progress), progress

        why = await s.ok("explain", {"job_id": job_id})
        assert why["pending"] is True and why["reason"] == "BeginTime", why
        assert "start time is in the future" in why["reason_words"]
        assert why["estimate"]["start_time"] and why["estimate"]["starts_in_secs"] > 9 * 86400, why
        assert KEEP_WAITING in why["next"]

        # The server answers other calls while a wait blocks (the engine runs on blocking threads).
        done = {}

        async def blocking_wait():
            done["wait"] = await s.call("wait", {"job_ids": [job_id], "timeout_secs": 5})
            done["wait_at"] = time.monotonic()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(blocking_wait)
            await anyio.sleep(0.5)
            listed = await s.ok("list", {"active_only": True})
            done["list_at"] = time.monotonic()
        assert [j["job_id"] for j in listed["jobs"]] == [job_id]
        assert done["list_at"] < done["wait_at"] - 3, "list waited for the blocking wait"

        cancelled = await s.ok("cancel", {"job_ids": [job_id]})
        assert cancelled["jobs"][0]["status"] == "Canceled"
        again = await s.ok("cancel", {"job_ids": [job_id]})
        assert again["jobs"][0]["status"] == "Canceled", "cancel is idempotent"
        after = await s.ok("wait", {"job_ids": [job_id], "cursor": cursor, "timeout_secs": 30})
        assert [(c["from"], c["to"]) for c in after["changes"]] == [("Pending", "Canceled")], after
        assert "Canceled" in after["next"] and "wait" not in after["next"]


@run_async
async def test_bad_arguments_are_tool_errors_naming_the_field(server_env):
    async with connect(server_env) as s:
        cases = [
            ("submit", {**JOB, "command": ["true"], "gpu": 2}, "gpu", "expected one of"),
            ("submit", {**JOB, "command": ["true"], "gpus": "eight"}, "gpus", "whole number"),
            ("submit", {**JOB, "command": ["true"], "partition": "nonexistent"}, "partition", "nonexistent"),
            ("submit", {**JOB, "command": ["true"], "time_hours": 12}, "time_hours", "partition"),
            ("logs", {"job_id": "x", "stream": "out"}, "stream", "`stdout`, `stderr`, `both`"),
            ("wait", {"timeout_secs": 900}, "timeout_secs", "allowed 1 to 300"),
            ("status", {"job_ids": ["no-such-job"]}, "job_ids", "no job no-such-job"),
            ("cancel", {}, "job_ids", "missing field"),
            ("list", {"status": "Finished"}, "status", "is not one of"),
        ]
        for tool, args, field, words in cases:
            result = await s.call(tool, args)
            assert result.is_error is True, (tool, args, result)
            data = result.structured_content
            assert data["field"] == field, (tool, args, data)
            assert words in data["error"], (tool, args, data)
            assert field in result.content[0].text
        unknown = await s.call("launch_rockets", {})
        assert unknown.is_error and "use one of" in unknown.structured_content["next"]
        # The server keeps serving.
        assert (await s.ok("list"))["total"] == 0


@run_async
async def test_read_only_offers_no_mutating_tool(server_env):
    async with connect(server_env, "--read-only") as s:
        tools = (await s.client.list_tools()).tools
        assert {t.name for t in tools} == ALL_TOOLS - MUTATING
        assert all(t.annotations.read_only_hint for t in tools)
        assert "read-only" in s.client.instructions
        refused = await s.call("submit", {**JOB, "command": ["true"]})
        assert refused.is_error and "--read-only" in refused.structured_content["error"]
        assert (await s.ok("list"))["total"] == 0


@run_async
async def test_a_secret_reaches_the_job_and_no_result_or_log(server_env, tmp_path):
    token = "tok-" + secrets.token_hex(16)
    server_env["MY_TOKEN"] = token
    server_env["TAO_SLURM_LOG"] = "trace"
    stderr_log = tmp_path / "server.stderr"
    # The job proves it got the value by a digest, never by printing it.
    probe = 'printf %s "$MY_TOKEN" | sha256sum | cut -c1-16'
    async with connect(server_env, errlog_path=stderr_log) as s:
        missing = await s.call("submit", {**JOB, "command": ["true"], "secret_env": ["NOT_SET_ANYWHERE"]})
        assert missing.is_error and missing.structured_content["field"] == "secret_env"
        dry = await s.ok("submit", {**JOB, "command": [probe], "shell": True, "secret_env": ["MY_TOKEN"], "dry_run": True})
        assert dry["secret_env"] == ["MY_TOKEN"]
        sub = await s.ok("submit", {**JOB, "command": [probe], "shell": True, "secret_env": ["MY_TOKEN"]})
        notes = []

        async def on_progress(progress, total, message):
            notes.append(f"{progress} {total} {message}")

        while True:
            data = await s.ok("wait", {"job_ids": [sub["job_id"]], "timeout_secs": 30}, progress_callback=on_progress)
            if data["jobs"][0]["status"] != "Pending" and data["jobs"][0]["status"] != "Running":
                break
        assert data["jobs"][0]["status"] == "Complete", data
        logs = await s.ok("logs", {"job_id": sub["job_id"]})
        assert logs["stdout"]["text"].strip() == hashlib.sha256(token.encode()).hexdigest()[:16]
        await s.ok("status", {})
        await s.ok("events", {})
    everything = "\n".join(s.transcript + notes)
    assert token not in everything
    log = stderr_log.read_text()
    assert "tool call" in log and "DEBUG" in log, "the server logged at debug level"
    assert token not in log


@run_async
async def test_preflight_failures_carry_the_remediation_verbatim(server_env, tmp_path):
    # No settings at all: the MISSING message.
    bare = {k: v for k, v in server_env.items() if k not in ("SLURM_USER", "SLURM_HOSTNAME")}
    async with connect(bare) as s:
        data = await s.ok("preflight")
        assert data["ok"] is False and "preflight FAILED" in data["summary"]
        assert "MISSING: set SLURM_USER and SLURM_HOSTNAME (comma-separated for failover)" in data["next"]
    # A key the cluster does not accept: the SSH remediation prompt.
    key = tmp_path / "id_unknown"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    server_env["SSH_KEY_PATH"] = str(key)
    # Straight to the login hosts: the sandbox's ssh_config would offer its own (accepted) key too.
    del server_env["SSH_CONFIG"]
    server_env["SLURM_HOSTNAME"] = ",".join(f"127.0.0.1:{p}" for p in ssh_ports())
    # Its own (short: a socket path has a length limit) ControlMaster directory: no shared master.
    server_env["TAO_SLURM_CONTROL_DIR"] = tempfile.mkdtemp(prefix="cm-", dir="/tmp")
    async with connect(server_env) as s:
        data = await s.ok("preflight")
        assert data["ok"] is False
        assert "SLURM is blocked on passwordless SSH. Please provide: SSH_KEY_PATH=/path/to/private_key" in data["next"]
        assert "ssh-keygen -t ed25519" in data["next"] and "do not submit" in data["next"]
        # Every other tool that needs the cluster says the same.
        failed = await s.call("check_paths", {"uris": ["lustre:///tmp"]})
        assert failed.is_error and "passwordless SSH" in failed.structured_content["next"]


@run_async
async def test_cluster_tools_on_the_sandbox(server_env):
    base = server_env["SLURM_BASE_RESULTS_DIR"]
    async with connect(server_env) as s:
        pre = await s.ok("preflight")
        assert pre["checks"] and any(c["name"] == "ssh login" and c["ok"] for c in pre["checks"]), pre
        for c in pre["checks"]:
            if not c["ok"] and c["required"]:
                # Another test may have stopped a service for a moment: the hint still says what to do.
                assert c["remediation"] in pre["next"]
        paths = await s.ok("check_paths", {"uris": [f"lustre://{base}", f"{base}/no-such-file", "file:///x", "s3://b/k"]})
        states = [p["state"] for p in paths["paths"]]
        assert states == ["exists", "missing", "refused", "not_checked"], paths
        assert paths["ok"] is False and "ask the user for corrected paths" in paths["next"]
        assert (await s.ok("check_paths", {"uris": [base]}))["ok"] is True
        creds = await s.ok("credentials_status")
        assert isinstance(creds["installed"], bool) and creds["path"].endswith("/.credentials")
        if not creds["installed"]:
            assert "tao-slurm credentials enroot" in creds["next"]
        assert "password" not in str(creds)
    # A real `enroot import` of a registry image into a cache of this test's own; a second import
    # finds the cached file.
    cache = f"{base}/mcp-cache-{secrets.token_hex(4)}"
    async with connect(dict(server_env, TAO_SLURM_SQSH_CACHE_DIR=cache)) as s:
        image = "nvcr.io/nvidia/pytorch:24.01-py3"
        first = await s.ok("image_import", {"image": image})
        assert first["how"] == "converted" and first["sqsh_path"].startswith(cache + "/"), first
        again = await s.ok("image_import", {"image": image})
        assert again["how"] == "cached" and again["sqsh_path"] == first["sqsh_path"]


def test_the_cli_lists_the_mcp_command():
    out = subprocess.run([binary(), "mcp", "--help"], capture_output=True, text=True, check=True).stdout
    assert "--read-only" in out
