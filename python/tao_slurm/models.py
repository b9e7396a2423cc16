"""The TAO SDK's data classes (``tao_sdk.models``), with the same fields and ``to_dict()`` keys:
code that imports ``Job``, ``JobStatus``, ``Checkpoint`` or ``CredentialError`` from ``tao_sdk.models``
imports them from here."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Dict

from .errors import CredentialError

__all__ = ["Job", "JobStatus", "Checkpoint", "CredentialError", "LogChunk"]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


@dataclass
class Job:
    """A submitted job, as the TAO SDK's ``Job``.

    ``id`` is tao-slurm's job id (a UUID, also the id the CLI shows), ``backend_job_id`` the Slurm job
    name ``tao-job-<id>``, ``results_dir`` ``lustre://<base>/results/<id>``. ``status`` is updated by
    the SDK's monitor and by every status call made through the same ``SlurmSDK``.
    """

    id: str
    network_arch: str = ""
    action: str = ""
    workspace_id: str = "slurm"
    backend_type: str = "slurm"
    status: str = "Pending"
    created_at: str = field(default_factory=_now)
    backend_job_id: str = ""
    parent_job_id: str = ""
    results_dir: str = ""
    local_results_dir: str = ""
    base_checkpoint: str = ""

    def to_dict(self) -> Dict[str, Any]:
        """The TAO SDK's dictionary form (``job_id`` for ``id``)."""
        return {
            "job_id": self.id,
            "network_arch": self.network_arch,
            "action": self.action,
            "workspace_id": self.workspace_id,
            "backend_type": self.backend_type,
            "status": self.status,
            "created_at": self.created_at,
            "backend_job_id": self.backend_job_id,
            "parent_job_id": self.parent_job_id,
            "results_dir": self.results_dir,
            "local_results_dir": self.local_results_dir,
            "base_checkpoint": self.base_checkpoint,
        }


@dataclass
class JobStatus:
    """A job's status, as the TAO SDK's ``JobStatus``: Pending, Running, Complete, Error, Canceled,
    Paused (and tao-slurm's Pausing and Resuming: ``pause_job``, ``resume_job``), or Unknown for an id
    the state file does not hold."""

    job_id: str
    status: str
    message: str = ""
    updated_at: str = field(default_factory=_now)


@dataclass
class Checkpoint:
    """A model checkpoint produced during training, as the TAO SDK's ``Checkpoint``."""

    path: str
    epoch: int
    metric_name: str = ""
    metric_value: float = 0.0


class LogChunk(str):
    """A piece of a log, as ``follow_logs`` yields it: the text itself, with ``stream`` telling
    which file it came from (``"stdout"`` for main.out, ``"stderr"`` for main.err)."""

    stream: str

    def __new__(cls, text: str, stream: str) -> "LogChunk":
        chunk = super().__new__(cls, text)
        chunk.stream = stream
        return chunk
