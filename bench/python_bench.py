"""tao_slurm against NVIDIA's TAO SDK (nvidia-tao-sdk 7.2.0), side by side on the sandbox cluster.

Run by dev/bench-python, in a virtual environment of its own that holds both packages (the TAO SDK
from PyPI, tao_slurm as a release wheel). Each side runs in a fresh process with its own HOME, state
and SSH key; its logins are counted in the sandbox's sshd logs by that key's fingerprint, so other
users of the sandbox never count. Measured, in this order, for each side:

  create_job      latency of submitting a small job (the first in a fresh process, then the median of
                  the next ones) and SSH logins per call
  status_pending  get_job_status of a pending job (median) and logins per call
  refresh_50      bringing 50 pending jobs up to date: 50 get_job_status calls (the TAO SDK's only way),
                  and for tao_slurm also one SlurmSDK.refresh() of all 50
  cancel_pending  cancel_job of a pending job, and whether its status is Canceled right after
  launch          a job that runs `echo hello` to its end: what each reports

Jobs are kept pending with `--begin=now+1hour` (tao_slurm: sbatch_options={"begin": ...}; the TAO SDK
has no such argument, so the directive reaches its script through its partition argument, which it
writes into `#SBATCH --partition=` unquoted). Nothing occupies a node. Everything submitted is
cancelled at the end. Writes bench/python-report.json and its section of bench/report.md.
Env: BENCH_PY_JOBS (default 50), BENCH_PY_REPEATS (default 10).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
SANDBOX = pathlib.Path(os.environ.get("SANDBOX_DIR", "/var/lib/tao-slurm-sandbox"))
REPORT_MD = REPO / "bench" / "report.md"
REPORT_JSON = REPO / "bench" / "python-report.json"
BEGIN, END = "<!-- python-bench:begin -->", "<!-- python-bench:end -->"
JOBS = int(os.environ.get("BENCH_PY_JOBS", "50"))
REPEATS = int(os.environ.get("BENCH_PY_REPEATS", "10"))
IMAGE = "nvcr.io/nvidia/tao/tao-toolkit:6.26.3-pyt"
TERMINAL = ("Complete", "Error", "Canceled")


def sandbox_settings() -> dict:
    pairs = (l.split("=", 1) for l in (SANDBOX / "settings.env").read_text().splitlines() if "=" in l)
    return {k.strip(): v.strip() for k, v in pairs}


def logins(fingerprint: str) -> int:
    total = 0
    for path in sandbox_settings()["SANDBOX_SSHD_LOGS"].split(","):
        with open(path, errors="replace") as f:
            total += sum(1 for l in f if "Accepted publickey for" in l and fingerprint in l)
    return total


def own_key(home: pathlib.Path) -> tuple[str, str]:
    """A key of this side's own, authorised for the sandbox user; returns (path, fingerprint)."""
    ssh = home / ".ssh"
    ssh.mkdir(parents=True, mode=0o700)
    key = ssh / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    auth = SANDBOX / "home" / "slurmuser" / ".ssh" / "authorized_keys"
    with open(auth, "a") as f:
        f.write(key.with_suffix(".pub").read_text())
    out = subprocess.run(["ssh-keygen", "-lf", str(key.with_suffix(".pub"))], capture_output=True, text=True)
    return str(key), out.stdout.split()[1]


# -- the child: one side, in its own process -------------------------------------------------------


