"""tao_slurm against NVIDIA's own nvidia-tao-sdk (pinned in dev/python-requirements.txt), offline:
the same calls and the same settings through the TAO SDK's SlurmSDK and its SlurmHandler and through
tao_slurm, compared. Every difference that is left is named in python/README.md's table of SlurmSDK methods,
with its reason."""

from __future__ import annotations

import dataclasses
import inspect
import json
import re

import pytest

import tao_slurm
import tao_slurm.models
from tao_slurm import _native

from tao_sdk import models as tao_models
from tao_sdk.platforms.slurm import SlurmSDK as TaoSlurmSDK
from tao_sdk.platforms.slurm.handler import SlurmHandler


def public_methods(cls) -> list:
    return sorted(n for n, v in inspect.getmembers(cls, callable) if not n.startswith("_"))


def test_every_slurmsdk_method_is_there_with_the_same_parameters_and_defaults():
    ours = set(public_methods(tao_slurm.SlurmSDK))
    for name in public_methods(TaoSlurmSDK) + ["__init__"]:
        assert name in ours or name == "__init__", f"tao_slurm.SlurmSDK lacks {name}"
        theirs = list(inspect.signature(getattr(TaoSlurmSDK, name)).parameters.values())
        mine = list(inspect.signature(getattr(tao_slurm.SlurmSDK, name)).parameters.values())
        # The TAO SDK's parameters come first, in its order, with its defaults and kinds; ours may
        # add keyword-only ones after them.
        assert [p.name for p in mine[: len(theirs)]] == [p.name for p in theirs], name
        for t, m in zip(theirs, mine):
            assert (m.kind, m.default) == (t.kind, t.default), (name, t.name, m, t)
        for extra in mine[len(theirs) :]:
            assert extra.kind is inspect.Parameter.KEYWORD_ONLY or extra.default is not inspect.Parameter.empty, (
                name,
                extra,
            )


def test_the_data_classes_have_the_tao_sdks_fields_and_dict_keys():
    for cls in ("Job", "JobStatus", "Checkpoint"):
        theirs, mine = getattr(tao_models, cls), getattr(tao_slurm.models, cls)
        assert [f.name for f in dataclasses.fields(mine)] == [f.name for f in dataclasses.fields(theirs)], cls
        assert getattr(tao_slurm, cls) is mine
    # Job: the TAO SDK requires network_arch, action and workspace_id; tao_slurm defaults them ("",
    # "", "slurm"): its SlurmSDK always passes these values.
    theirs = tao_models.Job(id="j", network_arch="", action="", workspace_id="slurm", backend_type="slurm")
    mine = tao_slurm.Job(id="j")
    t, m = theirs.to_dict(), mine.to_dict()
    assert list(m) == list(t)
    t.pop("created_at"), m.pop("created_at")
    assert m == t
    assert tao_slurm.JobStatus("j", "Done").message == tao_models.JobStatus("j", "Done").message == ""
    assert tao_slurm.models.Checkpoint("p", 3) == tao_slurm.models.Checkpoint(path="p", epoch=3, metric_value=0.0)
    # CredentialError where tao_sdk.models has it; ours is also a ConfigError.
    assert tao_slurm.models.CredentialError is tao_slurm.CredentialError
    assert issubclass(tao_slurm.models.CredentialError, Exception)


def test_an_sbatch_failure_is_a_runtime_error_as_there():
    assert issubclass(tao_slurm.RemoteCommandError, RuntimeError)


