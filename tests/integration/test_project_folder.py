"""Bring your project (issue 49): a folder with its own package, a config read by a relative path
and files that must not leave this machine, launched over two loopback SSH hosts (separate run
folders). No TensorFlow: what travels, where it lands, and which copy a restart runs.

Real parts: two sshd hosts, the keeper restarting a failed attempt, `runs show --json`."""
from __future__ import annotations

import json
import shlex
import subprocess
import sys

from backend.config.spec import job_from_dict
from backend.runs import launcher
from backend.runs.store import RunStore
from tests.conftest import processes_of, wait_for
from tests.unit.test_project import make_project

TRAIN = """import os, sys, time
import models.net                          # the project's own package, as at home
from models.net import WIDTH
attempt = os.environ["TFCONSOLE_ATTEMPT"]
print("attempt", attempt, "width", WIDTH, "settings", open("config/settings.yaml").read().strip(),
      "cwd", os.getcwd(), flush=True)
if attempt == "1":
    time.sleep(4)                          # past launch's start check, then fail: the keeper restarts
    sys.exit(1)
"""


def test_a_project_folder_runs_on_every_host_and_a_restart_runs_the_runs_own_copy(
        ssh_cluster, ssh_options, tmp_path):
    folder = make_project(tmp_path / "laptop")
    (folder / "train.py").write_text(TRAIN)
    job = job_from_dict({"kind": "command", "command": ["train.py"], "project": str(folder),
                         "restart": {"mode": "on_failure", "max_restarts": 1, "backoff_s": 0}})
    runs = tmp_path / "runs"
    run = launcher.launch(ssh_cluster, job, store=RunStore(runs), options=ssh_options,
                          preflight=launcher.Preflight.SKIP)
    sent = cached_tars(run)   # each host keeps the project it was sent, by its sha256
    # The operator edits the folder while the run lives: the run keeps what it launched with.
    (folder / "config" / "settings.yaml").write_text("lr: 0.5\n")
    (folder / "models" / "net.py").write_text("WIDTH = 16\n")
    try:
        wait_for(lambda: (run.settle(), not run.state.live)[1], 120, "the run to end")
    finally:
        if run.state.live:
            run.stop(grace_s=5)
    assert run.state.phase == "finished" and run.state.attempt == 2, run.log_tail("chief-0")
    for task in run.state.tasks:
        shipped = f"{task.remote_run_dir}/job"
        log = run.log_tail(task.name)
        for attempt in ("1", "2"):
            assert f"attempt {attempt} width 8 settings lr: 0.1 cwd {shipped}" in log, log
        # What the ignore file names, the links and the FIFO never left this machine (bytecode:
        # the host's own Python writes models/__pycache__ when train.py imports the package).
        listing = run.transport(task.name).run(["find", shipped, "-mindepth", "1"]).stdout.split()
        assert sorted(p[len(shipped) + 1:] for p in listing if "__pycache__" not in p) == [
            ".gitignore", "config", "config/settings.yaml", "models", "models/__init__.py",
            "models/net.py", "train.py"], listing
    shown = subprocess.run([sys.executable, "-m", "backend", "--runs", str(runs), "runs", "show", run.run_id,
                            "--json"], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    kept = json.loads(shown.stdout)["project"]
    assert kept["files"] == 5 and len(kept["sha256"]) == 64 and kept["ignore_file"] == ".gitignore"
    assert ["models/net.py", 10] in kept["listed"]
    # The restart sent nothing: each host took the same cached tar (a new one would be a new file).
    assert cached_tars(run) == sent and len(set(sent.values())) == 2, sent
    assert processes_of(run) == []

    # Launched again, unchanged: nothing sent either; one file changed: one new tar a host.
    (folder / "config" / "settings.yaml").write_text("lr: 0.1\n")
    (folder / "models" / "net.py").write_text("WIDTH = 8\n")
    again = launcher.launch(ssh_cluster, job, store=RunStore(runs), options=ssh_options,
                            preflight=launcher.Preflight.SKIP)
    assert cached_tars(again) == sent
    again.stop(grace_s=5)
    (folder / "models" / "net.py").write_text("WIDTH = 12\n")
    changed = launcher.launch(ssh_cluster, job, store=RunStore(runs), options=ssh_options,
                              preflight=launcher.Preflight.SKIP)
    grown = cached_tars(changed, every=True)
    changed.stop(grace_s=5)
    assert all(len(tars) == 2 and sent[host] in {f"{n}:{i}" for n, i in tars.items()}
               for host, tars in grown.items()), grown
    assert processes_of(again) == [] and processes_of(changed) == []


def cached_tars(run, *, every: bool = False) -> dict:
    """Per host, the cached tar of this run's project (``{name: inode}`` of every tar: ``every``),
    read on the host: ``<workdir>/projects/`` beside its ``runs/``."""
    out = {}
    for task in run.state.tasks:
        cache = f"{task.remote_run_dir.rsplit('/runs/', 1)[0]}/projects"
        listing = run.transport(task.name).run(["sh", "-c", f"cd {shlex.quote(cache)} && stat -c '%n %i' *.tar"]).stdout
        tars = dict(line.split() for line in listing.splitlines())
        out[task.host] = tars if every else next(f"{n}:{i}" for n, i in tars.items())
    return out


def test_preflight_checks_the_projects_requirements_on_every_host(ssh_cluster, ssh_options, tmp_path):
    """The folder's requirements.txt against each host's Python (issue 49): what is missing or at
    another version, per host, with the command that fixes it; nothing started, nothing installed."""
    from backend.errors import SpecError
    from backend.hosts.preflight import PreflightFailed
    folder = make_project(tmp_path / "laptop")
    (folder / "requirements.txt").write_text(
        "# what train.py needs\npyyaml==6.0.3\nnumpy>=99  # a version no host has\n"
        "surely-not-installed-anywhere\n-r more.txt\n")
    job = job_from_dict({"kind": "command", "command": ["train.py"], "project": str(folder)})
    store = RunStore(tmp_path / "runs")
    try:
        launcher.launch(ssh_cluster, job, store=store, options=ssh_options)
    except PreflightFailed as err:
        failed = err
    else:
        raise AssertionError("launched with requirements no host meets")
    for report in failed.reports:
        check = report.checks["packages"]
        assert not check["ok"] and check["installed"]["pyyaml"] == "6.0.3", check
        assert "numpy 2." in check["error"] and "(asked: >=99)" in check["error"], check
        assert "surely-not-installed-anywhere missing" in check["error"]
        assert "-m pip install 'numpy>=99' surely-not-installed-anywhere" in check["error"], check
        assert "pyyaml" not in check["error"]
    assert store.list() == []   # nothing was started or recorded
    (folder / "requirements.txt").write_text("pyyaml==6.0.3\nnumpy>=1.20\n")
    run = launcher.launch(ssh_cluster, job, store=store, options=ssh_options)
    run.stop(grace_s=5)
    (folder / "requirements.txt").write_text("numpy>=>1\n")
    try:
        launcher.launch(ssh_cluster, job, store=store, options=ssh_options)
    except SpecError as err:
        assert str(err).startswith("project: ") and "line 1 is not a requirement" in str(err), str(err)
    else:
        raise AssertionError("a requirements.txt pip cannot read was accepted")
