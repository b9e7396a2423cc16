"""The Python side's own translations (no cluster): mounts, state paths, log chunks, errors."""

from __future__ import annotations

import pytest

import tao_slurm
from tao_slurm import LogChunk
from tao_slurm.sdk import _mounts, _state_path


def test_the_tao_sdk_mount_forms():
    assert _mounts(None) == []
    assert _mounts("/data:/data, /models:/m") == ["/data:/data", "/models:/m"]
    assert _mounts(["/a:/b,/c", {"from_path": "/x", "mount_path": "/y"}, {"source": "/s", "read_only": True}]) == [
        "/a:/b",
        "/c",
        "/x:/y",
        "/s:/s:ro",
    ]
    with pytest.raises(tao_slurm.JobSpecError) as e:
        _mounts([{"mount_path": "/y"}])
    assert e.value.field == "mounts"


def test_state_file_never_opens_the_tao_sdks_own_database():
    assert _state_path(None) is None
    assert _state_path("/home/a/tao_session_state.json") == "/home/a/tao_session_state.tao-slurm.db"
    assert _state_path("/srv/state.db") == "/srv/state.db"


def test_log_chunks_are_text_with_their_stream():
    c = LogChunk("line\n", "stderr")
    assert c == "line\n" and c.stream == "stderr" and isinstance(c, str)


def test_error_classes_mirror_the_engine_and_the_tao_sdk():
    assert issubclass(tao_slurm.CredentialError, tao_slurm.ConfigError)
    assert issubclass(tao_slurm.JobSpecError, ValueError)
    assert issubclass(tao_slurm.RemoteError, ConnectionError)
    assert issubclass(tao_slurm.JobNotFoundError, tao_slurm.StateError)
    for cls in (tao_slurm.ConfigError, tao_slurm.JobSpecError, tao_slurm.RemoteError, tao_slurm.RemoteCommandError):
        assert issubclass(cls, tao_slurm.TaoSlurmError)
    assert str(tao_slurm.JobSpecError("bad", field="gpu_count")) == "bad"


def test_the_status_vocabulary_and_error_kinds_come_from_the_engine():
    from tao_slurm import _native, errors, sdk

    # One terminal set: the engine's, not a copy kept in Python.
    assert sdk.TERMINAL_STATUSES == frozenset(_native.TERMINAL_STATUSES) == {"Complete", "Error", "Canceled"}
    assert set(_native.TERMINAL_STATUSES) < set(_native.STATUSES)
    # Each kind of engine error raises the class the engine names, with the CLI's exit code for it.
    kinds = {kind: (cls, code) for kind, cls, code in _native.ERROR_KINDS}
    assert {"invalid", "not_found", "unreachable", "remote_command", "state"} <= set(kinds)
    for kind, (cls, code) in kinds.items():
        assert issubclass(getattr(errors, cls), errors.TaoSlurmError), kind
        assert getattr(errors, cls).exit_code == code, (kind, cls, code)


def test_gpu_count_is_packed_by_the_engines_rule():
    from tao_slurm import _native

    assert _native.gpus_from_count(2, 2, 8) == {"gpus": 2, "nodes": 2}
    assert _native.gpus_from_count(16, 1, 8) == {"total_gpus": 16}
    with pytest.raises(tao_slurm.JobSpecError) as e:
        _native.gpus_from_count(12, 1, 8)
    assert e.value.field == "gpu_count" and "use 16" in str(e.value) and e.value.exit_code == 2


def test_every_job_field_is_a_keyword_of_create_job_or_create_sweep():
    """The engine's one list of each door's names (spec::doors): every job field the Python door
    offers is a keyword, by the TAO SDK's name where it has one and by its own name otherwise."""
    import inspect

    from tao_slurm import SlurmSDK, _native

    offered = _native.job_keywords()
    names = {keyword for _, keyword in offered}
    assert {"gpu_count", "num_nodes", "env_vars", "qos", "constraint", "gpu_watch", "cosmos_rl"} <= names
    assert len(offered) > 40, offered
    job = inspect.signature(SlurmSDK.create_job).parameters
    sweep = inspect.signature(SlurmSDK.create_sweep).parameters
    # A sweep's variants are create_sweep's (`grid`); its variants are one node each (`num_nodes`).
    assert sorted(names - set(job)) == ["grid"], sorted(names - set(job))
    assert sorted(names - set(sweep)) == ["num_nodes"], sorted(names - set(sweep))
    assert job["qos"].kind is inspect.Parameter.KEYWORD_ONLY and job["qos"].default is None
    assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in job.values()), "each field is listed by name"
