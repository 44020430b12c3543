"""``files:`` on the Slurm engine: a script that exists only in the operator's folder runs from
the run's ``job/`` folder on every task, and still finds its run and ``tfconsole`` (their paths
are made absolute when the task starts elsewhere). No TensorFlow: Slurm's mechanics only."""
from __future__ import annotations

from pathlib import Path

import pytest

from backend.config.spec import job_from_dict
from backend.runs import launcher
from backend.runs.store import RunStore
from tests.conftest import slurm_spec

pytestmark = pytest.mark.slow

SCRIPT = """import os, tfconsole
ctx = tfconsole.context()
print("ran", ctx.task, "cwd", os.getcwd(), "run", ctx.run_dir, "settings", open("settings.json").read().strip(),
      flush=True)
"""


def test_a_local_script_shipped_with_files_runs_in_the_run_folder_on_every_slurm_task(
        slurm_cluster, tmp_path, python_path):
    folder = tmp_path / "laptop"
    folder.mkdir()
    (folder / "hello.py").write_text(SCRIPT)
    (folder / "settings.json").write_text("laptop\n")
    job = job_from_dict({"kind": "command", "command": ["hello.py"], "files": ["hello.py", "settings.json"]},
                        base_dir=folder)
    run = launcher.launch(slurm_spec(tmp_path, python_path), job, store=RunStore(tmp_path / "runs"))
    run.wait(timeout=120)
    assert run.state.phase == "finished", run.log_tail("chief-0")
    run_dir = run.state.chief.remote_run_dir
    for task in ("chief-0", "worker-0"):
        assert f"ran {task} cwd {run_dir}/job run {run_dir} settings laptop" in run.log_tail(task)


PROJECT_SCRIPT = """import os, tfconsole
from models.net import WIDTH
print("ran", tfconsole.context().task, "cwd", os.getcwd(), "width", WIDTH,
      "settings", open("config/settings.yaml").read().strip(), flush=True)
"""


def test_a_project_folder_runs_with_its_package_on_every_slurm_task(slurm_cluster, tmp_path, python_path):
    """``project:`` (issue 49) on Slurm: the folder's tree lands in the run's ``job/`` (shared by
    the nodes) and every task imports the project's package from there."""
    from tests.unit.test_project import make_project
    folder = make_project(tmp_path / "laptop")
    (folder / "train.py").write_text(PROJECT_SCRIPT)
    job = job_from_dict({"kind": "command", "command": ["train.py"], "project": str(folder)})
    run = launcher.launch(slurm_spec(tmp_path, python_path), job, store=RunStore(tmp_path / "runs"))
    run.wait(timeout=120)
    assert run.state.phase == "finished", run.log_tail("chief-0")
    run_dir = run.state.chief.remote_run_dir
    for task in ("chief-0", "worker-0"):
        assert f"ran {task} cwd {run_dir}/job width 8 settings lr: 0.1" in run.log_tail(task)
    assert not (Path(run_dir) / "job" / "data").exists()
    # Sent once: the login host keeps the tar by its hash beside runs/; launched again unchanged,
    # the same file serves (a tar that was sent again would be a new file: a new inode).
    cache = Path(run_dir).parent.parent / "projects"
    tars = {t.name: t.stat().st_ino for t in cache.glob("*.tar")}
    assert len(tars) == 1, tars
    again = launcher.launch(slurm_spec(tmp_path, python_path), job, store=RunStore(tmp_path / "runs"))
    again.wait(timeout=120)
    assert again.state.phase == "finished", again.log_tail("chief-0")
    assert {t.name: t.stat().st_ino for t in cache.glob("*.tar")} == tars
