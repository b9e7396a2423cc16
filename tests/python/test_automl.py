"""NVIDIA's own AutoML runner (`nvidia-tao-automl` 7.2.0, `tao_automl.runner.AutoMLRunner`) drives
`tao_slurm.SlurmSDK` unchanged on the sandbox, in real containers (issue 51, item 1).

The skill is the test's own: a container `train` action whose stand-in training (a Python script on
shared storage, run by TAO's own entrypoint, `tao_sdk.script_runner`, in config mode) reports a loss
that is a known function of two hyperparameters and of the epochs trained, writes a checkpoint per
epoch with the epoch in its name and TAO's `status.json` where TAO's trainers write it
(`<results_dir>/train/status.json`), and resumes from a checkpoint it is given."""

from __future__ import annotations

import json
import logging
import pathlib
import secrets
import shutil
import time

import pytest
import yaml

import tao_slurm

from tao_test_support import TERMINAL, wait_until

LR = [0.01, 0.03, 0.1]
WD = [0.0, 0.5]


def loss(lr: float, wd: float, epochs: int) -> float:
    """The stand-in's loss: best at lr 0.03, wd 0.5; more epochs lower it."""
    return round((lr - 0.03) ** 2 * 100 + (wd - 0.5) ** 2 + 0.5 / max(epochs, 1), 6)


# The stand-in training (the image's python3, stdlib only). Resumes from the checkpoint in
# train.resume_training_checkpoint_path (a lustre:// URI, as get_job_results_dir names it).
TRAIN = r'''
import json, os, re, sys, time
c = json.load(open(sys.argv[1]))
t = c["train"]; out = c["results_dir"]; d = os.path.join(out, "train"); os.makedirs(d, exist_ok=True)
lr, wd, n = float(t["lr"]), float(t["wd"]), int(t["num_epochs"])
start = 0
resume = (t.get("resume_training_checkpoint_path") or "").replace("lustre://", "", 1)
if resume:
    start = int(re.search(r"epoch_(\d+)", os.path.basename(resume)).group(1))
    assert json.load(open(resume))["epoch"] == start
    print("resumed from epoch %d of %s" % (start, resume), flush=True)
status = open(os.path.join(d, "status.json"), "a")
def report(**kw):
    kw.update(date=time.strftime("%m/%d/%Y"), time=time.strftime("%H:%M:%S"))
    status.write(json.dumps(kw) + "\n"); status.flush()
report(status="STARTED", message="Starting training")
for e in range(start + 1, n + 1):
    m = round((lr - 0.03) ** 2 * 100 + (wd - 0.5) ** 2 + 0.5 / e, 6)
    json.dump({"epoch": e, "lr": lr, "wd": wd}, open(os.path.join(d, "model_epoch_%03d.pth" % e), "w"))
    print("Epoch %d/%d val_loss: %s" % (e, n, m), flush=True)
    report(status="RUNNING", epoch=e, max_epoch=n, message="Epoch %d/%d" % (e, n), kpi={"val_loss": m})
json.dump({"val_loss": m}, open(os.path.join(out, "metrics.json"), "w"))
report(status="SUCCESS", epoch=n, max_epoch=n, message="Training finished", kpi={"val_loss": m})
print("Execution status: PASS", flush=True)
'''


def write_skill(skill_dir: pathlib.Path, code: pathlib.Path, image: str) -> pathlib.Path:
    """The skill (skill_info.yaml, the train spec template, the search schema) whose train action
    runs `code`/train.py in `image`. Also bench/automl_bench.py's."""
    (skill_dir / "references").mkdir(parents=True)
    (skill_dir / "schemas").mkdir()
    (skill_dir / "references" / "skill_info.yaml").write_text(
        yaml.safe_dump(
            {
                "network_arch": "stand_in_net",
                "container_image": image,
                "actions": {
                    "train": {
                        "command": f"python3 {code}/train.py {{config_path}}",
                        "config_format": "json",
                        "outputs": ["results_dir"],
                    }
                },
            }
        )
    )
    defaults = {
        "train": {"lr": 0.1, "wd": 0.0, "num_epochs": 1, "resume_training_checkpoint_path": ""},
        "results_dir": "",
    }
    (skill_dir / "references" / "spec_template_train.yaml").write_text(yaml.safe_dump(defaults))
    schema = {
        "type": "object",
        "default": defaults,
        "properties": {
            "train": {
                "type": "object",
                "properties": {
                    "lr": {"type": "number", "enum": LR, "default": 0.1, "automl_enabled": True},
                    "wd": {"type": "number", "enum": WD, "default": 0.0, "automl_enabled": True},
                    "num_epochs": {"type": "integer", "default": 1, "minimum": 1, "maximum": 10},
                    "resume_training_checkpoint_path": {"type": "string", "default": ""},
                },
            },
            "results_dir": {"type": "string", "default": ""},
        },
    }
    (skill_dir / "schemas" / "train.schema.json").write_text(json.dumps(schema))
    return skill_dir


