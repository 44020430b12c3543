"""A sweep on the Slurm test cluster (issue 50): each trial is a Slurm job of the allocation's
shape, two submitted at once; the queue runs them as the node allows. The best trial is the one
the runs' own metric files say, every trial's run is an ordinary Slurm run, and nothing is left.
The job is the tiny reporting script of tests/integration/test_sweep.py (no TensorFlow): what is
tested is the sweep's keeper on the Slurm engine, not training."""
from __future__ import annotations

import pytest

from backend.engines.slurm import SlurmEngine
from backend.runs import launcher
from backend.runs.store import RunStore
from backend.sweeps import control
from backend.sweeps.spec import sweep_from_dict
from tests.conftest import chief_metrics, processes_of, slurm_fields, wait_for
from tests.integration.test_sweep import REPORT

pytestmark = pytest.mark.slow


def test_a_sweep_on_slurm_submits_a_job_per_trial_and_names_the_best(slurm_cluster, tmp_path, python_path,
                                                                      ssh_options):
    data = {"cluster": slurm_fields(tmp_path, python_path), "job": {"kind": "command",
                                                                     "command": [python_path, "-c", REPORT, "{x}"]},
            "space": {"x": {"range": [0.0, 1.0]}}, "objective": {"metric": "val_loss", "direction": "min"},
            "budget": {"trials": 3}, "at_once": 2, "sampler": "random", "seed": 11}
    root = RunStore(tmp_path / "runs").root
    sweep_id = control.start(sweep_from_dict(data), data, root, ssh_options, poll_s=0.3)
    found = wait_for(lambda: (s := control.status(root, sweep_id))["phase"] in ("finished", "failed") and s,
                     300, "the Slurm sweep to finish")
    assert found["phase"] == "finished", found
    trials = [t for t in found["trials"] if t["counted"]]
    assert [t["state"] for t in trials] == ["complete"] * 3, trials
    jobs = set()
    for t in trials:
        run = launcher.attach(t["run_id"], store=RunStore(root), options=ssh_options)
        assert str(run.state.phase) == "finished" and processes_of(run) == []
        jobs |= set(SlurmEngine.jobs(run).values())
        record = [m["global"]["val_loss"] for m in chief_metrics(run) if "val_loss" in (m.get("global") or {})]
        assert t["value"] == pytest.approx(min(record))   # of: best, as the run's own file says
        assert run.state.sweep["trial"] == t["trial"]
    assert len(jobs) == 3   # a Slurm job per trial
    assert found["best"]["trial"] == min(trials, key=lambda t: t["value"])["trial"]
