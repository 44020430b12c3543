"""A ``train.py`` that exists only on the operator's machine (issue 26): ``files:`` ships it into
every host's run folder and the command runs there.

Real parts: two sshd hosts (chief on 127.0.0.2, worker on 127.0.0.3, separate run folders),
tf_keras ``model.fit`` under MultiWorkerMirroredStrategy with the console's callback. The hosts
share this machine's disk, so the script proves where it ran from by printing its own path and
its working folder; a companion file is read by a relative name.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend import checkpoints
from backend.config.spec import job_from_dict
from backend.runs import launcher
from backend.runs.store import RunStore
from tests.conftest import processes_of

ROOT = Path(__file__).resolve().parents[2]

WHERE = ('import os as _os\nprint("script", _os.path.abspath(__file__), "cwd", _os.getcwd(), '
         '"settings", open("settings.json").read().strip(), flush=True)\n')


def laptop_folder(tmp_path: Path) -> Path:
    """The operator's folder: the example fit script as train.py, and a file it reads."""
    folder = tmp_path / "laptop"
    folder.mkdir()
    text = (ROOT / "examples" / "keras_fit.py").read_text()
    (folder / "train.py").write_text(text.replace("\nimport time\n", "\nimport time\n" + WHERE, 1))
    (folder / "settings.json").write_text('{"from": "laptop"}\n')
    return folder


def metrics(run) -> list[dict]:
    chief = run.state.chief
    out = run.transport(chief.name).run(["cat", f"{chief.remote_run_dir}/metrics.jsonl"]).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


@pytest.mark.slow
def test_a_script_only_on_this_machine_trains_on_two_workers(ssh_cluster, ssh_options, tmp_path):
    folder = laptop_folder(tmp_path)
    job = job_from_dict({"kind": "command", "command": ["train.py", "--epochs", "1", "--steps", "20"],
                         "files": ["train.py", "settings.json"],
                         "env": {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}}, base_dir=folder)
    run = launcher.launch(ssh_cluster, job, store=RunStore(tmp_path / "runs"), options=ssh_options,
                          preflight=launcher.Preflight.SKIP)
    try:
        run.wait(timeout=300)
    finally:
        if run.state.live:
            run.stop(grace_s=5)
    assert run.state.phase == "finished", run.log_tail("chief-0")
    for task in run.state.tasks:
        shipped = f"{task.remote_run_dir}/job"
        assert f"script {shipped}/train.py cwd {shipped} settings {{\"from\": \"laptop\"}}" in run.log_tail(task.name)
    assert {m["task"] for m in metrics(run)} == {"chief-0", "worker-0"}
    assert 20 in [c["step"] for c in checkpoints.list_checkpoints(run)]
    assert 20 in [c["step"] for c in checkpoints.list_checkpoints(run, "worker-0")]
    assert processes_of(run) == []
