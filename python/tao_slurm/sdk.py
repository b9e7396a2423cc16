"""``SlurmSDK``: the TAO SDK's Slurm API over the tao-slurm engine.

Switch from NVIDIA's TAO SDK by changing one import::

    # from tao_sdk.platforms.slurm import SlurmSDK
    from tao_slurm import SlurmSDK

    sdk = SlurmSDK()  # SLURM_USER/SSH_USER, SLURM_HOSTNAME/SSH_HOST, ... from the environment
    job = sdk.create_job(image="nvcr.io/nvidia/tao/tao-toolkit:6.26.3-pyt",
                         command="torchrun --nnodes=$WORLD_SIZE --node-rank=$NODE_RANK ... train.py",
                         gpu_count=8, num_nodes=4)
    print(sdk.wait(job.id))

Every remote operation is one engine call with the GIL released: one persistent SSH login per
login host for the whole process (the TAO SDK opens one per command), a refresh of every job in one
round trip, a submission in two. Calls are safe from several threads.
"""

from __future__ import annotations

import difflib
import inspect
import json
import logging
import os
import re
import threading
import time
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Set, Tuple, Union

from . import _native
from ._storage import StorageCalls
from .errors import JobNotFoundError, JobSpecError, RemoteCommandError
from .models import Job, JobStatus, LogChunk

__all__ = ["SlurmSDK", "EPOCH_PATTERN", "TERMINAL_STATUSES"]

logger = logging.getLogger("tao_slurm")

# The engine's terminal set, not a copy of it.
TERMINAL_STATUSES = frozenset(_native.TERMINAL_STATUSES)
#: The TAO SDK's epoch pattern, read in the last 20 log lines when status.json has no epoch.
EPOCH_PATTERN = re.compile(r"[Ee]poch\s+(\d+)(?:/(\d+))?")
HOOK_NAMES = ("on_complete", "on_error", "on_epoch_milestone")
# The job's fields as keywords (the engine's one list of what each door names differently or leaves
# out): the TAO SDK's own keywords (``gpu_count``, ``num_nodes``, ``env_vars``, ...), and every
# other field by its own name.
_JOB_KEYWORDS: Tuple[Tuple[str, str], ...] = tuple(_native.job_keywords())
_ALL_KEYWORDS = sorted({keyword for _, keyword in _JOB_KEYWORDS})
_OWN_KEYWORDS = frozenset(f for f, keyword in _JOB_KEYWORDS if f == keyword and f not in ("image", "command"))

Hooks = Mapping[str, Callable[..., Any]]
Mount = Union[str, Mapping[str, Any]]


def _iso(seconds: Optional[int]) -> str:
    if not seconds:
        return ""
    return datetime.fromtimestamp(int(seconds), timezone.utc).isoformat()


def _state_path(state_file: Union[str, "os.PathLike[str]", None]) -> Optional[str]:
    """tao-slurm's state file for the TAO SDK's ``state_file`` argument. The TAO SDK keeps a JSON
    file and a SQLite file of its own schema beside it (``x.json`` -> ``x.db``); tao-slurm keeps its
    own SQLite file, ``x.tao-slurm.db``, so the two never open each other's. Any other path is used
    as it is."""
    if state_file is None:
        return None
    path = os.fspath(state_file)
    if path.endswith(".json"):
        return path[: -len(".json")] + ".tao-slurm.db"
    return path


def _mounts(mounts: Union[None, str, Sequence[Mount]]) -> List[str]:
    """The TAO SDK's mount forms (``"src:dst,src2:dst2"``, a list of such strings, or a list of
    dicts with ``from_path|source|src`` and ``mount_path|path|target``) as ``src[:dst[:ro]]``."""
    if mounts is None:
        return []
    if isinstance(mounts, str):
        return [m.strip() for m in mounts.split(",") if m.strip()]
    out: List[str] = []
    for m in mounts:
        if isinstance(m, str):
            out.extend(x.strip() for x in m.split(",") if x.strip())
            continue
        src = m.get("from_path") or m.get("source") or m.get("src")
        dst = m.get("mount_path") or m.get("path") or m.get("target") or src
        if not src:
            raise JobSpecError(f"mount {dict(m)!r} has no from_path, source or src", field="mounts")
        ro = m.get("read_only") or m.get("readonly")
        out.append(f"{src}:{dst}" + (":ro" if ro else ""))
    return out


@dataclass
class _Watch:
    """A job with hooks, followed by the monitor thread (the only caller of its hooks)."""

    job: Job
    hooks: Dict[str, Callable[..., Any]]
    milestone: int = 0
    fired: Set[str] = field(default_factory=set)
    done: threading.Event = field(default_factory=threading.Event)


