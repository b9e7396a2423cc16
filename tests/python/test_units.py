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
