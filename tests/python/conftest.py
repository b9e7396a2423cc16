"""Harness for the Python package's tests: `tao_slurm` (built into the repository's .venv by dev/test)
against the sandbox cluster (dev/sandbox) over real SSH. A missing sandbox or package is a failure,
never a skip. Each test gets its own HOME and state file; the ControlMaster directory is shared with
the other tests, as a user's would be. Jobs a test leaves active are cancelled at its end."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

# The helpers the three pytest suites share (tests/support/tao_test_support).
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "support"))
from tao_test_support import TERMINAL, use_env, user_env  # noqa: E402


@pytest.fixture
def env(tmp_path, monkeypatch) -> dict:
    """This test's user environment, also set in this process (SlurmSDK reads the environment)."""
    home = tmp_path / "home"
    home.mkdir()
    e = user_env(home, inherit=True)
    use_env(monkeypatch, e)
    return e


@pytest.fixture
def sdks():
    """Make SlurmSDKs; at the end, cancel what they left active and stop their monitors."""
    from tao_slurm import SlurmSDK

    made = []

    def make(**kwargs):
        kwargs.setdefault("poll_interval", 1)
        sdk = SlurmSDK(**kwargs)
        made.append(sdk)
        return sdk

    yield make
    for sdk in made:
        active = [j["job_id"] for j in sdk.list_jobs() if j["status"] not in TERMINAL]
        for job_id in active:
            try:
                sdk.cancel_job(job_id)
            except Exception as e:  # noqa: BLE001 - cleanup must reach every job
                print(f"cleanup: cancel {job_id}: {e}", file=sys.stderr)
        sdk.close()


def run_python(code: str, env: dict, timeout: float = 180) -> subprocess.CompletedProcess:
    """Run Python code in a new process (this venv's interpreter) with `env`."""
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def last_json(out: str):
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
