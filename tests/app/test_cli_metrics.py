"""`tfconsole metrics RUN` on a real finished two-worker run: the last value of every metric per
worker and global, as the chief wrote them, checked against the chief's metrics.jsonl read here
line by line (not through the product's parser); `runs --json` carries last and best values."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def cli(runs: Path, *args: str) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "backend", "--runs", str(runs), *args],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    return out


def chief_lines(root: Path, run_id: str) -> list[dict]:
    from backend.runs.store import RunStore
    state = RunStore(root).load(run_id)
    folder = Path(state.chief.remote_run_dir)
    folder = folder if folder.is_absolute() else Path.home() / folder
    return [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]


def copied_by_a_console(finished_run, tmp_path: Path) -> tuple[Path, str, list[dict]]:
    """A runs folder holding the finished run as a console leaves it once it watched the run:
    the chief's metric lines copied into its watch_mirror (runs folder, run id, the lines)."""
    import shutil
    root, run_id = finished_run
    runs = tmp_path / "runs"
    shutil.copytree(root / run_id, runs / run_id, symlinks=True)
    mirror = runs / run_id / "watch_mirror"
    mirror.mkdir(exist_ok=True)
    lines = chief_lines(root, run_id)
    (mirror / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return runs, run_id, lines


def test_metrics_prints_every_metric_per_worker_and_global_as_written(finished_run):
    root, run_id = finished_run
    lines = chief_lines(root, run_id)
    last_global: dict = {}
    last_worker: dict = {}
    for line in lines:                        # the file's own order: the last line wins
        last_global.update(line.get("global") or {})
        last_worker.setdefault(line["task"], {}).update(line["metrics"])
    named = set(last_global) - {"loss"}
    assert named, "the demo job reports named metrics besides the loss"
    found = json.loads(cli(root, "metrics", run_id, "--json").stdout)
    assert found["step"] == max(x["step"] for x in lines) and found["partial"] is False
    assert {n: v["last"] for n, v in found["global"].items()} == pytest.approx(last_global)
    assert set(found["workers"]) == set(last_worker)
    for task, values in last_worker.items():
        assert found["workers"][task] == pytest.approx(values)
    text = cli(root, "metrics", run_id).stdout
    for name in last_global:
        assert name in text


def test_runs_json_carries_the_last_and_best_value_once_a_console_copied_the_metrics(finished_run, tmp_path):
    runs, run_id, lines = copied_by_a_console(finished_run, tmp_path)
    listed = json.loads(cli(runs, "runs", "--json").stdout)
    mine = next(r for r in listed if r.get("run_id") == run_id)
    losses = {x["step"]: x["global"]["loss"] for x in lines}
    best_step = min(losses, key=losses.get)
    assert mine["metrics"]["loss"]["best_step"] == best_step
    assert mine["metrics"]["loss"]["best"] == pytest.approx(losses[best_step])


def test_checkpoints_show_the_metrics_at_their_step(finished_run):
    """Issue 34 item 7: a checkpoint's metadata holds every metric's global value at its step;
    the epoch-end ones (30, 60) hold the validation values too, equal to that step's line."""
    root, run_id = finished_run
    rows = {r["step"]: r for r in json.loads(cli(root, "checkpoints", run_id, "--json").stdout)}
    at_step = {}
    for line in chief_lines(root, run_id):
        at_step.setdefault(line["step"], {}).update(line.get("global") or {})
    for step in (30, 60):
        assert rows[step]["val_loss"] == pytest.approx(at_step[step]["val_loss"])
        assert rows[step]["mae"] == pytest.approx(at_step[step]["mae"])
    table = cli(root, "checkpoints", run_id).stdout.splitlines()
    assert "val_loss" in table[0].split() and "mae" in table[0].split()


def test_runs_show_names_the_last_and_best_of_every_metric(finished_run, tmp_path):
    """`runs show` (issue 34: it showed no metric): each metric's last and best, from the copy
    of the metrics the console keeps in the run's folder."""
    runs, run_id, lines = copied_by_a_console(finished_run, tmp_path)
    text = cli(runs, "runs", "show", run_id).stdout
    vals = [x["global"]["val_loss"] for x in lines if "val_loss" in (x.get("global") or {})]
    assert f"metric val_loss: last {vals[-1]:.6g}" in text
    assert f"best {min(vals):.6g}" in text
    shown = json.loads(cli(runs, "runs", "show", run_id, "--json").stdout)
    assert shown["metrics"]["val_loss"]["best"] == pytest.approx(min(vals))
