"""MCP server figures on the sandbox cluster, through the official MCP Python client over stdio:

1. latency of a `status` tool call for one active job (a refresh round trip on the server's warm
   persistent shell), against a `list` call (no remote call: the protocol's and the server's own cost)
   and the CLI's `tao-slurm status <id> --json` (a new process and shell each time);
2. the delay between a job's state change in Slurm and `wait` returning: a pending job is cancelled
   behind tao-slurm's back (`scancel` over plain ssh, at a random moment of the wait) and the time from
   scancel's return to wait's answer is measured, with the default query budget (30/min: one refresh
   per 4 s for a young job) and with 120/min (one per 2 s).

Run: dev/bench-mcp (builds the release binary, then runs this with the repository's .venv) and it
rewrites its section of bench/report.md. Env: BENCH_MCP_CALLS (default 50), BENCH_MCP_TRIALS (default 12).
"""

import asyncio
import json
import os
import pathlib
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time

from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

REPO = pathlib.Path(__file__).resolve().parents[1]
BIN = os.environ.get("TAO_SLURM_BIN", str(REPO / "target" / "release" / "tao-slurm"))
SANDBOX = pathlib.Path(os.environ.get("SANDBOX_DIR", "/var/lib/tao-slurm-sandbox"))
CALLS = int(os.environ.get("BENCH_MCP_CALLS", "50"))
TRIALS = int(os.environ.get("BENCH_MCP_TRIALS", "12"))
REPORT = REPO / "bench" / "report.md"
BEGIN, END = "<!-- mcp-bench:begin -->", "<!-- mcp-bench:end -->"
HELD = {"image": "ubuntu:22.04", "gpus": 1, "command": ["true"], "sbatch_options": {"begin": "now+10days"}}


def settings(home: pathlib.Path, budget: int) -> dict:
    env = dict(line.split("=", 1) for line in (SANDBOX / "settings.env").read_text().splitlines() if "=" in line)
    env.update(
        {
            "PATH": os.environ["PATH"],
            "HOME": str(home),
            "TAO_SLURM_STATE": str(home / "state.db"),
            "TAO_SLURM_CONTROL_DIR": "/tmp/tao-slurm-bench-cm",
            "TAO_SLURM_USE_SQSH": "false",
            "TAO_SLURM_MAX_QUERIES_PER_MINUTE": str(budget),
            "TAO_SLURM_LOG": "warn",
        }
    )
    return env


def ms(seconds: list[float]) -> dict:
    values = sorted(s * 1000 for s in seconds)
    return {
        "n": len(values),
        "median": round(statistics.median(values), 2),
        "p90": round(values[int(0.9 * (len(values) - 1))], 2),
        "min": round(values[0], 2),
        "max": round(values[-1], 2),
    }


async def call(client, tool, args=None) -> dict:
    result = await client.call_tool(tool, args or {})
    assert not result.is_error, result.content[0].text
    return result.structured_content


def server_side_ms(log: pathlib.Path, tool: str, last: int) -> dict:
    """The server's own time for the last `last` calls of `tool`, from its info log."""
    found = re.findall(rf'tool="{tool}" ms="([0-9.]+)"', log.read_text())
    return ms([float(v) / 1000 for v in found[-last:]])


async def status_latency(env: dict, log: pathlib.Path) -> dict:
    env = {**env, "TAO_SLURM_LOG": "info"}
    params = StdioServerParameters(command=BIN, args=["mcp"], env=env)
    with open(log, "w") as errlog:
        result = await status_calls(params, env, errlog)
    result["status_in_server"] = server_side_ms(log, "status", CALLS)
    return result


async def status_calls(params, env: dict, errlog) -> dict:
    async with Client(stdio_client(params, errlog=errlog), mode="auto") as client:
        job = await call(client, "submit", HELD)
        job_id = job["job_id"]
        for _ in range(5):  # warm: master, persistent shell, caches
            await call(client, "status", {"job_ids": [job_id]})
        status, listing = [], []
        for _ in range(CALLS):
            t = time.perf_counter()
            data = await call(client, "status", {"job_ids": [job_id]})
            status.append(time.perf_counter() - t)
            assert data["jobs"][0]["status"] == "Pending"
            t = time.perf_counter()
            await call(client, "list", {"limit": 5})
            listing.append(time.perf_counter() - t)
        cli = []
        for _ in range(min(CALLS, 20)):
            t = time.perf_counter()
            subprocess.run([BIN, "status", job_id, "--json"], env=env, capture_output=True, check=True)
            cli.append(time.perf_counter() - t)
        await call(client, "cancel", {"job_ids": [job_id]})
        return {"status_tool": ms(status), "list_tool": ms(listing), "cli_status": ms(cli), "protocol": client.protocol_version}


