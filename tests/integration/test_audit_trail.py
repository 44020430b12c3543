"""Who started a run and who stopped it (issue 48), asked as an operator would: `tfconsole audit`
answers "who stopped this run, and when", for the command line and a Python script alike; the
run's owner is in `runs --json`, `runs show` and the Runs page's rows.

Real parts: the command line and a Python script in subprocesses, two local workers
running a real command. No TensorFlow (a `sleep` command)."""
from __future__ import annotations

import getpass
import json
import subprocess
import sys

import pytest
import yaml

from backend.runs.store import RunStore
from console import runs_view
from rig import sshd
from tests.integration.test_cli import ROOT, cli


def test_the_audit_says_who_launched_and_stopped_each_run_from_the_cli_and_from_python(tmp_path, python_path):
    cluster = {"tasks": [{"role": "worker", "host": "127.0.0.1", "transport": "local", "tf_port": sshd.free_port(),
                          "python": python_path, "workdir": str(tmp_path / "host")} for _ in range(2)]}
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    (tmp_path / "job.yaml").write_text(yaml.safe_dump({"kind": "command", "command": ["sleep", "60"]}))
    runs = tmp_path / "runs"
    by_cli = cli("launch", str(tmp_path / "cluster.yaml"), str(tmp_path / "job.yaml"), "--run-id", "from-cli",
                 runs=runs).stdout.strip().splitlines()[-1]
    assert "from-cli" in by_cli
    refused = cli("launch", str(tmp_path / "cluster.yaml"), str(tmp_path / "job.yaml"), "--run-id", "from-cli",
                  runs=runs, check=False)
    assert refused.returncode == 2
    cli("stop", "from-cli", runs=runs)

    script = (f"from backend import api\n"   # an operator's own script, in its own process
              f"run = api.launch({str(tmp_path / 'cluster.yaml')!r}, {str(tmp_path / 'job.yaml')!r}, "
              f"runs={str(runs)!r}, run_id='from-python', preflight=False)\n"
              f"run.stop()\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr

    me = getpass.getuser()
    said = json.loads(cli("audit", "--json", runs=runs).stdout)
    assert said["skipped"] == []
    lines = [(e["who"]["name"], e["who"]["via"], e["action"], e["run"], e["outcome"].split(":")[0])
             for e in said["entries"]]
    assert lines == [(me, "cli", "launch", "from-cli", "ok"), (me, "cli", "launch", "from-cli", "refused"),
                     (me, "cli", "stop", "from-cli", "ok"),
                     (me, "python", "launch", "from-python", "ok"), (me, "python", "stop", "from-python", "ok")]
    stops = json.loads(cli("audit", "--json", "--run", "from-cli", "--action", "stop", runs=runs).stdout)["entries"]
    assert len(stops) == 1 and stops[0]["time"] > said["entries"][0]["time"]
    text = cli("audit", "--run", "from-python", runs=runs).stdout
    assert "launch" in text and "stop" in text and "(python on" in text

    owners = {r["run_id"]: r["owner"] for r in json.loads(cli("runs", "--json", runs=runs).stdout)}
    assert {k: (v["name"], v["via"]) for k, v in owners.items()} == {"from-cli": (me, "cli"),
                                                                  "from-python": (me, "python")}
    shown = json.loads(cli("runs", "show", "from-python", "--json", runs=runs).stdout)
    assert shown["owner"]["via"] == "python"
    assert "started by: " + me in cli("runs", "show", "from-cli", runs=runs).stdout
    rows = runs_view.run_rows(RunStore(runs).list())
    assert sorted(r["owner"] for r in rows) == [me, me]


def test_with_a_roles_file_a_viewer_or_another_operator_is_refused_and_audited(tmp_path, python_path, monkeypatch):
    """Roles (issue 48) enforced where the actions are, not by hiding buttons: requests that reach
    the backend as a viewer, or as an operator for someone else's run, are refused and recorded;
    the owner stops their own run. A roles file with a mistake refuses every action, naming it."""
    from backend.access import identity
    from backend.access.roles import AccessDenied
    from backend.runs import launcher
    from backend.config.spec import load_cluster, load_job
    monkeypatch.delenv("TFCONSOLE_ROLES", raising=False)
    cluster = {"tasks": [{"role": "worker", "host": "127.0.0.1", "transport": "local", "tf_port": sshd.free_port(),
                          "python": python_path, "workdir": str(tmp_path / "host")} for _ in range(2)]}
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    (tmp_path / "job.yaml").write_text(yaml.safe_dump({"kind": "command", "command": ["sleep", "60"]}))
    runs = tmp_path / "runs"
    runs.mkdir()
    me = getpass.getuser()
    (runs / "roles.yaml").write_text(f"users:\n  {me}: operator\n  bob: operator\ndefault: viewer\n")
    cli("launch", str(tmp_path / "cluster.yaml"), str(tmp_path / "job.yaml"), "--run-id", "mine", runs=runs)
    run = launcher.attach("mine", store=RunStore(runs))
    for who, said in ((identity.Identity("mallory@example.org", "console", "desk"), "is a viewer"),
                      (identity.Identity("bob", "cli", "laptop"), f"and {me} started this one")):
        with identity.acting_as(who), pytest.raises(AccessDenied, match=said):
            run.stop()
    with identity.acting_as(identity.Identity("mallory@example.org", "console", "desk")), \
            pytest.raises(AccessDenied, match="is a viewer: launch"):
        launcher.launch(load_cluster(tmp_path / "cluster.yaml"), load_job(tmp_path / "job.yaml"),
                        store=RunStore(runs), preflight=launcher.Preflight.SKIP)
    assert RunStore(runs).load("mine").live                       # nothing was done to it
    (runs / "roles.yaml").write_text("users:\n  bob: superuser\n")  # a mistake: nobody may act
    refused = cli("stop", "mine", runs=runs, check=False)
    assert refused.returncode == 2 and "unknown role 'superuser'" in refused.stderr, refused.stderr
    (runs / "roles.yaml").write_text(f"users:\n  {me}: operator\n")
    cli("stop", "mine", runs=runs)
    said = [(e["who"]["name"], e["action"], e["outcome"].split(":")[0])
            for e in json.loads(cli("audit", "--json", runs=runs).stdout)["entries"]]
    assert said == [(me, "launch", "ok"), ("mallory@example.org", "stop", "refused"), ("bob", "stop", "refused"),
                    ("mallory@example.org", "launch", "refused"), (me, "stop", "refused"), (me, "stop", "ok")]
