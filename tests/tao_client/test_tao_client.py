"""TAO's own REST client (`tao_sdk.client.TaoClient` from nvidia-tao-client 6.26.3, unchanged) driving
`tao-slurm serve` on the sandbox: login with a tao-slurm token, a Slurm workspace, TAO experiment and
dataset jobs run through TAO's container entrypoint (the sandbox's stand-in writes status.json epochs
and checkpoints), their metadata, logs, listings with TAO's filters, files and downloads, cancel,
delete, retry, pause and resume, GPU types, and the 501 of TAO's features that have no meaning here."""

from __future__ import annotations

import io
import pathlib
import re
import subprocess
import tarfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from tao_sdk.client import TaoClient
from tao_sdk.exceptions import TaoAPIError, TaoAuthenticationError, TaoNotFoundError

from conftest import DOWNLOAD_CAP, ORG, SECRET
from tao_test_support import sandbox_settings, wait_until

TERMINAL = ("Done", "Error", "Canceled")


def finished(client: TaoClient, job_id: str, limit: float = 240) -> dict:
    return wait_until(
        lambda: (lambda m: m if m["status"] in TERMINAL else None)(client.get_job_metadata(job_id)),
        limit,
        f"job {job_id} ends",
        pause=1,
    )


def tar_names(data: bytes) -> list:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as t:
        return sorted(m.name.removeprefix("./") for m in t.getmembers() if m.isfile())


@pytest.fixture(scope="module")
def client(service, tao_home) -> TaoClient:
    """A client logged in as TAO's users do: login() with the key and org, then a fresh client that
    reads ~/.tao/config."""
    creds = TaoClient(base_url=service.url).login(ngc_key=service.token, ngc_org_name=ORG)
    assert creds["token"] == service.token and uuid.UUID(creds["user_id"]), creds
    assert f"tao_org = {ORG}" in (tao_home / ".tao" / "config").read_text().lower()
    return TaoClient()


@pytest.fixture(scope="module")
def workspace(client, results_base) -> str:
    made = client.create_workspace(
        name="tao-client-tests",
        cloud_type="slurm",
        cloud_specific_details={
            "slurm_user": sandbox_settings()["SLURM_USER"],
            "slurm_hostname": "sandbox-login1",
            "base_results_dir": results_base,
        },
    )
    assert made["is_duplicate"] is False, made
    return made["id"]


def test_health_and_login(service, client):
    assert requests.get(f"{service.url}/api/v2/health/liveness", timeout=10).json() == "OK"
    assert requests.get(f"{service.url}/api/v2/health/readiness", timeout=10).json() == "OK"
    assert client.is_authenticated()
    for key, org in [("not-a-token", ORG), (service.token, "another-org")]:
        with pytest.raises(TaoAuthenticationError, match="401"):
            TaoClient(base_url=service.url).login(ngc_key=key, ngc_org_name=org)
    with pytest.raises(TaoAuthenticationError):
        TaoClient(base_url=service.url, org_name=ORG, token="not-a-token").list_jobs()


def test_workspace_and_gpu_types(client, workspace):
    listed = {w["id"]: w for w in client.list_workspaces()}
    assert listed[workspace]["cloud_type"] == "slurm", listed
    assert listed[workspace]["cloud_specific_details"]["slurm_hostname"] == ["sandbox-login1"]
    assert client.get_workspace_metadata(workspace)["name"] == "tao-client-tests"
    gpus = client.get_gpu_types()
    polar = [g for g in gpus if g["node"] == "polar" and g["cluster"] == "default"]
    assert len(polar) == 1, gpus
    assert (polar[0]["max_limit"], polar[0]["gpu_count"], polar[0]["backend_type"]) == (32, 8, "slurm"), polar
    assert polar[0]["current_used"] + polar[0]["current_available"] <= 32


