"""Training longer than the queue allows, from Python: `retry_job` of a job that ended Error runs it
again from its newest checkpoint, and `get_checkpoints` lists it (the one listing); `pause_job` and
`resume_job` (TAO's names) go on from the checkpoint a graceful pause saved."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from tao_test_support import TRAINING as EPOCHS
from tao_test_support import finished_epochs, wait_until

from tao_slurm import JobSpecError

IMAGE = "ubuntu:22.04"

TRAINING = """dir="$TAO_API_RESULTS_DIR/$TAO_JOB_ID/train"; mkdir -p "$dir"
if [ -z "${TAO_RESUME_CHECKPOINT:-}" ]; then echo x > "$dir/epoch-1.pth"; echo "failing after epoch 1"; exit 3; fi
echo "resumed from $TAO_RESUME_CHECKPOINT\""""


def test_retry_job_resumes_from_the_checkpoint(env, sdks):
    sdk = sdks()
    job = sdk.create_job(image=IMAGE, command=TRAINING, gpu_count=0)
    wait_until(lambda: sdk.get_job_status(job.id).status == "Error", 120, "the first attempt fails")
    assert sdk.get_checkpoints(job.id) == ["train/epoch-1.pth"]
    status = sdk.retry_job(job.id)
    assert status.status in ("Pending", "Running", "Complete"), status
    wait_until(lambda: sdk.get_job_status(job.id).status == "Complete", 120, "the retry completes")
    assert "/train/epoch-1.pth" in sdk.get_job_logs(job.id)
    try:
        sdk.retry_job(job.id)
        raise AssertionError("a completed job was retried")
    except JobSpecError as e:
        assert "nothing to retry" in str(e)


def test_pause_job_gracefully_and_two_resume_jobs_at_once_go_on_from_the_checkpoint(env, sdks, monkeypatch):
    # A graceful pause waits the job's checkpoint grace at most: 4 s here.
    monkeypatch.setenv("TAO_SLURM_CHECKPOINT_GRACE", "4")
    sdk = sdks()
    job = sdk.create_job(image=IMAGE, command=EPOCHS, gpu_count=0, env_vars={"EPOCHS": "6", "SECONDS": "2"})
    wait_until(lambda: len(finished_epochs(sdk.get_job_logs(job.id))) >= 2, 180, "two epochs")
    assert sdk.pause_job(job.id, graceful=True).status == "Pausing"
    wait_until(lambda: sdk.get_job_status(job.id).status == "Paused", 120, "the pause ends")
    log = sdk.get_job_logs(job.id)
    assert "training: warned after epoch" in log, log
    saved = finished_epochs(log)[-1]
    assert saved < 6, log
    assert sdk.pause_job(job.id).status == "Paused", "idempotent"
    # A wait on a paused job ends: only a resume makes it go on (without a timeout it would block for ever).
    assert sdk.wait(job.id, timeout=300).status == "Paused"
    # Two SDKs (two state-file connections) resume at once: one new attempt, one Slurm job.
    others = [sdks(), sdks()]
    with ThreadPoolExecutor(2) as pool:
        statuses = list(pool.map(lambda s: s.resume_job(job.id, {}), others))
    assert all(s.status in ("Resuming", "Running", "Complete") for s in statuses), statuses
    assert sdk.get_job(job.id)["attempt"] == 2
    wait_until(lambda: sdk.get_job_status(job.id).status == "Complete", 180, "the resumed job completes")
    log = sdk.get_job_logs(job.id)
    assert f"training: resuming at epoch {saved + 1}" in log, log
    assert finished_epochs(log) == list(range(saved + 1, 7)), log
    try:
        sdk.resume_job(job.id, {})
        raise AssertionError("a completed job was resumed")
    except JobSpecError as e:
        assert "nothing to resume" in str(e)
