"""Stand-in for TAO's container entrypoint (nvidia_tao_core.microservices.handlers.container_handler)
in the tao-slurm sandbox: takes TAO's arguments, reads the staged specs, docker env vars and cloud
metadata files as TAO's does, and plays a job: status.json lines (STARTED, RUNNING per epoch with
epoch/max_epoch/eta/kpi, then SUCCESS or FAILURE) and a checkpoint per epoch in the results directory.

The specs' `stand_in` section steers it: `epochs` (default 2), `seconds_per_epoch` (default 0.5),
`fail` (true: FAILURE after the first epoch, exit 1), `fail_unless_resumed` (the same, unless the
specs' `train.resume_training_checkpoint_path` names a checkpoint: it then goes on from the epoch
after that checkpoint's, as a TAO training resumes), `extra_bytes` (a file `extra.bin` of that size).
A dataset action checks that every path under
the specs' `dataset_uris` exists and writes `dataset_report.json`."""

import argparse
import datetime
import json
import os
import re
import sys
import time


def load(path, what):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if not text.strip():
        raise SystemExit(f"container_handler stand-in: the {what} file {path} is empty")
    return json.loads(text)


def status(results_dir, **fields):
    now = datetime.datetime.now(datetime.timezone.utc)
    line = {"date": now.strftime("%m/%d/%Y"), "time": now.strftime("%H:%M:%S"), **fields}
    with open(os.path.join(results_dir, "status.json"), "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def main():
    p = argparse.ArgumentParser()
    for name in ("neural-network-name", "action-name", "job-id", "specs-file", "docker-env-vars-file",
                 "cloud-metadata-file"):
        p.add_argument(f"--{name}", required=True)
    a = p.parse_args()
    specs = load(a.specs_file, "specs")
    env = load(a.docker_env_vars_file, "docker env vars")
    load(a.cloud_metadata_file, "cloud metadata")
    os.environ.update({k: str(v) for k, v in env.items()})
    results_base = os.environ.get("TAO_API_RESULTS_DIR", "/results")
    results_dir = specs.get("results_dir") or os.path.join(results_base, a.job_id)
    os.makedirs(results_dir, exist_ok=True)
    print(f"container_handler stand-in: network={a.neural_network_name} action={a.action_name} job={a.job_id}")
    print(f"TAO_API_JOB_ID={os.environ.get('TAO_API_JOB_ID', '')} results_dir={results_dir}")
    for k in sorted(env):
        if k.startswith("STAND_IN_"):
            print(f"docker_env_vars {k}={env[k]}")
    if os.environ.get("STAND_IN_SECRET"):
        print("the secret STAND_IN_SECRET arrived")
    steer = specs.get("stand_in", {})
    status(results_dir, status="STARTED", message="Starting " + a.action_name)
    for key, path in sorted(specs.get("dataset_uris", {}).items()):
        if not os.path.exists(path):
            status(results_dir, status="FAILURE", message=f"dataset {key} not found: {path}")
            print(f"dataset {key} not found: {path}", file=sys.stderr)
            return 1
        print(f"dataset {key}: {path}")
    if "dataset_uris" in specs:
        with open(os.path.join(results_dir, "dataset_report.json"), "w", encoding="utf-8") as f:
            json.dump({"action": a.action_name, "datasets": specs["dataset_uris"]}, f)
    if steer.get("extra_bytes"):
        with open(os.path.join(results_dir, "extra.bin"), "wb") as f:
            f.write(b"\0" * int(steer["extra_bytes"]))
    epochs = int(steer.get("epochs", 2))
    pause = float(steer.get("seconds_per_epoch", 0.5))
    resume = (specs.get("train") or {}).get("resume_training_checkpoint_path") or ""
    start = 1
    if resume:
        m = re.search(r"model_epoch_(\d+)\.pth$", resume)
        start = int(m.group(1)) + 1 if m else 1
        print(f"Resuming from {resume} (TAO_RESUME_CHECKPOINT={os.environ.get('TAO_RESUME_CHECKPOINT', '')})")
    for epoch in range(start, epochs + 1):
        time.sleep(pause)
        with open(os.path.join(results_dir, f"model_epoch_{epoch:03d}.pth"), "wb") as f:
            f.write(f"stand-in checkpoint of epoch {epoch}\n".encode())
        eta = str(datetime.timedelta(seconds=round(pause * (epochs - epoch))))
        status(results_dir, status="RUNNING", epoch=epoch, max_epoch=epochs, eta=eta,
               kpi={"loss": round(1.0 / epoch, 4)}, message=f"Epoch {epoch}/{epochs}")
        print(f"Epoch {epoch}/{epochs} loss={1.0 / epoch:.4f}", flush=True)
        if steer.get("fail") or (steer.get("fail_unless_resumed") and not resume):
            status(results_dir, status="FAILURE", message="stand-in asked to fail")
            print("stand-in asked to fail", file=sys.stderr)
            return 1
    status(results_dir, status="SUCCESS", message=f"{a.action_name} finished")
    print(f"Job {a.job_id} completed successfully")
    return 0


if __name__ == "__main__":
    sys.exit(main())
