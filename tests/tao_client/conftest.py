"""Harness for TAO's own REST client (`TaoClient` of nvidia-tao-client 6.26.3, unchanged) against
`tao-slurm serve` on the sandbox cluster (dev/sandbox) over real HTTP and SSH. One service for the
module: org `team-tao` with an admin token (it makes a workspace of its own), the operator's `default`
workspace granted to it, the sandbox's key assigned to the org. HOME is a temporary directory, so the
client's ~/.tao/config is the test's. A missing sandbox, binary or client is a failure, never a skip."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import uuid

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "support"))
from tao_test_support import binary, sandbox_settings, user_env  # noqa: E402

ORG = "team-tao"
DOWNLOAD_CAP = 1 << 20
# A value of the service's environment the org may give its jobs as STAND_IN_SECRET.
SECRET = "tao-client-secret-value-7f3a"


class Service:
    def __init__(self, url: str, token: str, env: dict, proc: subprocess.Popen, log: pathlib.Path):
        self.url, self.token, self.env, self.proc, self.log = url, token, env, proc, log

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([binary(), *args], env=self.env, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def service(tmp_path_factory, request):
    home = tmp_path_factory.mktemp("home")
    env = user_env(home)
    clusters = home / "clusters.toml"
    clusters.write_text(
        f'[default]\norgs = ["{ORG}"]\n\n[orgs.{ORG}]\nssh_key = "{sandbox_settings()["SSH_KEY_PATH"]}"\n'
        'ssh_aliases = ["sandbox-login1"]\n'
        'secret_env = { STAND_IN_SECRET = "TAO_CLIENT_TEST_SECRET" }\n'
    )
    env["TAO_CLIENT_TEST_SECRET"] = SECRET
    env["TAO_SLURM_CLUSTERS_FILE"] = str(clusters)
    # Short wall times let the sandbox's backfill start these jobs beside others' big ones.
    env["SLURM_TIME_HOURS"] = "0.25"
    env["SLURM_TIMEOUT_HOURS"] = "0.2"
    # A small download cap, so that a test can pass it.
    env["TAO_SLURM_DOWNLOAD_MAX_BYTES"] = str(DOWNLOAD_CAP)
    # A test module's own settings (`SERVICE_ENV`; None removes one).
    for k, v in getattr(request.module, "SERVICE_ENV", {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    made = subprocess.run(
        [binary(), "token", "create", "--org", ORG, "--name", "tao-client", "--admin", "--json"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )
    assert made.returncode == 0, made.stderr
    token = json.loads(made.stdout)["token"]
    log = home / "serve.log"
    proc = subprocess.Popen(
        [binary(), "serve", "--port", "0", "--rate-limit", "200"],
        env=env, stdout=subprocess.PIPE, stderr=log.open("w"), text=True,
    )
    line = proc.stdout.readline()
    assert line.startswith("listening on http://127.0.0.1:"), f"serve did not start: {line!r}; {log.read_text()}"
    url = line.split()[2].rstrip("/")
    svc = Service(url, token, env, proc, log)
    yield svc
    proc.terminate()
    proc.wait(timeout=30)
    # Jobs a failed test left active are cancelled.
    active = svc.cli("list", "--active", "--json")
    if active.returncode == 0:
        ids = [j["job_id"] for j in json.loads(active.stdout or "[]")]
        if ids:
            svc.cli("cancel", *ids)


@pytest.fixture(scope="module")
def tao_home(tmp_path_factory):
    """A HOME of the client's own (its ~/.tao/config), and no TAO_* of the caller's environment."""
    home = tmp_path_factory.mktemp("client-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(home))
        for k in list(os.environ):
            if k.startswith("TAO_"):
                mp.delenv(k)
        yield home


@pytest.fixture(scope="module")
def results_base():
    """A base results directory of the org's own workspace, made on the cluster as its user."""
    s = sandbox_settings()
    base = f"{s['SLURM_BASE_RESULTS_DIR']}/tao-client-{uuid.uuid4().hex[:8]}"
    made = subprocess.run(
        ["ssh", "-F", s["SSH_CONFIG"], "sandbox-login1", f"mkdir -p -m 700 '{base}'"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert made.returncode == 0, made.stderr
    return base
