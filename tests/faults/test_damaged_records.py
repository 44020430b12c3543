"""The console's own files, damaged (issue 35): a run id that is the name of the runs folder's own
file, a runs folder that is a file or read-only, run records that are damaged. Every reader skips
a damaged record, names it and goes on, and nothing ends in "This is a bug". The real command line
in a subprocess, real files, a real read-only mount (root, which runs the suite, ignores mode bits)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import yaml

from backend.access import audit
from backend.runs.store import RunStore
from backend.records.state import Attempt, Phase, RunState, TaskState
from rig import sshd
from tests.app.conftest import open_page, runs_dir  # noqa: F401 - runs_dir: a fixture used below
from tests.conftest import ROOT

BUG = "This is a bug"
# What each damage does to a good record, and the reason the user reads for it.
DAMAGE = {"created-text": ("created is a string", lambda path: _edit(path, created="yesterday")),
          "job-null": ("job is null", lambda path: _edit(path, job=None)),
          "state-folder": ("Is a directory", lambda path: (path.unlink(), path.mkdir()))}


def _cli(*args, runs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "backend", "--runs", str(runs), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def _edit(path, **fields) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


def _saved(store: RunStore, run_id: str, phase: Phase = Phase.FINISHED) -> None:
    """A run record only (no process): what every reader of the runs folder reads."""
    store.reserve(run_id)
    store.save(RunState(run_id, 1000.0, {"tasks": [{"role": "worker", "host": "127.0.0.1", "transport": "local"}]},
                        {"kind": "command", "command": ["true"]},
                        [TaskState("worker-0", 0, "127.0.0.1", f"/nonexistent/{run_id}")],
                        [Attempt(1, 1000.0)], phase=phase))


def _damaged_runs(root) -> RunStore:
    """A good run beside one run of each damage."""
    store = RunStore(root)
    for run_id in ("good", *DAMAGE):
        _saved(store, run_id)
    for run_id, (_, damage) in DAMAGE.items():
        damage(store.path(run_id) / "state.json")
    return store


def _unreachable_cluster(tmp_path):
    """An SSH host nobody answers on: a launch that got as far as preflight would say so."""
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"tasks": [{"role": "worker", "host": "127.0.0.9", "ssh_port": sshd.free_port(),
                                               "tf_port": sshd.free_port(), "python": sys.executable}]}))
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"kind": "command", "command": ["true"]}))
    return path, job


def test_a_run_id_that_is_the_runs_folders_own_file_is_refused_before_anything_starts(tmp_path):
    """Accepted before, it made <runs>/webhook.json a folder: every later launch failed."""
    cluster, job = _unreachable_cluster(tmp_path)
    runs = tmp_path / "runs"
    for run_id in ("webhook.json", "WEBHOOK.json"):
        out = _cli("launch", str(cluster), str(job), "--run-id", run_id, runs=runs)
        assert out.returncode == 2, out.stderr
        assert "--run-id" in out.stderr and "own file" in out.stderr and BUG not in out.stderr
        assert "127.0.0.9" not in out.stderr                 # refused before preflight
    assert not (runs / "webhook.json").exists()


def test_a_runs_folder_left_with_a_run_named_like_its_webhook_file_says_so_at_launch(tmp_path, python_path):
    """A run named webhook.json from before: launches say what to move (was IsADirectoryError)."""
    runs = tmp_path / "runs"
    (runs / "webhook.json").mkdir(parents=True, mode=0o700)   # as a run folder is made
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({"tasks": [{"role": "worker", "host": "127.0.0.1", "transport": "local",
                                                  "tf_port": sshd.free_port(), "python": python_path,
                                                  "workdir": str(tmp_path / "host")}]}))
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"kind": "command", "command": ["true"]}))
    out = _cli("launch", str(cluster), str(job), runs=runs)
    assert out.returncode == 2, out.stderr
    assert "webhook.json is a folder" in out.stderr and "Move that folder" in out.stderr and BUG not in out.stderr
    # Nothing launched: beside the webhook file only the audit, which says the launch was refused.
    assert sorted(p.name for p in runs.iterdir()) == ["audit.jsonl", "webhook.json"]
    assert [e["outcome"].split(":")[0] for e in audit.read(runs)[0]] == ["refused"]


def test_a_runs_folder_that_is_a_file_is_named_by_every_command(tmp_path):
    cluster, job = _unreachable_cluster(tmp_path)
    runs = tmp_path / "runs"
    runs.write_text("not a folder\n")
    for args in (["runs"], ["status", "some-run"], ["launch", str(cluster), str(job)]):
        out = _cli(*args, runs=runs)
        assert out.returncode == 2, (args, out.stderr)
        assert f"the runs folder {runs} is a file" in out.stderr and BUG not in out.stderr, (args, out.stderr)
        assert "127.0.0.9" not in out.stderr


def _read_only_view(source, view):
    """``source`` seen at ``view`` through a read-only bind mount (unmount with umount)."""
    view.mkdir()
    mounted = subprocess.run(["mount", "--bind", str(source), str(view)], capture_output=True)
    if mounted.returncode:
        pytest.skip(f"cannot bind-mount here: {mounted.stderr.decode().strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], check=True, capture_output=True)
    except subprocess.CalledProcessError:
        subprocess.run(["umount", str(view)], check=True)
        raise


@pytest.fixture
def read_only(tmp_path):
    """``runs`` (with a live run's record in it) seen through a read-only bind mount."""
    source = tmp_path / "runs"
    _saved(RunStore(source), "live", Phase.RUNNING)
    view = tmp_path / "ro"
    _read_only_view(source, view)
    try:
        yield view
    finally:
        subprocess.run(["umount", str(view)], check=True)


def test_a_read_only_runs_folder_is_refused_before_preflight_and_still_listed(read_only, tmp_path):
    cluster, job = _unreachable_cluster(tmp_path)
    out = _cli("launch", str(cluster), str(job), runs=read_only)
    assert out.returncode == 2, out.stderr
    assert f"the runs folder {read_only} cannot be written (Read-only file system)" in out.stderr, out.stderr
    assert "127.0.0.9" not in out.stderr and BUG not in out.stderr   # no host was touched
    listed = _cli("runs", runs=read_only)                           # reading needs no write
    assert listed.returncode == 0 and "live" in listed.stdout, listed.stderr
    for command in ("status", "stop"):                               # a live run's readers record
        out = _cli(command, "live", runs=read_only)
        assert out.returncode == 2, out.stderr
        assert "cannot be written (Read-only file system)" in out.stderr and BUG not in out.stderr


def test_logs_of_a_live_run_read_on_a_read_only_runs_folder(local_cluster, tmp_path):
    """Issue 56 item 10: a command that only reads must read. `logs` of a live run reads its
    hosts and writes nothing here (was refused: "cannot be written (Read-only file system)")."""
    from backend.config.spec import job_from_dict
    from backend.runs import launcher
    from tests.conftest import wait_for
    job = job_from_dict({"kind": "command", "command": [
        sys.executable, "-c", "import time; print('up and training', flush=True); time.sleep(600)"]})
    store = RunStore(tmp_path / "runs")
    run = launcher.launch(local_cluster, job, store=store, preflight=launcher.Preflight.SKIP)
    view = tmp_path / "ro"
    try:
        wait_for(lambda: all("up and training" in run.log_tail(t.name) for t in run.state.tasks), 60,
                 "both tasks to print")
        _read_only_view(store.root, view)
        try:
            every = _cli("logs", run.run_id, runs=view)
            one = _cli("logs", run.run_id, "--task", "worker-1", runs=view)
            status = _cli("status", run.run_id, runs=view)
        finally:
            subprocess.run(["umount", str(view)], check=True)
    finally:
        run.stop(grace_s=2)
    assert every.returncode == 0 and one.returncode == 0, (every.stderr, one.stderr)
    assert every.stdout.count("up and training") == 2 and "==> worker-1 <==" in every.stdout, every.stdout
    assert "up and training" in one.stdout and "==>" not in one.stdout, one.stdout
    assert "cannot be written" not in every.stderr + one.stderr
    assert status.returncode == 2 and "cannot be written" in status.stderr   # status records: still refused


def test_damaged_records_are_skipped_named_and_the_rest_still_listed(tmp_path):
    store = _damaged_runs(tmp_path / "runs")
    assert [s.run_id for s in store.list()] == ["good"]          # what every page sorts and picks from
    out = _cli("runs", runs=store.root)
    assert out.returncode == 0, out.stderr
    assert "good  finished" in out.stdout
    for run_id, (reason, _) in DAMAGE.items():
        assert f"(damaged) run {run_id!r} has a damaged state file" in out.stdout and reason in out.stdout
    listed = json.loads(_cli("runs", "--json", runs=store.root).stdout)
    assert [r["run_id"] for r in listed if "run_id" in r] == ["good"] and len(listed) == 1 + len(DAMAGE)
    for run_id, (reason, _) in DAMAGE.items():
        out = _cli("status", run_id, runs=store.root)
        assert out.returncode == 2 and BUG not in out.stderr, out.stderr
        assert f"run {run_id!r} has a damaged state file" in out.stderr and reason in out.stderr


def test_the_runs_page_names_each_damaged_run_and_shows_the_rest(runs_dir):  # noqa: F811
    _damaged_runs(runs_dir)
    at = open_page("runs")
    assert not at.exception
    warning = " ".join(w.value for w in at.warning).replace("\\", "")   # Markdown escapes
    assert "3 run(s)" in warning, warning
    for run_id, (reason, _) in DAMAGE.items():
        assert f"run '{run_id}' has a damaged state file" in warning and reason in warning
    assert list(at.dataframe[0].value["run"]) == ["good"]
    shutil.rmtree(runs_dir / "state-folder")                     # each damage, alone, is named
    assert "2 run(s)" in " ".join(w.value for w in open_page("runs").warning)


def test_the_consoles_start_on_a_read_only_runs_folder_is_refused_before_preflight(read_only):
    from backend.config.spec import job_from_dict
    from backend.hosts.ssh import SSHOptions
    from console import actions
    from console.live_run import Registry
    from tests.app.conftest import local_rows
    registry = Registry(RunStore(read_only), SSHOptions())
    try:
        result = actions.start(local_rows(), job_from_dict({"kind": "command", "command": ["true"]}), registry)
    finally:
        registry.close()
    assert result.live is None and result.preflight is None, result   # no host was checked
    assert any(f"the runs folder {read_only} cannot be written" in e for e in result.errors), result.errors
