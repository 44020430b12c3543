"""Alerts and the record of what ran, for real runs (local tasks, small scripts, no TensorFlow):
each end or restart reaches a real webhook receiver once, a dead receiver never delays the run's
end, and the webhook URL appears in no state, record or output."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from backend.config.spec import job_from_dict
from backend.runs import launcher
from backend.runs.launcher import Preflight
from backend.runs.store import RunStore
from backend.records.state import Phase
from tests.conftest import ps
from tests.webhook import Receiver

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def hook():
    made = []

    def make(answers=(200,), hang_s=0.0):
        made.append(Receiver(answers, hang_s))
        return made[-1]
    yield make
    for r in made:
        r.close()


def job(python: str, code: str, url: str, **extra):
    return job_from_dict({"kind": "command", "command": [python, "-c", code],
                          "alerts": {"webhook": url, "format": "json", "console_url": "http://console.test:8501"},
                          **extra})


def cli(*args: str, runs: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "backend", "--runs", str(runs), *args],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)


def test_a_run_that_finishes_sends_one_finished_alert(local_cluster, python_path, tmp_path, hook):
    receiver = hook()
    store = RunStore(tmp_path / "runs")
    run = launcher.launch(local_cluster, job(python_path, "pass", receiver.url), store=store,
                          preflight=Preflight.SKIP)
    run.wait(timeout=60)
    assert run.state.phase == Phase.FINISHED
    bodies = receiver.wait(1)
    time.sleep(1.0)   # nothing more comes
    assert [(b["run"], b["event"]) for b in receiver.bodies] == [(run.run_id, "finished")], bodies
    assert bodies[0]["link"] == "http://console.test:8501/runs"
    # The URL (a secret) is in the run's owner-only settings alone.
    for path in run.local_dir.rglob("*"):
        if path.is_file() and path.name != "settings.json":
            assert "SECRET-TOKEN" not in path.read_text(errors="replace"), path
    shown = cli("runs", "show", run.run_id, "--json", runs=store.root)
    assert shown.returncode == 0, shown.stderr
    assert "SECRET-TOKEN" not in shown.stdout
    data = json.loads(shown.stdout)
    assert data["alerts"]["webhook"] == "http://127.0.0.1/***"
    deadline = time.monotonic() + 10
    while json.loads(cli("runs", "show", run.run_id, "--json", runs=store.root).stdout)["alerts"]["sent"][0]["state"] \
            != "sent" and time.monotonic() < deadline:
        time.sleep(0.2)
    sent = json.loads(cli("runs", "show", run.run_id, "--json", runs=store.root).stdout)["alerts"]["sent"]
    assert [(e["state"], e["tries"]) for e in sent] == [("sent", 1)]


def test_a_failing_run_sends_failed_with_the_reason(local_cluster, python_path, tmp_path, hook):
    receiver = hook()
    store = RunStore(tmp_path / "runs")
    run = launcher.launch(local_cluster, job(python_path, "import sys, time; time.sleep(8); sys.exit(3)", receiver.url),
                          store=store, preflight=Preflight.SKIP)
    run.wait(timeout=60)
    assert run.state.phase == Phase.FAILED
    body = receiver.wait(1)[0]
    assert (body["event"], body["run"]) == ("failed", run.run_id)
    assert "exited(3)" in body["reason"] and "exited(3)" in body["text"]


def test_a_run_nobody_reads_still_alerts_its_failure(local_cluster, python_path, tmp_path, hook):
    """Launched, then the console closed (no restarts, nobody calls wait or status): the webhook
    hears of the failure all the same, and the record says failed to the next reader."""
    receiver = hook()
    store = RunStore(tmp_path / "runs")
    run = launcher.launch(local_cluster, job(python_path, "import sys, time; time.sleep(8); sys.exit(3)", receiver.url),
                          store=store, preflight=Preflight.SKIP)
    del run   # nothing in this process reads the run again
    bodies = receiver.wait(1)
    assert bodies, "no alert: nobody settled the run"
    body = bodies[0]
    assert body["event"] == "failed" and "exited(3)" in body["reason"]
    run_id = body["run"]
    assert store.load(run_id).phase == Phase.FAILED
    from backend.runs import detached
    from tests.conftest import wait_for
    wait_for(lambda: not detached.keeper_pid(store.path(run_id)), 30, "the keeper to exit")


def test_a_kept_run_alerts_each_restart_and_its_end_from_the_keeper(local_cluster, python_path, tmp_path, hook):
    receiver = hook()
    store = RunStore(tmp_path / "runs")
    run = launcher.launch(local_cluster, job(python_path, "import sys, time; time.sleep(8); sys.exit(3)", receiver.url,
                                             restart={"mode": "on_failure", "max_restarts": 1, "backoff_s": 0}),
                          store=store, preflight=Preflight.SKIP)
    run.wait(timeout=90)
    assert run.state.phase == Phase.FAILED
    receiver.wait(2)
    assert [(b["event"], b["attempt"]) for b in receiver.bodies] == [("restarted", 1), ("failed", 2)]
    assert "exited(3); restarted as attempt 2" in receiver.bodies[0]["text"]


def test_a_dead_receiver_does_not_delay_the_runs_end(local_cluster, python_path, tmp_path, hook):
    receiver = hook(hang_s=60)   # takes the request and never answers in time
    store = RunStore(tmp_path / "runs")
    run = launcher.launch(local_cluster, job(python_path, "pass", receiver.url), store=store,
                          preflight=Preflight.SKIP)
    started = time.monotonic()
    run.wait(timeout=60, poll_s=0.2)
    took = time.monotonic() - started
    assert run.state.phase == Phase.FINISHED
    assert receiver.wait(1)          # the alert was on its way while the run ended
    assert took < 10, took            # well under the receiver's 60 s and the sender's timeouts
    # The run's sender goes on trying the dead receiver for minutes (its own bound, by design):
    # this test ends the one it caused, or the session's leftover check would find it when the
    # test runs among the last (seen: the run of 2026-11-28).
    sender = f"backend.alerts.outbox {run.local_dir.resolve()}"
    for line in ps("pid=,args="):
        pid, _, args = line.strip().partition(" ")
        if args.strip().endswith(sender):
            os.kill(int(pid), signal.SIGKILL)


REPORTS = """import json, os, sys, time
run = os.environ["TFCONSOLE_RUN_DIR"]
sys.path.insert(0, os.path.join(run, "lib"))
from tfconsole.harness.report import MetricsReporter
if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 0:   # the chief writes the lines
    r = MetricsReporter(run, os.environ["TFCONSOLE_RUN_ID"], int(os.environ["TFCONSOLE_ATTEMPT"]))
    for step in range(1, 6):
        r.log("worker-0", step, 1, metrics={"loss": 1.0}, global_metrics={"loss": 1.0})
        time.sleep(0.2)
    r.close()
