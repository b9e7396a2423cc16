"""NVIDIA's AutoML runner (nvidia-tao-automl 7.2.0) on NVIDIA's own SlurmSDK (nvidia-tao-sdk 7.2.0) and
on tao_slurm's, side by side on the sandbox cluster: the same small search (Hyperband, max 3 epochs,
reduction 3: three one-epoch trials and a promotion; or BENCH_AUTOML_ALGORITHM=bayesian, four trials)
of the stand-in training of tests/python/test_automl.py.

Each side runs in a fresh process with its own HOME, state and SSH key (bench/python_bench.py's
side_env), its logins counted in the sandbox's sshd logs by that key's fingerprint. Reported per side:
the search's wall time, SSH logins, trials, the best metric, and whether the promoted trial resumed
from its parent's checkpoint. Run from the repository's .venv (dev/python-env.sh, then `maturin
develop`), which holds both SDKs and the runner:

    .venv/bin/python bench/automl_bench.py

Writes bench/automl-report.json. The sandbox is shared: a trial may wait for a node, so times vary
run to run; the logins do not.
"""

from __future__ import annotations

import json
import os
import pathlib
import secrets
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "python"))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "support"))
import python_bench  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
REPORT_JSON = REPO / "bench" / "automl-report.json"
ALGORITHM = os.environ.get("BENCH_AUTOML_ALGORITHM", "hyperband")
IMAGE = python_bench.IMAGE


def child(side: str, skill_dir: str) -> None:
    import logging

    logging.basicConfig(level=logging.WARNING)
    from tao_automl.runner import AutoMLRunner

    if side == "tao":
        from tao_sdk.platforms.slurm import SlurmSDK
    else:
        from tao_slurm import SlurmSDK
    fp = os.environ["BENCH_FINGERPRINT"]
    before = python_bench.logins(fp)
    started = time.perf_counter()
    sdk = SlurmSDK(poll_interval=30)
    settings = {"algorithm": ALGORITHM, "metric": "val_loss", "direction": "minimize", "automl_max_recommendations": 4}
    if ALGORITHM == "hyperband":
        settings.update(automl_max_epochs=3, automl_reduction_factor=3, epoch_multiplier=1)
    runner = AutoMLRunner(sdk=sdk, skill_dir=skill_dir, action="train", poll_interval=1)
    error = None
    try:
        result = runner.run(
            automl_settings=settings,
            automl_hyperparameters=["train.lr", "train.wd"],
            workspace_path=str(pathlib.Path(os.environ["HOME"]) / "automl"),
            image=IMAGE,
            gpu_count=1,
        )
    except RuntimeError as e:  # every trial failed: reported, not fatal to the comparison
        error, result = str(e), None
    secs = time.perf_counter() - started
    used = python_bench.logins(fp) - before
    job_ids = [j["job_id"] for j in sdk.list_jobs()]
    resumed = ["resumed from epoch" in sdk.get_job_logs(j) for j in job_ids]
    statuses = [sdk.get_job_status(j).status for j in job_ids]
    print(
        json.dumps(
            {
                "side": side,
                "seconds": round(secs, 1),
                "logins": used,
                "jobs": len(job_ids),
                "statuses": statuses,
                "succeeded": 0 if result is None else sum(1 for h in result["history"] if h["status"] == "success"),
                "best": None if result is None else result["best"]["metric_value"],
                "promoted_resumed": any(resumed),
                "error": error,
                "job_ids": job_ids,
            }
        )
    )


def main() -> None:
    from test_automl import TRAIN, write_skill  # the test's stand-in skill

    workdir = pathlib.Path(tempfile.mkdtemp(prefix="tao-slurm-automl-bench-"))
    settings = python_bench.sandbox_settings()
    code = pathlib.Path(settings["SLURM_BASE_RESULTS_DIR"]) / f"automl-bench-{secrets.token_hex(4)}"
    code.mkdir(mode=0o755)
    (code / "train.py").write_text(TRAIN)
    skill_dir = write_skill(workdir / "skills" / "stand_in_net", code, IMAGE)
    report = {"algorithm": ALGORITHM}
    try:
        for side in ("ours", "tao"):
            env = python_bench.side_env(side, workdir)
            run = subprocess.run(
                [sys.executable, __file__, "--side", side, str(skill_dir)],
                env=env,
                capture_output=True,
                text=True,
                timeout=3600,
            )
            if run.returncode != 0:
                raise SystemExit(f"the {side} side failed:\n{run.stderr[-4000:]}")
            report[side] = json.loads(run.stdout.strip().splitlines()[-1])
            python_bench.scancel_leftovers(report[side]["job_ids"])
    finally:
        shutil.rmtree(code, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)
    import importlib.metadata as md

    report["versions"] = {
        p: md.version(p) for p in ("nvidia-tao-automl", "nvidia-tao-sdk", "tao-slurm")
    }
    REPORT_JSON.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--side":
        child(sys.argv[2], sys.argv[3])
    else:
        main()
