"""The shipped examples run: digits on two workers, the bring-your-own script, no sklearn."""
import os
import subprocess

from .conftest import PYTHON, ROOT, read_metrics, worker_env

DIGITS = os.path.join(ROOT, "examples", "digits.py")


def test_digits_two_workers_loss_drops(launcher, tmp_path):
    run = str(tmp_path / "run")
    cluster = launcher.start(run, n=2, job=DIGITS,
                             params=["epochs=1", "steps_per_epoch=150", "checkpoint_every=0"])
    assert cluster.wait() == [0, 0], cluster.tails()
    rows = [m for m in read_metrics(run) if m["task"] == "worker-0"]
    assert rows[-1]["global"]["loss"] < 0.5 * rows[0]["global"]["loss"]


def test_digits_without_sklearn_says_so(tmp_path):
    fake = tmp_path / "fake" / "sklearn"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no sklearn here')\n")
    env = worker_env(None)
    env["PYTHONPATH"] = str(tmp_path / "fake")
    code = ("from backend.client.harness import jobs; j = jobs.load_job(%r); "
            "j.make_dataset(None, 8, 0)" % DIGITS)
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, env=env,
                         timeout=180)
    assert out.returncode != 0
    assert "needs scikit-learn on every worker host" in out.stderr


def test_byo_script_writes_metrics(tmp_path):
    run = str(tmp_path / "run")
    out = subprocess.run([PYTHON, os.path.join(ROOT, "examples", "byo_script.py"),
                          "--run-dir", run, "--run-id", "byo", "--steps", "40"],
                         capture_output=True, text=True, env=worker_env(None), timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = read_metrics(run)
    assert [r["step"] for r in rows] == [10, 20, 30, 40] and rows[0]["run_id"] == "byo"
