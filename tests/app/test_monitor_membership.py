"""Monitor after a host was lost for good (issue 39): the attempt that moved a task to a spare, or
ran without it, says why; a task that is not in the current attempt has its curves end there.

The run folder is written as a real run leaves it: the run record as the keeper records a lost host
(``Attempt.lost``, ``Attempt.hosts``, the lost attempt's reason in backend/runs/membership.py's
words), the harness unpacked in each task's run folder, and the chief's metrics.jsonl written by
the harness's own writer, attempt by attempt (attempt 1 ran past the step attempt 2 resumed from).
The page's watch agent reads it back from the chief's folder."""
from __future__ import annotations

import sys
import time

from backend.config.spec import job_from_dict, job_to_dict
from backend.engines.bundle import bundle
from backend.client.harness.report import MetricsReporter
from backend.hosts.local import LocalTransport
from backend.hosts.remote import Host, install
from backend.runs.store import RunStore
from backend.records.state import Attempt, Phase, RunState, TaskState
from console import monitor_view
from console.ui import state
from tests.app.test_monitor_page import _chart_messages
from tests.conftest import ROOT, wait_for
from rig.sshd import free_port

EVERY = 5          # the chief writes a line per worker every 5 steps
RESUMED = 20       # the newest checkpoint when the host went: attempt 2 resumed from it
LOST_AT = 30       # attempt 1 trained on to here before its collective aborted


def _task(role: str, host: str) -> dict:
    return {"role": role, "host": host, "transport": "local", "tf_port": free_port(), "python": sys.executable}


def _write_run(root, tmp_path, first: dict[str, str], second: dict[str, str], reason: str,
               cluster_after: list[dict], min_workers: int | None = None) -> str:
    """A finished two-attempt run: ``first`` / ``second`` map task -> host per attempt; the run's
    cluster and tasks are the second attempt's, as ``membership.apply`` leaves them."""
    run_id = "run-membership"
    store = RunStore(root)
    store.reserve(run_id)
    dirs = {host: str(tmp_path / host / "runs" / run_id) for host in {*first.values(), *second.values()}}
    job = job_from_dict({"kind": "harness", "module": str(ROOT / "examples" / "synthetic.py")})
    for host, folder in dirs.items():   # launch unpacks the harness in every task's folder
        install(Host(LocalTransport(host), sys.executable, folder), bundle(job))
    chief = dirs[second["chief-0"]]
    now = time.time() - 600
    for attempt, members, steps in ((1, first, range(EVERY, LOST_AT + 1, EVERY)),
                                    (2, second, range(RESUMED + EVERY, 60 + 1, EVERY))):
        reporter = MetricsReporter(chief, run_id, attempt)
        for step in steps:
            for i, task in enumerate(members):
                loss = 2.0 / step + 0.01 * i
                reporter.log(task, step, step // 30, metrics={"loss": loss},
                             global_metrics={"loss": 2.0 / step}, step_time=0.05,
                             examples_per_sec=640.0, now=now + step)
        reporter.close()
    cluster = {"tasks": cluster_after, **({"min_workers": min_workers} if min_workers else {})}
    tasks = [TaskState(name, i, host, dirs[host]) for i, (name, host) in enumerate(second.items())]
    attempts = [Attempt(1, now, None, ended=now + 100, reason=reason, last_step=LOST_AT, hosts=first,
                        lost={h: "unreachable for 121 s" for h in set(first.values()) - set(second.values())}),
                Attempt(2, now + 200, RESUMED, ended=now + 300, reason="finished", last_step=60, hosts=second)]
    store.save(RunState(run_id, now, cluster, job_to_dict(job), tasks, attempts,
                        phase=Phase.FINISHED))
    return run_id


def _opened(page, run_id: str):
    """The Monitor page on ``run_id`` once its watch agent has brought both attempts' lines."""
    at = page("monitor", run_id=run_id)
    assert not at.exception
    live = state.registry().get(run_id)
    wait_for(lambda: len(live.metrics.global_loss()[0]) and live.metrics.global_loss()[0][-1] == 60, 90,
             "the watch agent to bring both attempts' metrics")
    at.run()                       # drawn from the filled store
    assert not at.exception
    return at, live