class SlurmSDK(StorageCalls):
    """Run and follow jobs on a Slurm cluster over SSH, with the TAO SDK's API.

    Settings come from the environment and ``~/.config/tao/.env`` (or ``TAO_ENV_FILE``), under
    tao-slurm's names or the TAO SDK's (``SSH_USER``, ``SSH_HOST``, ``SLURM_USE_SQSH``,
    ``SLURM_CONVERSION_PARTITION``, ``TAO_SDK_STATE_DIR``, ...); where both are set, tao-slurm's wins.

    A background monitor thread refreshes every active job of the state file each ``poll_interval``
    seconds (one round trip for all of them), performs due retries of infrastructure failures, and
    calls the hooks given to :meth:`create_job` or :meth:`watch`. A new ``SlurmSDK`` on the same state
    file (another process, later) resumes following and retrying every job left active.

    Args:
        poll_interval: seconds between the monitor's refreshes.
        epoch_milestone_interval: ``on_epoch_milestone`` is called at every multiple of it.
        state_file: the session's state; ``x.json`` (the TAO SDK's form) keeps tao-slurm's state in
            ``x.tao-slurm.db``, any other path is the state file itself. Default: ``TAO_SLURM_STATE``,
            else ``$TAO_SDK_STATE_DIR/tao-slurm-state.db``, else tao-slurm's usual state file (shared
            with the CLI, so ``tao-slurm status`` shows these jobs).

    Raises:
        CredentialError: SLURM_USER/SLURM_HOSTNAME (or SSH_USER/SSH_HOST) are not set.
        ConfigError: a setting is invalid.
    """

    def __init__(
        self,
        poll_interval: float = 30,
        epoch_milestone_interval: int = 10,
        state_file: Union[str, "os.PathLike[str]", None] = None,
    ):
        self._engine = _native.Engine(_state_path(state_file))
        #: The TAO SDK's workspace of every Slurm job (``Job.workspace_id``); TAO's AutoML runner
        #: reads it as its default ``workspace_id``.
        self._workspace_id = "slurm"
        self._settings: Dict[str, Any] = json.loads(self._engine.settings_json())
        self._poll_interval = max(float(poll_interval), 0.1)
        self._milestone_every = max(int(epoch_milestone_interval), 1)
        self._lock = threading.Lock()
        self._watched: Dict[str, _Watch] = {}
        self._jobs: Dict[str, Job] = {}
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._monitor, name="tao-slurm-monitor", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        return f"SlurmSDK(state={self._settings['state_path']!r}, poll_interval={self._poll_interval})"

    # -- submission -------------------------------------------------------------------------------

    def create_job(
        self,
        image: str,
        command: Union[str, Sequence[str]],
        gpu_count: int = 1,
        env_vars: Optional[Mapping[str, Any]] = None,
        hooks: Optional[Hooks] = None,
        num_nodes: int = 1,
        partition: Optional[str] = None,
        account: Optional[str] = None,
        mounts: Union[None, str, Sequence[Mount]] = None,
        *,
        inputs: Optional[Mapping[str, str]] = None,
        specs: Optional[Mapping[str, Any]] = None,
        secret_env: Union[None, Sequence[str], Mapping[str, str]] = None,
        time_hours: Optional[float] = None,
        timeout_hours: Optional[float] = None,
        exclusive: Optional[bool] = None,
        name: Optional[str] = None,
        sbatch_options: Optional[Mapping[str, str]] = None,
        after: Optional[Sequence[str]] = None,
        **job_fields: Any,
    ) -> Job:
        """Validate, stage and submit a job; returns it Pending (or Running).

        Args:
            image: container image (``nvcr.io/...:tag``, ``registry#image:tag``, a ``.sqsh`` path).
            command: one shell string, run by bash under ``set -euo pipefail`` as the TAO SDK runs it
                (or a list of words, run as they are).
            gpu_count: GPUs **per node** up to a node's maximum (``SLURM_MAX_GPUS_PER_NODE``, 8); above
                it, a **total** packed into full nodes (16 is 2 nodes x 8). A total that does not fill
                nodes evenly (12) is refused with the values that do, where the TAO SDK silently
                allocates more (12 becomes 16). 0: a CPU-only job.
            env_vars: variables exported in the container. The credentials the TAO SDK forwards
                (``HF_TOKEN``, ``NGC_KEY``, ``ACCESS_KEY``/``SECRET_KEY``/``S3_ENDPOINT_URL`` as
                ``AWS_*``) are forwarded as secrets from the settings unless set here.
            hooks: ``on_complete(job)``, ``on_error(job)``, ``on_epoch_milestone(job, epoch, total)``,
                each called once (a milestone once per multiple of ``epoch_milestone_interval``) from
                the monitor thread.
            num_nodes: nodes; with ``gpu_count`` above a node's maximum it may be left at 1.
            partition, account: override ``SLURM_PARTITION``/``SLURM_ACCOUNT``.
            mounts: added to ``SLURM_CONTAINER_MOUNTS`` (``/lustre``): ``"src:dst,..."``, a list of
                such strings, or dicts with ``from_path|source|src`` and ``mount_path|path|target``.
            inputs: spec key -> URI (``lustre:///path`` checked with ``test -e`` before anything is
                staged; ``s3://``, ``hf_model://``, ``hf_dataset://``, ``ngc://`` fetched in the job).
            specs: the job's specs, staged as its specs file (``$TAO_SPECS_FILE``, inputs laid over
                them); ``{config_path}`` in ``command`` becomes that file's path.
            secret_env: names of secret variables (values from the environment), or name -> value.
                Values reach only a mode-600 file on the cluster, never a script, log or repr.
            time_hours, timeout_hours: wall time and inner timeout (exit 124 requeues the job).
            exclusive: whole nodes (default: when the job takes all of a node's GPUs).
            name: a label shown by ``list_jobs`` and the CLI.
            sbatch_options: extra ``#SBATCH`` options from an allow-list (``begin``, ``dependency``,
                ``mail-type``, ``mem-per-gpu``, ...), as ``{"begin": "now+3600"}``.
            after: jobs this one runs after, ``"JOB[:ok|:notok|:any]"`` (ids or prefixes; ``ok``, the
                default, waits for success). Kept across their retries; a parent that can no longer
                satisfy it cancels this job ("dependency <id> ended <status>").
            Every other field of a job is a keyword by its own name, as in a job file
            (``docs/commands.md``): ``qos``, ``constraint``, ``memory``, ``exclude``,
            ``reservation``, ``cpus_per_task``, ``requeue``, ``gpu_watch``, ``cosmos_rl``, ...
            (``inspect.signature`` lists them all). The engine checks each and names it when wrong.

        Raises:
            JobSpecError: an argument is invalid (``field`` names it); nothing was submitted.
            CredentialError, ConfigError, RemoteError, RemoteCommandError, StateError.
        """
        hook_map = self._check_hooks(hooks)
        named = dict(
            partition=partition, account=account, mounts=mounts, inputs=inputs, specs=specs,
            secret_env=secret_env, time_hours=time_hours, timeout_hours=timeout_hours,
            exclusive=exclusive, name=name, sbatch_options=sbatch_options, after=after,
        )
        spec, secret_values = self._job_spec(image, command, gpu_count, num_nodes, env_vars, named, job_fields)
        view = json.loads(self._engine.create_job(json.dumps(spec), secret_values))
        for text in view.pop("warnings", []):
            warnings.warn(text, stacklevel=2)
        job = self._job_from_view(view)
        if hook_map:
            self._watch(job, hook_map)
        return job

    def create_sweep(
        self,
        image: str,
        command: Union[str, Sequence[str]],
        gpu_count: int = 1,
        env_vars: Optional[Mapping[str, Any]] = None,
        *,
        grid: Optional[Mapping[str, Sequence[Any]]] = None,
        arg_grid: Optional[Mapping[str, Sequence[Any]]] = None,
        variants: Optional[Sequence[Mapping[str, Any]]] = None,
        max_concurrent: Optional[int] = None,
        partition: Optional[str] = None,
        account: Optional[str] = None,
        time_hours: Optional[float] = None,
        name: Optional[str] = None,
        sbatch_options: Optional[Mapping[str, str]] = None,
        secret_env: Union[None, Sequence[str], Mapping[str, str]] = None,
        **job_fields: Any,
    ) -> Dict[str, Any]:
        """Submit a sweep: the job once per variant, every variant a job of its own (own id, status,
        logs, retries), all of them one Slurm job array submitted in one round trip.

        Args:
            grid: environment values, ``{"LR": [0.1, 0.01], "BS": [32, 64]}``: every combination.
            arg_grid: command arguments, ``{"--seed": [1, 2]}`` appends ``--seed 1`` (an option
                ending with ``=`` appends ``--seed=1``).
            variants: explicit variants, ``[{"env": {...}, "args": [...]}]``, after the grid's.
            max_concurrent: at most this many variants run at once.
            The other arguments, and every other field of a job by its own name, are
            ``create_job``'s. Each task sees ``TAO_SWEEP_ID``,
            ``TAO_SWEEP_INDEX`` and ``TAO_SWEEP_VALUES``.

        Returns:
            ``{"sweep_id": ..., "slurm_array_id": ..., "jobs": [Job, ...]}`` (index order); the sweep
            id is accepted by ``refresh`` and ``cancel_sweep`` for all its variants.
        """
        named = dict(
            partition=partition, account=account, time_hours=time_hours, name=name,
            sbatch_options=sbatch_options, secret_env=secret_env,
        )
        spec, secret_values = self._job_spec(image, command, gpu_count, 1, env_vars, named, job_fields)
        sweep: Dict[str, Any] = {}
        if grid:
            sweep["grid"] = {str(k): [str(v) for v in vs] for k, vs in grid.items()}
        if arg_grid:
            sweep["arg_grid"] = {str(k): [str(v) for v in vs] for k, vs in arg_grid.items()}
        if variants:
            sweep["variants"] = [
                {"env": {str(k): str(v) for k, v in (x.get("env") or {}).items()}, "args": [str(a) for a in x.get("args") or []]}
                for x in variants
            ]
        if max_concurrent is not None:
            sweep["max_concurrent"] = int(max_concurrent)
        spec["sweep"] = sweep
        out = json.loads(self._engine.create_sweep(json.dumps(spec), secret_values))
        for text in out.get("warnings", []):
            warnings.warn(text, stacklevel=2)
        return {
            "sweep_id": out["sweep_id"],
            "slurm_array_id": out["slurm_array_id"],
            "jobs": [self._job_from_view(v) for v in out["jobs"]],
        }

    def preview_job(
        self,
        image: str,
        command: Union[str, Sequence[str]],
        gpu_count: int = 1,
        env_vars: Optional[Mapping[str, Any]] = None,
        num_nodes: int = 1,
        *,
        online: bool = True,
        **job_fields: Any,
    ) -> Dict[str, Any]:
        """What ``create_job`` with these arguments would submit, without submitting or recording
        anything: the engine's one preview, as the CLI's ``submit --dry-run`` and MCP's ``dry_run``
        show it. ``online`` (default): a submit's checks with the cluster too (the plan fitted to its
        partition, the inputs found, the secret values found); else offline, with no connection.

        Returns ``{"job_id", "plan", "files": [{"path", "contents"}], "warnings"}`` (the batch script
        is the last file). Raises as ``create_job`` would, before anything is submitted.
        """
        spec, secret_values = self._job_spec(image, command, gpu_count, num_nodes, env_vars, {}, job_fields)
        out = json.loads(self._engine.preview(json.dumps(spec), secret_values, bool(online)))
        return {key: out[key] for key in ("job_id", "plan", "files", "warnings")}

    def _job_spec(
        self,
        image: str,
        command: Union[str, Sequence[str]],
        gpu_count: int,
        num_nodes: int,
        env_vars: Optional[Mapping[str, Any]],
        named: Mapping[str, Any],
        job_fields: Mapping[str, Any],
    ) -> Tuple[Dict[str, Any], Dict[str, str]]:
        """The job's spec (the engine's JSON) and its secret values, from the TAO SDK's keywords and
        the job's other fields by name. A name that is no job field is refused here, naming it."""
        for key in job_fields:
            if key not in _OWN_KEYWORDS:
                near = difflib.get_close_matches(key, _ALL_KEYWORDS, n=1)
                hint = f": did you mean {near[0]}?" if near else ""
                raise JobSpecError(f"{key} is not a field of a job{hint}", field=key)
        spec: Dict[str, Any] = {"image": image}
        if isinstance(command, str):
            spec["command"] = ["set -euo pipefail\n" + command]
            spec["shell"] = True
        else:
            spec["command"] = [str(w) for w in command]
        spec.update(self._resources(gpu_count, num_nodes))
        if env_vars:
            spec["env"] = {str(k): str(v) for k, v in env_vars.items()}
        secret_values: Dict[str, str] = {}
        for key, value in list(named.items()) + list(job_fields.items()):
            if value is None:
                continue
            if key == "mounts":
                value = _mounts(value)
            elif key == "secret_env":
                if isinstance(value, Mapping):
                    secret_values = {str(k): str(v) for k, v in value.items()}
                    value = list(secret_values)
                else:
                    value = [str(n) for n in value]
            elif key in ("time_hours", "timeout_hours", "total_time_hours"):
                value = float(value)
            elif key in ("inputs", "sbatch_options"):
                value = {str(k): str(v) for k, v in value.items()}
            elif key == "specs":
                value = dict(value)
            elif key in ("after", "checkpoint_patterns", "dataset_files", "notify"):
                value = [str(v) for v in ([value] if isinstance(value, str) else value)]
            # An empty collection is no value, as the TAO SDK's keywords take it; empty specs are specs.
            if value or value == 0 or key == "specs":
                spec[key] = value
        return spec, secret_values

    def _resources(self, gpu_count: int, num_nodes: int) -> Dict[str, int]:
        """The TAO SDK's ``gpu_count`` as tao-slurm's ``gpus`` (per node) or ``total_gpus``."""
        if gpu_count is None or num_nodes is None:
            raise JobSpecError("gpu_count and num_nodes must be numbers", field="gpu_count")
        per_node = int(self._settings["max_gpus_per_node"])
        # The one packing rule of every door (the engine's), with its messages.
        return dict(_native.gpus_from_count(int(gpu_count), int(num_nodes), per_node))

    # -- status -----------------------------------------------------------------------------------

    def get_job_status(self, job_id: str) -> JobStatus:
        """Refresh the job (one round trip; none once it is terminal) and return its status.
        An unknown id gives status ``Unknown``, as in the TAO SDK."""
        try:
            view = json.loads(self._engine.refresh([job_id]))[0]
        except JobNotFoundError:
            return JobStatus(job_id=job_id, status="Unknown", message="Job not found")
        self._update_job(view)
        return self._status_from_view(view)

    def refresh(self, job_ids: Optional[Sequence[str]] = None) -> List[JobStatus]:
        """Refresh the given jobs, or every active job of the state file, in one round trip (the
        TAO SDK has no such call: it asks once per job), performing due retries; returns their
        statuses (with no ids, the active jobs and those that just ended)."""
        views = json.loads(self._engine.refresh([str(i) for i in job_ids or []]))
        for view in views:
            self._update_job(view)
        return [self._status_from_view(v) for v in views]

    def get_job(self, job_id: str) -> Optional[Dict[str, Any]]:
        """The job's record (the TAO SDK's keys and tao-slurm's), or None. No remote call."""
        try:
            view = json.loads(self._engine.stored([job_id]))[0]
        except JobNotFoundError:
            return None
        return self._record(view)

    def list_jobs(self, status: Optional[str] = None) -> List[Dict[str, Any]]:
        """Every job of the state file, newest first, optionally only those with ``status``. No
        remote call (the monitor keeps active jobs fresh)."""
        views = json.loads(self._engine.list(False))
        return [self._record(v) for v in views if status is None or v["status"] == status]

    def get_job_results_dir(self, job_id: str) -> str:
        """``lustre://<base>/results/<id>``, or "" for an unknown id."""
        record = self.get_job(job_id)
        return record["results_dir"] if record else ""

    def get_failure_analysis(self, job_id: str) -> Optional[Dict[str, Any]]:
        """Why the job failed, with the TAO SDK's keys: ``reason`` (``infrastructure_failure_pattern``
        when a log line matched an infrastructure pattern, as there; else tao-slurm's class: ``user``,
        ``timeout``, ``cancelled``, ``preempted``, ``infra``), ``pattern`` (the pattern matched, or
        None), ``match`` (the line that decided it) and ``retriable``; plus tao-slurm's
        ``failure_class``, ``evidence``, ``exit_code``, ``slurm_state``, ``attempts``, ``retries`` and
        ``message``. From the recorded classification of each attempt (no remote call). None when the
        job has not failed or is unknown (the TAO SDK answers None unless its logs match a pattern,
        even for a job that failed for another reason)."""
        record = self.get_job(job_id)
        if record is None:
            return None
        attempts = json.loads(self._engine.attempts(job_id))
        failed = [a for a in attempts if a.get("failure_class")]
        if not failed and record["status"] != "Error":
            return None
        last = failed[-1] if failed else (attempts[-1] if attempts else {})
        evidence = list(last.get("evidence") or [])
        failure_class = last.get("failure_class") or "error"
        pattern = next((p for p in map(_native.infra_pattern_of, evidence) if p), None)
        infra = failure_class == "infra"
        return {
            "reason": "infrastructure_failure_pattern" if infra and pattern else failure_class,
            "pattern": pattern if infra else None,
            "match": evidence[0] if evidence else "",
            "retriable": infra,
            "failure_class": failure_class,
            "evidence": evidence,
            "exit_code": last.get("exit_code"),
            "slurm_state": last.get("state"),
            "attempts": len(attempts),
            "retries": record["retries"],
            "message": record["message"],
        }

    # -- logs -------------------------------------------------------------------------------------

    def get_job_logs(self, job_id: str, tail: Optional[int] = None) -> str:
        """main.out, a newline, main.err, as the TAO SDK returns them (each file's last ``tail``
        lines when given; one round trip). "" for an unknown job or one not on Slurm yet."""
        record = self.get_job(job_id)
        if record is None or not record.get("slurm_job_id"):
            return ""
        out, err = self._engine.logs(job_id, None if tail is None else int(tail))
        return out + "\n" + err

    def follow_logs(self, job_id: str, poll_interval: Optional[float] = None) -> Iterator[LogChunk]:
        """Yield the job's log as it grows, until the job is terminal and every byte was read.

        Each item is a :class:`LogChunk`: a ``str`` of new text, with ``.stream`` ``"stdout"``
        (main.out) or ``"stderr"`` (main.err). One round trip per poll, the status refresh
        included; no byte is read twice. Stop early by leaving the loop."""
        interval = self._wait_interval() if poll_interval is None else max(float(poll_interval), 0.1)
        offsets: Tuple[int, int] = (0, 0)
        while True:
            view_json, chunks, finished, caught_up, offsets = self._engine.follow_poll(job_id, offsets)
            self._update_job(json.loads(view_json))
            for stream, text in chunks:
                if text:
                    yield LogChunk(text, stream)
            if finished:
                return
            if caught_up:
                time.sleep(interval)

    def iter_job_log_chunks(self, job_id: str) -> Iterator[str]:
        """The job's whole log in bounded pieces (at most 8 MiB each, main.out's and main.err's as
        ``follow_logs`` gives them), what NVIDIA's AutoML runner scans at a trial's end instead of one
        ``get_job_logs`` capped at the engine's limit. Called for a finished job it ends once every
        byte was read; for a running one it follows the log until the job ends."""
        for chunk in self.follow_logs(job_id, poll_interval=0.5):
            yield str(chunk)

    # -- control ----------------------------------------------------------------------------------

    def cancel_job(self, job_id: str) -> bool:
        """Cancel the job (idempotent: a finished job counts as cancelled). True once Slurm has
        cancelled it or it had ended; False for an unknown id or a cancel Slurm did not confirm."""
        try:
            view = json.loads(self._engine.cancel([job_id]))[0]
        except JobNotFoundError:
            return False
        except RemoteCommandError as e:
            logger.warning("cancel of job %s not confirmed: %s", job_id, e)
            return False
        self._update_job(view)
        self._wake.set()
        return view["status"] in TERMINAL_STATUSES

    def retry_job(self, job_id: str) -> JobStatus:
        """Run a job that ended Error or Canceled again, in the same results directory: its next
        attempt gets the newest checkpoint there in ``TAO_RESUME_CHECKPOINT`` (and TAO's
        ``train.resume_training_checkpoint_path`` in its specs). Idempotent: a job already running
        again is answered as it is, and two callers at once make one Slurm job.

        Raises:
            JobNotFoundError: no such job; JobSpecError: a job that completed, or had secrets.
        """
        view = json.loads(self._engine.retry(job_id))
        self._update_job(view)
        self._wake.set()
        return self._status_from_view(view)

    def pause_job(self, job_id: str, graceful: bool = False) -> JobStatus:
        """Pause a job (TAO's ``pause_job``): its Slurm job is cancelled and its allocation released,
        status ``Paused``. ``graceful``: a running job first gets the checkpoint signal (USR2, as
        before a time limit) and is ``Pausing`` until it ends or its checkpoint grace passes. Its
        dependants wait. Idempotent: a paused job is answered as it is.

        Raises:
            JobNotFoundError: no such job; JobSpecError: a job that ended.
        """
        view = json.loads(self._engine.pause(job_id, graceful))
        self._update_job(view)
        self._wake.set()
        return self._status_from_view(view)

    def resume_job(
        self, job_id: str, specs: Optional[Mapping[str, Any]] = None, parent_job_id: Optional[str] = None
    ) -> JobStatus:
        """Resume a paused job (TAO's ``resume_job``): a new attempt from its newest checkpoint
        (``TAO_RESUME_CHECKPOINT``, and TAO's ``train.resume_training_checkpoint_path`` in its specs),
        with ``specs`` replacing its own when given and not empty; ``Resuming`` until Slurm runs it.
        Idempotent: two callers at once make one Slurm job. ``parent_job_id`` is TAO's and is not used
        (the job's dependencies stay as they were).

        Raises:
            JobNotFoundError: no such job; JobSpecError: a job that ended or is still pausing.
        """
        del parent_job_id
        view = json.loads(self._engine.resume(job_id, None if specs is None else json.dumps(dict(specs))))
        self._update_job(view)
        self._wake.set()
        return self._status_from_view(view)

    def exec_job(
        self,
        job_id: str,
        command: List[str],
        node: Optional[str] = None,
        timeout_secs: int = 60,
        max_bytes: int = 65536,
        role: Optional[str] = None,
    ) -> Dict[str, Any]:
        """Run ``command`` (a list of words, never a shell line) inside the running job's container, on
        ``node`` or once on each of its nodes (``srun --overlap``); for a Cosmos-RL job, on ``role``'s
        nodes in its container (controller, policy, rollout). Returns ``exit_code``, ``stdout``,
        ``stderr`` (each at most ``max_bytes``), their full sizes and ``truncated``.

        Raises:
            JobNotFoundError: no such job; JobSpecError: the job is not running or the command is empty.
        """
        return json.loads(self._engine.exec_job(job_id, list(command), node, timeout_secs, max_bytes, role))

    def cancel_sweep(self, sweep_id: str) -> List[JobStatus]:
        """Cancel the variants of a sweep (or the steps of a pipeline) that have not finished; the
        finished ones keep their status. Returns every one's status, in index order.

        Raises:
            JobNotFoundError: no such sweep; RemoteCommandError: a cancel Slurm did not confirm.
        """
        views = json.loads(self._engine.cancel([sweep_id]))
        for view in views:
            self._update_job(view)
        self._wake.set()
        return [self._status_from_view(v) for v in views]

    def wait(self, job_id: str, timeout: Optional[float] = None) -> JobStatus:
        """Block until the job is terminal, or paused by ``pause_job`` (it goes on only after
        ``resume_job``), and return its status; a job with hooks returns after its hooks have run.
        Never gives up because time passed, unless ``timeout`` (seconds) is given: then
        ``TimeoutError``.

        Raises:
            JobNotFoundError: no such job.
        """
        deadline = None if timeout is None else time.monotonic() + float(timeout)
        while True:
            # One poll of the engine's wait (the client's `wait_step`): the refresh and its pace.
            tick = json.loads(self._engine.wait_step([job_id], self._wait_interval()))
            view = tick["views"][0]
            self._update_job(view)
            if tick["all_settled"] and not tick["all_terminal"]:
                return self._status_from_view(view)  # paused by pause_job: only a resume goes on
            if tick["all_terminal"]:
                with self._lock:
                    watch = self._watched.get(view["job_id"])
                if watch is not None:
                    self._wake.set()
                    left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
                    watch.done.wait(left if left is not None else max(60.0, 3 * self._poll_interval))
                return self._status_from_view(view)
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {job_id} is still {view['status']} after {timeout} s: {view['message']}")
            pause = tick["pause"] if deadline is None else min(tick["pause"], max(deadline - time.monotonic(), 0.0))
            time.sleep(pause)

    def watch(self, job_id: str, hooks: Hooks) -> Job:
        """Attach hooks to a job already submitted (by this or an earlier process): the monitor calls
        them as for a job created with ``hooks``."""
        hook_map = self._check_hooks(hooks)
        view = json.loads(self._engine.stored([job_id]))[0]
        job = self._job_from_view(view)
        self._watch(job, hook_map)
        return job

    def preflight(self) -> List[Dict[str, Any]]:
        """tao-slurm's preflight checks (settings, unknown ``SLURM_``/``TAO_SLURM_`` names, SSH to each
        login host, Slurm commands, accounting, partitions, Pyxis, credentials, results directory),
        each a dict with ``name``, ``host``, ``ok``, ``required``, ``detail``, ``remediation``."""
        return json.loads(self._engine.preflight())

    def close(self) -> None:
        """Stop the monitor thread (jobs keep running; a new SlurmSDK resumes following them)."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=self._poll_interval + 60)

    def __enter__(self) -> "SlurmSDK":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the monitor ------------------------------------------------------------------------------

    def _monitor(self) -> None:
        while not self._stop.is_set():
            pause = self._poll_interval
            try:
                pause = self._poll_once()
            except Exception:  # noqa: BLE001 - the monitor must outlive any one failure
                logger.warning("tao_slurm monitor: refresh failed; trying again", exc_info=True)
            self._wake.wait(pause)
            self._wake.clear()

    def _poll_once(self) -> float:
        """One step of the engine's monitor; returns the seconds to the next: the monitor's pace, at
        most ``poll_interval``, never below the query budget's floor."""
        # Every active job of the state file in one round trip: this resumes jobs left by earlier
        # processes and performs their due retries. Jobs that just ended are in the answer.
        jobs, interval, floor = self._engine.monitor_step()
        views = {v["job_id"]: v for v in json.loads(jobs)}
        with self._lock:
            watched = list(self._watched.values())
        missing = [w.job.id for w in watched if w.job.id not in views]
        if missing:
            views.update({v["job_id"]: v for v in json.loads(self._engine.stored(missing))})
        for view in views.values():
            self._update_job(view)
        for w in watched:
            view = views.get(w.job.id)
            if view is not None:
                self._observe(w, view)
        return max(floor, min(self._poll_interval, interval))

    def _observe(self, w: _Watch, view: Dict[str, Any]) -> None:
        """Call the hooks this view makes due, each once (monitor thread only)."""
        status = view["status"]
        calls: List[Tuple[str, Tuple[Any, ...]]] = []
        if "on_epoch_milestone" in w.hooks and (status == "Running" or status in TERMINAL_STATUSES):
            epoch, total = self._epoch(view)
            reached = epoch - epoch % self._milestone_every
            for m in range(w.milestone + self._milestone_every, reached + 1, self._milestone_every):
                calls.append(("on_epoch_milestone", (w.job, m, total)))
            w.milestone = max(w.milestone, reached)
        if status == "Complete" and "on_complete" not in w.fired:
            calls.append(("on_complete", (w.job,)))
        if status == "Error" and "on_error" not in w.fired:
            calls.append(("on_error", (w.job,)))
        for hook, args in calls:
            w.fired.add(hook)
            callback = w.hooks.get(hook)
            if callback is None:
                continue
            try:
                callback(*args)
            except Exception:  # noqa: BLE001 - a user's hook must not stop the monitor
                logger.exception("hook %s of job %s raised", hook, w.job.id)
        if status in TERMINAL_STATUSES:
            with self._lock:
                self._watched.pop(w.job.id, None)
            w.done.set()

    def _epoch(self, view: Dict[str, Any]) -> Tuple[int, int]:
        """(epoch, total) from status.json's last line, else from the TAO SDK's log pattern in the
        last 20 lines of the logs (total 0 when the log names none)."""
        progress = view.get("progress") or {}
        if isinstance(progress, dict) and progress.get("epoch") is not None:
            try:
                return int(progress["epoch"]), int(progress.get("max_epoch") or 0)
            except (TypeError, ValueError):
                pass
        if not view.get("slurm_job_id"):
            return 0, 0
        try:
            out, err = self._engine.logs(view["job_id"], 20)
        except Exception:  # noqa: BLE001 - no epoch this time; the next poll tries again
            return 0, 0
        matches = EPOCH_PATTERN.findall(out + "\n" + err)
        if not matches:
            return 0, 0
        epoch, total = matches[-1]
        return int(epoch), int(total) if total else 0

    # -- helpers ----------------------------------------------------------------------------------

    def _wait_interval(self) -> float:
        """How often wait() and follow_logs() poll: at most every poll_interval, at least every 5 s,
        within the query budget (TAO_SLURM_MAX_QUERIES_PER_MINUTE)."""
        floor = _native.budget_floor_secs(max(int(self._settings["max_queries_per_minute"]), 1))
        return max(floor, min(self._poll_interval, 5.0))

    @staticmethod
    def _check_hooks(hooks: Optional[Hooks]) -> Dict[str, Callable[..., Any]]:
        """The hooks that will be called. As lenient as the TAO SDK: an unknown name is never called
        (a warning says so, where the TAO SDK is silent) and a None hook is ignored; a hook that is
        neither None nor callable is refused here, where the TAO SDK fails when it comes due."""
        if not hooks:
            return {}
        unknown = [k for k in hooks if k not in HOOK_NAMES]
        if unknown:
            message = f"unknown hook(s) {', '.join(map(repr, unknown))} will never be called; hooks are {', '.join(HOOK_NAMES)}"
            logger.warning(message)
            warnings.warn(message, stacklevel=3)
        known = {k: v for k, v in hooks.items() if k in HOOK_NAMES and v is not None}
        for k, v in known.items():
            if not callable(v):
                raise JobSpecError(f"hook {k!r} is not callable", field="hooks")
        return known

    def _watch(self, job: Job, hooks: Dict[str, Callable[..., Any]]) -> None:
        with self._lock:
            self._watched[job.id] = _Watch(job=job, hooks=hooks)
        self._wake.set()

    def _job_from_view(self, view: Dict[str, Any]) -> Job:
        with self._lock:
            job = self._jobs.get(view["job_id"])
            if job is None:
                job = Job(
                    id=view["job_id"],
                    status=view["status"],
                    created_at=_iso(view["created_at"]),
                    backend_job_id=f"tao-job-{view['job_id']}",
                    results_dir="lustre://" + view["results_dir"],
                )
                self._jobs[job.id] = job
            job.status = view["status"]
            return job

    def _update_job(self, view: Dict[str, Any]) -> None:
        job = self._jobs.get(view["job_id"])
        if job is not None:
            job.status = view["status"]

    @staticmethod
    def _status_from_view(view: Dict[str, Any]) -> JobStatus:
        return JobStatus(
            job_id=view["job_id"], status=view["status"], message=view["message"], updated_at=_iso(view["updated_at"])
        )

    def _record(self, view: Dict[str, Any]) -> Dict[str, Any]:
        """A job as a dict: the TAO SDK's row (``job_id``, ``network_arch``, ``action``,
        ``workspace_id``, ``backend_type``, ``backend_job_id``, ``status``, ``parent_job_id``, ``image``,
        ``specs``, ``results_dir`` as ``lustre://``, ``local_results_dir``, ``base_checkpoint``,
        ``plan_id``, ``step_id``, ``last_epoch``, ``instance_id``, ``created_at``/``updated_at`` as ISO
        8601 text) with tao-slurm's fields beside it (``slurm_job_id``, ``message``, ``nodes``, ...)."""
        record = dict(view)
        progress = view.get("progress") if isinstance(view.get("progress"), dict) else {}
        try:
            last_epoch = int(progress.get("epoch") or 0)
        except (TypeError, ValueError):
            last_epoch = 0
        try:
            specs = json.loads(self._engine.staged_specs(view["job_id"]))
        except JobNotFoundError:
            specs = {}
        record.update(
            {
                "network_arch": "",
                "action": "",
                "workspace_id": "slurm",
                "backend_type": "slurm",
                "backend_job_id": f"tao-job-{view['job_id']}",
                "parent_job_id": None,
                # JSON text, as the TAO SDK's job store keeps and returns it.
                "specs": json.dumps(specs),
                "results_dir": "lustre://" + view["results_dir"],
                "local_results_dir": "",
                "base_checkpoint": "",
                "plan_id": view.get("sweep_id") or "",
                "step_id": view.get("sweep_index") or 0,
                "last_epoch": last_epoch,
                "instance_id": "",
                "created_at": _iso(view["created_at"]),
                "updated_at": _iso(view["updated_at"]),
            }
        )
        return record


def _list_job_keywords(method: Callable[..., Any]) -> None:
    """Give ``method`` (which takes ``**job_fields``) a signature that lists every job field it takes
    by name, keyword-only with default None, so ``help()`` and ``inspect.signature`` show them all:
    derived from the engine's list, never copied here."""
    signature = inspect.signature(method)
    params = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    have = {p.name for p in params}
    params += [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation="Any")
        for name in sorted(_OWN_KEYWORDS - have)
    ]
    method.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]


_list_job_keywords(SlurmSDK.create_job)
_list_job_keywords(SlurmSDK.create_sweep)
_list_job_keywords(SlurmSDK.preview_job)
