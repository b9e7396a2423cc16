"""The MCP server on PostgreSQL (issue 25): two users' servers (their own homes and state-file paths)
on one database schema share the jobs. One submits; the other follows the job to its end and reads
its logs; neither writes a state file."""

import uuid

from conftest import connect, run_async
from tao_test_support import sandbox_settings, user_env


def on_postgres(env: dict, schema: str) -> dict:
    """`env` with the sandbox's test database, its password apart from the URL (as an operator sets it)."""
    url = sandbox_settings()["TAO_SLURM_TEST_DATABASE_URL"]
    scheme, rest = url.split("://", 1)
    userinfo, host = rest.split("@", 1)
    user, password = userinfo.split(":", 1)
    return {
        **env,
        "TAO_SLURM_DATABASE_URL": f"{scheme}://{user}@{host}",
        "TAO_SLURM_DATABASE_PASSWORD": password,
        "TAO_SLURM_DATABASE_SCHEMA": schema,
    }


@run_async
async def test_two_servers_on_one_database_share_a_job(tmp_path):
    schema = f"mcp_{uuid.uuid4().hex}"
    envs = []
    for name in ("a", "b"):
        home = tmp_path / name
        home.mkdir()
        envs.append(on_postgres(user_env(home, state=tmp_path / f"{name}.db"), schema))
    async with connect(envs[0]) as a, connect(envs[1]) as b:
        job_id = (await a.ok("submit", {"image": "ubuntu:22.04", "gpus": 0, "command": ["echo", "on-postgres-mcp"]}))[
            "job_id"
        ]
        listed = await b.ok("list")
        assert job_id in {j["job_id"] for j in listed["jobs"]}, listed
        last, _ = await b.wait_terminal(job_id)
        assert last["jobs"][0]["status"] == "Complete", last
        logs = await b.ok("logs", {"job_id": job_id, "stream": "stdout"})
        assert "on-postgres-mcp" in logs["stdout"]["text"], logs
        seen = (await a.ok("status", {"job_ids": [job_id]}))["jobs"][0]
        assert seen["status"] == "Complete", seen
    for name in ("a", "b"):
        assert not (tmp_path / f"{name}.db").exists(), "the state is in PostgreSQL, not a state file"
