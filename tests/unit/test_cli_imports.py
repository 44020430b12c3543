"""A command imports what it uses (issue 57 item 7): `runs`, `status` and `sweep status` took
1.8-5.3 s because every command imported the whole backend (Optuna's alembic alone 0.9 s). Each
command runs here in a fresh process, and the heavy packages it has no use for must not be in
``sys.modules`` after it: this guards the start-up time without timing anything
(bench/cli_latency.py has the figures)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

# Never needed by a command that only reads the runs folder.
NEVER = ("optuna", "sqlalchemy", "alembic", "tensorflow", "streamlit", "plotly", "pandas")
# Needed only by commands that reach a host (paramiko) or read metric files (numpy, pyarrow).
HOSTS_AND_METRICS = ("paramiko", "numpy", "pyarrow")

PROBE = """
import json, sys
from backend.cli import main
try:
    code = main.main(json.loads(sys.argv[1]))
except SystemExit as done:   # --help
    code = done.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def imported_by(runs, argv: list[str]) -> tuple[int, set[str]]:
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(["--runs", str(runs), *argv])],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout.splitlines()[-1])
    return found["code"], {m.split(".")[0] for m in found["modules"]}


@pytest.mark.parametrize("argv", [["--help"], ["runs"], ["audit"], ["sweep", "status"]])
def test_a_command_that_reads_the_runs_folder_imports_nothing_heavy(tmp_path, argv):
    code, modules = imported_by(tmp_path, argv)
    assert code == 0
    assert modules.isdisjoint(NEVER + HOSTS_AND_METRICS), sorted(modules & {*NEVER, *HOSTS_AND_METRICS})


def test_status_imports_the_hosts_but_no_sweeps_training_or_pages(tmp_path):
    from backend.runs.store import RunStore
    from backend.records.state import Attempt, Phase, RunState, TaskState
    store = RunStore(tmp_path)
    store.reserve("r1")   # a finished run's record only: status asks its (absent) task once
    store.save(RunState("r1", 1000.0, {"tasks": [{"role": "worker", "host": "127.0.0.1", "transport": "local",
                                                  "tf_port": 2000}]},
                        {"kind": "command", "command": ["true"]},
                        [TaskState("worker-0", 0, "127.0.0.1", str(tmp_path / "nowhere"))],
                        [Attempt(1, 1000.0)], phase=Phase.FINISHED))
    code, modules = imported_by(tmp_path, ["status", "r1"])
    assert code == 0
    assert modules.isdisjoint(NEVER), sorted(modules & set(NEVER))



def test_sweep_status_reads_a_sweeps_trials_without_optuna(tmp_path):
    from backend.config.yaml_files import write_yaml
    from backend.sweeps import control
    from tests.unit.test_sweep_trials import data_of, filled
    here = control.folder(tmp_path, "s1")   # a finished sweep, its study holding 8 trials
    here.mkdir(parents=True)
    filled(here, "min")
    write_yaml(data_of("min"), here / control.SPEC, private=True)
    (here / control.STATE).write_text(json.dumps({"phase": "finished"}))
    for argv in (["sweep", "status"], ["sweep", "status", "s1"]):
        code, modules = imported_by(tmp_path, argv)
        assert code == 0
        assert modules.isdisjoint(NEVER), sorted(modules & set(NEVER))
