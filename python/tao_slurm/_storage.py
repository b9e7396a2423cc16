"""The TAO SDK's storage calls of ``SlurmSDK``: ``check_path``, ``list_path``,
``get_checkpoints``, ``read_job_result_file``, ``delete_job_artifacts``. ``lustre://`` goes to the cluster (one round trip each, where the TAO SDK's
``list_path`` cannot list Lustre at all); ``s3://`` uses fsspec/s3fs when the ``s3`` extra is
installed (``pip install tao-slurm[s3]``), with the TAO SDK's settings ``ACCESS_KEY``, ``SECRET_KEY``
and ``S3_ENDPOINT_URL``."""

from __future__ import annotations

import json
import logging
import os
from typing import Any, List

from .errors import JobNotFoundError, JobSpecError

logger = logging.getLogger("tao_slurm")


def _s3_filesystem() -> Any:
    """fsspec's S3 filesystem with the TAO SDK's credentials (its ``_get_fs``)."""
    try:
        import fsspec  # noqa: PLC0415 - the optional extra
    except ImportError as e:
        raise ModuleNotFoundError(
            "s3:// paths need fsspec and s3fs: pip install 'tao-slurm[s3]'", name="fsspec"
        ) from e
    options: dict = {}
    for setting, option in (("ACCESS_KEY", "key"), ("SECRET_KEY", "secret")):
        if os.environ.get(setting):
            options[option] = os.environ[setting]
    if os.environ.get("S3_ENDPOINT_URL"):
        options["client_kwargs"] = {"endpoint_url": os.environ["S3_ENDPOINT_URL"]}
    return fsspec.filesystem("s3", **options)


def _scheme(uri: str) -> str:
    if not isinstance(uri, str) or "://" not in uri:
        raise JobSpecError(f"{uri!r} is not a lustre:// or s3:// URI", field="remote_path")
    scheme = uri.split("://", 1)[0]
    if scheme not in ("lustre", "s3"):
        raise JobSpecError(f"{uri!r}: only lustre:// and s3:// paths can be checked or listed", field="remote_path")
    return scheme


class StorageCalls:
    """Mixed into ``SlurmSDK`` (which provides ``_engine``)."""

    _engine: Any

    def check_path(self, remote_path: str) -> bool:
        """Whether ``lustre:///path`` (on the cluster, one round trip) or ``s3://bucket/key`` exists.

        Raises:
            JobSpecError: not a lustre:// or s3:// URI (the TAO SDK answers False).
            RemoteError: the cluster could not be asked (the TAO SDK answers False).
        """
        if _scheme(remote_path) == "s3":
            return bool(_s3_filesystem().exists(remote_path.split("://", 1)[1]))
        (_, exists, refused), = self._engine.check_paths([remote_path])
        if refused is not None:
            raise JobSpecError(refused, field="remote_path")
        return bool(exists)

    def list_path(self, remote_path: str) -> List[str]:
        """The names in a directory, sorted: ``lustre:///dir`` on the cluster (one round trip) or
        ``s3://bucket/prefix``. [] when nothing is there.

        Raises:
            JobSpecError: not a lustre:// or s3:// URI, or a lustre:// path that is a file.
        """
        if _scheme(remote_path) == "s3":
            path = remote_path.split("://", 1)[1].rstrip("/")
            return sorted(e.rstrip("/").split("/")[-1] for e in _s3_filesystem().ls(path))
        entries = self._engine.list_path(remote_path)
        return [] if entries is None else [e["name"] for e in json.loads(entries)]

    def get_checkpoints(self, job_id: str) -> List[str]:
        """The checkpoints in the job's results directory (the job's patterns; TAO's by default:
        ``.pth``, ``.pt``, ``.ckpt``, ``.tlt``, ``.hdf5``, ``.engine``, ``.onnx``, ``.trt``,
        ``.safetensors`` files and ``checkpoint-*`` directories, up to four levels down), as paths
        relative to it, newest last; one round trip. [] for an unknown job or one
        with none (the TAO SDK always answers [] for its Lustre results directories)."""
        try:
            return [c["path"] for c in json.loads(self._engine.checkpoints(job_id))]
        except JobNotFoundError:
            return []

    def read_job_result_file(self, job_id: str, relative_path: str, max_bytes: int = 8 << 20) -> str:
        """The text of one file of the job's results directory (``relative_path`` relative to it, as
        :meth:`get_checkpoints` names files), read on the cluster over the existing connection (one
        round trip): TAO's AutoML runner reads ``best_score.json`` and ``metrics.json`` this way, so
        its metrics never need the results directory mounted where it runs. "" when the file, the
        job or its results directory does not exist (yet). Invalid UTF-8 is replaced.

        Raises:
            JobSpecError (``field`` ``relative_path``): a path outside the results directory (``..``,
                absolute), a symlink (the file or a directory on its way: a job can point one
                anywhere), a FIFO or directory, or a file over ``max_bytes`` (8 MiB by default; 32 MiB at most).
        """
        try:
            data = self._engine.read_result_file(job_id, str(relative_path), int(max_bytes))
        except JobNotFoundError:
            return ""
        return "" if data is None else bytes(data).decode("utf-8", errors="replace")

    def delete_job_artifacts(self, job_id: str) -> bool:
        """Remove a finished job's results directory (``<base>/results/<id>``; never through a
        symlink). True when it was removed; False, with a warning, for an unknown job, one that has
        not ended, or a directory already gone, as the TAO SDK answers."""
        try:
            return bool(self._engine.delete_job_results(job_id))
        except (JobNotFoundError, JobSpecError) as e:
            logger.warning("Could not delete artifacts for job %s: %s", job_id, e)
            return False
