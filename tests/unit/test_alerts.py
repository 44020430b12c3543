"""Alerts: the webhook's settings (a secret), the bodies, and delivery to a real local receiver."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import time

import pytest

from backend.alerts import outbox, settings
from backend.config.spec import job_from_dict, job_to_dict
from backend.errors import ConsoleError, SpecErrors
from backend.records.state import Attempt, RunState
from tests.conftest import ps
from tests.webhook import Receiver


@pytest.fixture
def receiver():
    made = []

    def make(answers=(200,), hang_s=0.0, **kw):
        made.append(Receiver(answers, hang_s, **kw))
        return made[-1]
    yield make
    for r in made:
        r.close()


@pytest.fixture(autouse=True)
def _no_sender_left(tmp_path):
    """A detached sender started here ends with its test: left, it retried its alerts against
    the closed receiver for minutes each (``BACKOFF_S``, ``TRIES``)."""
    yield
    for line in ps("pid=,args="):
        pid, args = line.split(None, 1)
        if "backend.alerts.outbox" in args and str(tmp_path) in args:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)


def _run_dir(tmp_path, url, fmt="json"):
    run_dir = tmp_path / "run-1"
    run_dir.mkdir()
    outbox.keep_settings(run_dir, {"webhook": url, "format": fmt})
    return run_dir


def test_the_job_file_takes_a_webhook_and_refuses_a_bad_one_without_echoing_it():
    job = job_from_dict({"kind": "command", "command": ["true"],
                         "alerts": {"webhook": "https://hooks.example.com/T1/SECRET", "format": "json"}})
    assert job.alerts == {"webhook": "https://hooks.example.com/T1/SECRET", "format": "json"}
    assert job_to_dict(job)["alerts"]["format"] == "json"
    with pytest.raises(SpecErrors) as bad:
        job_from_dict({"kind": "command", "command": ["true"], "alerts": {"webhook": "ftp://x/SECRET"}})
    assert "alerts.webhook: expected an http(s) URL" in str(bad.value) and "SECRET" not in str(bad.value)
    with pytest.raises(SpecErrors, match="alerts.format"):
        job_from_dict({"kind": "command", "command": ["true"], "alerts": {"webhook": "https://x/", "format": "xml"}})


def test_the_url_is_kept_owner_only_and_shown_masked(tmp_path):
    run_dir = _run_dir(tmp_path, "https://hooks.slack.com/services/T0/B0/SECRET")
    path = run_dir / "alerts" / "settings.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert settings.shown(settings.load(run_dir))["webhook"] == "https://hooks.slack.com/***"


def test_a_console_webhook_file_others_may_read_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("TFCONSOLE_WEBHOOK", raising=False)
    path = tmp_path / "webhook.json"
    path.write_text(json.dumps({"webhook": "https://h.example/SECRET", "format": "slack"}))
    os.chmod(path, 0o644)
    with pytest.raises(ConsoleError, match="chmod 600"):
        settings.resolve({}, tmp_path)
    os.chmod(path, 0o600)
    assert settings.resolve({}, tmp_path)["format"] == "slack"
    monkeypatch.setenv("TFCONSOLE_WEBHOOK", "https://env.example/SECRET")
    assert settings.resolve({}, tmp_path)["webhook"] == "https://env.example/SECRET"
    assert settings.resolve({"webhook": "https://job.example/x", "format": "json"}, tmp_path)["format"] == "json"


@pytest.mark.parametrize("phase, reason, kind", [
    ("finished", "finished", "finished"), ("failed", "worker-1 exited(3)", "failed"),
    ("restarted", "worker-1 exited(3)", "restarted"), ("restarted", "stalled: no new metrics for 61 s", "stall"),
    ("restarted", "chief-0 lost: preempted by a job with higher priority", "preempted"),
    ("restarted", "chief-0 exited(1): NonFiniteLoss: loss is not finite at step 4", "nan"),
    ("restarting", "worker-1 exited(3)", None),   # the keeper may give up instead: it tells later
    ("stopped", "stopped", None), ("running", None, None)])
def test_which_moves_alert(phase, reason, kind):
    assert outbox.kind_for(phase, reason) == kind


def test_slack_and_json_bodies_carry_run_reason_step_and_link():
    alert = outbox.event("run-7", "failed", reason="worker-1 exited(3)", step=40, attempt=2, phase="failed",
                         console_url="http://console.example:8501")
    slack = json.loads(outbox.body(alert, "slack"))
    assert list(slack) == ["text"]
    assert slack["text"] == ("tfconsole run run-7 failed at step 40 (attempt 2): worker-1 exited(3). "
                             "http://console.example:8501/runs")
    generic = json.loads(outbox.body(alert, "json"))
    assert (generic["run"], generic["event"], generic["reason"], generic["step"], generic["link"]) == \
        ("run-7", "failed", "worker-1 exited(3)", 40, "http://console.example:8501/runs")


def test_a_receiver_that_answers_500_twice_gets_the_alert_on_the_third_try(tmp_path, receiver):
    hook = receiver(answers=(500, 500, 200))
    run_dir = _run_dir(tmp_path, hook.url)
    assert outbox.queue(run_dir, outbox.event("run-1", "finished", reason="finished", step=9, attempt=1,
                                              phase="finished", console_url="http://c"), start=False)
    logged = []
    assert outbox.deliver(run_dir, backoff_s=0.05, log=logged.append) == 1
    assert len(hook.bodies) == 3 and all(b["event"] == "finished" for b in hook.bodies)
    entry = outbox.read(run_dir)[0]
    assert (entry["state"], entry["tries"]) == ("sent", 3)
    # The backoff doubles: each wait is at least its share (0.05 s, then 0.10 s). Lower bounds
    # only: a loaded machine lengthens either gap (one full run saw 0.18 s, then 0.22 s).
    assert hook.times[1] - hook.times[0] >= 0.05 and hook.times[2] - hook.times[1] >= 0.10
    assert not any("SECRET" in line for line in logged)                        # the URL is masked


def test_a_receiver_that_keeps_failing_is_given_up_with_why(tmp_path, receiver):
    hook = receiver(answers=(503,))
    run_dir = _run_dir(tmp_path, hook.url)
    outbox.queue(run_dir, outbox.event("run-1", "failed", reason="x", step=None, attempt=1, phase="failed",
                                       console_url="http://c"), start=False)
    assert outbox.deliver(run_dir, backoff_s=0.01, tries=3) == 0
    entry = outbox.read(run_dir)[0]
    assert (entry["state"], entry["tries"], entry["error"]) == ("failed", 3, "HTTP 503")


def test_each_move_alerts_once_and_the_queue_is_bounded(tmp_path, receiver):
    run_dir = _run_dir(tmp_path, receiver().url)
    assert outbox.on_move(run_dir, "run-1", "failed", reason="x", step=3, attempt=1) is True
    entries = outbox.read(run_dir)
    assert [e["alert"]["event"] for e in entries] == ["failed"]
    outbox.on_move(run_dir, "run-1", "failed", reason="x", step=3, attempt=1)   # the same move again
    assert len(outbox.read(run_dir)) == 1
    for i in range(outbox.MAX_EVENTS + 5):
        outbox.queue(run_dir, {"event": "nan"}, key=f"k{i}", start=False)
    assert len(outbox.read(run_dir)) == outbox.MAX_EVENTS
    # A sender woken as ``queue`` wakes one delivers the rest while the receiver is up, then exits.
    # (Left behind, it retried each of them against the closed receiver for minutes, for hours.)
    # The first alert's sender may still be at work (the new one then leaves the rest to it) or may
    # have drained the queue and exited while the alerts above were being queued without waking
    # one: it did in one full suite, whose slow disk made each queued alert slower than a post.
    outbox.start_sender(run_dir)
    deadline = time.monotonic() + 60
    while outbox.pending(run_dir) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not outbox.pending(run_dir) and {e["state"] for e in outbox.read(run_dir)} == {"sent"}


def test_the_detached_sender_delivers_and_a_run_without_webhook_sends_nothing(tmp_path, receiver):
    hook = receiver()
    run_dir = _run_dir(tmp_path, hook.url, fmt="slack")
    outbox.on_move(run_dir, "run-1", "finished", reason="finished", step=5, attempt=1)
    assert hook.wait(1) and hook.bodies[0]["text"].startswith("tfconsole run run-1 finished at step 5")
    deadline = time.monotonic() + 10
    while outbox.read(run_dir)[0]["state"] != "sent" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert outbox.read(run_dir)[0]["state"] == "sent"
    bare = tmp_path / "run-2"
    bare.mkdir()
    assert not outbox.on_move(bare, "run-2", "failed", reason="x", step=1, attempt=1)
    assert not (bare / "alerts" / "outbox.json").exists()


def test_a_nonfinite_loss_alerts_once_per_attempt(tmp_path, receiver):
    run_dir = _run_dir(tmp_path, receiver().url)
    assert not outbox.on_nonfinite(run_dir, "run-1", attempt=1, step=3, metric="loss", value=0.5)
    assert outbox.on_nonfinite(run_dir, "run-1", attempt=1, step=4, metric="loss", value=float("nan"))
    assert not outbox.on_nonfinite(run_dir, "run-1", attempt=1, step=5, metric="loss",
                                   value=float("inf"))   # seen already
    assert outbox.on_nonfinite(run_dir, "run-1", attempt=2, step=1, metric="worker-1 val_loss",
                               value=float("inf"))
    assert "worker-1 val_loss is inf" in outbox.read(run_dir)[-1]["alert"]["reason"]
    assert [(e["alert"]["event"], e["alert"]["step"]) for e in outbox.read(run_dir)] == [("nan", 4), ("nan", 1)]


@pytest.mark.parametrize("left, kind, words", [
    (3, "moved", "moved a lost host's task(s) to a spare"), (2, "shrunk", "shrank after losing a host")])
def test_a_host_lost_for_good_alerts_what_became_of_its_task(tmp_path, receiver, left, kind, words):
    """The keeper's restart alert after a host gone for good (issue 39): "moved" to a spare, or
    "shrunk" to fewer tasks, with the lost attempt's reason; a plain restart stays "restarted"."""
    hook = receiver()
    run_dir = _run_dir(tmp_path, hook.url, fmt="json")
    why = ("worker-1: host 127.0.0.21 unreachable for 4 s; "
           + ("moved to spare 127.0.0.22" if kind == "moved" else
              "no spare left: runs on 2 task(s) without worker-1 (min_workers 2); global batch 30 kept (15 per task)"))
    hosts = {"chief-0": "127.0.0.2", "worker-0": "127.0.0.3", "worker-1": "127.0.0.21"}
    state = RunState("run-1", time.time(), {}, {}, [], attempts=[
        Attempt(1, time.time(), ended=time.time(), reason=why, last_step=57, hosts=hosts,
                lost={"127.0.0.21": "unreachable for 4 s"}),
        Attempt(2, time.time(), resume_step=40, hosts=dict(list(hosts.items())[:left]))])
    assert outbox.on_restart(run_dir, state)
    got = hook.wait(1)[0]
    assert (got["event"], got["reason"], got["step"], got["attempt"]) == (kind, why, 57, 1)
    assert got["text"].startswith(f"tfconsole run run-1 {words} at step 57 (attempt 1): {why}; "
                                  "restarted as attempt 2."), got["text"]
    state.attempts[0].lost = None   # the same attempts without a host lost for good
    assert outbox.on_restart(run_dir, state) and hook.wait(2)[1]["event"] == "restarted"


