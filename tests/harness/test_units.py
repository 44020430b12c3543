"""Pure tests: checkpoint listing, diagnose(), job parameters. No TensorFlow in this process."""
import json
import os
import subprocess
import sys

import pytest

from backend.diagnosis import diagnose as dg
from backend.client.harness import ckpt_index, jobs

from .conftest import PYTHON, host_argv


def touch(path, text=""):
    with open(path, "w") as fh:
        fh.write(text)


def make_ckpt(folder, step, *, index=True, meta=True, data=True):
    if index:
        touch(os.path.join(folder, f"ckpt-{step}.index"), "i")
    if data:
        touch(os.path.join(folder, f"ckpt-{step}.data-00000-of-00001"), "dd")
    if meta:
        touch(os.path.join(folder, f"ckpt-{step}.meta.json"), json.dumps({"step": step}))


def test_list_complete_ignores_partial_checkpoints(tmp_path):
    make_ckpt(tmp_path, 10)
    make_ckpt(tmp_path, 20, meta=False)            # save cut short: .index, no meta
    make_ckpt(tmp_path, 30, index=False)           # meta left over, checkpoint removed
    make_ckpt(tmp_path, 40)
    touch(tmp_path / "ckpt-50.meta.json", "{half")  # unreadable meta
    touch(tmp_path / "ckpt-50.index")
    steps = [c["step"] for c in ckpt_index.list_complete(str(tmp_path))]
    assert steps == [10, 40]
    assert ckpt_index.list_partial(str(tmp_path)) == [20, 30, 50]
    first = ckpt_index.list_complete(str(tmp_path))[0]
    assert first["prefix"] == str(tmp_path / "ckpt-10")
    assert set(first["files"]) == {"ckpt-10.index", "ckpt-10.data-00000-of-00001",
                                   "ckpt-10.meta.json"}


def test_list_complete_sorts_numerically_and_handles_missing_dir(tmp_path):
    for step in (100, 9, 25):
        make_ckpt(tmp_path, step)
    assert [c["step"] for c in ckpt_index.list_complete(str(tmp_path))] == [9, 25, 100]
    assert ckpt_index.list_complete(str(tmp_path / "nope")) == []


def test_ckpt_index_cli_prints_json(tmp_path):
    make_ckpt(tmp_path, 7)
    make_ckpt(tmp_path, 8, meta=False)
    out = subprocess.run([*host_argv(str(tmp_path / "run"), "ckpt_index"), str(tmp_path)],
                         capture_output=True, text=True, check=True, timeout=60)
    assert [c["step"] for c in json.loads(out.stdout)] == [7]


KERAS_FIT_LOG = """
Epoch 1/3
Traceback (most recent call last):
  File "train.py", line 40, in <module>
    model.fit(ds, epochs=3)
  File ".../keras/src/utils/traceback_utils.py", line 122, in error_handler
    raise e.with_traceback(filtered_tb) from None
ValueError: Attempt to convert a value (PerReplica:{
  0: <tf.Tensor: shape=(), dtype=float32, numpy=2.3>
}) with an unsupported type (<class 'tensorflow.python.distribute.values.PerReplica'>)
"""

PEER_LOG = """[worker-0] step 40/300 epoch 1 loss 1.0 global_loss 1.0 5 ms/step 6000 ex/s
Traceback (most recent call last):
tensorflow.python.framework.errors_impl.UnavailableError: Collective ops is aborted by: ...
[worker-0] HARNESS FAILED: UnavailableError: a peer worker died
"""

OTHER_LOG = """2025 I tensorflow noise
Traceback (most recent call last):
  File "job.py", line 3, in make_dataset
    raise KeyError("x")
KeyError: 'x'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "train.py", line 9, in main
RuntimeError: job broke: no data
[worker-1] HARNESS FAILED: RuntimeError: job broke: no data
"""