@pytest.fixture
def settings_env(tmp_path, monkeypatch):
    """A clean environment for reading settings (no cluster is asked)."""
    import os

    for k in list(os.environ):
        if k.startswith(("SLURM_", "TAO_SLURM_", "SSH_", "TAO_SDK")) or k in ("NGC_KEY", "HF_TOKEN", "TAO_ENV_FILE"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("SLURM_USER", "alice")
    monkeypatch.setenv("SLURM_HOSTNAME", "login.invalid")
    monkeypatch.setenv("TAO_SLURM_STATE", str(tmp_path / "state.db"))

    def both(**env):
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        return SlurmHandler.from_credentials({}), _native.Engine(str(tmp_path / "state.db"))

    return both


def reference_script(h: SlurmHandler, gpus: int, nodes: int) -> dict:
    """What the TAO SDK's batch script asks for: CPUs per task, wall time, inner timeout (minutes)."""
    script = h._build_slurm_script(
        job_name="j", num_nodes=nodes, num_gpus=gpus, cpus_per_task=h.cpus_per_task, time_hours=h.time_hours,
        account=None, partition=h.partition, log_dir="/l", mail_user=None, image="ubuntu:22.04",
        container_mounts=h.container_mounts, use_timeout=h.use_timeout, timeout_hours=h.timeout_hours,
        use_requeue=h.use_requeue, use_srun=False, command="true", docker_env_vars={}, exclusive=False,
    )  # fmt: skip
    hh, mm = re.search(r"--time=(\d+):(\d+):00", script).groups()
    timeout = re.search(r"^timeout (\d+)m ", script, re.M)
    return {
        "cpus": int(re.search(r"--cpus-per-task=(\d+)", script).group(1)),
        "time_minutes": int(hh) * 60 + int(mm),
        "timeout_minutes": int(timeout.group(1)) if timeout else None,
        "requeue": "#SBATCH --requeue" in script,
    }


def our_plan(engine, gpus: int, nodes: int) -> dict:
    spec = {"image": "ubuntu:22.04", "command": ["true"]}
    spec.update(_native.gpus_from_count(gpus, nodes, 8))
    return json.loads(engine.plan(json.dumps(spec)))


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"SLURM_TIME_HOURS": "2"},
        {"SLURM_TIME_HOURS": "3", "SLURM_TIMEOUT_HOURS": "2.5"},
        {"SLURM_CPUS_PER_TASK": "8"},
        {"SLURM_MAX_CPUS_PER_TASK": "48"},
        {"SLURM_USE_REQUEUE": "n", "SLURM_USE_TIMEOUT": "no"},
    ],
    ids=["defaults", "time-2-alone", "time-and-timeout", "cpus-8", "max-cpus-48", "no-requeue-no-timeout"],
)
def test_the_same_settings_give_the_same_batch_script_resources(settings_env, env):
    handler, engine = settings_env(**env)
    for gpus, nodes in [(1, 1), (2, 1), (4, 1), (8, 1), (8, 2)]:
        ref = reference_script(handler, gpus, nodes)
        plan = our_plan(engine, gpus, nodes)
        assert plan["cpus_per_task"] == ref["cpus"], (env, gpus, nodes, plan, ref)
        assert plan["time_minutes"] == ref["time_minutes"], (env, plan, ref)
        if ref["timeout_minutes"] is None:
            assert not plan["use_timeout"], (env, plan)
        else:
            assert plan["use_timeout"] and plan["timeout_seconds"] == ref["timeout_minutes"] * 60, (env, plan, ref)
        assert plan["requeue"] == ref["requeue"], (env, plan, ref)
        assert {"NCCL_DEBUG", "LOGLEVEL"} <= set(plan["env"]), "exported as the TAO SDK's script does"


def test_slurm_time_hours_2_alone_is_2_hours_with_a_1_8_hour_timeout(settings_env):
    handler, engine = settings_env(SLURM_TIME_HOURS="2")
    assert (handler.time_hours, handler.timeout_hours) == (2.0, 1.8)
    plan = our_plan(engine, 4, 1)
    assert (plan["time_minutes"], plan["timeout_seconds"], plan["cpus_per_task"]) == (120, 1.8 * 3600, 64)


@pytest.mark.parametrize("text", ["y", "yes", "1", "true", "on", "Y", "TRUE", "n", "no", "0", "false", "off"])
def test_booleans_read_as_the_tao_sdk_reads_them(settings_env, text):
    handler, engine = settings_env(SLURM_USE_REQUEUE=text, SLURM_USE_SRUN_LOGS=text)
    mine = json.loads(engine.settings_json())
    assert (mine["use_requeue"], mine["use_srun_logs"]) == (handler.use_requeue, handler.use_srun_logs), text


def test_other_boolean_text_is_an_error_naming_the_variable_where_the_tao_sdk_reads_false(settings_env):
    with pytest.raises(tao_slurm.ConfigError) as e:
        settings_env(SLURM_USE_REQUEUE="maybe")
    assert "SLURM_USE_REQUEUE" in str(e.value) and "y/n" in str(e.value)
    assert SlurmHandler.from_credentials({}).use_requeue is False, "the TAO SDK: silently false"


def test_the_settings_the_tao_sdk_reads_are_read(settings_env):
    handler, engine = settings_env(
        SLURM_NUM_GPUS="2", S3_BUCKET_NAME="data", CLOUD_REGION="us-west-2", ACCESS_KEY="AK", SECRET_KEY="SK",
        NCCL_DEBUG="WARN", LOGLEVEL="DEBUG",
    )  # fmt: skip
    spec = {"image": "ubuntu:22.04", "command": ["true"]}
    plan = json.loads(engine.plan(json.dumps(spec)))
    assert plan["gpus_per_node"] == handler._num_gpus_from_shape(None) == 2
    # The credentials, CLOUD_METADATA (it holds them) and the region reach the container as secrets.
    assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "CLOUD_METADATA", "AWS_DEFAULT_REGION"} <= set(
        plan["secret_names"]
    )
    assert "CLOUD_METADATA" not in plan["env"]


def test_hooks_are_as_lenient_as_the_tao_sdks():
    check = tao_slurm.SlurmSDK._check_hooks
    with pytest.warns(UserWarning, match="on_completed"):
        hooks = check({"on_completed": print, "on_error": None, "on_complete": print})
    assert hooks == {"on_complete": print}, "unknown names warned and dropped, None ignored"
    assert check(None) == {} and check({}) == {}
    with pytest.raises(tao_slurm.JobSpecError) as e:
        check({"on_complete": "print"})
    assert e.value.field == "hooks"
