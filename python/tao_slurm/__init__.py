"""tao_slurm: run containerised GPU jobs (NVIDIA TAO, any Pyxis/Enroot image) on Slurm over SSH.

The TAO SDK's Slurm API over the tao-slurm engine: switch by changing one import::

    from tao_slurm import SlurmSDK        # was: from tao_sdk.platforms.slurm import SlurmSDK

See :class:`SlurmSDK`.
"""

from ._native import __version__
from .errors import (
    ConfigError,
    CredentialError,
    JobNotFoundError,
    JobSpecError,
    RemoteCommandError,
    RemoteError,
    StateError,
    TaoSlurmError,
)
from .models import Checkpoint, Job, JobStatus, LogChunk
from .sdk import EPOCH_PATTERN, TERMINAL_STATUSES, SlurmSDK

__all__ = [
    "SlurmSDK",
    "Job",
    "JobStatus",
    "Checkpoint",
    "LogChunk",
    "EPOCH_PATTERN",
    "TERMINAL_STATUSES",
    "TaoSlurmError",
    "ConfigError",
    "CredentialError",
    "JobSpecError",
    "RemoteError",
    "RemoteCommandError",
    "StateError",
    "JobNotFoundError",
    "__version__",
]
