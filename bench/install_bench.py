"""The install figures, run inside a clean Debian root by dev/bench-install (/work holds the release
files and the tree's release build): `pip install` of the wheel from its file into a fresh venv, and the
start of the installed `tao-slurm --version` against the tree's `cargo build --release` one, the two in
turn. Prints one JSON object of medians (seconds)."""

import json
import pathlib
import statistics
import subprocess
import sys
import time

work = pathlib.Path("/work")
wheel = next(work.glob("tao_slurm-*.whl"))
installs = []
for i in range(int(sys.argv[1]) if len(sys.argv) > 1 else 5):
    venv = work / f"venv{i}"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    start = time.perf_counter()
    subprocess.run([str(venv / "bin/pip"), "install", "-q", "--no-index", "--disable-pip-version-check", str(wheel)],
                   check=True)
    installs.append(time.perf_counter() - start)

installed, tree = str(work / "venv0/bin/tao-slurm"), str(work / "tree/tao-slurm")
starts = {installed: [], tree: []}
for _ in range(50):
    for exe in (installed, tree):
        start = time.perf_counter()
        subprocess.run([exe, "--version"], check=True, stdout=subprocess.DEVNULL)
        starts[exe].append(time.perf_counter() - start)
ratios = [a / b for a, b in zip(starts[installed], starts[tree])]
print(json.dumps({
    "pip_install_s": statistics.median(installs),
    "pip_install_min_max_s": [min(installs), max(installs)],
    "version_installed_s": statistics.median(starts[installed]),
    "version_tree_release_s": statistics.median(starts[tree]),
    "version_ratio_median": statistics.median(ratios),
}))
