"""The multi-node Slurm cluster (rig/slurm_nodes.py) as a fixture."""
from __future__ import annotations

import os

import pytest

from backend.engines.slurm import SlurmEngine
from backend.runs import launcher
from backend.runs.store import RunStore
from tests.conftest import require, slurm_spec, wait_for
from tests.faults.conftest import PARAMS, harness_job, metrics

TOTAL = PARAMS["epochs"] * PARAMS["steps_per_epoch"]


@pytest.fixture
def slurm_nodes():
    """Two Slurm nodes, each in its own network namespace, for one test; ``SLURM_CONF`` points
    every client at it while the test runs.

    Per test, not per session: it starts in about 1.5 s, and a session-wide one would fight the
    one-node cluster (``slurm_session``) over ``SLURM_CONF`` in a process that has both.
    """
    from rig import slurm_nodes as nodes
    lacking = nodes.missing()
    require("a multi-node Slurm cluster (" + ", ".join(lacking) + ")", not lacking)
    cluster = nodes.start(nodes=2, cpus=2)
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = cluster.env["SLURM_CONF"]
    try:
        yield cluster
    finally:
        cluster.stop()
        if before is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = before


def training_past_a_checkpoint(tmp_path, python_path):
    """A two-task harness run on the one-node cluster, trained past its first periodic checkpoint;
    max_restarts=0, so only a preemption or Slurm's own requeue may bring it back. Returns the
    store, the run and its first Slurm job's id."""
    store = RunStore(tmp_path / "runs")
    run = launcher.launch(slurm_spec(tmp_path, python_path), harness_job(max_restarts=0, pace_s=0.03),
                          store=store)
    wait_for(lambda: any(r["step"] > PARAMS["checkpoint_every"] + 5 for r in metrics(run)), 300,
             "training past the first periodic checkpoint")
    return store, run, SlurmEngine.jobs(run)["1"]


def resumed_where_it_stopped(run, state):
    """The second attempt began at the step after the last one the first ran (the signal's save:
    nothing lost) and trained to the end. Returns both attempts and that step."""
    first, second = state.attempts
    rows = metrics(run)
    ran_to = max(r["step"] for r in rows if r["attempt"] == first.number)
    assert second.resume_step == ran_to, (second, ran_to)
    assert min(r["step"] for r in rows if r["attempt"] == second.number) == ran_to + 1
    assert second.last_step == TOTAL
    return first, second, ran_to