@pytest.fixture
def skill(env, tmp_path):
    """The skill directory (local) and the stand-in training (on shared storage, where jobs see it)."""
    base = pathlib.Path(env["SLURM_BASE_RESULTS_DIR"])
    code = base / f"automl-stand-in-{secrets.token_hex(4)}"
    code.mkdir(mode=0o755)
    (code / "train.py").write_text(TRAIN)
    (code / "train.py").chmod(0o644)
    yield write_skill(tmp_path / "skills" / "stand_in_net", code, "ubuntu:22.04")
    shutil.rmtree(code, ignore_errors=True)


def run_search(sdk, skill_dir, workspace, settings):
    from tao_automl.runner import AutoMLRunner

    runner = AutoMLRunner(sdk=sdk, skill_dir=str(skill_dir), action="train", poll_interval=1)
    return runner.run(
        automl_settings={"metric": "val_loss", "direction": "minimize", **settings},
        automl_hyperparameters=["train.lr", "train.wd"],
        workspace_path=str(workspace),
        gpu_count=0,
    )


def check_trial(sdk, h):
    """A trial's metric is the known function of the hyperparameters and epochs its job ran with
    (read from the job's own files over SSH), and TAO's status.json was read by the refresh."""
    job = h["job_id"]
    assert isinstance(job, str)
    status = sdk.get_job_status(job)
    assert status.status == "Complete" and "no terminal status" not in status.message, status
    # The specs travel inside TAO's entrypoint (create_job has no specs=): what the job ran.
    ran = json.loads(sdk.read_job_result_file(job, "spec.json"))["train"]
    metrics = json.loads(sdk.read_job_result_file(job, "results_dir/metrics.json"))
    assert h["metric"] == metrics["val_loss"] == loss(ran["lr"], ran["wd"], ran["num_epochs"]), (h, ran)
    record = sdk.get_job(job)
    assert record["last_epoch"] == ran["num_epochs"], record
    assert (record.get("progress") or {}).get("status") == "SUCCESS", record.get("progress")


def successes(result):
    done = [h for h in result["history"] if h["status"] == "success"]
    assert done, result["history"]
    assert result["best"]["metric_value"] == min(h["metric"] for h in done), (result["best"], done)
    return done


