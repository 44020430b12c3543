"""Monitor's GPU panel shows every host of the run, each by the name the operator gave it
(issue 26 item 4). No GPU here: each SSH test host answers from its own FAKE nvidia-smi
(``tests/integration/test_gpu_hosts.py``'s ``fake_gpus``: 11 % on h2, 77 % and 5 % on h3)."""
from __future__ import annotations

import sys

import pytest

from backend.config.spec import job_from_dict
from backend.runs import launcher
from backend.runs.store import RunStore
from tests.app.conftest import errors, open_page
from tests.conftest import wait_for
from tests.integration.test_gpu_hosts import fake_gpus  # noqa: F401 - a fixture


@pytest.mark.slow
def test_the_gpu_table_shows_each_hosts_gpus(runs_dir, alias_cluster, fake_gpus):  # noqa: F811
    job = job_from_dict({"kind": "command", "command": [sys.executable, "-c", "import time; time.sleep(120)"]})
    run = launcher.launch(alias_cluster, job, store=RunStore(runs_dir), preflight=launcher.Preflight.SKIP)
    at = open_page("monitor", run_id=run.run_id)
    assert not at.exception and not errors(at), errors(at)

    def table():
        at.run()
        frames = [d.value for d in at.dataframe if "utilisation %" in d.value.columns]
        return frames[0].to_dict("records") if frames and len(set(frames[0]["host"])) == 2 else None
    shown = wait_for(table, 90, "the GPU table with both hosts")
    assert shown == [
        {"host": "h2", "GPU": 0, "utilisation %": 11.0, "memory used MiB": 1000.0, "memory total MiB": 16000.0},
        {"host": "h3", "GPU": 0, "utilisation %": 77.0, "memory used MiB": 7000.0, "memory total MiB": 16000.0},
        {"host": "h3", "GPU": 1, "utilisation %": 5.0, "memory used MiB": 500.0, "memory total MiB": 16000.0}]
