"""Goodput's saves and validation, from a real run (docs/goodput.md): the chief says on its next
metric line how long its training stood still for each checkpoint save and each validation
(``blocked``), and ``tfconsole goodput`` counts those seconds apart from training kept. The
test adds them up from the run's own metrics.jsonl and compares."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from backend.config.spec import job_from_dict
from backend.runs import launcher
from backend.runs.launcher import Preflight
from backend.runs.store import RunStore
from tests.conftest import ROOT, chief_metrics, ended_well
from tests.faults.conftest import PARAMS, SYNTHETIC, TF_ENV

pytestmark = pytest.mark.slow


def test_saves_and_validations_of_a_real_run_are_counted_apart_from_training(local_cluster, tmp_path):
    store = RunStore(tmp_path / "runs")
    params = {**PARAMS, "epochs": 2, "steps_per_epoch": 100, "checkpoint_every": 20, "log_every": 10,
              "val_every": 50, "val_steps": 40}
    run = launcher.launch(local_cluster, job_from_dict({"kind": "harness", "module": SYNTHETIC, "env": TF_ENV,
                                                        "params": params}),
                          store=store, preflight=Preflight.SKIP)
    assert ended_well(run, run.wait(timeout=300))
    lines = [line for line in chief_metrics(run) if line["task"] == run.state.chief.name]
    saves = [line["step"] for line in lines if line.get("blocked", {}).get("save")]
    vals = [line["step"] for line in lines if line.get("blocked", {}).get("validation")]
    # A save at step 20 is told on the next line (30); validations at 50, 100, ... on their own.
    assert 30 in saves and 20 not in saves, saves
    assert {50, 100, 150, 200} <= set(vals), vals
    # What the lines say, added up by the test: after the attempt's first line, times 2 tasks.
    first = min(line["step"] for line in lines)
    later = [line.get("blocked", {}) for line in lines if line["step"] > first]
    want_save = 2 * sum(b.get("save", 0.0) for b in later)
    want_val = 2 * sum(b.get("validation", 0.0) for b in later)
    out = subprocess.run([sys.executable, "-m", "backend", "--runs", str(store.root), "goodput", run.run_id, "--json"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    causes = found["causes"]
    assert causes["checkpoint saves"] == pytest.approx(want_save, rel=1e-3) and want_save > 0
    assert causes["validation"] == pytest.approx(want_val, rel=1e-3) and want_val > 0
    assert sum(causes.values()) == pytest.approx(found["total_s"], rel=1e-6)
    assert causes["unaccounted"] < 0.01 * found["total_s"]
