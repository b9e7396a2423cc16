"""What the pytest suites share (tests/python, tests/mcp, tests/cli): the sandbox cluster's settings,
the environment of one user of tao-slurm, the binary under test and its --json answers, the terminal
statuses, and one way to wait for a condition. Each suite's conftest.py puts tests/support on sys.path; each suite still runs
on its own (dev/test runs them one by one). A missing sandbox or binary is a failure, never a skip."""

from __future__ import annotations

import functools
import json
import os
import pathlib
import subprocess
import tempfile
import time
from typing import Callable, Optional, TypeVar

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
SANDBOX = pathlib.Path(os.environ.get("SANDBOX_DIR", "/var/lib/tao-slurm-sandbox"))
BIN = pathlib.Path(os.environ.get("TAO_SLURM_BIN", REPO / "target" / "debug" / "tao-slurm"))
# The statuses a job never leaves.
TERMINAL = ("Complete", "Error", "Canceled")
# The ControlMaster directory the tests share, as one user's commands would.
CONTROL_DIR = "/tmp/tao-slurm-test-cm"

T = TypeVar("T")


@functools.cache
def _read_sandbox_settings() -> tuple:
    path = SANDBOX / "settings.env"
    if not path.is_file():
        pytest.fail(f"the sandbox cluster is not set up ({path} is missing): start it with bash dev/sandbox/up.sh")
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return tuple((k.strip(), v.strip()) for k, v in pairs)


def sandbox_settings() -> dict:
    """Every setting the sandbox's start script wrote (read once): the user's (SLURM_USER, SSH_CONFIG,
    ...) and the sandbox's own (SANDBOX_*)."""
    return dict(_read_sandbox_settings())


def ssh_ports() -> list:
    """The login hosts' sshd ports on loopback, first host first."""
    return sandbox_settings()["SANDBOX_SSH_PORTS"].split(",")


def binary() -> str:
    """The tao-slurm binary under test (TAO_SLURM_BIN, else the debug build)."""
    if not BIN.is_file():
        pytest.fail(f"{BIN} is missing: build it with cargo build (dev/test does)")
    return str(BIN)


def run_json(env: dict, *args: str, ok_codes=(0,)):
    """The command line's JSON answer to `args`, run as the user `env` describes; its exit status
    must be one of `ok_codes`."""
    out = subprocess.run([binary(), *args], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode in ok_codes, f"{args}: {out.returncode}\n{out.stdout}\n{out.stderr}"
    return json.loads(out.stdout)


def user_env(
    home: pathlib.Path,
    *,
    state: Optional[pathlib.Path] = None,
    inherit: bool = False,
    tao_names: bool = False,
) -> dict:
    """The environment of one user of tao-slurm: the sandbox's settings, a HOME and state file of its
    own, the shared ControlMaster directory, fast retries, and a query budget that lets a wait poll each
    second. `inherit` starts from this process's environment without its SLURM_/TAO_/SSH_ names (for
    Python processes), else from PATH alone (for the binary). `tao_names` gives the settings under the
    TAO SDK's names (SSH_USER, SSH_HOST, SLURM_USE_SQSH, TAO_SDK_STATE_DIR) instead of tao-slurm's."""
    if inherit:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TAO_", "SSH_"))}
    else:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    env.update({k: v for k, v in sandbox_settings().items() if not k.startswith("SANDBOX_")})
    env.update(
        {
            "HOME": str(home),
            "TAO_SLURM_CONTROL_DIR": CONTROL_DIR,
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
        env["TAO_SLURM_STATE"] = str(state or home / "state.db")
    return env


def long_home_env(tmp: pathlib.Path, length: int = 80, *, inherit: bool = False) -> dict:
    """user_env for a HOME of exactly `length` characters, with the state file and the ControlMaster
    directory at their defaults (the state under HOME; the sockets in $XDG_RUNTIME_DIR/tao-slurm, here
    a fresh short directory of this test's own, as /run/user/<uid> is), none of the harness's short
    paths: under a home of 35 characters the old sockets' path did not fit a Unix socket's 107 bytes."""
    home = tmp / ("h" * (length - len(str(tmp)) - 1))
    home.mkdir()
    assert len(str(home)) == length, home
    env = user_env(home, inherit=inherit)
    del env["TAO_SLURM_CONTROL_DIR"], env["TAO_SLURM_STATE"]
    env["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="rt", dir="/tmp")
    return env


def use_env(monkeypatch, env: dict) -> None:
    """Make `env` this process's whole environment for the test (SlurmSDK reads the environment);
    pytest's monkeypatch restores the old one after it."""
    for k in list(os.environ):
        if k not in env:
            monkeypatch.delenv(k)
    for k, v in env.items():
        monkeypatch.setenv(k, v)


def wait_until(condition: Callable[[], T], limit: float, what: str, pause: float = 0.5) -> T:
    """Call `condition` every `pause` seconds until it returns something true, and return that; fail
    naming `what` (and what was seen last) once `limit` seconds have passed without it."""
    start = time.monotonic()
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() - start < limit, f"{what}: not so after {limit} s (last seen: {value!r})"
        time.sleep(pause)


# A stand-in for a TAO training (the one of tests/sandbox/long_training.rs): $EPOCHS epochs of $SECONDS
# each, a checkpoint `train/epoch-N.pth` after each, resumed from $TAO_RESUME_CHECKPOINT when set; on
# USR2 (the checkpoint signal) it says so and saves its last finished epoch again.
TRAINING = r"""set -u
dir="$TAO_API_RESULTS_DIR/$TAO_JOB_ID/train"; mkdir -p "$dir"
start=1
if [ -n "${TAO_RESUME_CHECKPOINT:-}" ]; then
  n="${TAO_RESUME_CHECKPOINT##*/epoch-}"; start=$(( ${n%.pth} + 1 ))
  echo "training: resuming at epoch $start from $TAO_RESUME_CHECKPOINT"
else
  echo "training: starting from scratch"
fi
last=$((start - 1))
trap 'echo "training: warned after epoch $last, saving"; [ "$last" -gt 0 ] && touch "$dir/epoch-$last.pth"' USR2
for e in $(seq "$start" "$EPOCHS"); do
  (trap '' USR2; exec sleep "$SECONDS") & s=$!
  while kill -0 "$s" 2>/dev/null; do wait "$s"; done
  echo "epoch $e" > "$dir/epoch-$e.pth"; last=$e
  echo "training: finished epoch $e"
done
echo "training: done"
"""


def finished_epochs(log: str) -> list:
    """The epochs a TRAINING log says it finished, in order."""
    prefix = "training: finished epoch "
    return [int(line[len(prefix):]) for line in log.splitlines() if line.startswith(prefix)]