time.sleep(2)   # most of the run is not training: its goodput is low
"""


def test_a_run_that_ends_under_its_goodput_threshold_says_so_once(local_cluster, python_path, tmp_path, hook):
    from backend.runs import goodput
    receiver = hook()
    store = RunStore(tmp_path / "runs")
    spec = job_from_dict({"kind": "command", "command": [python_path, "-c", REPORTS],
                          "alerts": {"webhook": receiver.url, "format": "json", "goodput_below": 0.9}})
    run = launcher.launch(local_cluster, spec, store=store, preflight=Preflight.SKIP)
    run.wait(timeout=60)
    assert run.state.phase == Phase.FINISHED
    bodies = receiver.wait(2)
    time.sleep(1.0)   # nothing more comes
    assert sorted(b["event"] for b in receiver.bodies) == ["finished", "low_goodput"], receiver.bodies
    low = next(b for b in bodies if b["event"] == "low_goodput")
    share = goodput.of(launcher.attach(run.run_id, store=store)).share
    assert share is not None and share < 0.9
    assert f"goodput {share:.0%} of" in low["text"] and "(alert below 90%)" in low["text"], low["text"]


SLOW_START = """import json, os, sys, time
run = os.environ["TFCONSOLE_RUN_DIR"]
sys.path.insert(0, os.path.join(run, "lib"))
from tfconsole.harness.report import MetricsReporter
time.sleep(4)   # a long start-up: the goodput read while it trains is low
if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 0:   # the chief writes the lines
    r = MetricsReporter(run, os.environ["TFCONSOLE_RUN_ID"], int(os.environ["TFCONSOLE_ATTEMPT"]))
    for step in range(1, 121):
        r.log("worker-0", step, 1, metrics={"loss": 1.0}, global_metrics={"loss": 1.0})
        time.sleep(0.1)
    r.close()
"""


def test_a_live_run_under_its_goodput_threshold_says_so_while_it_trains(local_cluster, python_path, tmp_path, hook):
    """``goodput_after_s``: once the run has lived that long its keeper reads its goodput (the
    chief's new lines only) and, under ``goodput_below``, alerts once while the run still
    trains; the end's own alert follows."""
    receiver = hook()
    store = RunStore(tmp_path / "runs")
    spec = job_from_dict({"kind": "command", "command": [python_path, "-c", SLOW_START],
                          "alerts": {"webhook": receiver.url, "format": "json", "goodput_below": 0.9,
                                     "goodput_after_s": 3}})
    run = launcher.launch(local_cluster, spec, store=store, preflight=Preflight.SKIP)
    live = receiver.wait(1)[0]
    assert live["event"] == "low_goodput_live" and live["phase"] == "running", receiver.bodies
    assert store.load(run.run_id).live, "the alert came only after the run had ended"
    assert "has a low goodput" in live["text"] and "(alert below 90%)" in live["text"], live["text"]
    share = int(live["text"].split(": goodput ")[1].split("%")[0])
    assert share < 90, live["text"]
    run.wait(timeout=120)
    receiver.wait(3)
    time.sleep(1.0)   # nothing more comes: the live alert once, however many polls read it low
    assert sorted(b["event"] for b in receiver.bodies) == ["finished", "low_goodput", "low_goodput_live"], \
        receiver.bodies


def test_a_goodput_threshold_that_is_no_share_is_refused_naming_the_field(python_path):
    from backend.errors import ConsoleError
    with pytest.raises(ConsoleError) as refused:
        job_from_dict({"kind": "command", "command": [python_path, "-c", "pass"],
                       "alerts": {"webhook": "http://127.0.0.1/hook", "goodput_below": 60}})
    assert "alerts.goodput_below" in str(refused.value) and "share between 0 and 1" in str(refused.value)
    with pytest.raises(ConsoleError) as alone:
        job_from_dict({"kind": "command", "command": [python_path, "-c", "pass"],
                       "alerts": {"webhook": "http://127.0.0.1/hook", "goodput_after_s": 60}})
    assert "alerts.goodput_after_s" in str(alone.value) and "without goodput_below" in str(alone.value)
    with pytest.raises(ConsoleError) as bad:
        job_from_dict({"kind": "command", "command": [python_path, "-c", "pass"],
                       "alerts": {"webhook": "http://127.0.0.1/hook", "goodput_below": 0.5, "goodput_after_s": 0}})
    assert "alerts.goodput_after_s" in str(bad.value) and "number of seconds" in str(bad.value)