def test_diagnose_keras_fit_under_multiworker():
    text = dg.diagnose(KERAS_FIT_LOG)
    assert "model.fit" in text and "harness" in text and "tf_keras" in text


def test_diagnose_peer_died():
    assert "peer worker died" in dg.diagnose(PEER_LOG)


def test_diagnose_step_timeout_names_the_bound_and_the_fix():
    log = "[worker-0] step 20/100 epoch 1 loss 0.1\nTimeout (0:01:01)!\nThread 0x7f (most recent call first):\n"
    text = dg.diagnose(log)
    assert text.startswith("No training step finished for 60 s (collective_timeout_s") and "raise collective_timeout_s" in text


def test_diagnose_generic_traceback_gives_last_exception_line():
    assert dg.diagnose(OTHER_LOG) == "The worker stopped with an error: RuntimeError: job broke: no data"


def test_diagnose_clean_or_finished_logs():
    assert dg.diagnose("") is None
    assert dg.diagnose("[worker-0] step 10/20 loss 1.0\n[worker-0] HARNESS DONE {}\n") is None
    # an earlier failed attempt, then a successful one, in the same log
    assert dg.diagnose(PEER_LOG + "[worker-0] HARNESS DONE {}\n") is None


def test_job_params_layering(tmp_path):
    job = tmp_path / "j.py"
    job.write_text("DEFAULTS = {'epochs': 7, 'lr': 0.1}\n"
                   "def build_model(): pass\ndef make_dataset(c, b, s): pass\n"
                   "def loss_fn(y, p): pass\ndef make_optimizer(): pass\n")
    module = jobs.load_job(str(job))
    params = jobs.settle_params(module, ["steps_per_epoch=5", "lr=0.5", "bare=1", "name=x"])
    assert params["epochs"] == 7 and params["steps_per_epoch"] == 5
    assert params["lr"] == 0.5 and params["bare"] is True and params["name"] == "x"
    assert params["global_batch_size"] == 64 and params["collective_timeout_s"] == 60
    with pytest.raises(jobs.JobError):
        jobs.settle_params(module, ["epochs=many"])
    assert params["pace_s"] == 0.0 and jobs.settle_params(module, ["pace_s=0.02"])["pace_s"] == 0.02
    with pytest.raises(jobs.JobError, match="pace_s must be >= 0"):
        jobs.settle_params(module, ["pace_s=-1"])


def test_job_missing_functions_is_a_clear_error(tmp_path):
    job = tmp_path / "bad.py"
    job.write_text("def build_model(): pass\n")
    with pytest.raises(jobs.JobError, match="make_dataset, loss_fn, make_optimizer"):
        jobs.load_job(str(job))


def test_metrics_reporter_writes_contract_lines(tmp_path):
    from backend.client.harness.report import MetricsReporter
    with MetricsReporter(str(tmp_path), "r1", 2) as rep:
        rep.log("worker-1", 10, 1, metrics={"loss": 0.5}, global_metrics={"loss": 0.4},
                step_time=0.01, examples_per_sec=6400.0)
    line = json.loads((tmp_path / "metrics.jsonl").read_text())
    assert set(line) == {"run_id", "attempt", "task", "step", "epoch", "time", "step_time",
                         "examples_per_sec", "metrics", "global"}
    assert line["metrics"] == {"loss": 0.5} and line["global"] == {"loss": 0.4}
    assert line["attempt"] == 2 and line["task"] == "worker-1"


