"""The CLI's --json output against the JSON schemas it documents (`tao-slurm schema`, generated from the
types that print it): every documented command's real output on the sandbox validates, and a wrong
output would not. A missing sandbox or binary is a failure, never a skip."""

import shutil

import jsonschema
import pytest
from tao_test_support import REPO, run_json, user_env


@pytest.fixture
def env(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    return user_env(home, state=tmp_path / "state.db")


def schema(env, command):
    return run_json(env, "schema", command)


def test_every_documented_output_validates(env, tmp_path):
    documented = run_json(env, "schema")
    checked = set()

    def check(command, value):
        jsonschema.validate(value, documented[command])
        checked.add(command)

    check("preflight", run_json(env, "preflight", "--json", ok_codes=(0, 1)))
    check("check-path", run_json(env, "check-path", "--json", "/tmp", "/nonexistent-tao", ok_codes=(1,)))
    check(
        "render",
        run_json(env, "render", "--json", "--image", "ubuntu:22.04", "--gpus", "0", "--secret-env", "T", "--", "true"),
    )
    # A job held a day (it never runs): submit, status, list and cancel of it.
    held = ("--image", "ubuntu:22.04", "--gpus", "0", "--sbatch-option", "begin=now+1day", "--", "true")
    submitted = run_json(env, "submit", "--json", *held)
    check("submit", submitted)
    job = submitted["job_id"]
    status = run_json(env, "status", job, "--json")
    assert isinstance(status, list) and len(status) == 1 and status[0]["job_id"] == job, status
    check("status", status)
    check("list", run_json(env, "list", "--json"))
    # Paused (not running yet: cancelled at once), then resumed: held a day again, Resuming.
    paused = run_json(env, "pause", job, "--json")
    check("pause", paused)
    assert paused[0]["status"] == "Paused", paused
    resumed = run_json(env, "resume", job, "--json")
    check("resume", resumed)
    assert resumed[0]["status"] == "Resuming" and resumed[0]["attempt"] == 2, resumed
    cancelled = run_json(env, "cancel", job, "--json")
    check("cancel", cancelled)
    assert cancelled[0]["status"] == "Canceled", cancelled
    # A state file written by an earlier build: its jobs' history, offline.
    state = tmp_path / "old.db"
    shutil.copy(REPO / "tests/fixtures/state/v4-c7f1618.db", state)
    old = dict(env, TAO_SLURM_STATE=str(state))
    jobs = run_json(old, "list", "--json")
    check("events", run_json(old, "events", jobs[0]["job_id"], "--json"))
    # Every documented command whose output needs no job to run on the cluster was checked.
    assert checked == {
        "preflight", "check-path", "render", "events", "submit", "status", "list", "pause", "resume", "cancel"
    }, checked
    assert set(documented) >= checked


def test_a_wrong_output_would_not_validate(env):
    # The schemas constrain: a missing field or a wrong type is caught (so a pass above means something).
    preflight = schema(env, "preflight")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"checks": []}, preflight)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"ok": "yes", "checks": []}, preflight)
    events = schema(env, "events")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate([{"at": "noon", "kind": "x", "detail": ""}], events)