def child(side: str) -> None:
    fp = os.environ["BENCH_FINGERPRINT"]
    out: dict = {"side": side}
    begin = {"begin": "now+3600"}
    command = "echo hello"
    if side == "tao":
        from tao_sdk.platforms.slurm import SlurmSDK

        sdk = SlurmSDK(poll_interval=3600)
        pending_kwargs = {"partition": "polar\n#SBATCH --begin=now+3600"}
    else:
        from tao_slurm import SlurmSDK

        sdk = SlurmSDK(poll_interval=3600)
        pending_kwargs = {"sbatch_options": begin}

    def create(**kw):
        return sdk.create_job(image=IMAGE, command=command, gpu_count=1, **kw)

    def timed(fn):
        before = logins(fp)
        t = time.perf_counter()
        value = fn()
        return value, (time.perf_counter() - t) * 1000, logins(fp) - before

    # create_job: the first in this process, then the others
    jobs, times, counts = [], [], []
    for _ in range(REPEATS + 1):
        job, ms, n = timed(lambda: create(**pending_kwargs))
        jobs.append(job.id)
        times.append(ms)
        counts.append(n)
    out["create_job"] = {
        "first_ms": times[0],
        "first_logins": counts[0],
        "median_ms": statistics.median(times[1:]),
        "logins_per_call": statistics.mean(counts[1:]),
    }
    # get_job_status of a pending job
    statuses, times, counts = [], [], []
    for _ in range(REPEATS):
        st, ms, n = timed(lambda: sdk.get_job_status(jobs[0]))
        statuses.append(st.status)
        times.append(ms)
        counts.append(n)
    out["status_pending"] = {
        "median_ms": statistics.median(times),
        "logins_per_call": statistics.mean(counts),
        "statuses": sorted(set(statuses)),
    }
    # refresh 50 pending jobs
    while len(jobs) < JOBS:
        jobs.append(create(**pending_kwargs).id)
    ids = jobs[:JOBS]
    result, ms, n = timed(lambda: [sdk.get_job_status(i).status for i in ids])
    out["refresh_50_loop"] = {"ms": ms, "logins": n, "statuses": sorted(set(result))}
    if side == "ours":
        result, ms, n = timed(lambda: [s.status for s in sdk.refresh(ids)])
        out["refresh_50_batch"] = {"ms": ms, "logins": n, "statuses": sorted(set(result))}
    # cancel a pending job
    target = ids[-1]
    ok, ms, n = timed(lambda: sdk.cancel_job(target))
    after, ms2, n2 = timed(lambda: sdk.get_job_status(target).status)
    out["cancel_pending"] = {"ms": ms, "logins": n, "returned": ok, "status_after": after, "status_ms": ms2}
    # a job that runs to its end
    job = create()
    deadline = time.monotonic() + 90
    seen = []
    while time.monotonic() < deadline:
        st = sdk.get_job_status(job.id)
        if not seen or seen[-1] != st.status:
            seen.append(st.status)
        if st.status in TERMINAL:
            break
        time.sleep(1)
    out["launch"] = {
        "job_id": job.id,
        "statuses": seen,
        "message": st.message,
        "logs": sdk.get_job_logs(job.id)[-400:],
    }
    # cleanup: cancel every job this side submitted
    for i in ids[:-1]:
        try:
            sdk.cancel_job(i)
        except Exception as e:  # noqa: BLE001
            out.setdefault("cleanup_errors", []).append(str(e)[:200])
    out["job_ids"] = ids
    print(json.dumps(out))


# -- the parent: set up both sides, run them, write the report ------------------------------------


