"""`SlurmSDK.exec_job`: a command in a running job's container, its exit status and bounded output."""

import time

import pytest

IMAGE = "ubuntu:22.04"


def test_exec_job_returns_output_and_exit_status_of_a_command_in_the_running_job(env, sdks):
    from tao_slurm.errors import JobSpecError

    sdk = sdks()
    job = sdk.create_job(image=IMAGE, command="sleep 300", gpu_count=0)
    deadline = time.monotonic() + 90
    while sdk.get_job_status(job.id).status != "Running":
        assert time.monotonic() < deadline, "the job never ran"
        time.sleep(0.5)
    out = sdk.exec_job(job.id, ["sh", "-c", "echo node=$SLURMD_NODENAME; echo oops >&2"])
    assert out["exit_code"] == 0 and out["stdout"].startswith("node=node"), out
    assert out["stderr"] == "oops\n" and out["truncated"] is False, out
    assert sdk.exec_job(job.id, ["false"])["exit_code"] == 1
    small = sdk.exec_job(job.id, ["head", "-c", "3000", "/dev/zero"], max_bytes=10)
    assert small["truncated"] is True and small["stdout_bytes"] == 3000 and len(small["stdout"]) == 10
    assert sdk.cancel_job(job.id) is True
    with pytest.raises(JobSpecError, match="not running"):
        sdk.exec_job(job.id, ["true"])