def _queue(run_dir, count=1):
    for i in range(count):
        assert outbox.queue(run_dir, outbox.event("run-1", "failed", reason=f"r{i}", step=i, attempt=1,
                                                  phase="failed", console_url="http://c"),
                            key=f"failed-{i}", start=False)


def test_a_receiver_that_answers_with_a_banner_is_retried_then_failed_not_a_crash(tmp_path, receiver):
    """An SSH banner on the webhook's port raised BadStatusLine out of the sender: a traceback,
    and the alert left pending forever (issue 35)."""
    hook = receiver(banner=b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n")
    run_dir = _run_dir(tmp_path, hook.url)
    _queue(run_dir)
    logged = []
    assert outbox.deliver(run_dir, backoff_s=0.01, tries=3, log=logged.append) == 0
    entry = outbox.read(run_dir)[0]
    assert (entry["state"], entry["tries"]) == ("failed", 3) and len(hook.bodies) == 3
    assert entry["error"] == "not an HTTP answer (BadStatusLine)", entry
    assert not any("SECRET" in line for line in logged)


def test_a_receiver_that_trickles_its_answer_is_cut_at_the_deadline(tmp_path, receiver):
    """A socket's timeout is per read: one byte every 2 s held a POST for minutes (issue 35)."""
    hook = receiver(trickle_s=0.2)
    run_dir = _run_dir(tmp_path, hook.url)
    _queue(run_dir)
    started = time.monotonic()
    assert outbox.deliver(run_dir, backoff_s=0.01, tries=2, timeout_s=1.0) == 0
    took = time.monotonic() - started
    assert 2.0 <= took < 3.5, took   # two tries of 1 s each, and the backoff
    entry = outbox.read(run_dir)[0]
    assert (entry["state"], entry["tries"], entry["error"]) == ("failed", 2, "no answer within 1 s")


def test_a_prompt_200_is_the_delivery_whatever_its_body_does(tmp_path, receiver):
    hook = receiver(trickle_s=2.0, trickle="body")
    run_dir = _run_dir(tmp_path, hook.url)
    _queue(run_dir)
    started = time.monotonic()
    assert outbox.deliver(run_dir, backoff_s=0.01, tries=2, timeout_s=10.0) == 1
    assert time.monotonic() - started < 2.0 and outbox.read(run_dir)[0]["state"] == "sent"


def test_queued_alerts_share_one_backoff_for_a_webhook_that_is_down(tmp_path, receiver):
    """Each alert ran its own 8 tries and backoff: minutes per queued alert (issue 35). Now the
    webhook is tried ``tries`` times in all, then every alert left is failed with why."""
    hook = receiver(answers=(503,))
    run_dir = _run_dir(tmp_path, hook.url)
    _queue(run_dir, count=5)
    started = time.monotonic()
    assert outbox.deliver(run_dir, backoff_s=0.2, tries=3) == 0
    assert time.monotonic() - started < 1.5        # 0.2 + 0.4 s of backoff, once
    assert len(hook.bodies) == 3                   # three tries of the webhook, not fifteen
    entries = outbox.read(run_dir)
    assert {e["state"] for e in entries} == {"failed"}
    assert entries[0]["error"] == "HTTP 503"
    assert entries[1]["tries"] == 0 and "webhook failed 3 tries in a row (HTTP 503)" in entries[1]["error"]


def test_after_the_webhook_answers_the_backoff_starts_again(tmp_path, receiver):
    hook = receiver(answers=(503, 503, 200, 503, 200, 200))
    run_dir = _run_dir(tmp_path, hook.url)
    _queue(run_dir, count=3)
    assert outbox.deliver(run_dir, backoff_s=0.01, tries=3) == 3
    assert [e["tries"] for e in outbox.read(run_dir)] == [3, 2, 1]