def test_experiment_train_job_end_to_end(client, workspace, tmp_path):
    made = client.create_job(
        kind="experiment",
        action="train",
        specs={"stand_in": {"epochs": 3, "seconds_per_epoch": 0.5}, "train": {"num_epochs": 3}},
        name="tao-client-train",
        description="TaoClient drives tao-slurm",
        network_arch="classification_pyt",
        encryption_key="tlt_encode",
        workspace=workspace,
        docker_env_vars={"STAND_IN_GREETING": "hello"},
        tags=["tao-client-test"],
        backend_details={"backend_type": "slurm", "partition": "polar"},
    )
    job_id = made["id"]
    meta = finished(client, job_id)
    assert meta["status"] == "Done", meta
    assert (meta["kind"], meta["action"], meta["network_arch"], meta["name"]) == (
        "experiment", "train", "classification_pyt", "tao-client-train")
    assert meta["image"] == "nvcr.io#nvidia/tao/tao-toolkit:6.0.0-pyt", "TAO's image for the network"
    assert meta["specs"]["train"] == {"num_epochs": 3}
    assert any(w.startswith("encryption_key ignored") for w in meta["warnings"]), meta["warnings"]
    result = meta["job_details"][job_id]
    assert (result["epoch"], result["max_epoch"], result["detailed_status"]["status"]) == (3, 3, "SUCCESS"), result
    assert result["kpi"] == {"loss": 0.3333}
    slurm = meta["backend_details"]["slurm_metadata"]
    assert slurm["slurm_job_id"] and slurm["job_dir"], slurm

    logs = client.get_job_logs(job_id)
    for line in [
        f"container_handler stand-in: network=classification_pyt action=train job={job_id}",
        f"TAO_API_JOB_ID={job_id}",
        "docker_env_vars STAND_IN_GREETING=hello",
        "Epoch 3/3",
        f"Job {job_id} completed successfully",
    ]:
        assert line in logs, logs

    files = client.list_job_files(job_id)
    for f in ["status.json", "model_epoch_001.pth", "model_epoch_003.pth", "logs/main.out", "logs/main.err"]:
        assert f in files, files
    assert "logs/main.out" not in client.list_job_files(job_id, retrieve_logs=False)

    # The client writes the archive, then calls Path.to_string(), which Python's Path does not have
    # (a defect of nvidia-tao-client 6.26.3): the file is there all the same.
    with pytest.raises(AttributeError, match="to_string"):
        client.download_job_files(job_id, str(tmp_path / "some"), file_lists=["status.json", "model_epoch_002.pth"])
    assert tar_names((tmp_path / "some" / f"{job_id}.tar.gz").read_bytes()) == ["model_epoch_002.pth", "status.json"]
    with pytest.raises(AttributeError, match="to_string"):
        client.download_job_files(job_id, str(tmp_path / "latest"), latest_model=True)
    assert tar_names((tmp_path / "latest" / f"{job_id}.tar.gz").read_bytes()) == ["model_epoch_003.pth"]
    with pytest.raises(AttributeError, match="to_string"):
        client.download_entire_job(job_id, str(tmp_path / "all"))
    names = tar_names((tmp_path / "all" / f"{job_id}.tar.gz").read_bytes())
    assert {"status.json", "model_epoch_003.pth", "logs/main.out"} <= set(names), names
    with pytest.raises(TaoNotFoundError):
        client.download_job_files(job_id, str(tmp_path / "none"), file_lists=["no-such-file.pth"])
    assert not (tmp_path / "none" / f"{job_id}.tar.gz").exists()
    with pytest.raises(TaoAPIError, match="400"):
        client.download_job_files(job_id, str(tmp_path / "bad"), file_lists=["../../etc/passwd"])

    # A child job runs after its parent (TAO's parent_job_id), in the same image table.
    child = client.create_job(
        kind="experiment", action="evaluate", specs={"stand_in": {"epochs": 1, "seconds_per_epoch": 0.1}},
        name="tao-client-evaluate", network_arch="classification_pyt", workspace=workspace, parent_job_id=job_id,
    )["id"]
    child_meta = finished(client, child)
    assert (child_meta["status"], child_meta["parent_id"]) == ("Done", job_id), child_meta


