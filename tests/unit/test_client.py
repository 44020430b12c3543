"""The job scripts' client library (`import tfconsole`): shipped with every run, a no-op by hand.

Each test runs a real Python process the way a worker would (the run bundle unpacked into a
run folder, the environment `task_env` gives a command job), not the package in-process.
"""
from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
import tarfile
from pathlib import Path

from backend.engines.bundle import bundle
from backend.engines.direct import task_env
from backend.watch.metrics import MetricsStore
from backend.config.spec import JobKind, JobSpec, import_hostfile

ROOT = Path(__file__).resolve().parents[2]
JOB = JobSpec(kind=JobKind.COMMAND, command=("job.py",))


def _unpack(run: Path) -> None:
    run.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(bundle(JOB)), mode="r") as tar:
        tar.extractall(run, filter="data")


def _env(run: Path, position: int, *, resume_step=None) -> dict:
    cluster = import_hostfile("localhost slots=2", tf_port=25300)
    env = task_env(cluster, position, JOB, str(run), "r1", 3, cluster.task_names()[position],
                   resume_step=resume_step)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TFCONSOLE_", "PYTHON"))}
    return {**base, **env}


def _python(code: str, env: dict, cwd: Path) -> str:
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_outside_a_run_every_call_is_a_harmless_no_op(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TFCONSOLE_")}
    env["PYTHONPATH"] = str(tmp_path / "lib")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "tfconsole").symlink_to(ROOT / "backend" / "client")
    out = _python("import sys, tfconsole\n"
                  "print(tfconsole.report(5, loss=0.5), tfconsole.should_save(),"
                  " tfconsole.checkpoint_dir(), tfconsole.context().in_run,"
                  " 'tensorflow' in sys.modules)\n"
                  "tfconsole.saved(5)", env, tmp_path)
    assert out.split() == ["False", "False", "None", "False", "False"]
    assert list(tmp_path.iterdir()) == [tmp_path / "lib"]   # nothing written anywhere


def test_a_command_job_imports_tfconsole_from_any_folder_and_learns_its_place(tmp_path):
    run = tmp_path / "home" / "runs" / "r1"
    _unpack(run)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = ("import tfconsole; c = tfconsole.context()\n"
            "print(c.run_id, c.attempt, c.task, c.is_chief, c.resume_step, c.tasks)")
    chief = _python(code, _env(run, 0), elsewhere)
    worker = _python(code, _env(run, 1, resume_step=40), elsewhere)
    assert chief.strip() == "r1 3 chief-0 True None ('chief-0', 'worker-0')"
    assert worker.strip() == "r1 3 worker-0 False 40 ('chief-0', 'worker-0')"


def test_the_chief_reports_every_workers_loss_in_lines_the_metrics_store_reads(tmp_path):
    run = tmp_path / "run"
    _unpack(run)
    code = ("import tfconsole\n"
            "print(tfconsole.report(10, epoch=1, losses={'chief-0': 1.0, 'worker-0': 3.0},"
            " step_time={'chief-0': 0.01, 'worker-0': 0.02}))\n"
            "print(tfconsole.report(20, loss=0.5))")
    assert _python(code, _env(run, 0), tmp_path).split() == ["True", "True"]
    assert _python(code, _env(run, 1), tmp_path).split() == ["False", "False"]  # not the chief
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    store = MetricsStore()
    store.add_many(lines)
    assert store.tasks() == ["chief-0", "worker-0"]
    assert list(store.series("worker-0").loss) == [3.0]
    chief_times = store.series("chief-0").step_time
    assert chief_times[0] == 0.01 and math.isnan(chief_times[1])     # not given: null
    steps, loss = store.global_loss()
    assert list(steps) == [10, 20] and list(loss) == [2.0, 0.5]
    assert lines[0]["attempt"] == 3 and lines[0]["run_id"] == "r1"


