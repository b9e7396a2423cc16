"""The `init` tool (issue 41) through the real MCP client: nothing written without `write`; with it,
the env file (mode 600) that preflight then passes; a missing partition and an unknown host key are
errors naming the field and the fix, nothing written."""

import os
import stat

from conftest import connect, run_async

SSH = "/var/lib/tao-slurm-sandbox/ssh"
BASE = "/var/lib/tao-slurm-sandbox/shared/slurmuser"


def answers(**more) -> dict:
    return {
        "host": "127.0.0.1:2222",
        "user": "slurmuser",
        "key": f"{SSH}/id_ed25519",
        "known_hosts": f"{SSH}/known_hosts",
        "base_dir": BASE,
        **more,
    }


@run_async
async def test_init_shows_then_writes_the_env_file_and_preflight_passes(server_env, tmp_path):
    path = tmp_path / "tao" / ".env"
    async with connect(server_env) as s:
        shown = await s.ok("init", answers(env_file=str(path)))
        assert shown["written"] is False and not path.exists()
        assert "SLURM_HOSTNAME=127.0.0.1:2222\n" in shown["text"]
        parts = {p["name"]: p for p in shown["found"]["partitions"]}
        assert parts["debug"]["max_time"] == "00:30:00" and parts["polar"]["is_default"] is True
        assert shown["found"]["accounts"] == ["default"] and shown["found"]["pyxis"] is True

        done = await s.ok("init", answers(env_file=str(path), partition="debug", write=True))
        assert done["written"] is True and done["preflight_ok"] is True, done
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert "SLURM_PARTITION=debug\n" in path.read_text()


@run_async
async def test_init_names_a_missing_partition_and_an_unknown_host_key(server_env, tmp_path):
    path = tmp_path / ".env"
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    async with connect(server_env) as s:
        bad = await s.call("init", answers(env_file=str(path), partition="nosuch", write=True))
        assert bad.is_error
        err = bad.structured_content
        assert err["field"] == "partition" and "polar" in err["error"] and "debug" in err["error"], err
        assert "pass --partition with one of" in err["next"]
        unknown = await s.call("init", answers(env_file=str(path), known_hosts=str(empty), write=True))
        assert unknown.is_error
        assert "--accept-new-host-key" in unknown.structured_content["next"], unknown.structured_content
    assert not path.exists()
