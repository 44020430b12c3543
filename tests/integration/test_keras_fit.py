"""A Keras user's own `model.fit` script with one callback, as a `kind: command` job over SSH.

Real parts: two workers (chief on 127.0.0.2, worker on 127.0.0.3, separate run folders) under
MultiWorkerMirroredStrategy with tf_keras, examples/keras_fit.py unchanged, the console's own
monitor, Save now and Restore.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend import checkpoints, launcher
from backend.metrics import MetricsStore
from backend.runs import RunStore
from backend.spec import job_from_dict
from tests.conftest import processes_of, wait_for

ROOT = Path(__file__).resolve().parents[2]


def fit_job(*args: str):
    return job_from_dict({"kind": "command",
                          "command": [str(ROOT / "examples" / "keras_fit.py"), *args],
                          "env": {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}})


def metrics(run) -> list[dict]:
    chief = run.state.chief
    out = run.transport(chief.name).run(["cat", f"{chief.remote_run_dir}/metrics.jsonl"]).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


@pytest.mark.slow
def test_fit_job_shows_both_workers_saves_now_on_both_and_restores(ssh_cluster, ssh_options, tmp_path):
    run = launcher.launch(ssh_cluster, fit_job("--epochs", "2", "--steps", "60", "--pace", "0.05"),
                          store=RunStore(tmp_path / "runs"), options=ssh_options,
                          preflight=launcher.Preflight.SKIP)
    store = MetricsStore()
    monitor = run.monitor(store).start()
    try:
        wait_for(lambda: sorted(store.tasks()) == ["chief-0", "worker-0"]
                 and min(len(store.series(t)) for t in store.tasks()) >= 2, 180,
                 "two metric points from each worker")
        chief, worker = (store.series(t).loss for t in ("chief-0", "worker-0"))
        assert chief[-1] != worker[-1]          # each worker's own loss, not one number twice
        saved = checkpoints.save_now(run, wait_s=120)
        assert saved % 10 == 0                  # at a sync point, which every worker joins
        assert saved in [c["step"] for c in checkpoints.list_checkpoints(run)]
        assert saved in [c["step"] for c in checkpoints.list_checkpoints(run, "worker-0")]
        run.wait(timeout=300)
    finally:
        monitor.stop()
        if run.state.live:
            run.stop(grace_s=5)
    assert run.state.phase == "finished"
    listed = {c["step"]: c for c in checkpoints.list_checkpoints(run)}
    assert {60, 120, saved} <= set(listed)     # epoch ends and the Save now
    assert listed[60]["epoch"] == 1 and listed[120]["epoch"] == 2
    assert set(listed[120]["losses"]) == {"chief-0", "worker-0"}
    first = metrics(run)
    assert {m["task"] for m in first} == {"chief-0", "worker-0"}
    steps, global_loss = store.global_loss()
    assert float(global_loss[-1]) < float(global_loss[0])

    checkpoints.restore(run, 60)
    run.wait(timeout=300)
    assert run.state.phase == "finished"
    resumed = [m for m in metrics(run) if m["attempt"] == run.state.attempt]
    assert resumed[0]["step"] == 61 and resumed[-1]["step"] == 120   # fit went on from step 60
    before = next(m for m in first if m["step"] == 70 and m["task"] == "chief-0")["loss"]
    again = next(m for m in resumed if m["step"] == 70 and m["task"] == "chief-0")["loss"]
    assert abs(again - before) < 0.2 * before   # restored weights, not a fresh model
    assert processes_of(run) == []
