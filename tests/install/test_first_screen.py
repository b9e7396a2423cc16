"""The README's first screen, followed literally as a new user would, in a clean root against the sandbox:
the README's pip line (the release's wheel), its `tao-slurm init --yes` line (its example host, user,
partition and base directory replaced by the sandbox's, nothing else), then its first job's lines
(submit, watch, logs) as they are written. A user with no settings at all: only a HOME with an SSH key
and the login host's key known. When a line of the README stops working, this fails on that line."""

import json
import os
import re
import shutil
import stat
import subprocess

from conftest import PATH_IN_ROOT, REPO
from test_wheel import install

SSH = "/var/lib/tao-slurm-sandbox/ssh"
BASE = "/var/lib/tao-slurm-sandbox/shared/slurmuser"
# The README's example values, and the sandbox's for them.
SANDBOX = {
    "--host login.example.org": "--host 127.0.0.1:2222",
    "--user me": "--user slurmuser",
    "--partition gpu": "--partition polar",
    "--base-dir /lustre/users/me/tao-slurm": f"--base-dir {BASE}",
}


def readme_lines(title: str) -> list:
    """The command lines of the `sh` blocks of the README's section `## title`, without their comments."""
    text = (REPO / "README.md").read_text()
    assert f"\n## {title}\n" in text, f"the README has no section {title!r}"
    section = text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", section, re.S):
        lines += [line.split("  # ")[0].strip() for line in block.strip().splitlines()]
    return lines


def newcomer_run(root, script: str, timeout=300) -> str:
    """Run a README line in the root as the new user: HOME and PATH, none of the sandbox's settings.
    The additions: the known hosts file by its full path (below), and no squashfs conversion: the
    first job's image is pulled by Pyxis as it is (the conversion has tests of its own)."""
    env = {"HOME": "/work/home", "PATH": PATH_IN_ROOT, "LANG": "C.UTF-8", "TAO_SLURM_USE_SQSH": "false",
           # ssh reads `~/.ssh/known_hosts` from the passwd entry (root's /root in the root), not $HOME: the
           # test's HOME is not root's, a real user's is theirs. The same file a user's default names.
           "SSH_KNOWN_HOSTS": "/work/home/.ssh/known_hosts"}
    out = subprocess.run(root.popen_args("/bin/bash", "-c", script), env=env, capture_output=True, text=True,
                         timeout=timeout)
    assert out.returncode == 0, f"README line: {script}\n-> {out.returncode}\n{out.stdout}\n{out.stderr}"
    return out.stdout + out.stderr


def test_the_readme_first_screen_runs_as_written(root, wheel):
    install(root, wheel)
    # The user's own SSH set-up: a key of theirs in ~/.ssh, the login host already known.
    ssh = root.work / "home/.ssh"
    ssh.mkdir(mode=0o700)
    for name in ("id_ed25519", "id_ed25519.pub", "known_hosts"):
        shutil.copy(f"{SSH}/{name}", ssh / name)
    os.chmod(ssh / "id_ed25519", 0o600)

    (init,) = readme_lines("First settings: `tao-slurm init`")
    assert init.startswith("tao-slurm init --yes "), init
    for example, sandbox in SANDBOX.items():
        assert example in init, f"the README's init line no longer has {example!r}: {init}"
        init = init.replace(example, sandbox)
    said = newcomer_run(root, init)
    env_file = root.work / "home/.config/tao/.env"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600, said
    assert "SLURM_HOSTNAME=127.0.0.1:2222\n" in env_file.read_text(), env_file.read_text()
    assert "preflight: all required checks passed" in said, said

    submit, watch, logs = readme_lines("A first job and its logs")
    assert submit.startswith("tao-slurm submit ") and watch.startswith("tao-slurm watch"), (submit, watch)
    assert logs.startswith("tao-slurm logs JOB_ID"), logs
    said = newcomer_run(root, submit)
    (job,) = json.loads(newcomer_run(root, "tao-slurm list --json 2>/dev/null"))
    assert job["job_id"] in said, f"submit names the job's id: {said}"
    newcomer_run(root, watch)  # exits 0 only when every job ended Complete
    out = newcomer_run(root, logs.replace("JOB_ID", job["job_id"]))
    assert "hello from Slurm" in out, out
