"""A save-stop of a run whose tasks have all exited already (a run that finishes as it is stopped,
a sweep's trial pruned at its last step): no worker is left to save, so the stop says so and does
not wait out its save grace for an answer that cannot come. The chief's run folder and its
``hostctl`` are real (a local task); the engine is a stand-in for the hosts' process table."""
from __future__ import annotations

import time

from backend.engines.bundle import harness_bundle
from backend.hosts import remote
from backend.records.outcome import TaskPhase, TaskStatus
from tests.unit.test_stop_twice import Hosts, _run


def _with_chief_folder(tmp_path) -> tuple:
    """The run (``test_stop_twice._run``) with its chief's folder and harness installed, as a
    launch leaves them: the save request is written there and answered by the real hostctl."""
    run, _ = _run(tmp_path)
    run.engine = hosts = Exited()
    (tmp_path / "host" / "r1").mkdir(parents=True)
    remote.install(run.remote(run.state.chief.name), harness_bundle())
    return run, hosts


class Exited(Hosts):
    """Every task has already exited, before any stop."""

    def status(self, run) -> list[TaskStatus]:
        return [TaskStatus(n, "127.0.0.1", TaskPhase.EXITED) for n in ("worker-0", "worker-1")]


def test_a_save_stop_after_every_task_exited_says_so_and_does_not_wait_its_grace(tmp_path):
    run, hosts = _with_chief_folder(tmp_path)
    began = time.time()
    report = run.stop(save=True, save_grace_s=30)
    waited = time.time() - began
    assert report.clean and run.saved_step is None and hosts.stops == 1
    state = run.store.load("r1")
    assert state.phase == "stopped"
    assert state.attempts[-1].reason == ("stopped: every task had exited before it could save "
                                         "(the previous checkpoint stays usable)")
    assert waited < 10, f"the stop waited {waited:.1f} s for a save no worker could make"


def test_a_save_answered_by_a_chief_that_then_exited_is_the_stops_step(tmp_path, monkeypatch):
    """The chief answers, then exits: the step is read once more after every task has exited."""
    run, _ = _with_chief_folder(tmp_path)
    answers = iter([None, 140])
    monkeypatch.setattr(remote, "save_done", lambda host, name: next(answers, 140))
    run.stop(save=True, save_grace_s=30)
    assert run.saved_step == 140
    assert run.store.load("r1").attempts[-1].reason == "stopped: saved at step 140 on every worker"


def test_a_save_stop_with_its_own_reason_keeps_it_before_the_save_and_a_second_stop_finds_the_step(tmp_path, monkeypatch):
    """A sweep prunes with a reason of its own: the record says why, then what the save did."""
    run, _ = _with_chief_folder(tmp_path)
    monkeypatch.setattr(remote, "save_done", lambda host, name: 19)
    run.stop(save=True, reason="pruned by the sweep at step 18 (val_loss 0.52)")
    assert run.store.load("r1").attempts[-1].reason == ("pruned by the sweep at step 18 (val_loss 0.52): "
                                                        "saved at step 19 on every worker")
    again = run.stop(save=True)   # the ended run: its saved step read back from that reason
    assert again.clean and run.saved_step == 19
