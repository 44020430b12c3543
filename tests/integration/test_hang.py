"""Hang diagnosis, for real: hostctl's ``stacks`` signals real processes; a real two-worker
TensorFlow run whose worker-1 hangs in the job's own code shows where in ``stacks RUN``, and the
keeper keeps every worker's stack with the run before the stall timeout restarts it."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from backend.runs import launcher
from backend.hosts import remote
from backend.diagnosis import stacks
from backend.watch.metrics import MetricsStore
from tests.conftest import wait_for
from tests.faults.conftest import assert_nothing_left, harness_job, metrics, store, wait_phase  # noqa: F401
from tests.integration.test_hostctl import alive, local_host  # noqa: F401

# A task that installs the harness's handler, then blocks in a function we can look for.
WITH_HANDLER = [sys.executable, "-c", textwrap.dedent("""
    import os, sys, time
    from backend.client.harness import stackdump
    stackdump.install(os.environ["RUN"], "worker-0")
    def parked_here():
        print("up", flush=True)
        time.sleep(600)
    parked_here()
""")]
NO_HANDLER = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(600)"]

# The rest of a job module: a one-layer model, its loss and optimizer.
TINY_MODEL = '''
def build_model():
    return keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(1)])


def loss_fn(labels, predictions):
    return keras.losses.mean_squared_error(labels, predictions)


def make_optimizer():
    return keras.optimizers.SGD(0.01)
'''

# worker-1 hangs in the job's own Python (a tf.data py_function) once it has made 40 batches;
# the chief then waits for it in the next collective, as a real input-pipeline hang does.
HANGING_JOB = '''
import json, os, time
import keras
import tensorflow as tf

PARAMS = {}
# worker-1 (the second worker; worker-0 is the chief): read from TF_CONFIG, set for every worker.
HANGS = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task", {}).get("index") == 1


def _maybe_hang(i):
    if HANGS and int(i) >= 40:
        time.sleep(3600)   # hung_in_input_pipeline
    return i


def make_dataset(input_context, batch_size, seed):
    x = tf.random.stateless_normal([batch_size, 4], seed=[seed, 1])
    y = tf.reduce_sum(x, axis=1, keepdims=True)
    ds = tf.data.Dataset.range(2 ** 62).map(lambda i: tf.py_function(_maybe_hang, [i], tf.int64))
    return ds.map(lambda i: (x, y))
''' + "\n\n" + TINY_MODEL


def test_stacks_come_back_from_a_task_with_the_handler(local_host):
    env = {"RUN": local_host.run_dir}
    remote.start(local_host, [{"task": "worker-0", "argv": WITH_HANDLER, "env": env}], wait_s=20, settle_s=0)
    wait_for(lambda: b"up" in remote.read_tail(local_host, "logs/worker-0.log", 1000), 30, "the task to start")
    got = remote.stacks(local_host, ["worker-0"])["worker-0"]
    assert "parked_here" in got["stacks"] and "most recent call first" in got["stacks"], got
    # A second dump returns only the new stacks, not the first one again.
    again = remote.stacks(local_host, ["worker-0"])["worker-0"]["stacks"]
    assert again.count("parked_here") == got["stacks"].count("parked_here")
    assert remote.status(local_host, ["worker-0"])["worker-0"].state == "running"   # not killed
    remote.stop(local_host, ["worker-0"], grace_s=5)


def test_a_task_without_the_handler_is_not_signalled(local_host):
    started = remote.start(local_host, [{"task": "worker-0", "argv": NO_HANDLER, "env": {}}],
                           wait_s=20, settle_s=0)
    wait_for(lambda: b"up" in remote.read_tail(local_host, "logs/worker-0.log", 1000), 30, "the task to start")
    got = remote.stacks(local_host, ["worker-0"])["worker-0"]
    assert "no stack handler" in got["error"] and "stacks" not in got
    assert alive(started["worker-0"].pid)   # SIGUSR1's default action would have killed it
    remote.stop(local_host, ["worker-0"], grace_s=5)


def test_stall_note_names_the_worker_that_stopped_advancing():
    store = MetricsStore()
    store.add_many([{"task": "chief-0", "step": s, "time": 100.0 + s, "loss": 1.0} for s in (10, 20, 30)]
                   + [{"task": "worker-1", "step": s, "time": 100.0 + s, "loss": 1.0} for s in (10, 20)])
    workers = stacks.progress(store)
    assert [w.task for w in stacks.stalled(workers)] == ["worker-1"]
    assert stacks.stall_note(workers, now=125.0, stall_timeout_s=300, warn_after_s=60) == ""
    note = stacks.stall_note(workers, now=200.0, stall_timeout_s=300, warn_after_s=60)
    assert "worker-1 stopped at step 20" in note and "acts in 220 s" in note and "chief-0" not in note


@pytest.mark.slow
def test_a_hung_worker_shows_where_and_the_keeper_keeps_its_stack(local_cluster, store, tmp_path, training_turn):
    module = tmp_path / "hanging_job.py"
    module.write_text(HANGING_JOB)
    job = harness_job(str(module), max_restarts=0, stall_timeout_s=30, log_every=5, checkpoint_every=0,
                      collective_timeout_s=600,   # the stall timeout must act first
                      steps_per_epoch=100000)
    run = launcher.launch(local_cluster, job, store=store, preflight=launcher.Preflight.SKIP)
    wait_for(lambda: any(m["step"] >= 30 for m in metrics(run)), 240, "the first 30 steps")
    cli = subprocess.run([sys.executable, "-m", "backend", "--runs", str(store.root), "stacks", run.run_id],
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    chief, worker = cli.stdout.split("==> worker-1 on ")
    assert "==> worker-0 on " in chief and "most recent call first" in chief and "_maybe_hang" not in chief
    assert "_maybe_hang" in worker   # worker-1's stack shows the job's own function it hangs in
    training_turn.end()   # both workers now wait (one hung, one in the collective) for the stall timeout
    state = wait_phase(store, run.run_id, ("failed", "finished", "stopped"), 240)
    assert state.phase == "failed" and "stalled" in state.attempts[0].reason
    kept = run.local_dir / "stacks" / "stall-attempt-1"
    assert "_maybe_hang" in (kept / "worker-1.txt").read_text()
    assert "_maybe_hang" not in (kept / "worker-0.txt").read_text()
    assert_nothing_left(run, store)
