"""A run shrunk with ``restart.shrink: keep_replica_batch`` (issue 39): the keeper gives the
tasks TFCONSOLE_LR_SCALE, and the harness multiplies the job's own learning rate by it after the
restore, which brings back the rate the checkpoint was saved with. A real one-worker run."""
import pytest

from .conftest import read_metrics

PARAMS = ("epochs=1", "steps_per_epoch=40", "log_every=10", "checkpoint_every=20", "seed=3")


def test_the_learning_rate_is_the_jobs_own_times_the_scale_after_a_restore(launcher, tmp_path, monkeypatch):
    run = str(tmp_path / "run")
    first = launcher.start(run, n=1, params=PARAMS, run_id="lr")
    assert first.wait() == [0], first.tails()
    monkeypatch.setenv("TFCONSOLE_LR_SCALE", "0.5")   # worker_env passes this process's env on
    again = launcher.start(run, n=1, params=PARAMS, run_id="lr", attempt=1, extra=["--resume-step", "20"])
    assert again.wait() == [0], again.tails()
    rates = {m["attempt"]: m["global"]["learning_rate"] for m in read_metrics(run)}
    assert rates[0] == pytest.approx(0.01) and rates[1] == pytest.approx(0.005), rates
    assert "learning rate 0.01 x 0.5 = 0.005 (the run shrank)" in again.log(0)
