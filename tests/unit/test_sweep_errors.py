"""A sweep's bad input ends in one ConsoleError naming the field and what to do (issue 50): a
storage that does not answer, a damaged SQLite file, more trials at once than host groups, a bad
range, refused before any keeper starts and with no sweep folder left behind; from the CLI, one
line and no traceback."""
from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from backend.errors import ConsoleError, SweepError
from backend.hosts.ssh import SSHOptions
from backend.sweeps import control
from backend.sweeps.spec import sweep_from_dict
from tests.conftest import ROOT


def _data(**over) -> dict:
    data = {"cluster": {"tasks": [{"role": "chief", "host": "10.0.0.1", "tf_port": 2222},
                                  {"role": "worker", "host": "10.0.0.2", "tf_port": 2222}]},
            "job": {"kind": "command", "command": ["python", "-c", "pass", "{x}"]},
            "space": {"x": {"range": [0.0, 1.0]}}, "objective": {"metric": "val_loss"},
            "budget": {"trials": 2}, "at_once": 2, "sampler": "random"}
    return {**data, **over}


def _start(tmp_path, data) -> str:
    return control.start(sweep_from_dict(data), data, tmp_path / "runs", SSHOptions())


def test_a_storage_that_does_not_answer_is_named_and_nothing_is_left(tmp_path):
    url = f"sqlite:///{tmp_path}/no/such/folder/s.db"
    with pytest.raises(SweepError) as info:
        _start(tmp_path, _data(storage=url))
    assert url in str(info.value) and "Check the URL" in info.value.fix
    assert list((tmp_path / "runs" / control.FOLDER).iterdir()) == []


def test_a_damaged_sqlite_file_is_named_with_what_to_do(tmp_path):
    db = tmp_path / "damaged.db"
    db.write_bytes(b"this is not a database\n" * 200)
    with pytest.raises(SweepError) as info:
        _start(tmp_path, _data(storage=f"sqlite:///{db}"))
    assert str(db) in str(info.value) and "move it away" in info.value.fix
    assert db.read_bytes().startswith(b"this is not")   # left as it was, for the operator to look at


def test_a_damaged_sweep_file_is_refused_when_read(tmp_path):
    here = control.folder(tmp_path, "sweep-x")
    here.mkdir(parents=True)
    (here / control.SPEC).write_text(yaml.safe_dump(_data()))
    (here / "optuna.db").write_bytes(b"garbage" * 100)
    with pytest.raises(ConsoleError) as info:
        control.status(tmp_path, "sweep-x")
    assert "cannot be read" in str(info.value) and info.value.fix


@pytest.mark.parametrize("over, words", [
    ({"at_once": 3}, "at_once: 3 trials at once need 3 disjoint host groups"),
    ({"space": {"x": {"range": [1.0, 0.5]}}}, "space.x: the range [1.0, 0.5] is inverted"),
    ({"space": {"x": {"log_range": [0.0, 1.0]}}}, "space.x: a log_range must stay above zero"),
])
def test_the_cli_says_a_bad_sweep_in_one_line_without_a_traceback(tmp_path, over, words):
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(_data(**over)))
    out = subprocess.run([sys.executable, "-m", "backend", "--runs", str(tmp_path / "runs"), "sweep", "start",
                          str(path)], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode != 0 and "Traceback" not in out.stderr + out.stdout
    assert words in out.stderr + out.stdout, out.stderr


def test_an_unknown_sweep_is_refused_by_name(tmp_path):
    out = subprocess.run([sys.executable, "-m", "backend", "--runs", str(tmp_path), "sweep", "status", "sweep-nope"],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode != 0 and "Traceback" not in out.stderr and "no sweep 'sweep-nope'" in out.stderr