def test_save_now_is_seen_by_the_chief_only_and_answered_with_the_step(tmp_path):
    run = tmp_path / "run"
    _unpack(run)
    asked = subprocess.run([sys.executable, "-S", str(run / "lib"), "hostctl", "request-save", "--run", str(run)], capture_output=True, text=True)
    name = json.loads(asked.stdout)["name"]
    code = "import tfconsole\nprint(tfconsole.should_save())\ntfconsole.saved(70)"
    assert _python(code, _env(run, 1), tmp_path).strip() == "False"
    assert (run / "requests" / name).exists()          # a worker leaves the request alone
    (run / "checkpoints").mkdir()                      # step 70 is listed (issue 36: only a
    for part in ("index", "meta.json"):                # listed step answers a Save now)
        (run / "checkpoints" / f"ckpt-70.{part}").write_text("{}")
    assert _python(code, _env(run, 0), tmp_path).strip() == "True"
    done = subprocess.run([sys.executable, "-S", str(run / "lib"), "hostctl", "save-done",
                           "--run", str(run), "--name", name], capture_output=True, text=True)
    assert json.loads(done.stdout)["step"] == 70       # what the console's Save now waits for


def test_a_job_that_imports_the_client_under_two_names_is_refused_at_its_first_report(tmp_path):
    """On a host the package is `tfconsole`; where the console is installed it is also importable
    as `backend.client`. Both in one job would keep two Save-now states: refused, by name."""
    run = tmp_path / "run"
    _unpack(run)
    code = ("import tfconsole, backend.client.reporting\n"
            "try:\n    tfconsole.report(1, loss=0.5)\nexcept ImportError as err:\n    print('refused:', err)\n"
            "else:\n    print('both silently')\n")
    out = _python(code, _env(run, 0), tmp_path)
    assert "refused: tfconsole is imported twice in this process" in out, out
    assert "import it only as `tfconsole`" in out


def test_a_report_of_too_many_or_unusable_metrics_never_ends_the_script(tmp_path):
    """Issue 56: 64 named metrics plus the loss raised `ValueError: ... at most 64 per line`
    inside tfconsole.report and ended the user's training. Every report below is written (or,
    without a whole step, skipped) and the script runs to its end; the log says each problem once."""
    run = tmp_path / "run"
    _unpack(run)
    code = ("import tfconsole\n"
            "many = {f'm{i}': i / 100 for i in range(64)}\n"
            "for s in range(1, 4): print(tfconsole.report(s, loss=1.0 / s, metrics=many))\n"
            "print(tfconsole.report(4, loss=None, metrics={'acc': 'high', 'ok': 1.0}, step_time='x'))\n"
            "print(tfconsole.report(5, loss=0.2, metrics=[1, 2], global_metrics=3))\n"
            "print(tfconsole.report(6, losses={'chief-0': 0.1}, metrics={'nobody': {'a': 1.0}}))\n"
            "print(tfconsole.report(None, loss=0.1), tfconsole.report(None, loss=0.1))\n"
            "print('trained to the end')\n")
    out = subprocess.run([sys.executable, "-c", code], env=_env(run, 0), cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True"] * 6 + ["False", "False", "trained", "to", "the", "end"]
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 2, 3, 4, 5, 6]
    assert list(lines[0]["metrics"]) == ["loss", *[f"m{i}" for i in range(63)]]
    assert lines[0]["left_out"] == ["m63"] and "left_out" not in lines[1]
    assert lines[3]["metrics"] == {"ok": 1.0} and lines[3]["left_out"] == ["loss", "acc"]
    assert lines[4]["metrics"] == {"loss": 0.2} and lines[5]["metrics"] == {"loss": 0.1}
    log = out.stderr
    assert log.count("left out m63 (past the first 64 names of a line)") == 1, log
    assert "left out loss (NoneType, not a number); acc (str, not a number)" in log
    assert "metrics= is a dict of metric name -> number, not list" in log
    assert "global_metrics= is a dict of metric name -> number, not int" in log
    assert "give metrics={task: {name: value}} for the same tasks" in log
    assert log.count("no metrics line without a whole step") == 1
    assert log.count("training goes on") == 6
