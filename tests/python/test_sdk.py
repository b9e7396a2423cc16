"""tao_slurm against the sandbox cluster: the TAO SDK's API with only the import changed."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import threading
import time

import pytest
from conftest import last_json, run_python
from tao_test_support import BIN, run_json, sandbox_settings, user_env, wait_until

import tao_slurm
from tao_slurm import JobSpecError, JobStatus, SlurmSDK

HERE = pathlib.Path(__file__).resolve().parent
IMAGE = "ubuntu:22.04"


def test_the_seed_multinode_example_runs_with_only_the_import_changed(env, sdks):
    seed = (HERE / "seed_multinode.py").read_text()
    assert "from tao_slurm import SlurmSDK" in seed and "#   from tao_sdk.platforms.slurm import SlurmSDK" in seed
    run = subprocess.run(
        [sys.executable, str(HERE / "seed_multinode.py")], env=env, capture_output=True, text=True, timeout=240
    )
    assert run.returncode == 0, run.stderr
    result = last_json(run.stdout)
    assert result["status"] == "Complete", result
    lines = [l for l in result["logs"].splitlines() if l.startswith("torchrun stand-in:")]
    assert len(lines) == 4, result["logs"]
    seen = [dict(re.findall(r"(\w+)=(\S*)", l)) for l in lines]
    # Every node got its own rank, from its own task (not the batch step's rank 0 on every node).
    assert sorted(s["node_rank"] for s in seen) == ["0", "1", "2", "3"], seen
    assert len({s["node"] for s in seen}) == 4, seen
    for s in seen:
        assert s["nnodes"] == "4" and s["WORLD_SIZE"] == "4" and s["nproc_per_node"] == "8", s
        assert s["NODE_RANK"] == s["node_rank"], s
        assert s["master"] == f"{seen[0]['master'].split(':')[0]}:29500", s
    job = sdks(poll_interval=60).get_job(result["job_id"])
    assert (job["nodes"], job["gpus_per_node"]) == (4, 8), job


def test_exit_0_is_complete_and_exit_3_is_error_and_each_hook_fires_once(env, sdks):
    sdk = sdks(epoch_milestone_interval=2)
    calls = []
    lock = threading.Lock()

    def hook(name):
        def record(*args):
            with lock:
                calls.append((name, args[0].id, threading.current_thread().name, args[1:]))

        return record

    hooks = {name: hook(name) for name in ("on_complete", "on_error", "on_epoch_milestone")}
    epochs = 'for i in 1 2 3 4 5; do echo "Epoch $i/5"; sleep 1.2; done'
    ok = sdk.create_job(image=IMAGE, command=epochs, gpu_count=0, hooks=hooks)
    bad = sdk.create_job(image=IMAGE, command="echo about to fail; exit 3", gpu_count=0, hooks=hooks)
    assert ok.backend_type == "slurm" and ok.backend_job_id == f"tao-job-{ok.id}"
    assert ok.results_dir.startswith("lustre:///") and ok.results_dir.endswith(f"/results/{ok.id}")
    assert set(ok.to_dict()) >= {"job_id", "status", "backend_type", "backend_job_id", "results_dir", "created_at"}

    done_ok, done_bad = sdk.wait(ok.id, timeout=300), sdk.wait(bad.id, timeout=120)
    assert isinstance(done_ok, JobStatus) and done_ok.status == "Complete", done_ok
    assert done_bad.status == "Error" and "exit code 3" in done_bad.message, done_bad
    assert ok.status == "Complete" and bad.status == "Error", "the Job objects follow"
    # Nothing fires again: checked once the monitor has polled again since both ended, which a later
    # job's hook proves (the monitor calls hooks as it polls).
    later = sdk.create_job(image=IMAGE, command="true", gpu_count=0, hooks={"on_complete": lambda job: None})
    assert sdk.wait(later.id, timeout=300).status == "Complete"
    with lock:
        got = list(calls)
    ends = sorted((n, j) for n, j, _, _ in got if n != "on_epoch_milestone")
    assert ends == [("on_complete", ok.id), ("on_error", bad.id)], got
    milestones = [(j, args) for n, j, _, args in got if n == "on_epoch_milestone"]
    assert milestones == [(ok.id, (2, 5)), (ok.id, (4, 5))], got
    assert {t for _, _, t, _ in got} == {"tao-slurm-monitor"}, "hooks run on the monitor thread"
    analysis = sdk.get_failure_analysis(bad.id)
    assert analysis["reason"] == "user" and analysis["retriable"] is False and analysis["exit_code"] == 3, analysis
    assert sdk.get_failure_analysis(ok.id) is None
    assert {j["job_id"] for j in sdk.list_jobs(status="Error")} == {bad.id}


def test_a_running_gpu_jobs_record_carries_its_gpu_samples(env, sdks, monkeypatch):
    """get_job's record has the job's GPUs as its nodes last sampled them (issue 40): each node's
    utilisation per GPU, and no utilisation at all (not 0%) for a node without nvidia-smi."""
    monkeypatch.setenv("TAO_SLURM_GPU_SAMPLE_SECS", "2")
    sdk = sdks()
    job = sdk.create_job(image=IMAGE, command="sleep 120", gpu_count=1)

    def sampled():
        sdk.get_job_status(job.id)  # a refresh reads the nodes' newest samples
        record = sdk.get_job(job.id)
        return record if (record.get("gpu") or {}).get("nodes") else None

    record = wait_until(sampled, 240, "the job's GPU samples")
    gpu, node = record["gpu"], record["gpu"]["nodes"][0]
    assert node["node"] == record["node_list"], record
    if node.get("no_data"):
        assert gpu["util"] is None and node["gpus"] == [], gpu
    else:
        assert 0 <= gpu["util"] <= 100 and len(node["gpus"]) >= 1, gpu
        assert {"util", "mem_mib", "power_w"} <= set(node["gpus"][0]), gpu
    assert sdk.cancel_job(job.id) is True


def test_cancel_of_a_pending_job_is_true_and_canceled_at_once(env, sdks):
    sdk = sdks()
    job = sdk.create_job(image=IMAGE, command="true", gpu_count=0, sbatch_options={"begin": "now+3600"})
    status = sdk.get_job_status(job.id)
    assert status.status == "Pending", status
    assert sdk.cancel_job(job.id) is True
    assert sdk.get_job(job.id)["status"] == "Canceled", "recorded at once, before any refresh"
    assert sdk.get_job_status(job.id).status == "Canceled"
    assert job.status == "Canceled"
    assert sdk.cancel_job(job.id) is True, "idempotent"
    assert sdk.cancel_job("00000000-0000-4000-8000-00000000dead") is False
    assert sdk.get_job_status("00000000-0000-4000-8000-00000000dead").status == "Unknown"


def test_logs_whole_tail_and_followed(env, sdks):
    sdk = sdks()
    cmd = 'for i in $(seq 1 10); do echo "line $i"; done; echo "err A" >&2; sleep 2; echo "err B" >&2; echo "line 11"'
    job = sdk.create_job(image=IMAGE, command=cmd, gpu_count=0)
    chunks = list(sdk.follow_logs(job.id, poll_interval=0.5))
    assert job.status == "Complete"
    out = "".join(c for c in chunks if c.stream == "stdout")
    err = "".join(c for c in chunks if c.stream == "stderr")
    assert out == "".join(f"line {i}\n" for i in range(1, 12)), chunks
    assert "err A\n" in err and "err B\n" in err and all(isinstance(c, str) for c in chunks)
    whole = sdk.get_job_logs(job.id)
    assert whole == out + "\n" + err, "main.out, a newline, main.err"
    tail = sdk.get_job_logs(job.id, tail=2)
    assert tail.startswith("line 10\nline 11\n\n"), tail
    assert tail.split("\n\n", 1)[1].splitlines() == err.splitlines()[-2:], tail
    assert sdk.get_job_logs("00000000-0000-4000-8000-00000000dead") == ""


def test_gpu_count_is_per_node_up_to_a_node_and_a_total_above(env, sdks):
    sdk = sdks()
    with pytest.raises(JobSpecError) as e:
        sdk.create_job(image=IMAGE, command="true", gpu_count=12)
    assert e.value.field == "gpu_count" and "use 16" in str(e.value) and e.value.exit_code == 2, str(e.value)
    with pytest.raises(JobSpecError) as e:
        sdk.create_job(image=IMAGE, command="true", gpu_count=16, num_nodes=4)
    assert e.value.field == "num_nodes", str(e.value)
    with pytest.raises(JobSpecError) as e:
        sdk.create_job(image=IMAGE, command="true", hooks={"on_complete": "print"})
    assert e.value.field == "hooks", "a hook that cannot be called is refused before anything is submitted"
    total = sdk.create_job(image=IMAGE, command="true", gpu_count=16)
    per_node = sdk.create_job(image=IMAGE, command="true", gpu_count=2, num_nodes=2)
    assert (sdk.get_job(total.id)["nodes"], sdk.get_job(total.id)["gpus_per_node"]) == (2, 8)
    assert (sdk.get_job(per_node.id)["nodes"], sdk.get_job(per_node.id)["gpus_per_node"]) == (2, 2)
    assert sdk.wait(total.id, timeout=300).status == "Complete"
    assert sdk.wait(per_node.id, timeout=300).status == "Complete"


def test_extras_specs_inputs_and_secrets(env, sdks):
    sdk = sdks()
    secret = "s3cr3t-" + "x" * 12
    base = env["SLURM_BASE_RESULTS_DIR"]
    job = sdk.create_job(
        image=IMAGE,
        command='cat {config_path}; echo; echo "token length ${#MY_TOKEN}"; echo "ids $TAO_JOB_ID $TAO_API_JOB_ID"',
        gpu_count=0,
        specs={"train": {"num_epochs": 3}},
        inputs={"dataset.root": f"lustre://{base}"},
        secret_env={"MY_TOKEN": secret},
        env_vars={"EXPERIMENT": "py"},
        time_hours=1,
        timeout_hours=0.5,
        exclusive=True,
        name="extras",
    )
    assert sdk.wait(job.id, timeout=300).status == "Complete"
    logs = sdk.get_job_logs(job.id)
    staged = json.loads(logs.splitlines()[0])
    assert staged == {"train": {"num_epochs": 3}, "dataset": {"root": base}}, logs
    assert f"token length {len(secret)}" in logs and f"ids {job.id} {job.id}" in logs
    record = sdk.get_job(job.id)
    assert record["name"] == "extras"
    for text in (logs, repr(job), json.dumps(record), repr(sdk), repr(sdk.get_job_status(job.id))):
        assert secret not in text
    with pytest.raises(JobSpecError) as e:
        sdk.create_job(image=IMAGE, command="true", gpu_count=0, inputs={"dataset.root": "lustre:///no/such/path"})
    assert e.value.field == "inputs" and "/no/such/path" in str(e.value), str(e.value)
    with pytest.raises(JobSpecError) as e:
        sdk.create_job(image=IMAGE, command="true", gpu_count=0, inputs={"dataset.root": "file:///data"})
    assert "Local paths (file:// or no prefix) not allowed" in str(e.value)


def test_every_job_field_is_a_keyword_that_reaches_the_job(env, sdks):
    """Fields the TAO SDK has no keyword for are keywords by their own name (the engine's list), and
    reach Slurm; a name that is no field, or a value of the wrong type, is refused naming it."""
    sdk = sdks()
    job = sdk.create_job(
        image=IMAGE,
        command='echo "mem=$SLURM_MEM_PER_NODE cpus=$SLURM_CPUS_PER_TASK node=$SLURMD_NODENAME"',
        gpu_count=0,
        memory="300M",
        cpus_per_task=2,
        exclude="node1",
        nodelist="node3",
        max_timeout_requeues=1,
    )
    assert sdk.wait(job.id, timeout=300).status == "Complete"
    line = next(l for l in sdk.get_job_logs(job.id).splitlines() if l.startswith("mem="))
    ran = re.fullmatch(r"mem=300 cpus=2 node=(\S+)", line)
    assert ran and ran.group(1) == "node3", line
    before = len(sdk.list_jobs())
    with pytest.raises(JobSpecError) as e:
        sdk.create_job(image=IMAGE, command="true", gpu_count=0, qoss="high")
    assert e.value.field == "qoss" and "did you mean qos" in str(e.value), str(e.value)
    with pytest.raises(JobSpecError) as e:
        sdk.create_sweep(image=IMAGE, command="true", gpu_count=0, grid={"A": [1]}, cpus_per_task="many")
    assert e.value.field == "cpus_per_task", str(e.value)
    assert len(sdk.list_jobs()) == before, "a refused call records nothing"


def test_a_preview_submits_nothing_and_is_the_command_lines_dry_run(env, sdks):
    """preview_job is the engine's one preview: checked with the cluster, nothing recorded, and the
    plan and batch script the command line's `submit --dry-run` shows for the same job."""
    sdk = sdks()
    before = len(sdk.list_jobs())
    preview = sdk.preview_job(IMAGE, "echo previewed", gpu_count=0, time_hours=1, memory="200M", nodelist="node2")
    script = preview["files"][-1]["contents"]
    assert "#SBATCH --mem=200M" in script and "echo previewed" in script, script
    assert "\n#SBATCH --nodelist=node2\n" in script, script
    assert len(sdk.list_jobs()) == before, "a preview records nothing"
    cli = run_json(
        env, "submit", "--dry-run", "--json", "--image", IMAGE, "--gpus", "0", "--time-hours", "1",
        "--memory", "200M", "--nodelist", "node2", "--shell", "--", "set -euo pipefail\necho previewed",
    )
    for key in ("resources", "partition", "time_minutes", "image", "mounts"):
        assert preview["plan"][key] == cli["plan"][key], key
    # The same script but for the job's own id.
    assert script.replace(preview["job_id"], "ID") == cli["files"][-1]["contents"].replace(cli["job_id"], "ID")
    offline = sdk.preview_job(IMAGE, "echo previewed", gpu_count=0, online=False, partition="no-such-partition")
    assert offline["plan"]["partition"] == "no-such-partition", "offline: no check with the cluster"
    with pytest.raises(JobSpecError):
        sdk.preview_job(IMAGE, "echo previewed", gpu_count=0, partition="no-such-partition")


def test_the_gil_is_released_during_remote_work_and_threads_share_one_sdk(env, sdks):
    sdk = sdks()
    # A call that spends about a second on the cluster (logins and checks on both hosts): while it
    # runs in another thread, this one keeps running Python. Held, the GIL would stop this loop for the
    # whole call; released, the longest pause is a thread switch or two (the CPU is shared with ssh).
    checks = []
    worker = threading.Thread(target=lambda: checks.extend(sdk.preflight()))
    start = last = time.monotonic()
    longest = 0.0
    worker.start()
    while worker.is_alive():
        now = time.monotonic()
        longest = max(longest, now - last)
        last = now
    elapsed = time.monotonic() - start
    assert checks and elapsed > 0.2, (elapsed, checks)
    assert longest < elapsed / 2, f"this thread stopped for {longest:.3f} s of {elapsed:.3f} s: the GIL was held"

    job = sdk.create_job(image=IMAGE, command="sleep 3", gpu_count=0)
    results, errors = [], []

    def waiter():
        try:
            results.append(sdk.wait(job.id, timeout=300).status)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    def poller():
        try:
            for _ in range(10):
                results.append(sdk.get_job_status(job.id).status)
                results.append(sdk.get_job(job.id)["status"])
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=waiter)] + [threading.Thread(target=poller) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert not errors, errors
    assert results[-1] == "Complete" or "Complete" in results, results
    assert set(results) <= {"Pending", "Running", "Complete"}, results
    assert sdk.get_job_status(job.id).status == "Complete"


def test_a_program_ends_cleanly_while_other_threads_are_in_engine_calls(env):
    # Python 3.11 ends a thread that takes the GIL back after the interpreter began to finalise with
    # pthread_exit. Unwound through the extension, that aborted the process ("FATAL: exception not
    # rethrown", code -6) after the program's last line: the seed example met it in CI, its monitor
    # thread mid-refresh at exit. Here daemon threads are always in an engine call when the main
    # thread ends, in ten programs.
    code = (
        "import threading, time\n"
        "from tao_slurm import SlurmSDK\n"
        "sdk = SlurmSDK(poll_interval=0.1)\n"
        "def loop():\n"
        "    while True:\n"
        "        sdk.list_jobs()\n"
        "for _ in range(4):\n"
        "    threading.Thread(target=loop, daemon=True).start()\n"
        "time.sleep(0.3)\n"
        "print('{\"ended\": true}')\n"
    )
    for attempt in range(10):
        run = run_python(code, env, timeout=60)
        assert run.returncode == 0, (attempt, run.returncode, run.stderr)
        assert last_json(run.stdout) == {"ended": True}


def test_a_new_process_resumes_a_running_job_and_sees_it_to_the_end(env, tmp_path):
    state = tmp_path / "session.json"  # the TAO SDK's form: tao-slurm keeps session.tao-slurm.db
    first = run_python(
        f"""
import json
from tao_slurm import SlurmSDK
sdk = SlurmSDK(state_file={str(state)!r})
job = sdk.create_job(image="ubuntu:22.04", command='sleep 6; echo "Epoch 4/4"; echo finished', gpu_count=0)
print(json.dumps({{"job_id": job.id}}))
""",
        env,
    )
    assert first.returncode == 0, first.stderr
    job_id = last_json(first.stdout)["job_id"]
    assert (tmp_path / "session.tao-slurm.db").is_file() and not (tmp_path / "session.db").exists()
    # The first process is gone; a second one follows the job with its monitor alone, then attaches
    # hooks to it.
    second = run_python(
        f"""
import json, time
from tao_slurm import SlurmSDK
sdk = SlurmSDK(poll_interval=1, state_file={str(state)!r})
calls = []
sdk.watch({job_id!r}, {{"on_complete": lambda j: calls.append(j.id)}})
seen = []
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    status = sdk.get_job({job_id!r})["status"]   # the state file only: the monitor refreshes it
    if not seen or seen[-1] != status:
        seen.append(status)
    if status in ("Complete", "Error", "Canceled"):
        break
    time.sleep(0.3)
final = sdk.wait({job_id!r}, timeout=30)
# on_complete once: checked once the monitor has polled again since the job ended, which a later job's
# hook proves (the monitor calls hooks as it polls).
later = sdk.create_job(image="ubuntu:22.04", command="true", gpu_count=0, hooks={{"on_complete": lambda j: None}})
later_final = sdk.wait(later.id, timeout=300)
print(json.dumps({{"seen": seen, "final": final.status, "calls": calls, "later": later_final.status,
                   "logs": sdk.get_job_logs({job_id!r})}}))
""",
        env,
        timeout=300,
    )
    assert second.returncode == 0, second.stderr
    result = last_json(second.stdout)
    assert result["final"] == "Complete" and result["seen"][-1] == "Complete" and result["later"] == "Complete", result
    assert "Running" in result["seen"] or "Pending" in result["seen"], "it was picked up before it ended"
    assert result["calls"] == [job_id], "on_complete once"
    assert "finished" in result["logs"]


def test_settings_given_only_under_the_tao_sdk_names_take_effect(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = user_env(home, inherit=True, tao_names=True)
    assert "SLURM_USER" not in env and "SLURM_HOSTNAME" not in env and "TAO_SLURM_STATE" not in env
    env.update(
        {
            "SLURM_CPUS_PER_TASK": "2",
            # the shared storage (the sandbox's /lustre) and a read-only host directory
            "SLURM_CONTAINER_MOUNTS": f"{sandbox_settings()['SLURM_BASE_RESULTS_DIR']},/tmp:/hosttmp:ro",
            "SLURM_CONVERSION_PARTITION": "debug",
            "HF_TOKEN": "hf_" + "t" * 20,
            "SLURM_PARTITON": "typo",
        }
    )
    run = run_python(
        """
import json, os
from tao_slurm import SlurmSDK
sdk = SlurmSDK(poll_interval=1)
job = sdk.create_job(image="ubuntu:22.04", gpu_count=0,
    command='echo "hosttmp=$(test -d /hosttmp && { touch /hosttmp/x 2>/dev/null && echo rw || echo ro; })"; '
            'echo "cpus=$SLURM_CPUS_PER_TASK"; echo "hf=${#HF_TOKEN}"; echo "user=$(id -un)"')
final = sdk.wait(job.id, timeout=300)
checks = {c["name"]: c for c in sdk.preflight()}
print(json.dumps({"job_id": job.id, "final": final.status, "logs": sdk.get_job_logs(job.id),
                  "unknown": checks.get("unknown settings")}))
""",
        env,
    )
    assert run.returncode == 0, run.stderr
    result = last_json(run.stdout)
    assert result["final"] == "Complete", result
    logs = result["logs"]
    assert "hosttmp=ro" in logs, "the configured mounts reached the container: " + logs
    assert "cpus=2" in logs and f"user={sandbox_settings()['SLURM_USER']}" in logs, logs
    # in the container (--container-env names it), never in the logs
    assert f"hf={len(env['HF_TOKEN'])}" in logs and env["HF_TOKEN"] not in logs, "forwarded as a secret"
    assert (home / ".tao_sdk" / "tao-slurm-state.db").is_file(), "TAO_SDK_STATE_DIR holds the state"
    unknown = result["unknown"]
    assert unknown and not unknown["ok"] and not unknown["required"], unknown
    assert "SLURM_PARTITON (did you mean SLURM_PARTITION?)" in unknown["detail"], unknown
    # The CLI reads the same names.
    cli = BIN  # TAO_SLURM_BIN, else the debug build
    assert cli.is_file(), f"{cli} is missing: dev/test builds it"
    out = subprocess.run([str(cli), "status", result["job_id"], "--json"], env=env, capture_output=True, text=True)
    assert out.returncode == 0 and json.loads(out.stdout)[0]["status"] == "Complete", out.stderr


def test_missing_settings_are_a_credential_error_with_the_contract_message(tmp_path, monkeypatch):
    for k in ("SLURM_USER", "SSH_USER", "SLURM_HOSTNAME", "SSH_HOST", "TAO_SLURM_LOCAL", "TAO_ENV_FILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(tao_slurm.CredentialError) as e:
        SlurmSDK()
    assert str(e.value) == (
        "MISSING: set SLURM_USER and SLURM_HOSTNAME (comma-separated for failover) in your env (~/.config/tao/.env)."
    )
    assert isinstance(e.value, tao_slurm.ConfigError) and e.value.exit_code == 3
    monkeypatch.setenv("SSH_USER", "alice")
    monkeypatch.setenv("SSH_HOST", "login")
    monkeypatch.setenv("SLURM_TIME_HOURS", "zero")
    with pytest.raises(tao_slurm.ConfigError) as e:
        SlurmSDK()
    assert "SLURM_TIME_HOURS" in str(e.value) and not isinstance(e.value, tao_slurm.CredentialError)


def test_a_sweep_is_one_array_each_variant_a_job_and_cancel_sweep_stops_the_unfinished(env, sdks):
    sdk = sdks()
    out = sdk.create_sweep(
        image=IMAGE,
        command='if [ "$I" -ge 2 ]; then sleep 600; fi; echo "index=$TAO_SWEEP_INDEX I=$I"',
        gpu_count=0,
        grid={"I": [0, 1, 2, 3]},
    )
    jobs = out["jobs"]
    assert [j.id for j in jobs] and len(jobs) == 4
    array = out["slurm_array_id"]
    assert [sdk.get_job(j.id)["slurm_job_id"] for j in jobs] == [f"{array}_{i}" for i in range(4)]

    def two_done_two_running():
        statuses = [s.status for s in sdk.refresh([out["sweep_id"]])]
        return statuses[:2] == ["Complete", "Complete"] and statuses[2:] == ["Running", "Running"]

    wait_until(two_done_two_running, 90, "two variants done, two running")
    assert "index=1 I=1" in sdk.get_job_logs(jobs[1].id)
    statuses = sdk.cancel_sweep(out["sweep_id"])
    assert [s.status for s in statuses] == ["Complete", "Complete", "Canceled", "Canceled"]


@pytest.mark.parametrize("kind", ["fifo", "symlink"])
def test_follow_logs_of_a_job_that_swaps_main_out_answers_without_the_linked_file(env, sdks, kind):
    import secrets

    base = env["SLURM_BASE_RESULTS_DIR"]
    secret = "linked-content-" + secrets.token_hex(6)
    outside = f"{base}/outside-{secrets.token_hex(6)}"
    with open(outside, "w") as f:
        f.write(secret + "\n")
    os.chmod(outside, 0o644)
    how = 'mkfifo "$f"' if kind == "fifo" else f'ln -s {outside} "$f"'
    cmd = (
        f'echo before-swap; f={base}/slurm-logs/$SLURM_JOB_NAME-$SLURM_JOB_ID/main.out; sleep 3; rm -f "$f"; {how}; '
        "echo after-swap >&2; sleep 5"
    )
    sdk = sdks()
    job = sdk.create_job(image=IMAGE, command=cmd, gpu_count=0)
    started = time.monotonic()
    chunks = list(sdk.follow_logs(job.id, poll_interval=0.5))
    assert time.monotonic() - started < 180, "the follower did not finish in time"
    text = "".join(chunks)
    assert "after-swap" in "".join(c for c in chunks if c.stream == "stderr"), chunks
    assert secret not in text and secret not in sdk.get_job_logs(job.id, tail=10)
