"""The Python package on PostgreSQL (issue 25): two SlurmSDKs with their own state-file paths, on one
database schema, share the jobs; neither writes a state file."""

from __future__ import annotations

import uuid

from tao_test_support import sandbox_settings, wait_until


def test_two_sdks_on_one_database_share_a_job(env, sdks, tmp_path, monkeypatch):
    url = sandbox_settings()["TAO_SLURM_TEST_DATABASE_URL"]
    scheme, rest = url.split("://", 1)
    userinfo, host = rest.split("@", 1)
    user, password = userinfo.split(":", 1)
    monkeypatch.setenv("TAO_SLURM_DATABASE_URL", f"{scheme}://{user}@{host}")
    monkeypatch.setenv("TAO_SLURM_DATABASE_PASSWORD", password)
    monkeypatch.setenv("TAO_SLURM_DATABASE_SCHEMA", f"py_{uuid.uuid4().hex}")
    a = sdks(state_file=str(tmp_path / "a.json"))
    b = sdks(state_file=str(tmp_path / "b.json"))
    job = a.create_job(image="ubuntu:22.04", command="echo on-postgres-python", gpu_count=0)
    assert job.id in {j["job_id"] for j in b.list_jobs()}
    assert b.wait(job.id, timeout=300).status == "Complete"
    assert "on-postgres-python" in b.get_job_logs(job.id)
    wait_until(lambda: a.get_job_status(job.id).status == "Complete", 60, "the other SDK sees the end")
    assert not list(tmp_path.rglob("*.db")), "the state is in PostgreSQL, not a state file"