def test_nvidias_automl_runner_searches_with_tao_slurm_bayesian_and_hyperband(env, sdks, skill, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="tao_automl")
    sdk = sdks()
    started = time.monotonic()

    # Bayesian: four trials of one epoch, every artifact kept so each trial is checked.
    bayes = run_search(
        sdk,
        skill,
        tmp_path / "bayes",
        {"algorithm": "bayesian", "automl_max_recommendations": 4, "automl_delete_intermediate_ckpt": False},
    )
    done = successes(bayes)
    assert len(done) == 4, bayes["history"]
    for h in done:
        check_trial(sdk, h)
    # TAO's entrypoint (about 92 KB) was staged as a file and sourced, never a command line.
    base = pathlib.Path(env["SLURM_BASE_RESULTS_DIR"])
    for h in done:
        staged = (base / "specs" / f"{h['job_id']}.command.sh").read_text()
        assert len(staged) > 80_000 and "{config_path}" in staged and "base64 -d" in staged
        script = (base / "sbatch" / f"job_{h['job_id']}.sbatch").read_text()
        assert "base64 -d" not in script and len(script) < 32_000, len(script)
    # read_job_result_file stays inside the results directory and names its field.
    job = done[0]["job_id"]
    assert sdk.read_job_result_file(job, "results_dir/no-such.json") == ""
    for bad in ("../../specs/x.json", "/etc/passwd", "results_dir"):
        with pytest.raises(tao_slurm.JobSpecError) as e:
            sdk.read_job_result_file(job, bad)
        assert e.value.field == "relative_path", bad
    bayes_secs = time.monotonic() - started

    # Hyperband (max 3 epochs, reduction 3): three trials of one epoch, the best promoted to three
    # epochs, resuming from its parent's epoch-1 checkpoint that get_checkpoints found.
    hb = run_search(
        sdk,
        skill,
        tmp_path / "hyperband",
        {
            "algorithm": "hyperband",
            "automl_max_recommendations": 4,
            "automl_max_epochs": 3,
            "automl_reduction_factor": 3,
            "epoch_multiplier": 1,
        },
    )
    done = successes(hb)
    best = next(h for h in done if h["job_id"] == hb["best"]["job_id"])
    check_trial(sdk, best)
    logs = {h["job_id"]: sdk.get_job_logs(h["job_id"]) for h in done}
    promoted = [j for j, log in logs.items() if "resumed from epoch" in log]
    assert promoted, {j: log[-1500:] for j, log in logs.items()}
    for job in promoted:
        log = logs[job]
        line = next(l for l in log.splitlines() if "resumed from epoch" in l)
        assert line.startswith("resumed from epoch 1 of /"), line
        parent = line.split("/results/", 1)[1].split("/", 1)[0]
        assert parent != job and sdk.get_job(parent)["status"] == "Complete", line
        # The promoted trial ran only the epochs after its parent's.
        assert "Epoch 1/" not in log and "Epoch 3/3" in log, log[-2000:]
    # The runner pruned the other trials' artifacts through delete_job_artifacts, the best's kept.
    kept = [h["job_id"] for h in done if sdk.check_path(sdk.get_job_results_dir(h["job_id"]))]
    assert kept == [best["job_id"]], (kept, best)
    assert all(sdk.get_job_status(h["job_id"]).status in TERMINAL for h in hb["history"] if h["job_id"])
    print(f"bayesian {bayes_secs:.0f} s, hyperband {time.monotonic() - started - bayes_secs:.0f} s")


def test_the_runners_end_of_trial_log_scan_streams_the_whole_log(env, sdks):
    """At a trial's end the runner scans the log through `iter_job_log_chunks` when the SDK's class
    has it (its own `_iter_terminal_log_chunks`, called here): every line of both streams, in str
    pieces, none of them cut at the engine's single-read cap."""
    from tao_automl.runner import _iter_terminal_log_chunks

    sdk = sdks()
    assert callable(getattr(type(sdk), "iter_job_log_chunks", None))
    job = sdk.create_job(
        image="ubuntu:22.04",
        command="seq 1 200000 | sed 's/^/line /'; echo 'loss: 0.25' >&2",
        gpu_count=0,
    )
    assert sdk.wait(job.id, timeout=300).status == "Complete"
    chunks = list(_iter_terminal_log_chunks(sdk, job.id))
    assert chunks and all(isinstance(c, str) for c in chunks), [type(c) for c in chunks]
    text = "".join(chunks)
    numbered = [int(l[5:]) for l in text.splitlines() if l.startswith("line ") and l[5:].isdigit()]
    assert numbered == list(range(1, 200001)), "every line once, in order"
    assert "loss: 0.25" in text


def test_the_runners_cancel_is_confirmed_within_its_window(env, sdks):
    """The runner stops a trial with `cancel_job`, then polls `get_job_status` every 0.5 s for up to
    30 s until its own `_confirmed_platform_status` says the job is quiescent (run here through its
    `_wait_for_job_quiescence`, with the runner's defaults as the only state it reads)."""
    import types

    from tao_automl.runner import AutoMLRunner

    sdk = sdks()
    job = sdk.create_job(image="ubuntu:22.04", command="sleep 600", gpu_count=0)
    wait_until(lambda: sdk.get_job_status(job.id).status == "Running", 300, f"job {job.id} running")
    assert sdk.cancel_job(job.id) is True
    runner = types.SimpleNamespace(_sdk=sdk, _cancel_confirmation_timeout=30.0, _cancel_confirmation_poll_interval=0.5)
    assert AutoMLRunner._wait_for_job_quiescence(runner, job.id) == "Canceled"