def run_side(side: str, workdir: pathlib.Path) -> dict:
    env = side_env(side, workdir)
    run = subprocess.run(
        [sys.executable, __file__, "--side", side], env=env, capture_output=True, text=True, timeout=3600
    )
    if run.returncode != 0:
        raise SystemExit(f"the {side} side failed:\n{run.stderr[-4000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def side_env(side: str, workdir: pathlib.Path) -> dict:
    """The environment of one side's process ("tao": NVIDIA's SDK, "ours": tao_slurm): its own HOME,
    state and key (its fingerprint in BENCH_FINGERPRINT). Also used by bench/automl_bench.py."""
    settings = sandbox_settings()
    home = workdir / side
    home.mkdir()
    key, fp = own_key(home)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TAO_", "SSH_"))}
    env.update(
        {
            "HOME": str(home),
            "BENCH_FINGERPRINT": fp,
            "SLURM_USER": settings["SLURM_USER"],
            "SLURM_PARTITION": settings["SLURM_PARTITION"],
            "SLURM_BASE_RESULTS_DIR": settings["SLURM_BASE_RESULTS_DIR"],
            "SSH_KEY_PATH": key,
            "SLURM_USE_SQSH": "false",
        }
    )
    ports = settings["SANDBOX_SSH_PORTS"].split(",")
    if side == "tao":
        # The TAO SDK runs `ssh user@host` and `scp` with no port or config option: the hosts are
        # aliases that an ssh_config of this side names (what a user's ~/.ssh/config would do),
        # passed by ssh/scp wrappers first on PATH. Its own options (no host key checks) apply.
        conf = home / "ssh_config"
        conf.write_text(
            "".join(f"Host bench-login{i + 1}\n  HostName 127.0.0.1\n  Port {p}\n" for i, p in enumerate(ports))
        )
        wrappers = home / "bin"
        wrappers.mkdir()
        for tool in ("ssh", "scp"):
            w = wrappers / tool
            w.write_text(f'#!/bin/sh\nexec /usr/bin/{tool} -F {conf} "$@"\n')
            w.chmod(0o755)
        env["PATH"] = f"{wrappers}:{env['PATH']}"
        env["SLURM_HOSTNAME"] = ",".join(f"bench-login{i + 1}" for i in range(len(ports)))
        env["TAO_SDK_STATE_DIR"] = str(home / "tao-state")
    else:
        env["SLURM_HOSTNAME"] = ",".join(f"127.0.0.1:{p}" for p in ports)
        env["SSH_KNOWN_HOSTS"] = settings["SSH_KNOWN_HOSTS"]
        env["TAO_SLURM_STATE"] = str(home / "state.db")
        # Its own (fresh) ControlMaster directory, short: socket paths are limited to 108 bytes.
        env["TAO_SLURM_CONTROL_DIR"] = tempfile.mkdtemp(prefix="tpb", dir="/tmp")
        env["TAO_SLURM_CONTROL_PERSIST"] = "60"
    return env


def scancel_leftovers(job_names_of: list[str]) -> None:
    """Safety net: cancel, by name, whatever the sides left (with the sandbox's own key)."""
    settings = sandbox_settings()
    names = ",".join(f"tao-job-{i}" for i in job_names_of)
    if names:
        subprocess.run(
            ["ssh", "-F", settings["SSH_CONFIG"], "sandbox-login1", f"scancel --name={names} 2>/dev/null; true"],
            check=False,
        )


def fmt(ms: float) -> str:
    return f"{ms:,.0f}" if ms >= 100 else f"{ms:.1f}"


def main() -> None:
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="tao-slurm-pybench-"))
    ours = run_side("ours", workdir)
    tao = run_side("tao", workdir)
    scancel_leftovers(ours.get("job_ids", []) + tao.get("job_ids", []))
    shutil.rmtree(workdir, ignore_errors=True)
    import importlib.metadata as md

    versions = {"nvidia-tao-sdk": md.version("nvidia-tao-sdk"), "tao-slurm": md.version("tao-slurm")}
    report = {"versions": versions, "jobs": JOBS, "repeats": REPEATS, "ours": ours, "tao": tao}
    REPORT_JSON.write_text(json.dumps(report, indent=2) + "\n")
    REPORT_MD.write_text(splice(REPORT_MD.read_text(), section(report)))
    print(section(report))


