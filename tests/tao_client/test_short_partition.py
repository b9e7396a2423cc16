"""A TAO job on a short partition (issue 41): TaoClient sends no wall time, and the service's default
(4 h, SLURM_TIME_HOURS unset) is capped at the sandbox's `debug` partition's MaxTime (30 min) rather
than refused, with a warning in the create reply."""

from __future__ import annotations

import requests

from conftest import ORG
from test_tao_client import client, finished, workspace  # noqa: F401 (fixtures)

# The service's default wall time, not the short one of test_tao_client's service.
SERVICE_ENV = {"SLURM_TIME_HOURS": None, "SLURM_TIMEOUT_HOURS": None}


def test_a_tao_job_on_the_30_minute_partition_runs_with_the_warning_in_the_reply(service, client, workspace):
    # The body TaoClient.create_job sends (no time: TAO has no such field) on debug (MaxTime 30 min):
    # the default 4 h is capped there rather than refused. TaoClient keeps only the reply's id, so the
    # reply is read as it comes.
    r = requests.post(
        f"{service.url}/api/v2/orgs/{ORG}/jobs",
        json={"kind": "experiment", "action": "train", "network_arch": "dino", "name": "tao-client-debug",
              "workspace": workspace, "specs": {"stand_in": {"epochs": 1, "seconds_per_epoch": 0.1}},
              "backend_details": {"backend_type": "slurm", "partition": "debug"}},
        headers={"Authorization": f"Bearer {service.token}"},
        timeout=120,
    )
    job = r.json()
    assert r.status_code == 201, job
    capped = "default 04:00:00 is capped at the MaxTime 00:30:00 of partition debug"
    assert any(capped in w for w in job["warnings"]), job["warnings"]
    assert finished(client, job["id"])["status"] == "Done"
