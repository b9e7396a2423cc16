"""Training longer than the queue allows, from Python: `retry_job` of a job that ended Error runs it
again from its newest checkpoint, and `get_checkpoints` lists it (the one listing)."""

from __future__ import annotations

from tao_test_support import wait_until

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
