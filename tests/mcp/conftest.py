"""Harness for the MCP tests: a real MCP client (the official Python SDK) drives `tao-slurm mcp` over
stdio against the sandbox cluster (dev/sandbox) over real SSH. A missing sandbox or binary is a
failure, never a skip."""

import asyncio
import contextlib
import functools
import json
import pathlib
import sys
import time

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

# The helpers the three pytest suites share (tests/support/tao_test_support).
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "support"))
from tao_test_support import TERMINAL, binary, user_env  # noqa: E402

# The rule every non-terminal result must carry.
KEEP_WAITING = "do not give a final answer unless the user asked to detach"


@pytest.fixture
def server_env(tmp_path) -> dict:
    """The environment of one user of the server: the sandbox's settings, its own HOME and state file,
    the ControlMaster directory shared with the other tests (as a user's would be)."""
    home = tmp_path / "home"
    home.mkdir()
    return {**user_env(home, state=tmp_path / "state.db"), "TAO_SLURM_LOG": "info"}


def run_async(test):
    """Run an async test function to completion (fixtures resolve as for a plain function)."""

    @functools.wraps(test)
    def wrapper(*args, **kwargs):
        return asyncio.run(test(*args, **kwargs))

    return wrapper


@contextlib.asynccontextmanager
async def connect(env: dict, *extra_args: str, mode: str = "auto", errlog_path: pathlib.Path | None = None):
    """A client connected to a fresh `tao-slurm mcp` process; its stderr goes to errlog_path if given."""
    params = StdioServerParameters(command=binary(), args=["mcp", *extra_args], env=env)
    with contextlib.ExitStack() as files:
        errlog = files.enter_context(open(errlog_path, "w")) if errlog_path else None
        transport = stdio_client(params, errlog=errlog) if errlog else stdio_client(params)
        async with Client(transport, mode=mode, read_timeout_seconds=400) as client:
            yield Session(client)


class Session:
    """A connected client that keeps every result's text, so tests can search all of it."""

    def __init__(self, client: Client):
        self.client = client
        self.transcript: list[str] = []

    async def call(self, tool: str, args: dict | None = None, **kwargs):
        result = await self.client.call_tool(tool, args or {}, **kwargs)
        self.transcript.append(json.dumps(result.model_dump(mode="json", by_alias=True)))
        return result

    async def ok(self, tool: str, args: dict | None = None, **kwargs) -> dict:
        """Call and require success; returns the structured content."""
        result = await self.call(tool, args, **kwargs)
        text = result.content[0].text if result.content else ""
        assert not result.is_error, f"{tool} {args} failed: {text}"
        data = result.structured_content
        assert data["summary"] and data["next"], data
        return data

    async def wait_terminal(self, job_id: str, limit: float = 240) -> tuple[dict, list[dict]]:
        """Call wait until the job is terminal (bounded); returns the last result and every change."""
        start, cursor, changes = time.monotonic(), None, []
        while True:
            args = {"job_ids": [job_id], "timeout_secs": 30}
            if cursor is not None:
                args["cursor"] = cursor
            data = await self.ok("wait", args)
            changes.extend(data["changes"])
            cursor = data["cursor"]
            job = data["jobs"][0]
            if job["status"] in TERMINAL:
                return data, changes
            assert KEEP_WAITING in data["next"], data["next"]
            assert time.monotonic() - start < limit, f"job {job_id} not terminal after {limit} s: {data}"
