"""A spare that fails preflight at the restart (issue 39): skipped, named with why in the lost
attempt's reason, and the next spare used; with none left, the reason names every spare tried
and why. Real sshd hosts on loopback, real preflight probes; no training (a command job)."""
from __future__ import annotations

import time

import pytest

from backend.config.spec import job_to_dict
from backend.hosts.pool import Pool
from backend.runs import membership
from backend.runs.handle import Run
from backend.records.state import RunState, TaskState
from rig import sshd
from tests.conftest import ssh_task
from tests.faults.conftest import command_job

LOST = "127.0.0.3"


@pytest.fixture
def lost_run(ssh_hosts, client_key, python_path, tmp_path, store, ssh_options):
    """A run record whose worker's host (127.0.0.3) is gone; ``make(spares)`` builds it."""
    def spare(host, **extra):
        task = ssh_task(host, "worker", sshd.free_port(), client_key, python_path, tmp_path / "spare")
        return {**{k: v for k, v in task.items() if k != "role"}, **extra}

    def make(spares: list[dict]) -> Run:
        cluster = {"tasks": [ssh_task(h, role, sshd.free_port(), client_key, python_path, tmp_path / h.address)
                             for h, role in zip(ssh_hosts, ("chief", "worker"))], "spares": spares}
        state = RunState("spare-preflight", time.time(), cluster, job_to_dict(command_job("pass", python_path)),
                         [TaskState("chief-0", 0, ssh_hosts[0].address, str(tmp_path / "h2" / "run")),
                          TaskState("worker-0", 1, LOST, str(tmp_path / "h3" / "run"))])
        store.save(state)
        return Run(state, store, Pool(ssh_options))
    # sshd down: nothing listens on its port; a Python path that is not there; a good one.
    no_sshd = spare(ssh_hosts[0], ssh_port=sshd.free_port())
    no_python = spare(ssh_hosts[0], python="/nonexistent/bin/python3")
    make.bad, make.good = [no_sshd, no_python], spare(ssh_hosts[0])
    return make


def test_a_spare_failing_preflight_is_skipped_named_and_the_next_one_used(lost_run):
    no_sshd, no_python = lost_run.bad
    run = lost_run([no_sshd, no_python, lost_run.good])
    lost = {LOST: "unreachable for 120 s"}
    found = membership.replace_lost(run, lost)
    assert [(m.task, m.new, m.spare) for m in found.moves] == [("worker-0", "127.0.0.2", 2)]
    assert found.tasks[1]["tf_port"] == lost_run.good["tf_port"] and not found.missing
    reason = membership.reason(run, lost, found)
    assert reason.startswith(f"worker-0: host {LOST} unreachable for 120 s; "), reason
    # The three spares share a host, so each is named by host:port, each with its own why.
    assert f"spare 127.0.0.2:{no_sshd['tf_port']} skipped (ssh: " in reason, reason
    assert (f"spare 127.0.0.2:{no_python['tf_port']} skipped (python: /nonexistent/bin/python3 not found"
            in reason), reason
    assert reason.endswith("; moved to spare 127.0.0.2"), reason


def test_with_every_spare_failing_preflight_the_reason_says_which_were_tried_and_why(lost_run):
    no_sshd, no_python = lost_run.bad
    run = lost_run([no_sshd, no_python])
    lost = {LOST: "unreachable for 120 s"}
    found = membership.replace_lost(run, lost)
    assert found.missing == ["worker-0"] and not found.moves
    reason = membership.reason(run, lost, found)
    assert f"no spare left for worker-0 (spare 127.0.0.2:{no_sshd['tf_port']} skipped (ssh: " in reason, reason
    assert f"spare 127.0.0.2:{no_python['tf_port']} skipped (python: " in reason, reason
    assert reason.endswith(membership.SKIPPED_FIX) and "fix the spares skipped above" in reason, reason
