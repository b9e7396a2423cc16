"""Exceptions of tao_slurm: one class per class of the engine's error, with the engine's message
unchanged. ``exit_code`` is the exit code the ``tao-slurm`` CLI gives the same failure.

``CredentialError`` keeps the TAO SDK's name for missing ``SLURM_USER``/``SLURM_HOSTNAME``
(or ``SSH_USER``/``SSH_HOST``), so ``except CredentialError`` works as before.
"""

from __future__ import annotations

from typing import Optional

__all__ = [
    "TaoSlurmError",
    "ConfigError",
    "CredentialError",
    "JobSpecError",
    "RemoteError",
    "RemoteCommandError",
    "StateError",
    "JobNotFoundError",
]


class TaoSlurmError(Exception):
    """Base class of every tao_slurm error."""

    exit_code: Optional[int] = None


class ConfigError(TaoSlurmError):
    """A setting is invalid (its name is in the message), or a required one is missing."""

    exit_code = 3


class CredentialError(ConfigError):
    """SLURM_USER and SLURM_HOSTNAME (or the TAO SDK's SSH_USER and SSH_HOST) are not set."""


class JobSpecError(TaoSlurmError, ValueError):
    """A job argument is invalid; ``field`` names it. Nothing was staged or submitted."""

    exit_code = 2
    field: Optional[str] = None

    def __init__(self, message: str, field: Optional[str] = None):
        super().__init__(message)
        if field is not None:
            self.field = field


class RemoteError(TaoSlurmError, ConnectionError):
    """No login host could be reached, a host key changed, the SSH key is unusable, or the
    connection dropped while a command ran (its outcome is then unknown)."""

    exit_code = 4


class RemoteCommandError(TaoSlurmError, RuntimeError):
    """A command ran on the cluster and failed (sbatch refused the job, a cancel was not confirmed...).
    Also a ``RuntimeError``, what the TAO SDK raises when sbatch fails."""

    exit_code = 5


class StateError(TaoSlurmError):
    """The local state file cannot be opened, read or written."""

    exit_code = 6


class JobNotFoundError(StateError, LookupError):
    """No job with this id (or an id prefix that matches several) in the state file."""
