"""An attempt's last step is read as the attempt ends (issue 56 item 7): after a reboot the record
said "last 40" while the metrics reached 70, because the step was the keeper's read from before
the host stopped answering. Now the newest of what the keeper saw, the chief's file (unless its
host is silent) and the console's local copy of the chief's metrics."""
from __future__ import annotations

import json
from types import SimpleNamespace

from backend.runs.keeper import Keeper, MetricsSeen
from backend.watch.chief_metrics import kept_path, local_last_step
from backend.watch.journal import MIRROR_DIR


def lines(attempt: int, steps) -> str:
    return "".join(json.dumps({"task": "worker-0", "step": s, "attempt": attempt, "metrics": {"loss": 0.5}}) + "\n"
                   for s in steps)


def a_run_folder(tmp_path):
    (tmp_path / MIRROR_DIR).mkdir(parents=True)
    (tmp_path / MIRROR_DIR / "metrics.jsonl").write_text(lines(1, range(5, 75, 5)) + lines(2, [5]) + '{"cut')
    kept_path(tmp_path).write_text(lines(1, range(5, 45, 5)))
    return tmp_path


def test_the_local_copies_give_the_newest_step_of_the_attempt(tmp_path):
    folder = a_run_folder(tmp_path)
    assert local_last_step(folder, 1) == 70   # the mirror is ahead of the kept copy
    assert local_last_step(folder, 2) == 5 and local_last_step(folder, 3) is None
    assert local_last_step(tmp_path / "none", 1) is None


def keeper_over(tmp_path, *, chief_says, silent):
    keeper = Keeper.__new__(Keeper)
    keeper.progress, keeper.silent = MetricsSeen(40), ({"h3": 1.0} if silent else {})
    asked = []

    def last_step():
        asked.append(True)
        return chief_says
    run = SimpleNamespace(local_dir=a_run_folder(tmp_path), last_step=last_step,
                          state=SimpleNamespace(attempt=1, chief=SimpleNamespace(host="h3")))
    return keeper._newest_step(run), asked


def test_the_attempt_ends_with_the_newest_step_known_not_an_earlier_read(tmp_path):
    # The chief's host is silent: not asked (that would cost its connect timeout); the console's copy wins.
    assert keeper_over(tmp_path / "a", chief_says=110, silent=True) == (70, [])
    # The chief answers: its file is newest.
    assert keeper_over(tmp_path / "b", chief_says=110, silent=False) == (110, [True])
