"""End to end: a real two-worker run, the chief over SSH, losses reach the store while it trains."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from backend.runs import launcher
from backend.watch.metrics import MetricsStore
from backend.runs.store import RunStore
from backend.config.spec import job_from_dict
from tests.conftest import processes_of, wait_for

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_per_worker_losses_stream_in_while_training(ssh_cluster, ssh_options, tmp_path):
    job = job_from_dict({"kind": "harness", "module": str(ROOT / "examples" / "synthetic.py"),
                         "params": {"epochs": 1, "steps_per_epoch": 3000, "log_every": 10,
                                    "checkpoint_every": 0}})
    run = launcher.launch(ssh_cluster, job, store=RunStore(tmp_path / "runs"), options=ssh_options,
                          preflight=launcher.Preflight.SKIP)
    store = MetricsStore()
    monitor = run.monitor(store).start()
    try:
        wait_for(lambda: sorted(store.tasks()) == ["chief-0", "worker-0"]
                 and min(len(store.series(t)) for t in store.tasks()) >= 5, 120,
                 "five metric points from each worker")
        seen_at = time.time()
        assert [s.state for s in run.status()] == ["running", "running"], "arrived only after the run"
        first = {t: float(store.series(t).loss[0]) for t in store.tasks()}
        wait_for(lambda: store.progress() and store.progress() >= 300, 120, "step 300")
        for task in store.tasks():
            series = store.series(task)
            assert (series.step[1:] > series.step[:-1]).all()       # each step once, in order
            assert float(series.loss[-1]) < first[task]              # and the loss falls
        steps, global_loss = store.global_loss()
        assert len(steps) >= 5 and float(global_loss[-1]) < float(global_loss[0])
        assert monitor.status()["state"] != "idle" and time.time() - seen_at < 120
    finally:
        monitor.stop()
        run.stop(grace_s=5)
    assert processes_of(run) == []