def test_a_shrunk_run_names_why_and_the_gone_workers_curve_ends_where_it_left(page, runs_dir, tmp_path):
    first = {"chief-0": "127.0.0.1", "worker-0": "127.0.0.2", "worker-1": "127.0.0.3"}
    second = {"chief-0": "127.0.0.1", "worker-0": "127.0.0.3"}   # worker-1 renumbered: TF_CONFIG's order
    reason = ("worker-0: host 127.0.0.2 unreachable for 121 s; no spare left: runs on 2 task(s) without "
              "worker-0 (min_workers 2); global batch 32 kept (16 per task)")
    run_id = _write_run(runs_dir, tmp_path, first, second, reason,
                        [_task("chief", "127.0.0.1"), _task("worker", "127.0.0.3")], min_workers=2)
    at, live = _opened(page, run_id)
    shown = [i.value.replace("\\", "") for i in at.info]
    assert any("Attempt 2 runs on other hosts than attempt 1: " + reason in i for i in shown), shown
    captions = [c.value.replace("\\", "") for c in at.caption]
    assert any("Attempt 2 runs on 2 task(s): chief-0 on 127.0.0.1, worker-0 on 127.0.0.3; not in it: "
               f"worker-1 (its curves end at step {RESUMED})" in c for c in captions), captions

    # The loss chart as the browser gets it: worker-1 stops at the step attempt 2 resumed from;
    # its points from attempt 1 past that step (steps 25, 30) are not drawn, and nothing joins on.
    drawn = {t["name"]: t for t in _chart_messages(at)["loss_chart"]["data"]}
    assert drawn["worker-1"]["x"] == list(range(EVERY, RESUMED + 1, EVERY))
    assert None not in drawn["worker-1"]["y"]
    for task in ("chief-0", "worker-0"):       # the tasks of attempt 2 train on to the end
        assert drawn[task]["x"][-1] == 60 and None not in drawn[task]["y"]
    for chart in ("step_time_chart", "throughput_chart"):   # every per-worker chart alike
        lines = {t["name"]: t["x"] for t in _chart_messages(at)[chart]["data"]}
        assert lines["worker-1"] == list(range(EVERY, RESUMED + 1, EVERY)), (chart, lines)
    table = at.dataframe[-1].value.to_dict("records")   # the attempts table, with each one's hosts
    assert [(r["attempt"], r["hosts"]) for r in table] == [(1, "127.0.0.1, 127.0.0.2, 127.0.0.3"),
                                                           (2, "127.0.0.1, 127.0.0.3")], table


def test_a_task_moved_to_a_spare_keeps_one_curve_and_the_page_names_the_swap(page, runs_dir, tmp_path):
    first = {"chief-0": "127.0.0.1", "worker-0": "127.0.0.2"}
    second = {"chief-0": "127.0.0.1", "worker-0": "127.0.0.9"}
    reason = "worker-0: host 127.0.0.2 unreachable for 121 s; moved to spare 127.0.0.9"
    run_id = _write_run(runs_dir, tmp_path, first, second, reason,
                        [_task("chief", "127.0.0.1"), _task("worker", "127.0.0.9")])
    at, live = _opened(page, run_id)
    assert any(f"Attempt 2 runs on other hosts than attempt 1: {reason}" in i.value.replace("\\", "")
               for i in at.info), [i.value for i in at.info]
    captions = [c.value.replace("\\", "") for c in at.caption]
    assert any("Attempt 2 runs on 2 task(s): chief-0 on 127.0.0.1, worker-0 on 127.0.0.9" in c
               and "not in it" not in c for c in captions), captions
    drawn = {t["name"]: t for t in _chart_messages(at)["loss_chart"]["data"]}
    assert drawn["worker-0"]["x"][-1] == 60 and None not in drawn["worker-0"]["y"]   # one task, one curve


def test_a_run_whose_hosts_never_changed_shows_no_membership_note():
    """The note is for a changed membership only (and a record from before spares has none)."""
    plain = RunState("r", 0.0, {"tasks": []}, {}, [], [Attempt(1, 0.0, hosts={"chief-0": "h1"}, reason="failed"),
                                                       Attempt(2, 1.0, 10, hosts={"chief-0": "h1"})])
    assert monitor_view.membership_notes(plain) == ("", "")
    assert monitor_view.absent_spans(plain) == {}
    old = RunState("r", 0.0, {"tasks": []}, {}, [], [Attempt(1, 0.0), Attempt(2, 1.0, 10)])
    assert monitor_view.membership_notes(old) == ("", "") and monitor_view.absent_spans(old) == {}
    # The attempts table names each attempt's hosts once each; an old record has none to name.
    assert [r["hosts"] for r in monitor_view.attempt_rows(plain)] == ["h1", "h1"]
    assert [r["hosts"] for r in monitor_view.attempt_rows(old)] == ["", ""]


def test_a_worker_absent_from_a_middle_attempt_has_a_gap_not_a_joining_line():
    """A worker in attempts 1 and 3 but not 2: no point in attempt 2's steps, and its line breaks
    (a NaN point: plotly draws nothing across it) rather than joining step 10 to step 41."""
    from backend.watch.metrics import MetricsStore
    from console import figures
    run = RunState("r", 0.0, {"tasks": []}, {}, [], [
        Attempt(1, 0.0, None, hosts={"chief-0": "h1", "worker-0": "h2"}),
        Attempt(2, 1.0, 10, hosts={"chief-0": "h1"}),
        Attempt(3, 2.0, 40, hosts={"chief-0": "h1", "worker-0": "h2"})])
    store = MetricsStore()
    for attempt, tasks, steps in ((1, ("chief-0", "worker-0"), range(1, 16)), (2, ("chief-0",), range(11, 41)),
                                  (3, ("chief-0", "worker-0"), range(41, 51))):
        store.add_many({"task": t, "step": s, "attempt": attempt, "loss": 1.0 / s, "global_loss": 1.0 / s,
                        "time": float(s)} for s in steps for t in tasks)
    fig = figures.loss_figure(store, gaps=monitor_view.absent_spans(run))
    worker = next(t for t in fig.data if t.name == "worker-0")
    x, y = list(worker.x), list(worker.y)
    gap = x.index(11)
    assert x[:gap] == list(range(1, 11)) and x[gap + 1:] == list(range(41, 51))
    assert y[gap] != y[gap]                     # NaN: the line is broken there
