"""Harness of the install checks: the release's files (dev/release, in TAO_SLURM_DIST) installed in clean
Debian roots with no compiler and no Rust (tests/install/clean-root.sh: Debian 13 and the oldest release
the mirror serves), each command run there by tests/install/in-root.sh, against the sandbox cluster over
real SSH on loopback. The README's install lines are what the tests run. A missing release, root or
sandbox is a failure, never a skip."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "support"))
from tao_test_support import REPO, user_env  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
# Debian 13, and the oldest Debian the mirror still serves (11: glibc 2.31, Python 3.9).
SUITES = ("trixie", "bullseye")
TOOLS = pathlib.Path("/var/cache/tao-slurm-release/tools/bin")
VERSION = re.search(r'^version = "(.+)"', (REPO / "Cargo.toml").read_text(), re.M).group(1)
PATH_IN_ROOT = "/work/venv/bin:/work/home/.local/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"


@pytest.fixture(scope="session")
def dist() -> pathlib.Path:
    value = os.environ.get("TAO_SLURM_DIST", "")
    if not value or not pathlib.Path(value).is_dir():
        pytest.fail(f"TAO_SLURM_DIST ({value!r}) is not a directory: run bash tests/install/run (dev/release builds it)")
    return pathlib.Path(value)


def one(dist: pathlib.Path, pattern: str) -> pathlib.Path:
    found = sorted(dist.glob(pattern))
    assert len(found) == 1, f"{dist}: {pattern} matches {found}"
    return found[0]


@pytest.fixture(scope="session")
def wheel(dist) -> pathlib.Path:
    return one(dist, f"tao_slurm-{VERSION}-cp39-abi3-*manylinux_2_17_x86_64.whl")


@pytest.fixture(scope="session")
def archive(dist) -> pathlib.Path:
    return one(dist, f"tao-slurm-{VERSION}-x86_64-linux.tar.gz")


def readme_install_lines() -> dict:
    """The README's install section: one `sh` line per way (pip, uv, archive, image), by its comment."""
    text = (REPO / "README.md").read_text()
    section = text.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    lines = {}
    for block in re.findall(r"```sh\n(.*?)```", section, re.S):
        (line,) = block.strip().splitlines()
        command, _, way = line.partition("  # ")
        lines[way.split(":")[0].strip()] = command.strip()
    return lines


class Root:
    """A clean root with this test's work directory at /work (HOME is /work/home)."""

    def __init__(self, path: pathlib.Path, work: pathlib.Path):
        self.path, self.work = path, work
        (work / "home").mkdir(exist_ok=True)

    def env(self, **extra) -> dict:
        env = user_env(pathlib.Path("/work/home"), state=pathlib.Path("/work/state.db"))
        env.pop("TAO_SLURM_TEST_DATABASE_URL", None)
        env.update(PATH=PATH_IN_ROOT, LANG="C.UTF-8")
        env.update(extra)
        return env

    def popen_args(self, *cmd: str) -> list:
        return ["/bin/bash", str(HERE / "in-root.sh"), str(self.path), str(self.work), *cmd]

    def run(self, script: str, ok=True, timeout=300, **extra) -> subprocess.CompletedProcess:
        """Run a bash script (the tests' own text) in the root; fail with its output unless it succeeded."""
        out = subprocess.run(
            self.popen_args("/bin/bash", "-c", script), env=self.env(**extra), capture_output=True, text=True, timeout=timeout
        )
        if ok:
            assert out.returncode == 0, f"{script}\n-> {out.returncode}\n{out.stdout}\n{out.stderr}"
        return out


@pytest.fixture(scope="session", params=SUITES)
def root_path(request) -> pathlib.Path:
    out = subprocess.run(["bash", str(HERE / "clean-root.sh"), request.param], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return pathlib.Path(out.stdout.strip())


@pytest.fixture
def root(root_path, tmp_path) -> Root:
    r = Root(root_path, tmp_path)
    # Clean means no compiler and no Rust toolchain: nothing could have built the package here.
    r.run("for t in cc gcc c++ clang rustc cargo maturin; do ! command -v $t || exit 1; done")
    return r
