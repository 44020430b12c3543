"""Names a chief reports never name files outside their folder on the console machine (issue 27).

A checkpoint listing's file names were joined to a local temporary folder (``Path(tmp) / name``)
and an export's name became a download folder, unchecked: an absolute name or '..' from a
compromised or confused host wrote where it pointed. The listings here are crafted, as such a
host would send them.
"""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from backend import checkpoints
from backend.errors import HostError
from backend.hosts import remote
from backend.hosts.base import Result
from backend.records.state import TaskState
from backend.config.spec import JobKind, JobSpec, Role, TaskSpec, TransportKind
from console import actions


class Host:
    """A transport that answers every command with one crafted stdout line."""
    host = "chief-host"

    def __init__(self, stdout: str) -> None:
        self.stdout, self.commands = stdout, []

    def run(self, argv, *, stdin=None, timeout=None):
        self.commands.append(list(argv))
        if "read" in argv:
            pytest.fail("nothing may be fetched for a refused name")
        return Result(0, self.stdout, "", self.host, " ".join(argv))


def fake_run(tmp_path: Path, stdout: str):
    chief = TaskState("chief-0", 0, "chief-host", "tfconsole/runs/r1.abc")
    spec = TaskSpec(role=Role.CHIEF, host="chief-host", tf_port=2222, transport=TransportKind.SSH)
    host = Host(stdout)
    return SimpleNamespace(
        state=SimpleNamespace(chief=chief, tasks=[chief], live=False), task=lambda name: chief,
        task_spec=lambda name: spec, transport=lambda name: host, local_dir=tmp_path / "runs" / "r1", run_id="r1",
        job=JobSpec(kind=JobKind.HARNESS, module=str(tmp_path / "job.py")),
        remote=lambda name: remote.Host(host, "python3", chief.remote_run_dir))


@pytest.mark.parametrize("name", ["/tmp/evil", "../../evil", "ckpt-1/../../../evil", "..", ""])
def test_a_checkpoint_listing_with_a_path_for_a_name_is_refused(tmp_path, name):
    listing = [{"step": 1, "epoch": 0, "dir": "x", "files": {"ckpt-1.index": 10, name: 10}}]
    with pytest.raises(HostError) as err:
        checkpoints.list_checkpoints(fake_run(tmp_path, json.dumps({"checkpoints": listing})))
    text = str(err.value)
    assert text.startswith("chief-host: the checkpoint file name ") and "is not a plain file name" in text, text
    assert "nothing was copied to this machine" in text, text


def test_an_ordinary_listing_still_loads(tmp_path):
    listing = [{"step": 1, "files": {"ckpt-1.index": 10, "ckpt-1.data-00000-of-00001": 5, "ckpt-1.meta.json": 1}}]
    assert checkpoints.list_checkpoints(fake_run(tmp_path, json.dumps({"checkpoints": listing}))) == listing


def test_an_export_named_with_a_path_makes_no_folder(tmp_path):
    """The Keras download made runs/<id>/downloads/<name> before any check: ../../.. escaped it."""
    run = fake_run(tmp_path, "")
    escape = str(tmp_path / "outside" / "evil")
    with pytest.raises(HostError) as err:
        actions.fetch_keras(SimpleNamespace(run=run), {"name": "../../../outside/evil"})
    assert "the export name '../../../outside/evil'" in str(err.value), str(err.value)
    with pytest.raises(HostError):
        actions.fetch_keras(SimpleNamespace(run=run), {"name": escape})
    assert not (tmp_path / "outside").exists() and not (tmp_path / "runs").exists()


def test_an_export_result_with_a_path_for_a_name_is_refused(tmp_path):
    run = fake_run(tmp_path, "")
    host = run.transport("chief-0")
    answers = {"ckpt-hold": json.dumps({"step": 1, "hold": "h1"}), "ckpt-release": "{}",
               "export": json.dumps({"name": "/etc/evil", "step": 1})}
    host.run = lambda argv, **kw: Result(0, answers[argv[4]], "", host.host, " ".join(argv))
    with pytest.raises(HostError) as err:
        checkpoints.export(run, step=1)
    assert "the export name '/etc/evil'" in str(err.value), str(err.value)
