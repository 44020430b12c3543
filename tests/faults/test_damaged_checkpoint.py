"""A damaged checkpoint (issue 47): the chief's newest ``ckpt-N.data`` cut short with `truncate`
(index and meta intact, so it is still listed complete). One real two-worker run answers three
questions: a worker killed with kill -9, the keeper resumes from the newest GOOD step, names the
damaged one in the attempt's reason and the webhook's alert, and keeps it moved aside; a restore of
a damaged step is refused before anything stops, in export's words; a Stop that lands while a
restore starts the tasks is said to be that, with no import traceback."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from backend import checkpoints
from backend.config.spec import job_from_dict
from backend.errors import ArtifactError
from backend.runs import launcher, restore
from backend.runs.launcher import Preflight
from console import monitor_view
from tests.conftest import ROOT, wait_for
from tests.faults.conftest import (PARAMS, SYNTHETIC, TF_ENV, assert_nothing_left, kill_task, record,
                                   wait_phase)
from tests.webhook import Receiver

pytestmark = pytest.mark.slow


def _folder(run) -> Path:
    path = run.state.chief.remote_run_dir
    return Path(path if os.path.isabs(path) else os.path.expanduser(f"~/{path}"))


def _cut(run, step: int) -> None:
    """The chief's copy of ``step``: its data file cut to 10 bytes, as a full disk or a copy cut
    off leaves it."""
    data = sorted((_folder(run) / "checkpoints").glob(f"ckpt-{step}.data-*"))
    assert data, f"no data file of step {step}"
    subprocess.run(["truncate", "-s", "10", str(data[0])], check=True)


def _common(run) -> list[int]:
    held = [{c["step"] for c in checkpoints.list_checkpoints(run, t.name)} for t in run.state.tasks]
    return sorted(set.intersection(*held))


def _kill_and_damage(run, store) -> tuple[int, int]:
    """Kill worker-1 past two checkpoints; once every task has exited (nothing saves any more)
    and before the keeper's backoff ends, cut the chief's copy of the newest common step."""
    worker = run.state.tasks[1].name
    wait_for(lambda: len(checkpoints.list_checkpoints(run, worker)) >= 2, 180, "two checkpoints on the worker")
    kill_task(run, worker)
    wait_phase(store, run.run_id, ("restarting",), 120)
    tasks = _folder(run) / "tasks"
    wait_for(lambda: all((tasks / f"{t.name}.exit").exists() for t in run.state.tasks), 60, "every task to exit")
    common = _common(run)
    _cut(run, common[-1])
    return common[-1], common[-2]


def _pids(run) -> dict[str, int | None]:
    out = {}
    for t in run.state.tasks:
        try:
            out[t.name] = json.loads((_folder(run) / "tasks" / f"{t.name}.json").read_text()).get("pid")
        except (OSError, ValueError):
            out[t.name] = None
    return out


def _alive(pid: int | None) -> bool:
    try:
        os.kill(pid, 0)
        return pid is not None
    except (OSError, TypeError):
        return False


def _cli(store, *args) -> dict | list:
    out = subprocess.run([sys.executable, "-m", "backend", "--runs", str(store.root), *args, "--json"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_damaged_checkpoint_is_passed_over_named_kept_and_refused(local_cluster, store):
    receiver = Receiver()
    # 6000 paced steps (3 minutes an attempt at least): attempt 2 still trains through parts 2
    # and 3 however loaded the machine (a loaded full run once finished it during part 2).
    job = job_from_dict({"kind": "harness", "module": SYNTHETIC, "env": TF_ENV,
                         "params": {**PARAMS, "steps_per_epoch": 6000},
                         "alerts": {"webhook": receiver.url, "format": "json"},
                         "restart": {"mode": "on_failure", "max_restarts": 1, "backoff_s": 5}})
    run = launcher.launch(local_cluster, job, store=store, preflight=Preflight.SKIP)
    try:
        damaged, good = _kill_and_damage(run, store)
        # 1. The keeper resumes from the newest good step, names the damaged one, keeps it aside.
        state = wait_for(lambda: (s := store.load(run.run_id)).attempt == 2 and s, 120, "attempt 2")
        assert state.attempts[1].resume_step == good, (damaged, good, state.attempts)
        said = f"checkpoint step {damaged} cannot be restored (IndexError"
        # The chief's list goes on to name its nearest good steps, older and newer (retention
        # may have dropped the older ones by the time the keeper reads it).
        assert said in state.attempts[0].reason and "good one is step" in state.attempts[0].reason
        assert said in receiver.wait(1)[0]["text"], receiver.bodies
        aside = _folder(run) / "checkpoints" / "abandoned" / "attempt-2-unrestorable"
        assert (aside / f"ckpt-{damaged}.index").exists() and f"kept in {aside}" in state.attempts[0].reason
        # 2. A restore of a damaged step is refused before anything stops: attempt 2 trains on.
        wait_for(lambda: store.load(run.run_id).phase == "running"
                 and max(c["step"] for c in checkpoints.list_checkpoints(run)) > good, 120, "a new checkpoint")
        newest = max(c["step"] for c in checkpoints.list_checkpoints(run))
        _cut(run, newest)
        pids = _pids(run)
        with pytest.raises(ArtifactError) as refused:
            restore.restore(launcher.attach(run.run_id, store=store), newest)
        assert f"checkpoint step {newest} cannot be restored (IndexError" in str(refused.value)
        assert "good one is step" in str(refused.value), refused.value   # where to go instead
        after = store.load(run.run_id)
        assert (after.phase, after.attempt, after.attempts[-1].reason) == ("running", 2, None), after
        assert _pids(run) == pids and all(_alive(p) for p in pids.values()), pids
        # 3. A Stop while a restore (of the live run) starts the tasks wins, and restore says
        # so, no traceback. It restores a good step saved after the cut one: `good` is older than
        # the last keep_checkpoints saves by now, and retention may have dropped it (a loaded CI
        # run restored a step already gone, and the restore never started the tasks).
        wait_for(lambda: max(c["step"] for c in checkpoints.list_checkpoints(run)) > newest, 120,
                 "a checkpoint after the cut one")
        after_cut = max(c["step"] for c in checkpoints.list_checkpoints(run))
        failed, pids = [], _pids(run)

        def restore_good() -> None:
            try:
                restore.restore(launcher.attach(run.run_id, store=store), after_cut)
            except Exception as err:  # noqa: BLE001 - the test reads it below
                failed.append(err)
        thread = threading.Thread(target=restore_good)
        thread.start()
        wait_for(lambda: failed or store.load(run.run_id).phase == "launching"
                 and all(_alive(p) and p != pids[t] for t, p in _pids(run).items()), 120, "the restore's tasks")
        assert not failed, failed   # it failed before it started anything: not the race under test
        launcher.attach(run.run_id, store=store).stop(grace_s=3)
        thread.join(180)
        assert len(failed) == 1 and str(failed[0]).startswith(
            f"run {run.run_id} was stopped while the restore started it"), failed
        assert "Traceback" not in str(failed[0]) and "launch failed" not in str(failed[0])
        assert_nothing_left(run, store)
        final = store.load(run.run_id)
        assert final.phase == "stopped"
        assert _cli(store, "status", run.run_id)["phase"] == "stopped"
        assert [r["phase"] for r in _cli(store, "runs") if r.get("run_id") == run.run_id] == ["stopped"]
        assert said in monitor_view.attempt_rows(final)[0]["ended"]   # Monitor's attempts table
        record("damaged newest checkpoint: keeper resumes from the good one", damaged=damaged, resumed_from=good,
               restart_issued_s=state.attempts[1].started - state.attempts[0].ended)
    finally:
        receiver.close()
