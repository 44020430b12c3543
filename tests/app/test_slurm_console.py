"""The console on Slurm: the Cluster page's "Slurm" choice (form, problems, batch-script preview),
and a two-task job started from the Launch page on the real one-node cluster (rig/slurm.py),
whose per-worker losses reach Monitor."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from backend.runs.store import RunStore
from console import monitor_view, slurm_form
from console.ui import state
from rig import sshd
from tests.app.conftest import errors
from tests.conftest import wait_for


def slurm_values(**fields) -> dict:
    return {**slurm_form.default_values(sys.executable), **fields}


def test_choosing_slurm_shows_its_form_and_the_batch_script(page):
    at = page("cluster")
    at.radio(key="cluster_kind_choice").set_value("Slurm").run()
    assert not at.exception and not errors(at)
    assert not at.data_editor                        # the form replaces the task table
    script = at.code[0].value
    assert "#SBATCH --ntasks-per-node=2" in script and "srun --distribution=block" in script
    assert "lib slurm_task run" in script and "lib train" in script
    at.text_input(key="slurm_time_limit").input("soon").run()
    assert any(m.startswith("time_limit:") and "HH:MM:SS" in m for m in errors(at)), errors(at)
    assert not at.code                               # no preview of a cluster that cannot run


def test_form_values_round_trip_and_name_bad_fields():
    spec, problems = slurm_form.build(slurm_values(partition="gpu", extra="mem=16G, exclusive", nodes=2.0))
    assert problems == [] and spec.extra == {"mem": "16G", "exclusive": True} and spec.nodes == 2
    assert slurm_form.build(slurm_form.values_from_spec(spec, sys.executable))[0] == spec
    _, problems = slurm_form.build(slurm_values(extra="output=/tmp/x", qos="a b"))
    assert any(p.startswith("extra.output:") for p in problems), problems
    assert any(p.startswith("qos:") for p in problems), problems


@pytest.mark.slow
def test_a_two_task_job_started_from_the_console_reaches_monitor(page, runs_dir, slurm_cluster, tmp_path):
    values = slurm_values(partition="debug", time_limit="10", workdir=str(tmp_path / "shared"),
                          tf_port=sshd.free_port(span=2))
    at = page("launch", cluster_kind="Slurm", slurm_values=values)
    assert any("Slurm, 2 task(s)" in c.value for c in at.caption), [c.value for c in at.caption]
    at.number_input(key="param_epochs").set_value(1)
    at.number_input(key="param_steps_per_epoch").set_value(60)
    at.button(key="start_button").click().run()
    assert not at.exception and not errors(at), errors(at)
    run_id = at.session_state["run_id"]
    wait_for(lambda: RunStore(runs_dir).list(), 60, "the run's record")
    live = state.registry().get(run_id)
    live.run.wait(timeout=400)   # a reader settles the run, as the pages do
    assert live.run.state.phase == "finished", (live.run.state.attempts, live.run.log_tail("chief-0"),
                                                live.run.log_tail("worker-0"))
    wait_for(lambda: len(live.metrics.tasks()) == 2 and max(live.metrics.global_loss()[0], default=0) == 60,
             60, "both workers' losses up to the last step")
    snap = monitor_view.snapshot(live)
    workers = [t for t in snap.loss.data if t.legendgroup == "workers"]   # not global, not validation
    assert [t.name for t in workers] == ["chief-0", "worker-0"]
    for trace in workers:
        assert np.asarray(trace.y).size >= 3
    assert snap.progress.step == 60
    monitor = page("monitor")
    assert not monitor.exception and any(run_id in m.value for m in monitor.markdown)
