"""Resume a real two-worker run from a mid-run checkpoint."""
import shutil

from .conftest import TrainedRun, read_metrics


def copy_run(src, dst):
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("exports", "logs", "requests"))
    return dst


def test_resume_continues_from_the_checkpoint(trained_run, launcher, tmp_path):
    run = copy_run(trained_run.run_dir, str(tmp_path / "run"))
    before = {m["step"]: m for m in trained_run.metrics if m["task"] == "worker-0"}
    cluster = launcher.start(run, n=2, params=TrainedRun.PARAMS, run_id="shared", attempt=1,
                             extra=["--resume-step", "100"])
    assert cluster.wait() == [0, 0], cluster.tails()
    after = [m for m in read_metrics(run) if m["attempt"] == 1 and m["task"] == "worker-0"]
    assert [m["step"] for m in after] == [101, *range(110, 201, 10)], "step counter continues"
    # Close to where it stopped, far from where training began. (Step 101's row covers that step
    # alone, an attempt's first sync point; step 110's covers 102-110, the uninterrupted 101-110.)
    at = {m["step"]: m["global"]["loss"] for m in after}
    assert abs(at[110] - before[110]["global"]["loss"]) <= 0.05 * before[110]["global"]["loss"]
    assert at[101] < 0.7 * before[10]["global"]["loss"]
    # resume_data=skip replays the same batches and Adam's state is restored: the resumed
    # run follows the uninterrupted one (float rounding aside).
    final = after[-1]["global"]["loss"]
    assert abs(final - before[200]["global"]["loss"]) <= 1e-3 * before[200]["global"]["loss"]
    assert "restored step 100" in cluster.log(1)


def test_resume_from_a_missing_step_names_the_available_ones(trained_run, launcher, tmp_path):
    run = copy_run(trained_run.run_dir, str(tmp_path / "run"))
    cluster = launcher.start(run, n=1, params=TrainedRun.PARAMS, attempt=1,
                             extra=["--resume-step", "77"])
    assert cluster.wait() == [1]
    last = cluster.log(0).strip().splitlines()[-1]
    assert "HARNESS FAILED" in last and "step 77" in last and "[50, 100, 150, 200]" in last
