"""Harness for the Python package's tests: `tao_slurm` (built into the repository's .venv by dev/test)
against the sandbox cluster (dev/sandbox) over real SSH. A missing sandbox or package is a failure,
never a skip. Each test gets its own HOME and state file; the ControlMaster directory is shared with
the other tests, as a user's would be. Jobs a test leaves active are cancelled at its end."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SANDBOX = pathlib.Path(os.environ.get("SANDBOX_DIR", "/var/lib/tao-slurm-sandbox"))
TERMINAL = ("Complete", "Error", "Canceled")


def sandbox_settings() -> dict:
    path = SANDBOX / "settings.env"
    if not path.is_file():
        pytest.fail(f"the sandbox cluster is not set up ({path} is missing): start it with bash dev/sandbox/up.sh")
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {k.strip(): v.strip() for k, v in pairs}


def user_env(home: pathlib.Path, *, tao_names: bool = False) -> dict:
    """The environment of one user: the sandbox's settings (under the TAO SDK's names when
    `tao_names`), a HOME of its own, fast retries and a query budget that lets wait() poll each second."""
    settings = sandbox_settings()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TAO_", "SSH_"))}
    env.update({k: v for k, v in settings.items() if not k.startswith("SANDBOX_")})
    env.update(
        {
            "HOME": str(home),
            "TAO_SLURM_CONTROL_DIR": "/tmp/tao-slurm-test-cm",
            "TAO_SLURM_CONTROL_PERSIST": "120",
            "TAO_SLURM_RETRY_BACKOFF_SECS": "1",
            "TAO_SLURM_MAX_QUERIES_PER_MINUTE": "120",
        }
    )
    if tao_names:
        env["SSH_USER"] = env.pop("SLURM_USER")
        env["SSH_HOST"] = env.pop("SLURM_HOSTNAME")
        env["SLURM_USE_SQSH"] = "false"
        env["TAO_SDK_STATE_DIR"] = str(home / ".tao_sdk")
    else:
        env["TAO_SLURM_USE_SQSH"] = "false"
        env["TAO_SLURM_STATE"] = str(home / "state.db")
    return env


@pytest.fixture
def env(tmp_path, monkeypatch) -> dict:
    """This test's user environment, also set in this process (SlurmSDK reads the environment)."""
    home = tmp_path / "home"
    home.mkdir()
    e = user_env(home)
    for k in list(os.environ):
        if k not in e:
            monkeypatch.delenv(k)
    for k, v in e.items():
        monkeypatch.setenv(k, v)
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


def until(predicate, limit: float, what: str, pause: float = 0.5):
    start = time.monotonic()
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() - start < limit, f"{what}: not within {limit} s"
        time.sleep(pause)
