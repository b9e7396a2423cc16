"""The TAO SDK's calls that tao_slurm once lacked or read differently, against the sandbox cluster:
SLURM_TIME_HOURS alone, the storage calls (check_path, list_path, delete_job_artifacts,
get_checkpoints), the rows of get_job/list_jobs, and the TAO SDK's own S3 wrapping
(tao_sdk.script_runner.build_entrypoint) run by tao_slurm against a local S3 server."""

from __future__ import annotations

import json
import pathlib
import secrets
import shutil
import site
import subprocess

import pytest

import tao_slurm
from tao_test_support import wait_until

IMAGE = "ubuntu:22.04"


def test_slurm_time_hours_2_alone_submits_2_hours_with_a_1_8_hour_timeout_and_64_cpus_for_4_gpus(
    env, sdks, monkeypatch
):
    monkeypatch.setenv("SLURM_TIME_HOURS", "2")
    monkeypatch.delenv("SLURM_TIMEOUT_HOURS", raising=False)
    sdk = sdks()
    job = sdk.create_job(
        image=IMAGE,
        command='echo "cpus=$SLURM_CPUS_PER_TASK"',
        gpu_count=4,
    )
    assert sdk.wait(job.id, timeout=300).status == "Complete"
    logs = sdk.get_job_logs(job.id)
    assert "cpus=64" in logs, logs
    # The container has no Slurm commands: the limit is read from Slurm's accounting over SSH (the
    # controller forgets an ended job after MinJobAge; sacct has it once slurmdbd recorded it).
    slurm_id = sdk.get_job(job.id)["slurm_job_id"]

    def time_limit() -> str:
        return subprocess.run(
            ["ssh", "-F", env["SSH_CONFIG"], env["SLURM_HOSTNAME"].split(",")[0],
             f"sacct -X -n -P -j {slurm_id} -o Timelimit"],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout.strip()

    shown = wait_until(time_limit, 60, f"Slurm job {slurm_id} in sacct")
    assert shown == "02:00:00", shown
    script = pathlib.Path(env["SLURM_BASE_RESULTS_DIR"], "sbatch", f"job_{job.id}.sbatch").read_text()
    assert "#SBATCH --time=02:00:00" in script and "#SBATCH --cpus-per-task=64" in script
    assert f"timeout --signal=TERM --kill-after=60 {int(1.8 * 3600)}s srun" in script, "1.8 h inner timeout"


def test_a_job_without_a_time_on_the_30_minute_partition_runs_with_a_warning(env, sdks, monkeypatch):
    # No time asked for: the default 4 h is capped at debug's MaxTime, and the submission says so.
    monkeypatch.delenv("SLURM_TIME_HOURS", raising=False)
    monkeypatch.delenv("SLURM_TIMEOUT_HOURS", raising=False)
    sdk = sdks()
    with pytest.warns(UserWarning, match="default 04:00:00 is capped at the MaxTime 00:30:00 of partition debug"):
        job = sdk.create_job(image=IMAGE, command="true", gpu_count=0, partition="debug")
    assert sdk.wait(job.id, timeout=300).status == "Complete"
    script = pathlib.Path(env["SLURM_BASE_RESULTS_DIR"], "sbatch", f"job_{job.id}.sbatch").read_text()
    assert "#SBATCH --time=00:30:00" in script


def test_storage_calls_rows_and_artifacts(env, sdks):
    sdk = sdks()
    # The job leaves checkpoints in its results directory, the newest written last.
    cmd = (
        'd="$TAO_RESULTS_ROOT/$TAO_JOB_ID"; mkdir -p "$d/train"; echo "Epoch 2/5"; '
        'echo a > "$d/train/model_epoch_001.pth"; touch -d "2 minutes ago" "$d/train/model_epoch_001.pth"; '
        'echo b > "$d/train/model_epoch_002.pth"; echo notes > "$d/train/notes.txt"'
    )
    job = sdk.create_job(image=IMAGE, command=cmd, gpu_count=0, specs={"train": {"num_epochs": 5}})
    assert sdk.wait(job.id, timeout=300).status == "Complete"
    results = sdk.get_job_results_dir(job.id)
    assert results == job.results_dir and results.startswith("lustre:///")
    assert sdk.check_path(results) is True
    assert sdk.check_path(results + "/train/model_epoch_002.pth") is True
    assert sdk.check_path("lustre:///no/such/path") is False
    assert sdk.list_path(results + "/train") == ["model_epoch_001.pth", "model_epoch_002.pth", "notes.txt"]
    assert sdk.list_path("lustre:///no/such/dir") == []
    with pytest.raises(tao_slurm.JobSpecError) as e:
        sdk.list_path(results + "/train/notes.txt")
    assert e.value.field == "path"
    with pytest.raises(tao_slurm.JobSpecError) as e:
        sdk.check_path("/etc/passwd")
    assert e.value.field == "remote_path"
    assert sdk.get_checkpoints(job.id) == ["train/model_epoch_001.pth", "train/model_epoch_002.pth"], "newest last"

    # The TAO SDK's row keys, in get_job and list_jobs alike, beside tao-slurm's.
    row = sdk.get_job(job.id)
    tao_keys = {
        "job_id", "network_arch", "action", "workspace_id", "backend_type", "backend_job_id", "status",
        "parent_job_id", "image", "specs", "results_dir", "local_results_dir", "base_checkpoint", "plan_id",
        "step_id", "last_epoch", "instance_id", "created_at", "updated_at",
    }  # fmt: skip
    assert tao_keys <= set(row), tao_keys - set(row)
    # The TAO SDK's types: specs as JSON text, step_id and last_epoch ints, the other columns text.
    assert isinstance(row["specs"], str) and json.loads(row["specs"]) == {"train": {"num_epochs": 5}}
    assert row["image"] == IMAGE and row["status"] == "Complete"
    assert isinstance(row["step_id"], int) and isinstance(row["last_epoch"], int)
    text_columns = [k for k in tao_keys if k not in ("specs", "step_id", "last_epoch", "parent_job_id")]
    assert all(isinstance(row[k], str) for k in text_columns), {k: type(row[k]) for k in text_columns}
    assert row["parent_job_id"] is None or isinstance(row["parent_job_id"], str)
    assert row["backend_job_id"] == f"tao-job-{job.id}" and row["slurm_job_id"]
    listed = [r for r in sdk.list_jobs(status="Complete") if r["job_id"] == job.id]
    assert listed == [row]

    # delete_job_artifacts: not while the job runs; then once, the directory gone; a second time False.
    running = sdk.create_job(image=IMAGE, command="sleep 60", gpu_count=0)
    assert sdk.delete_job_artifacts(running.id) is False
    assert sdk.delete_job_artifacts(job.id) is True
    assert sdk.check_path(results) is False and sdk.get_checkpoints(job.id) == []
    assert sdk.delete_job_artifacts(job.id) is False
    assert sdk.delete_job_artifacts("00000000-0000-4000-8000-00000000dead") is False
    assert sdk.get_job(job.id)["status"] == "Complete", "the record stays"
    assert sdk.cancel_job(running.id) is True


def test_an_sbatch_refusal_is_a_runtime_error(env, sdks):
    sdk = sdks()
    # sbatch refuses a license the cluster does not have.
    with pytest.raises(RuntimeError) as e:
        sdk.create_job(image=IMAGE, command="true", gpu_count=0, sbatch_options={"licenses": "nosuchlicense:1"})
    assert isinstance(e.value, tao_slurm.RemoteCommandError), repr(e.value)
    # The job was recorded before sbatch refused it: the error names it (NVIDIA's AutoML runner then
    # cancels and polls it), and it is kept, ended Error with sbatch's words.
    job_id = e.value.tao_job_id
    assert isinstance(job_id, str) and job_id, repr(e.value)
    status = sdk.get_job_status(job_id)
    assert status.status == "Error" and status.message, status


@pytest.fixture
def s3_server():
    """moto's S3 server on loopback. The sandbox's nodes are this machine (each slurmd's NodeAddr is
    127.0.0.1), so jobs reach it at the same address."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


# What fsspec's S3 filesystem imports (s3fs, aiobotocore, botocore, aiohttp and theirs), by import name.
IMAGE_PACKAGES = (
    "fsspec", "s3fs", "aiobotocore", "botocore", "aiohttp", "aiohappyeyeballs", "aiosignal", "attr", "attrs",
    "frozenlist", "multidict", "propcache", "yarl", "aioitertools", "wrapt", "jmespath", "dateutil", "six.py",
    "urllib3", "idna", "typing_extensions.py",
)  # fmt: skip


@pytest.fixture
def image_with_fsspec(env):
    """What the TAO SDK's entrypoint needs from the job's image: `python` with fsspec and s3fs (its
    `pip install` of them is a no-op in a TAO image that has them). The sandbox's jobs run on the
    host, whose Python has neither: this directory, put first on the command's PATH, is that image.
    Its `python` is the host's with this venv's packages; its `pip` says they are there."""
    base = pathlib.Path(env["SLURM_BASE_RESULTS_DIR"])
    image = base / f"test-image-{secrets.token_hex(4)}"
    image.mkdir(mode=0o755)
    # The packages are copied: the job's user may not be able to reach this venv (a private checkout).
    packages = image / "site-packages"
    venv = pathlib.Path(site.getsitepackages()[0])
    for name in IMAGE_PACKAGES:
        source = venv / name
        assert source.exists(), f"{source} is missing: dev/python-env.sh installs it"
        if source.is_dir():
            shutil.copytree(source, packages / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            packages.mkdir(exist_ok=True)
            shutil.copy2(source, packages / name)
    (image / "python").write_text(f'#!/bin/sh\nPYTHONPATH={packages} exec /usr/bin/python3 "$@"\n')
    (image / "pip").write_text('#!/bin/sh\necho "pip stand-in: the image already has fsspec and s3fs"\n')
    for f in ("python", "pip"):
        (image / f).chmod(0o755)
    yield str(image)
    shutil.rmtree(image, ignore_errors=True)


def test_the_tao_sdks_s3_wrapping_runs_input_downloaded_output_uploaded_credentials_as_secrets(
    env, sdks, monkeypatch, s3_server, image_with_fsspec
):
    import boto3
    from tao_sdk.script_runner import build_entrypoint

    access, secret = "AKIA" + secrets.token_hex(8).upper(), "sk-" + secrets.token_hex(16)
    bucket = "tao-bucket"
    s3 = boto3.client(
        "s3", endpoint_url=s3_server, aws_access_key_id=access, aws_secret_access_key=secret, region_name="us-east-1"
    )
    s3.create_bucket(Bucket=bucket)
    payload = "rows-" + secrets.token_hex(8)
    s3.put_object(Bucket=bucket, Key="data/train.txt", Body=payload.encode())
    for name, value in {
        "ACCESS_KEY": access, "SECRET_KEY": secret, "S3_ENDPOINT_URL": s3_server,
        "S3_BUCKET_NAME": bucket, "CLOUD_REGION": "us-east-1",
    }.items():  # fmt: skip
        monkeypatch.setenv(name, value)

    # The training command, run by the TAO SDK's runner with {config_path} its spec file: it reads the
    # downloaded input, writes the output directory the runner uploads, and reports what it was given.
    train = (
        "import json, os, sys; c = json.load(open(sys.argv[1])); d = c['train']['results_dir']; "
        "data = open(c['dataset']['train_file']).read(); os.makedirs(d, exist_ok=True); "
        "open(os.path.join(d, 'model.txt'), 'w').write('trained on ' + data); "
        "m = json.loads(os.environ['CLOUD_METADATA']); b = m['aws']; "
        "print('report ' + json.dumps(dict(input_is_local=not c['dataset']['train_file'].startswith('s3://'), "
        "buckets=list(b), endpoint=b[list(b)[0]]['endpoint_url'], "
        "key_len=len(os.environ.get('AWS_ACCESS_KEY_ID', '')), region=os.environ.get('AWS_DEFAULT_REGION'))))"
    )  # no braces: the runner formats the command with {config_path}
    entry = build_entrypoint(
        command=f"python -c {json.dumps(train)} {{config_path}}",
        specs={"dataset": {"train_file": f"s3://{bucket}/data/train.txt"}, "train": {"results_dir": f"s3://{bucket}/out/run1"}},
        inputs=["dataset.train_file"],
        outputs=["train.results_dir"],
        config_format="json",
    )
    sdk = sdks()
    # The entrypoint as built, after one line that stands for the image's PATH (a job may not set PATH
    # for the batch script itself).
    job = sdk.create_job(image=IMAGE, command=f'export PATH="{image_with_fsspec}:$PATH"\n' + entry["command"], gpu_count=0)
    final = sdk.wait(job.id, timeout=240)
    logs = sdk.get_job_logs(job.id)
    assert final.status == "Complete", (final, logs[-3000:])
    report = json.loads(next(l for l in logs.splitlines() if l.startswith("report "))[len("report ") :])
    assert report == {
        "input_is_local": True, "buckets": [bucket], "endpoint": s3_server, "key_len": len(access), "region": "us-east-1"
    }, report  # fmt: skip
    # The output landed in the bucket.
    body = s3.get_object(Bucket=bucket, Key="out/run1/model.txt")["Body"].read().decode()
    assert body == "trained on " + payload
    # The credentials went as secrets: never in the batch script, a staged file or the logs.
    base = pathlib.Path(env["SLURM_BASE_RESULTS_DIR"])
    staged = [
        base / "sbatch" / f"job_{job.id}.sbatch",
        base / "specs" / f"{job.id}.json",
        base / "env" / f"{job.id}.json",
        base / "meta" / f"{job.id}.json",
    ]
    for path in staged:
        if path.exists():
            text = path.read_text()
            assert access not in text and secret not in text, path
    script = staged[0].read_text()
    assert "CLOUD_METADATA" in script and "AWS_ACCESS_KEY_ID" in script, "named for --container-env"
    assert access not in logs and secret not in logs
    assert not (base / "secrets" / job.id).exists(), "the secrets file is removed once the job ended"
