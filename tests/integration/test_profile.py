"""A profile of every worker on demand (issue 58, section 2), from the operator's side: a real
two-worker run under MultiWorkerMirroredStrategy, profiled from the command line while it trains.
Every worker's trace lands in the run folder and on this machine, parses, and its summary names
the collective ops the strategy runs; training goes on and the run finishes."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from backend.config.spec import job_from_dict
from backend.runs import launcher
from backend.runs.launcher import Preflight
from backend.runs.store import RunStore
from tests.conftest import ROOT, wait_for
from tests.faults.conftest import PARAMS, SYNTHETIC, TF_ENV, assert_nothing_left

pytestmark = pytest.mark.slow


@pytest.fixture
def store(tmp_path):
    return RunStore(tmp_path / "runs")


def _cli(store, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "backend", "--runs", str(store.root), *args],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)


def _trace_ops(path) -> set[str]:
    """Op types in a trace, read by the test itself with TensorFlow's own XSpace proto."""
    code = ("import sys, json\nfrom tensorflow.tsl.profiler.protobuf import xplane_pb2\n"
            "s = xplane_pb2.XSpace(); s.ParseFromString(open(sys.argv[1], 'rb').read())\n"
            "print(json.dumps(sorted({p.event_metadata[e.metadata_id].name.rsplit(':', 1)[-1] "
            "for p in s.planes for l in p.lines for e in l.events})))")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_a_harness_run_is_profiled_from_the_command_line_and_trains_on(local_cluster, store):
    job = job_from_dict({"kind": "harness", "module": SYNTHETIC, "env": TF_ENV,
                         "params": {**PARAMS, "steps_per_epoch": 400, "log_every": 10}})
    run = launcher.launch(local_cluster, job, store=store, preflight=Preflight.SKIP)
    wait_for(lambda: store.load(run.run_id).phase == "running", 120, "the run to train")
    out = _cli(store, "profile", run.run_id, "--steps", "6", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    found = json.loads(out.stdout)
    assert set(found["tasks"]) == {t.name for t in run.state.tasks} and found["steps"] == 6
    for task, summary in found["tasks"].items():
        assert summary["error"] is None, summary
        assert summary["steps"] == 6 and summary["seconds"] > 0, summary
        # The strategy's all-reduce of the gradients: communication shows apart from compute.
        assert summary["collective_s"] > 0 and summary["compute_s"] > 0, summary
        assert any("Collective" in o["op"] for o in summary["top_ops"]) or summary["collective_s"] > 0
        ops = _trace_ops(summary["copied"])
        assert any(op.startswith("Collective") for op in ops), sorted(ops)[:40]
        assert any("MatMul" in op for op in ops), sorted(ops)[:40]
    # Training went on through the profile and ended well; nothing of the profiler is left.
    launcher.attach(run.run_id, store=store).wait(timeout=300)
    assert store.load(run.run_id).phase == "finished"
    assert_nothing_left(run, store)
    # The words a person reads.
    said = _cli(store, "profile", run.run_id)
    assert said.returncode != 0 and "not training" in said.stdout + said.stderr


def test_a_custom_loop_and_a_fit_script_are_refused_saying_why_and_train_on(local_cluster, store, python_path):
    """TensorFlow's custom-loop tutorial (tfconsole.Loop) through the Python API, then the shipped
    fit example (tfconsole.KerasCallback) from the command line: their profiles are off (a worker
    of each died inside TensorFlow's profiler start here, ``double free``, exit -6, in one run in
    a few); the refusal says so at once, nothing is started, and each run finishes."""
    from backend import api
    from backend.errors import RunError
    from tests.integration.test_custom_loop import tutorial_job
    from tests.integration.test_keras_fit import fit_job
    for job, via_api in ((tutorial_job(python_path, 0.1), True),
                         (fit_job("--epochs", "2", "--steps", "60", "--pace", "0.1"), False)):
        run = launcher.launch(local_cluster, job, store=store, preflight=Preflight.SKIP)
        wait_for(lambda: store.load(run.run_id).phase == "running", 180, "the job to train")
        if via_api:
            with pytest.raises(RunError) as refused:
                api.attach(run.run_id, runs=store.root).profile(steps=4, wait_s=180)
            said = str(refused.value)
        else:
            out = _cli(store, "profile", run.run_id, "--steps", "3")
            assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr
            said = out.stdout + out.stderr
        assert "profiles of fit scripts and custom loops are off" in said and "harness jobs" in said, said
        launcher.attach(run.run_id, store=store).wait(timeout=400)
        assert store.load(run.run_id).phase == "finished"
        assert not list(run.local_dir.glob("profile/*")), "nothing was profiled"
        assert_nothing_left(run, store)