def test_dataset_job_checks_its_paths_on_the_cluster(client, workspace, results_base):
    s = sandbox_settings()
    data = f"{results_base}/images"
    made = subprocess.run(["ssh", "-F", s["SSH_CONFIG"], "sandbox-login1", f"mkdir -p '{data}'"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert made.returncode == 0, made.stderr
    with pytest.raises(TaoAPIError, match="400") as refused:
        client.create_job(kind="dataset", action="validate_images", specs={}, dataset_type="image",
                          train_dataset_uris=[f"lustre://{results_base}/no-such-dir"], workspace=workspace)
    assert "no-such-dir" in str(refused.value)
    ds = client.create_job(
        kind="dataset", action="validate_images", specs={"stand_in": {"epochs": 1, "seconds_per_epoch": 0.1}},
        dataset_type="image", train_dataset_uris=[f"lustre://{data}"], workspace=workspace,
    )["id"]
    meta = finished(client, ds)
    assert (meta["status"], meta["kind"], meta["train_dataset_uris"]) == ("Done", "dataset", [f"lustre://{data}"]), meta
    assert meta["image"] == "nvcr.io#nvidia/tao/tao-toolkit:6.0.0-data-services", "TAO_DS for data services"
    assert "dataset_report.json" in client.list_job_files(ds)
    assert f"dataset train_0: {data}" in client.get_job_logs(ds)


def test_downloads_past_the_cap_are_refused_before_any_archive(client, workspace, tmp_path):
    big = client.create_job(
        kind="experiment", action="train",
        specs={"stand_in": {"epochs": 1, "seconds_per_epoch": 0.1, "extra_bytes": DOWNLOAD_CAP + 1}},
        name="tao-client-big", network_arch="rtdetr", workspace=workspace,
    )["id"]
    assert finished(client, big)["status"] == "Done"
    with pytest.raises(TaoAPIError, match="413") as refused:
        client.download_entire_job(big, str(tmp_path))
    assert f"more than the {DOWNLOAD_CAP}-byte cap" in str(refused.value)
    with pytest.raises(AttributeError, match="to_string"):
        client.download_job_files(big, str(tmp_path / "small"), file_lists=["status.json"])
    assert tar_names((tmp_path / "small" / f"{big}.tar.gz").read_bytes()) == ["status.json"]


def test_listing_with_taos_filters(client, workspace):
    # The jobs of the tests above (module order), and one more to tell filters apart.
    all_jobs = client.list_jobs()
    assert len(all_jobs) >= 3, all_jobs
    by_arch = client.list_jobs({"network_arch": "classification_pyt"})
    assert by_arch and all(j["network_arch"] == "classification_pyt" for j in by_arch)
    datasets = client.list_jobs({"kind": "dataset"})
    assert datasets and all(j["kind"] == "dataset" for j in datasets)
    tagged = client.list_jobs({"tags": "tao-client-test"})
    assert [j["name"] for j in tagged] == ["tao-client-train"], tagged
    named = client.list_jobs({"name": "tao-client-evaluate"})
    assert len(named) == 1
    assert {j["id"] for j in client.list_jobs({"search": "drives TAO-SLURM"})} == {tagged[0]["id"]}
    oldest_first = client.list_jobs({"sort": "date-ascending"})
    assert [j["id"] for j in oldest_first] == [j["id"] for j in reversed(all_jobs)]
    assert len(client.list_jobs({"skip": 1, "size": 1})) == 1
    done = client.list_jobs({"status": "Done"})
    assert done and all(j["status"] == "Done" for j in done)
    assert all(j["status"] != "Done" for j in client.list_jobs({"status": "!Done"}))


def test_cancel_failure_and_delete(client, workspace):
    long = client.create_job(
        kind="experiment", action="train", specs={"stand_in": {"epochs": 300, "seconds_per_epoch": 1}},
        name="tao-client-long", network_arch="dino", workspace=workspace,
    )["id"]
    wait_until(lambda: client.get_job_metadata(long)["status"] == "Running", 180, f"job {long} runs", pause=1)
    client.cancel_job(long)
    assert finished(client, long)["status"] == "Canceled"

    failing = client.create_job(
        kind="experiment", action="train", specs={"stand_in": {"epochs": 2, "fail": True, "seconds_per_epoch": 0.1}},
        name="tao-client-failing", network_arch="dino", workspace=workspace,
    )["id"]
    meta = finished(client, failing)
    assert meta["status"] == "Error", meta
    assert meta["job_details"][failing]["detailed_status"]["status"] == "FAILURE", meta
    assert "stand-in asked to fail" in client.get_job_logs(failing)

    deleted = client.delete_job(failing)
    assert deleted == {"id": failing, "deleted": True}, deleted
    with pytest.raises(TaoNotFoundError):
        client.get_job_metadata(failing)
    assert failing not in {j["id"] for j in client.list_jobs()}


def test_taos_features_without_meaning_here_answer_501(client):
    for call in [client.list_datasets, client.list_base_experiments]:
        with pytest.raises(TaoAPIError, match="501") as e:
            call()
        assert "not implemented by tao-slurm" in str(e.value)
    with pytest.raises(TaoAPIError, match="501"):
        client.update_job(str(uuid.uuid4()), {"name": "x"})


def test_a_tao_body_may_name_the_orgs_secrets(service, client, workspace, results_base):
    # Not TaoClient's (it has no such argument): TAO's body with tao-slurm's secret_env beside it.
    r = requests.post(
        f"{service.url}/api/v2/orgs/{ORG}/jobs",
        json={"kind": "experiment", "action": "train", "network_arch": "dino", "name": "tao-client-secret",
              "workspace": workspace, "specs": {"stand_in": {"epochs": 1, "seconds_per_epoch": 0.1}},
              "docker_env_vars": {"STAND_IN_PLAIN": "visible"}, "secret_env": ["STAND_IN_SECRET"],
              "automl_settings": {"automl_enabled": False}},
        headers={"Authorization": f"Bearer {service.token}"},
        timeout=120,
    )
    job = r.json()
    assert r.status_code == 201, job
    assert job["warnings"] == [], "an unset AutoML section warns of nothing"
    assert finished(client, job["id"])["status"] == "Done"
    logs = client.get_job_logs(job["id"])
    assert "the secret STAND_IN_SECRET arrived" in logs and "docker_env_vars STAND_IN_PLAIN=visible" in logs, logs
    staged = (pathlib.Path(results_base) / "env" / f"{job['id']}.json").read_text()
    assert "STAND_IN_PLAIN" in staged and SECRET not in staged and SECRET not in logs


def test_errors_have_taos_types(service, client):
    r = requests.post(
        f"{service.url}/api/v2/orgs/{ORG}/jobs",
        json={"kind": "experiment", "action": "train", "network_arch": "no_such_net", "specs": {}},
        headers={"Authorization": f"Bearer {service.token}"},
        timeout=30,
    )
    body = r.json()
    assert (r.status_code, body["error_code"], body["error_type"], body["field"]) == (
        400, 400, "invalid_field", "network_arch"), body
    assert isinstance(body["error_desc"], str) and "no_such_net" in body["error_desc"]
    t = time.monotonic()
    with pytest.raises(TaoNotFoundError):
        client.get_job_metadata(str(uuid.uuid4()))
    assert time.monotonic() - t < 10


def test_retry_job_resumes_from_the_newest_checkpoint(client, workspace):
    # The stand-in fails after its first epoch unless its specs name a checkpoint to resume from.
    job = client.create_job(
        kind="experiment", action="train",
        specs={"stand_in": {"epochs": 3, "fail_unless_resumed": True, "seconds_per_epoch": 0.1}},
        name="tao-client-retried", network_arch="dino", workspace=workspace,
    )["id"]
    assert finished(client, job)["status"] == "Error"
    client.retry_job(job)
    meta = finished(client, job)
    assert meta["status"] == "Done", meta
    logs = client.get_job_logs(job)
    # TAO's resume key in the staged specs and TAO_RESUME_CHECKPOINT name the first attempt's checkpoint.
    resumed = [line for line in logs.splitlines() if line.startswith("Resuming from ")]
    assert len(resumed) == 1 and resumed[0].count("model_epoch_001.pth") == 2, logs
    # The retried attempt's log: it went on from epoch 2, it did not start again.
    assert "Epoch 1/3" not in logs and "Epoch 2/3" in logs and "Epoch 3/3" in logs, logs
    with pytest.raises(TaoAPIError, match="nothing to retry"):
        client.retry_job(job)
    assert client.get_job_metadata(job)["status"] == "Done"


def test_pause_job_gracefully_and_resume_job_go_on_from_the_checkpoint(service, client, workspace):
    # 6 epochs of 2 s; the stand-in ends on the checkpoint signal (as a program without a handler
    # does), after the checkpoint of each finished epoch.
    specs = {"stand_in": {"epochs": 6, "seconds_per_epoch": 2}}
    job = client.create_job(
        kind="experiment", action="train", specs=specs, name="tao-client-paused", network_arch="dino",
        workspace=workspace,
    )["id"]
    wait_until(lambda: "Epoch 2/6" in client.get_job_logs(job), 180, "two epochs", pause=1)
    client.pause_job(job, graceful=True)
    meta = wait_until(
        lambda: (lambda m: m if m["status"] == "Paused" else None)(client.get_job_metadata(job)), 120,
        "the pause ends", pause=1,
    )
    client.pause_job(job)  # idempotent
    assert client.get_job_metadata(job)["status"] == "Paused", meta
    saved = max(int(n) for n in re.findall(r"Epoch (\d)/6", client.get_job_logs(job)))
    assert saved < 6
    # Two resumes at once (TAO's body, with specs that make the rest faster): one new attempt.
    faster = {"stand_in": {"epochs": 6, "seconds_per_epoch": 0.2}}
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda _: client.resume_job(job, faster), range(2)))
    assert client.get_job_metadata(job)["status"] in ("Resuming", "Running", "Done")
    meta = finished(client, job)
    assert meta["status"] == "Done", meta
    attempts = requests.get(
        f"{service.url}/api/v2/orgs/{ORG}/jobs/{job}:attempts",
        headers={"Authorization": f"Bearer {service.token}"}, timeout=30,
    ).json()["attempts"]
    assert len(attempts) == 2, attempts
    logs = client.get_job_logs(job)
    assert "Resuming from " in logs and f"model_epoch_{saved:03d}.pth" in logs, logs
    assert f"Epoch {saved}/6" not in logs and "Epoch 6/6" in logs, logs
    with pytest.raises(TaoAPIError, match="nothing to resume"):
        client.resume_job(job, {})
    with pytest.raises(TaoAPIError, match="nothing to pause"):
        client.pause_job(job)
    # Each pause and resume is in the org's audit trail, with its outcome.
    trail = requests.get(
        f"{service.url}/api/v2/orgs/{ORG}:audit", params={"size": 1000},
        headers={"Authorization": f"Bearer {service.token}"}, timeout=30,
    ).json()["entries"]
    mine = [(e["action"], e["status"]) for e in trail if e["target"] == job]
    assert mine.count(("jobs.pause", 200)) == 2 and mine.count(("jobs.resume", 200)) == 2, mine
    assert ("jobs.resume", 400) in mine and ("jobs.pause", 400) in mine, mine
