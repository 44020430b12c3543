"""`tfconsole tensorboard RUN` on a real finished two-worker run: the chief's event files copied
to the run's local folder (only what is new), read back with TensorFlow's own reader against the
chief's metrics.jsonl; TensorBoard started on a free port, listing the train and validation runs,
and stopped with no process left; the errors for no event files and no TensorBoard."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

import pytest

from tests.app.test_cli_metrics import chief_lines, cli
from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def chief_dir(root: Path, run_id: str) -> Path:
    from backend.runs.store import RunStore
    folder = Path(RunStore(root).load(run_id).chief.remote_run_dir)
    return folder if folder.is_absolute() else Path.home() / folder


def scalars(folder: Path) -> dict:
    """step -> tag -> value, from the event files directly in ``folder``."""
    import tensorflow as tf
    found: dict = defaultdict(dict)
    for path in folder.glob("events.out.tfevents*"):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                found[event.step][value.tag] = float(tf.make_ndarray(value.tensor))
    return found


def moved_copy(finished_run, tmp_path) -> tuple[Path, str, Path]:
    """The finished run's record in a new runs folder, its chief's folder (harness and event files)
    copied too and named in the record: a run this test may change. (runs root, id, chief folder)."""
    root, run_id = finished_run
    runs, chief = tmp_path / "runs", tmp_path / "chief"
    shutil.copytree(root / run_id, runs / run_id, symlinks=True)
    shutil.rmtree(runs / run_id / "tensorboard", ignore_errors=True)
    for name in ("lib", "tensorboard"):
        shutil.copytree(chief_dir(root, run_id) / name, chief / name)
    state_file = runs / run_id / "state.json"
    state = json.loads(state_file.read_text())
    from backend.runs.store import RunStore
    chief_name = RunStore(root).load(run_id).chief.name   # the default cluster's chief is worker-0
    for task in state["tasks"]:
        if task["name"] == chief_name:
            task["remote_run_dir"] = str(chief)
    state_file.write_text(json.dumps(state))
    return runs, run_id, chief


def test_once_copies_the_chief_event_files_with_the_runs_metrics(finished_run):
    root, run_id = finished_run
    out = cli(root, "tensorboard", run_id, "--once")
    local = root / run_id / "tensorboard"
    assert str(local) in out.stdout
    train, val = scalars(local), scalars(local / "validation")
    lines = chief_lines(root, run_id)
    assert sorted(train) == sorted({x["step"] for x in lines})
    for line in lines:
        step, task = line["step"], line["task"]
        assert train[step][f"loss/{task}"] == pytest.approx(line["metrics"]["loss"], rel=1e-5)
        assert train[step]["loss/global"] == pytest.approx(line["global"]["loss"], rel=1e-5)
    validated = {x["step"]: x["global"]["val_loss"] for x in lines if "val_loss" in (x.get("global") or {})}
    assert validated and sorted(val) == sorted(validated)
    for step, value in validated.items():
        assert val[step]["loss/global"] == pytest.approx(value, rel=1e-5)


def test_the_runs_goodput_is_a_tensorboard_run_of_its_own(finished_run):
    """``goodput/share`` and one ``goodput/<cause>`` per cause, at the run's last step, equal to
    what ``tfconsole goodput`` says; a second start replaces the snapshot."""
    import tensorflow as tf
    from backend.runs import goodput
    from backend.runs.store import RunStore
    root, run_id = finished_run
    cli(root, "tensorboard", run_id, "--once")
    cli(root, "tensorboard", run_id, "--once")
    files = list((root / run_id / "tensorboard" / "goodput").glob("events.out.tfevents*"))
    assert len(files) == 1, files
    found = {}
    for event in tf.compat.v1.train.summary_iterator(str(files[0])):
        found.update({(event.step, v.tag): v.simple_value for v in event.summary.value})
    store = RunStore(root)
    want = goodput.here(store.load(run_id), store.path(run_id))
    assert found[(60, "goodput/share")] == pytest.approx(want.share, rel=1e-5)
    assert found[(60, "goodput/training_kept")] == pytest.approx(want.causes["training kept"], rel=1e-5)
    assert {t for _, t in found} >= {"goodput/start-up", "goodput/checkpoint_saves", "goodput/validation"}


def test_a_second_copy_fetches_only_the_bytes_the_chief_added(finished_run, tmp_path):
    runs, run_id, chief = moved_copy(finished_run, tmp_path)
    first = cli(runs, "tensorboard", run_id, "--once").stdout
    total = sum(p.stat().st_size for p in (chief / "tensorboard").rglob("*") if p.is_file())
    assert f"copied {total} bytes" in first
    assert "copied 0 bytes" in cli(runs, "tensorboard", run_id, "--once").stdout
    grown = next((chief / "tensorboard").glob("events.out.tfevents*"))
    with open(grown, "ab") as fh:   # as a live writer appends
        fh.write(b"x" * 123)
    assert "copied 123 bytes (1 file(s)" in cli(runs, "tensorboard", run_id, "--once").stdout
    assert (runs / run_id / "tensorboard" / grown.name).read_bytes() == grown.read_bytes()


def test_no_event_files_says_why_and_what_to_do(finished_run, tmp_path):
    runs, run_id, chief = moved_copy(finished_run, tmp_path)
    shutil.rmtree(chief / "tensorboard")
    out = subprocess.run([sys.executable, "-m", "backend", "--runs", str(runs), "tensorboard", run_id, "--once"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert f"run {run_id} has no TensorBoard event files yet" in out.stderr
    assert "try again once" in out.stderr


def test_without_tensorboard_installed_the_error_says_how_to_install_it(finished_run):
    root, run_id = finished_run
    code = ("import sys; sys.modules['tensorboard'] = None\n"   # as in a Python without the package
            "from backend.cli.main import main\n"
            f"sys.exit(main(['--runs', {str(root)!r}, 'tensorboard', {run_id!r}]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "TensorBoard is not installed" in out.stderr and "requirements.txt" in out.stderr


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:
        return []


def test_tensorboard_serves_the_train_and_validation_runs_and_stops_with_the_command(finished_run):
    from rig.sshd import free_port
    root, run_id = finished_run
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "backend", "--runs", str(root), "tensorboard", run_id,
                             "--port", str(port)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        url = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 240   # TensorBoard imports TensorFlow first: 25 s on a busy machine
        for line in proc.stdout:
            if "TensorBoard: open" in line or time.monotonic() > deadline:
                break
        assert url in line, (line, proc.stderr.read() if proc.poll() is not None else "")
        with urllib.request.urlopen(f"{url}data/runs", timeout=30) as answer:
            assert answer.status == 200
            assert set(json.loads(answer.read())) == {".", "validation", "goodput"}
        with urllib.request.urlopen(f"{url}data/plugin/scalars/tags", timeout=30) as answer:
            tags = json.loads(answer.read())
        assert "loss/global" in tags["."] and "loss/global" in tags["validation"]
        assert "goodput/share" in tags["goodput"]   # served by TensorBoard itself
        served = children(proc.pid)
        assert served
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    for pid in served:
        assert not Path(f"/proc/{pid}").exists(), f"TensorBoard (pid {pid}) outlived the command"
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{url}data/runs", timeout=5)