def scancel_behind_our_back(env: dict, slurm_job_id: str) -> None:
    subprocess.run(
        ["ssh", "-F", env["SSH_CONFIG"], "sandbox-login1", "scancel", slurm_job_id], check=True, capture_output=True
    )


async def wait_delay(env: dict) -> dict:
    params = StdioServerParameters(command=BIN, args=["mcp"], env=env)
    delays = []
    async with Client(stdio_client(params), mode="auto") as client:
        for _ in range(TRIALS):
            job = await call(client, "submit", HELD)
            first = await call(client, "wait", {"job_ids": [job["job_id"]], "timeout_secs": 1})
            cursor = first["cursor"]
            waiting = asyncio.create_task(
                call(client, "wait", {"job_ids": [job["job_id"]], "cursor": cursor, "timeout_secs": 120})
            )
            await asyncio.sleep(random.uniform(0.5, 5.0))
            await asyncio.to_thread(scancel_behind_our_back, env, job["slurm_job_id"])
            changed_at = time.perf_counter()
            data = await waiting
            delays.append(time.perf_counter() - changed_at)
            assert data["changed"] and data["changes"][-1]["to"] == "Canceled", data
    return ms(delays)


def section(results: dict) -> str:
    s, l, c = results["status"]["status_tool"], results["status"]["list_tool"], results["status"]["cli_status"]
    i = results["status"]["status_in_server"]
    d30, d120 = results["wait_default"], results["wait_120"]
    return f"""{BEGIN}
## MCP server (`tao-slurm mcp`, bench/mcp_bench.py)

Through the official MCP Python client over stdio (protocol {results["status"]["protocol"]}), release build, warm
ControlMaster; {s["n"]} calls each.

| call | median ms | p90 ms | min ms |
|---|---|---|---|
| `status` tool, one active (held) job: a refresh round trip on the server's warm shell | {s["median"]} | {s["p90"]} | {s["min"]} |
| the same calls, time inside the server (its log: parse, refresh, reply) | {i["median"]} | {i["p90"]} | {i["min"]} |
| `list` tool (state file only: the protocol's and the server's own cost) | {l["median"]} | {l["p90"]} | {l["min"]} |
| `tao-slurm status <id> --json` (CLI: a new process and shell each time; {c["n"]} runs) | {c["median"]} | {c["p90"]} | {c["min"]} |

Delay from a job's state change in Slurm to `wait` returning ({d30["n"]} trials each; the job is cancelled
with a plain `scancel` over ssh at a random moment of the wait, timed from scancel's return):

| query budget | median s | max s | min s |
|---|---|---|---|
| default, 30 queries/min (a young job is refreshed every 4 s) | {d30["median"] / 1000:.2f} | {d30["max"] / 1000:.2f} | {d30["min"] / 1000:.2f} |
| `TAO_SLURM_MAX_QUERIES_PER_MINUTE=120` (every 2 s) | {d120["median"] / 1000:.2f} | {d120["max"] / 1000:.2f} | {d120["min"] / 1000:.2f} |

`wait` refreshes at the monitor's pace (2 s after a change, slower for long runs, never above the query
budget), so the delay is about half the refresh interval plus one refresh (the `status` row above). Reproduce:
`dev/bench-mcp`.
{END}"""


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = pathlib.Path(tmp)
        homes = [base / name for name in ("status", "wait30", "wait120")]
        for h in homes:
            h.mkdir()
        results = {
            "status": await status_latency(settings(homes[0], 30), base / "server.log"),
            "wait_default": await wait_delay(settings(homes[1], 30)),
            "wait_120": await wait_delay(settings(homes[2], 120)),
        }
    print(json.dumps(results, indent=2))
    text = REPORT.read_text()
    new = section(results)
    if BEGIN in text:
        text = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: new, text, flags=re.S)
    else:
        text = text.rstrip("\n") + "\n\n" + new + "\n"
    REPORT.write_text(text)
    print(f"wrote the MCP section of {REPORT}", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