def section(r: dict) -> str:
    o, t = r["ours"], r["tao"]
    ratio = lambda a, b: f"{a / b:.0f}x" if b else "-"  # noqa: E731
    c_o, c_t = o["create_job"], t["create_job"]
    s_o, s_t = o["status_pending"], t["status_pending"]
    l_o, l_t, b_o = o["refresh_50_loop"], t["refresh_50_loop"], o["refresh_50_batch"]
    x_o, x_t = o["cancel_pending"], t["cancel_pending"]
    lines = [
        BEGIN,
        f"## Python: tao_slurm against the TAO SDK (`bench/python_bench.py`, nvidia-tao-sdk {r['versions']['nvidia-tao-sdk']})",
        "",
        "Both in one run on the sandbox, each in a fresh process with its own key (logins counted in the sshd",
        "logs by fingerprint); times are medians on this shared 2-core machine. Jobs are kept pending with",
        "`--begin`; sqsh conversion is off on both sides.",
        "",
        "| operation | tao_slurm | TAO SDK 7.2.0 | ratio (time) |",
        "|---|---|---|---|",
        f"| `create_job`, first in a process | {fmt(c_o['first_ms'])} ms, {c_o['first_logins']} login(s) | "
        f"{fmt(c_t['first_ms'])} ms, {c_t['first_logins']} logins | {ratio(c_t['first_ms'], c_o['first_ms'])} |",
        f"| `create_job`, next ones (median of {r['repeats']}) | {fmt(c_o['median_ms'])} ms, {c_o['logins_per_call']:g} logins each | "
        f"{fmt(c_t['median_ms'])} ms, {c_t['logins_per_call']:g} logins each | {ratio(c_t['median_ms'], c_o['median_ms'])} |",
        f"| `get_job_status` of a pending job (median of {r['repeats']}) | {fmt(s_o['median_ms'])} ms, {s_o['logins_per_call']:g} logins | "
        f"{fmt(s_t['median_ms'])} ms, {s_t['logins_per_call']:g} logins | {ratio(s_t['median_ms'], s_o['median_ms'])} |",
        f"| {r['jobs']} pending jobs, `get_job_status` each | {fmt(l_o['ms'])} ms, {l_o['logins']} logins | "
        f"{fmt(l_t['ms'])} ms, {l_t['logins']} logins | {ratio(l_t['ms'], l_o['ms'])} |",
        f"| {r['jobs']} pending jobs, one `SlurmSDK.refresh()` (tao_slurm only) | {fmt(b_o['ms'])} ms, {b_o['logins']} logins | "
        f"(no such call) | {ratio(l_t['ms'], b_o['ms'])} against the TAO SDK's loop |",
        f"| `cancel_job` of a pending job | {fmt(x_o['ms'])} ms, {x_o['logins']} logins, returned {x_o['returned']}, then {x_o['status_after']} | "
        f"{fmt(x_t['ms'])} ms, {x_t['logins']} logins, returned {x_t['returned']}, then {x_t['status_after']} | {ratio(x_t['ms'], x_o['ms'])} |",
        "",
        "A job that runs `echo hello` to its end (statuses as the caller saw them):",
        "",
        f"- tao_slurm: {' -> '.join(o['launch']['statuses'])} ({o['launch']['message']})",
        f"- TAO SDK: {' -> '.join(t['launch']['statuses']) or 'no status'} ({t['launch']['message'] or 'no message'});"
        f" its logs: {json.dumps(t['launch']['logs'][-160:])}",
    ]
    if not x_t["returned"]:
        lines += [
            "",
            f"The TAO SDK's cancel: its `scancel` took effect at once (sacct: `CANCELLED by <uid>`), then it polled",
            "the job's state for 30 s, one login per poll, for a state it counts as terminal, which `CANCELLED by",
            f"<uid>` is not; it gave up, returned False and left its record {x_t['status_after']}.",
        ]
    if t["launch"]["statuses"][-1:] == ["Error"]:
        lines += [
            "",
            "The TAO SDK's job died at launch: Slurm ended it FAILED, exit code 0:53, because its log directory",
            "(`slurm-logs/%x-%j/`) is never created and Slurm could not open main.out; there are no logs to read.",
        ]
    lines += [
        "",
        "Harness notes: the TAO SDK runs `ssh user@host` with no port or config option, so its hosts are aliases",
        "of an ssh_config passed by `ssh`/`scp` wrappers on its PATH (what a user's `~/.ssh/config` does); its own",
        "options apply (no host-key checks). It has no argument for `--begin`; the directive reaches its script",
        "through `partition=`, which it writes unquoted into `#SBATCH --partition=`.",
        END,
    ]
    return "\n".join(lines) + "\n"


def splice(text: str, new: str) -> str:
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        return head + new.rstrip("\n") + tail
    return text.rstrip("\n") + "\n\n" + new


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--side":
        child(sys.argv[2])
    elif sys.argv[1:] == ["--render"]:
        # Rewrite the report's section from bench/python-report.json (no run).
        REPORT_MD.write_text(splice(REPORT_MD.read_text(), section(json.loads(REPORT_JSON.read_text()))))
    else:
        main()
