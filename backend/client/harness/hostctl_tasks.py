"""hostctl's task commands: start, status, stop, stacks, liveness, resumed (declared in
``host_commands.py``). Each takes the parsed arguments and returns the JSON answer.
"""
from __future__ import annotations

import json
import os
import sys

from . import layout, proctree, spawn, stackdump
from .host_commands import number


def start(a) -> dict:
    tasks = json.loads(sys.stdin.read())["tasks"]
    return spawn.start_many(a.run, tasks, a.wait, a.settle)


def status(a) -> dict:
    return {task: spawn.status_one(a.run, task) for task in a.task}


def stop(a) -> dict:
    """Each task's processes, found by group and by mark (``proctree.py``), ended and looked for again."""
    groups = {}
    for item in a.group:   # TASK=PGID from the run's record: used where this host lost its own
        task, _, pgid = item.partition("=")
        groups[task] = number(pgid, f"--group {task}")
    return proctree.stop(a.run, a.task, a.grace, groups)


def stacks(a) -> dict:
    """Each running task's Python stacks (``stackdump.py``), or why there are none."""
    out = {}
    for task in a.task:
        info = spawn.status_one(a.run, task)
        pid = info.get("pid")
        if info["state"] != "running" or not pid:
            out[task] = {"error": f"{task} is {info['state']}, not running"}
        elif not stackdump.catches(pid):
            out[task] = {"error": f"{task} (pid {pid}) has no stack handler: only harness jobs dump stacks"}
        else:
            out[task] = {"pid": pid, "stacks": stackdump.dump(a.run, task, pid, a.wait)}
    return out


def liveness(a) -> dict:
    """Each task's signs of life (``spawn.signs_of_life``): state, live processes, CPU seconds,
    log size; the keeper judges a stall by them, not by missing metrics alone."""
    return {task: spawn.signs_of_life(a.run, task) for task in a.task}


def resumed(a) -> dict:
    """``resumed``: task -> step for the tasks that restored in ``--attempt`` (session.py writes
    it); ``ended``: tasks whose process has exited (spawn.py clears that file at each start)."""
    out: dict = {"resumed": {}, "ended": []}
    for task in a.task:
        if os.path.exists(layout.task_file(a.run, task, "exit")):
            out["ended"].append(task)
        try:
            with open(layout.task_file(a.run, task, "resumed")) as fh:
                info = json.load(fh)
        except (OSError, ValueError):
            continue
        if info.get("attempt") == a.attempt:
            out["resumed"][task] = info["step"]
    return out