def test_units_do_not_import_tensorflow():
    """In a fresh interpreter: other tests in the same pytest process may import TensorFlow."""
    code = ("import sys; from backend.diagnosis import diagnose; from backend.client.harness import ckpt_index, jobs; "
            "print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_tensorflow_loads_without_kerass_sklearn_and_pandas_and_jobs_still_use_both():
    """tfload: a worker's TensorFlow import skips the optional sklearn wrappers, pandas and scipy
    (about 1 of 3.8 CPU-s here); a job that imports sklearn (and so scipy) itself
    (examples/digits.py) still gets it, and Keras still takes a pandas DataFrame. The import runs
    without garbage collection and its objects are frozen; collection is on again after it and
    still frees the job's cycles."""
    code = ("import sys, gc, weakref; from backend.client.harness import tfload; tfload.load(); "
            "print(sorted(m for m in ('tensorflow', 'keras', 'sklearn', 'scipy', 'pandas') "
            "if m in sys.modules)); "
            "f = lambda: None; f.me = f; ref = weakref.ref(f); del f; gc.collect(); "
            "print(gc.isenabled(), gc.get_freeze_count() > 100000, ref() is None); "
            "import sklearn.datasets; print(sklearn.datasets.load_digits().data.shape); "
            "import keras, pandas; model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)]); "
            "frame = pandas.DataFrame({'a': [1.0, 2.0, 3.0], 'b': [0, 1, 2]}); "
            "print(model.predict(frame, verbose=0).shape, model.predict(frame[['a', 'b']].to_numpy(), "
            "verbose=0).tolist() == model.predict(frame, verbose=0).tolist())")
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == ["['keras', 'tensorflow']", "True True True", "(1797, 64)",
                                       "(3, 1) True"], out.stdout


def test_a_task_that_ends_between_two_reads_is_exited_not_lost(tmp_path, monkeypatch):
    """The supervisor writes the task's exit code, then leaves its process group. A status read
    that saw no exit file, then an empty group, must look again: the run ended well (a CLI
    `launch --wait` once reported such a finished run as failed, "worker-0 lost")."""
    from backend.client.harness import layout, spawn
    run = str(tmp_path)
    os.makedirs(os.path.join(run, layout.TASKS))
    with open(layout.task_file(run, "worker-0", "json"), "w") as f:
        json.dump({"pid": 2 ** 22 + 1, "pgid": 2 ** 22 + 1}, f)

    def supervisor_finishes_meanwhile(pgid):
        with open(layout.task_file(run, "worker-0", "exit"), "w") as f:
            f.write("0\n")
        return []
    monkeypatch.setattr(spawn, "group_members", supervisor_finishes_meanwhile)
    assert spawn.status_one(run, "worker-0")["state"] == "exited"
    assert spawn.status_one(run, "worker-0")["exit_code"] == 0
    os.remove(layout.task_file(run, "worker-0", "exit"))
    monkeypatch.setattr(spawn, "group_members", lambda pgid: [])
    assert spawn.status_one(run, "worker-0")["state"] == "lost"   # gone with no code: lost


def test_a_restarted_tasks_log_is_diagnosed_from_its_latest_attempt(tmp_path):
    """The supervisor writes the attempt banner before each attempt's output; diagnosis reads the
    log from the last banner on, so the first attempt's traceback does not explain the second."""
    from backend.client.harness import layout
    run = str(tmp_path)
    for sub in (layout.TASKS, layout.LOGS):   # as spawn.start makes them before the supervisor
        os.makedirs(os.path.join(run, sub))
    for attempt, code in (("0", "raise ValueError('the first attempt failed')"), ("1", "print('step 5')")):
        subprocess.run([*host_argv(os.path.join(run, "shipped"), "hostctl"), "supervise", "--run", run,
                        "--task", "worker-0", "--cwd", run, "--", sys.executable, "-c", code],
                       env={**os.environ, "TFCONSOLE_ATTEMPT": attempt}, check=True, timeout=60)
    log = open(layout.log_file(run, "worker-0")).read()
    assert log.count(layout.ATTEMPT_BANNER) == 2, log
    assert "ValueError: the first attempt failed" in dg.diagnose(log), log
    latest = dg.current_attempt(log)
    assert latest.startswith(f"{layout.ATTEMPT_BANNER}1 ") and "step 5" in latest, log
    assert dg.diagnose(latest) is None, latest
