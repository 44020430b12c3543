"""The command line does what the Checkpoints page does, on a real two-worker TensorFlow run:
list, save now, export (verified), restore; and ``--json`` on status, runs, checkpoints and
preflight gives documents a script can read. Run as a user would: ``python -m backend``."""
from __future__ import annotations

import json

import pytest
import yaml

from tests.conftest import wait_for
from tests.faults.conftest import SYNTHETIC, TF_ENV
from tests.integration.test_cli import cli, files  # noqa: F401


def test_help_documents_the_exit_codes(tmp_path):
    for args in (["--help"], ["export", "--help"]):
        out = cli(*args, runs=tmp_path).stdout
        assert "exit codes:" in out and "130" in out
    assert "restore" in cli("--help", runs=tmp_path).stdout


def test_json_of_runs_and_a_bad_step_is_one_line(files):  # noqa: F811
    assert json.loads(cli("runs", "--json", runs=files / "runs").stdout) == []
    bad = cli("export", "no-such-run", "--step", "x", runs=files / "runs", check=False)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "--step: 'x' is not a step" in bad.stderr


def test_preflight_json(files):  # noqa: F811
    out = cli("preflight", str(files / "cluster.yaml"), "--json", runs=files / "runs", check=False)
    reports = json.loads(out.stdout)
    assert [r["task"] for r in reports] == ["worker-0", "worker-1"]
    assert out.returncode == (0 if all(r["ok"] for r in reports) else 1)
    assert all(r["checks"]["python"]["ok"] for r in reports)


@pytest.mark.slow
def test_checkpoints_save_export_restore_from_the_cli(files):  # noqa: F811
    job = {"kind": "harness", "module": SYNTHETIC, "env": TF_ENV,
           "params": {"epochs": 1, "steps_per_epoch": 100000, "checkpoint_every": 0, "log_every": 5,
                      "global_batch_size": 32, "pace_s": 0.02}}   # leaves the cores to export and restore
    (files / "train.yaml").write_text(yaml.safe_dump(job))
    runs = files / "runs"
    run_id = cli("launch", str(files / "cluster.yaml"), str(files / "train.yaml"), runs=runs).stdout.strip()
    try:
        saved = cli("save", run_id, "--wait", "240", runs=runs).stdout
        step = int(saved.split("saved at step ")[1])
        listed = json.loads(cli("checkpoints", run_id, "--json", runs=runs).stdout)
        assert step in [c["step"] for c in listed] and all(c["bytes"] > 0 for c in listed)
        assert str(step) in cli("checkpoints", run_id, runs=runs).stdout.splitlines()[1]
        status = json.loads(cli("status", run_id, "--json", runs=runs).stdout)
        assert status["phase"] == "running" and [t["state"] for t in status["tasks"]] == ["running"] * 2
        exported = json.loads(cli("export", run_id, "--step", str(step), "--name", "cli-export", "--json",
                                  runs=runs).stdout)
        assert exported["name"] == "cli-export" and exported["step"] == step
        cli("restore", run_id, "--step", str(step), runs=runs)
        status = json.loads(cli("status", run_id, "--json", runs=runs).stdout)
        assert status["attempt"] == 2 and status["attempts"][-1]["resume_step"] == step
        wait_for(lambda: "restored step" in cli("logs", run_id, "--task", "worker-1", runs=runs).stdout,
                 180, "worker-1 to restore the checkpoint")
    finally:
        cli("stop", run_id, runs=runs, check=False)
    listed = json.loads(cli("runs", "--json", runs=runs).stdout)
    assert [(r["run_id"], r["phase"]) for r in listed] == [(run_id, "stopped")]
