"""The service's image (built offline by dev/release with podman: its base a Debian root made by
debootstrap) runs `serve` against the sandbox cluster with its state on a volume, stops on SIGTERM, and
starts again from the same volume with the job it ran; deploy/tao-slurm-kube.yaml runs it beside
PostgreSQL with `podman play kube`, the jobs' state in that database."""

import io
import json
import pathlib
import re
import socket
import subprocess
import tarfile
import uuid

import pytest
import requests
from conftest import REPO, VERSION
from tao_test_support import sandbox_settings, wait_until

IMAGE = f"localhost/tao-slurm:{VERSION}"
HOME = "/var/lib/tao-slurm"
ORG = "team-a"
UID = 10001


def podman(*args, ok=True, timeout=300) -> subprocess.CompletedProcess:
    out = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)
    if ok:
        assert out.returncode == 0, f"podman {' '.join(args)}: {out.returncode}\n{out.stdout}\n{out.stderr}"
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read(path: str) -> str:
    return pathlib.Path(path).read_text()


def settings_tar() -> bytes:
    """The service's home as a user sets it up: .env, clusters.toml and the SSH files, owned by its user."""
    s = sandbox_settings()
    ssh = f"{HOME}/.ssh"
    config = (read(s["SSH_CONFIG"])
              .replace(s["SSH_KEY_PATH"], f"{ssh}/id_ed25519").replace(s["SSH_KNOWN_HOSTS"], f"{ssh}/known_hosts"))
    env = "\n".join([
        f"SLURM_USER={s['SLURM_USER']}", "SLURM_HOSTNAME=sandbox-login1", f"SLURM_PARTITION={s['SLURM_PARTITION']}",
        f"SLURM_BASE_RESULTS_DIR={s['SLURM_BASE_RESULTS_DIR']}", f"SSH_CONFIG={ssh}/config",
        f"SSH_KNOWN_HOSTS={ssh}/known_hosts", f"SSH_KEY_PATH={ssh}/id_ed25519", "TAO_SLURM_USE_SQSH=false",
        "TAO_SLURM_RETRY_BACKOFF_SECS=1", "",
    ])
    files = {
        ".config/tao/.env": env,
        ".config/tao/clusters.toml": f'[default]\norgs = ["{ORG}"]\n',
        ".ssh/config": config,
        ".ssh/known_hosts": read(s["SSH_KNOWN_HOSTS"]),
        ".ssh/id_ed25519": read(s["SSH_KEY_PATH"]),
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in (".config", ".config/tao", ".ssh"):
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.uid, info.gid = tarfile.DIRTYPE, 0o700, UID, UID
            tar.addfile(info)
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.uid, info.gid = len(data), 0o600, UID, UID
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture
def volume(tmp_path):
    """A fresh volume holding the service's settings; removed at the end."""
    name = f"tao-slurm-test-{uuid.uuid4().hex[:8]}"
    podman("volume", "create", name)
    seed = tmp_path / "seed.tar"
    seed.write_bytes(settings_tar())
    podman("run", "--rm", "--network", "none", "--user", "0", "-v", f"{name}:{HOME}", "-v", f"{seed}:/seed.tar:ro",
           "--entrypoint", "tar", IMAGE, "-xpf", "/seed.tar", "-C", HOME, "--same-owner")
    yield name
    podman("volume", "rm", "-f", name, ok=False)


class Api:
    def __init__(self, url: str, token: str):
        self.url, self.http = url, requests.Session()
        self.http.headers["Authorization"] = f"Bearer {token}"

    def jobs(self, path: str = "") -> str:
        return f"{self.url}/api/v2/orgs/{ORG}/jobs{path}"

    def accepted(self) -> "Api":
        """Once the service took the token (it reloads them every second)."""
        wait_until(lambda: self.http.get(self.jobs(), timeout=30).status_code == 200, 30, "the token is accepted")
        return self

    def run_job(self) -> str:
        """Create a job that prints a word of its own, wait for it to end, read the word in its log."""
        word = f"image-{uuid.uuid4().hex[:12]}"
        body = {"image": "ubuntu:22.04", "command": ["echo", word], "gpus": 0, "time_hours": 0.25,
                "timeout_hours": 0.2}
        r = self.http.post(self.jobs(), json=body, timeout=120)
        assert r.status_code == 201, r.text
        job = r.json()["id"]
        done = wait_until(lambda: self.job(job)["platform_status"] in ("Complete", "Error", "Canceled")
                          and self.job(job), 240, f"job {job} ends")
        assert done["platform_status"] == "Complete", done
        logs = self.http.get(self.jobs(f"/{job}:logs"), timeout=60).text
        assert word in logs, logs
        return job

    def job(self, job: str) -> dict:
        r = self.http.get(self.jobs(f"/{job}"), timeout=60)
        assert r.status_code == 200, r.text
        return r.json()


def listening(container: str) -> str:
    """The URL `serve` printed (bounded wait); fails with its log if it exited."""
    def url():
        out = podman("logs", container, ok=False)
        m = re.search(r"listening on (http://127\.0\.0\.1:\d+)/", out.stdout)
        state = podman("inspect", "--format", "{{.State.Status}}", container, ok=False).stdout.strip()
        assert state in ("running", "created", "configured"), f"{container} {state}:\n{out.stdout}\n{out.stderr}"
        return m and m.group(1)
    return wait_until(url, 120, f"{container} serves")


def token(volume: str, *env: str) -> str:
    """A token for ORG, made by the image's `token create` over the same state."""
    flags = [x for e in env for x in ("-e", e)]
    out = podman("run", "--rm", "--network", "host", *flags, "-v", f"{volume}:{HOME}", IMAGE,
                 "token", "create", "--org", ORG, "--name", "image-test", "--json")
    return json.loads(out.stdout)["token"]


def serve(volume: str, name: str, port: int) -> str:
    podman("run", "-d", "--name", name, "--network", "host", "-v", f"{volume}:{HOME}", IMAGE,
           "serve", "--bind", "127.0.0.1", "--port", str(port))
    return listening(name)


def test_the_image_serves_from_a_volume_and_stops_on_sigterm(volume):
    # The Dockerfile's user and stop signal.
    config = podman("image", "inspect", "--format", "{{.Config.StopSignal}} {{.Config.User}}", IMAGE).stdout.split()
    assert config == ["SIGTERM", "tao"], config
    api_token = token(volume)
    name = f"{volume}-serve"
    try:
        url = serve(volume, name, free_port())
        job = Api(url, api_token).run_job()
        # podman stop sends the image's STOPSIGNAL (SIGTERM); the service finishes and exits 0 at once.
        podman("stop", "--time", "60", name)
        state = podman("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
        log = podman("logs", name).stderr
        assert state == "0" and "stopping; finishing the requests in flight" in log, (state, log)
        podman("rm", name)
        # The state is on the volume: a new container knows the job and its token.
        url = serve(volume, name, free_port())
        again = Api(url, api_token).job(job)
        assert again["platform_status"] == "Complete", again
    finally:
        podman("rm", "-f", name, ok=False)


def test_the_kube_deployment_runs_the_service_beside_postgresql(volume, tmp_path):
    """deploy/tao-slurm-kube.yaml as it is, its pod, volume and port names made the test's own."""
    suffix = volume.rsplit("-", 1)[1]
    port, pg_port = free_port(), free_port()
    text = (REPO / "deploy/tao-slurm-kube.yaml").read_text()
    assert "port=5433" in text and "--port 8570" in text and "claimName: tao-slurm\n" in text
    text = (text.replace("name: tao-slurm\n", f"name: tao-slurm-{suffix}\n", 1)
            .replace("claimName: tao-slurm\n", f"claimName: {volume}\n")
            .replace("claimName: tao-slurm-pg\n", f"claimName: {volume}-pg\n")
            .replace("5433", str(pg_port)).replace("--port 8570", f"--port {port}"))
    kube = tmp_path / "kube.yaml"
    kube.write_text(text)
    pod = f"tao-slurm-{suffix}"
    try:
        podman("play", "kube", str(kube))
        url = listening(f"{pod}-service")
        db = [f"TAO_SLURM_DATABASE_URL=postgresql://tao@127.0.0.1:{pg_port}/tao_slurm",
              "TAO_SLURM_DATABASE_PASSWORD=tao-slurm-example-password"]
        api = Api(url, token(volume, *db)).accepted()
        job = api.run_job()
        # The job's row is in PostgreSQL (the service keeps no state file then).
        job = str(uuid.UUID(job))  # (the service's answer, checked before it goes into SQL)
        rows = podman("exec", f"{pod}-postgres", "runuser", "-u", "postgres", "--", "psql", "-h", "/tmp",
                      "-p", str(pg_port), "-d", "tao_slurm", "-Atc",
                      f"select count(*) from tao_state.jobs where job_id = '{job}'", ok=False)
        assert rows.stdout.strip() == "1", (rows.stdout, rows.stderr)
        podman("play", "kube", "--down", str(kube))
        podman("play", "kube", str(kube))
        url = listening(f"{pod}-service")
        assert Api(url, api.http.headers["Authorization"][7:]).job(job)["platform_status"] == "Complete"
    finally:
        podman("play", "kube", "--down", str(kube), ok=False)
        podman("volume", "rm", "-f", f"{volume}-pg", ok=False)
