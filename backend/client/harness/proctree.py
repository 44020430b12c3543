"""Stop one run's tasks on this host, and everything they started, wherever it went. Standard
library only; Linux.

A task's processes are found two ways. Its process group: the supervisor records it, or the
console passes it from the run's record when the run folder (and so that record) is gone. And its
mark: the supervisor starts with ``taskenv.GROUP`` in its environment and every descendant inherits
it, ``setsid`` or not, so a daemon that left the group, a child that outlived its main process and
a task whose records were removed are all found by reading ``/proc/*/environ``. Only this user's
processes can be read, which are the only ones a stop may signal anyway. This command and its
ancestors are never signalled (a job that runs ``stop`` on its own run). A process that clears its
environment AND leaves the task's group is not found.
"""
from __future__ import annotations

import json
import os
import signal
import time

from . import layout
from . import spawn
from . import taskenv

GONE_WAIT_S = 5.0   # after a KILL: how long processes get to disappear from /proc
SWEEPS = 3          # looks again (each KILLs what it finds): one forking as it dies is caught too


def stop(run: str, tasks: list[str], grace_s: float = spawn.KILL_AFTER_S,
         groups: dict[str, int] | None = None) -> dict:
    """Stop each task: INT and TERM to every group and marked process at once; what is still
    alive ``grace_s`` later gets KILL; then look again for the marks until a look finds none.
    Per task: ``found`` (processes it had), ``killed`` (some needed KILL) and ``left`` (pids
    alive at the end: empty means checked and gone), or ``skipped`` for a recorded group whose
    number now belongs to another program (never signalled).

    TensorFlow under MultiWorkerMirroredStrategy catches SIGTERM and keeps training, so SIGINT
    (KeyboardInterrupt) goes too. KILL spares the supervisor, so it can still record the exit
    code; a supervisor that is itself stuck is killed last and the code recorded for it.
    ``groups``: task -> process group from the run's record, used where this host has no record.
    """
    spare = spared()
    infos, skipped = _groups(run, tasks, groups or {}, spare)
    scope = _Scope(infos, spare)
    supervisors = {i["supervisor"] for i in infos.values() if i.get("supervisor")}
    members = scope.all_members()
    in_groups = {pid for pids in members.values() for pid in pids}
    strays = {pid: found for pid, found in marked(run, tasks, spare | supervisors).items() if pid not in in_groups}
    found = {task: len(pids) for task, pids in members.items()}
    for task, _ in strays.values():
        found[task] = found.get(task, 0) + 1
    # CONT last: a stopped (SIGSTOP, frozen) task gets INT and TERM only once it runs again, and
    # its stopped supervisor could not record its exit (the group's KILL waited GONE_WAIT_S more).
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCONT):
        for task in infos:
            scope.signal(task, sig)
        for pid in strays:
            _signal(pid, sig)
    scope.wait_gone(strays, grace_s)
    killed = scope.kill_all_but_supervisors(strays)
    scope.wait_gone(strays, GONE_WAIT_S)
    killed |= scope.kill_stuck_groups(run)
    scope.wait_gone({}, GONE_WAIT_S)
    late, left = _look_and_end(run, tasks, spare)
    last = scope.all_members()
    out = {task: {"pgid": infos[task]["pgid"] if task in infos else None, "found": found.get(task, 0),
                  "killed": task in killed | late,
                  "left": last.get(task, []) + [pid for pid, (t, _) in left.items() if t == task]}
           for task in tasks if task not in skipped}
    out.update({task: {"left": [], "skipped": "its process group now belongs to another program"}
                for task in skipped})
    for task, answer in out.items():
        if not answer["left"]:   # nothing of the task left that could still use its temp folder
            layout.remove_task_tmp(run, task)
    return out


def _groups(run: str, tasks: list[str], given: dict[str, int], spare: set[int]) -> tuple[dict, list[str]]:
    """Each task's group that is still the task's (``spawn.ours``), and the tasks whose group
    number another program now has."""
    infos, skipped = {}, []
    for task in tasks:
        info = json.loads(spawn._read(layout.task_file(run, task, "json")) or "{}")
        if not info.get("pgid") and given.get(task):
            info = {"pgid": int(given[task])}   # no record here: ours only if a marked process is in it
        if not info.get("pgid"):
            continue
        if spawn.ours(run, task, info):
            infos[task] = info
        elif spawn.group_members(info["pgid"]) and not marked(run, [task], spare):
            skipped.append(task)   # the task is gone; its group number was given to another program
    return infos, skipped


class _Scope:
    """The tasks' groups, less the processes spared (this command and its ancestors)."""

    def __init__(self, infos: dict, spare: set[int]) -> None:
        self.infos, self.spare = infos, spare
        # The groups this command or an ancestor is in (a job stopping its own run): never
        # signalled whole. Read once: a process's group does not change under a stop.
        self.spared_groups = {int(fields[2]) for fields in map(_stat, spare) if fields}

    def members(self, task: str) -> list[int]:
        return self.all_members().get(task, [])

    def all_members(self) -> dict[str, list[int]]:
        """Every task's live group members, from one pass over /proc (a pass per task
        and per poll was most of a host's stop with four tasks there)."""
        wanted = {info["pgid"] for info in self.infos.values()}
        if not wanted:
            return {}
        by_group: dict[int, list[int]] = {}
        for pid, (state, pgid) in _states().items():
            if pgid in wanted and state != "Z" and pid not in self.spare:
                by_group.setdefault(pgid, []).append(pid)
        return {task: by_group.get(info["pgid"], []) for task, info in self.infos.items()}

    def signal(self, task: str, sig: int) -> None:
        """The whole group at once (nothing forks past it), or member by member where this
        command itself is in it (a job that stops its own run)."""
        pgid = self.infos[task]["pgid"]
        if pgid not in self.spared_groups:
            _signal_group(pgid, sig)
        else:
            for pid in self.members(task):
                _signal(pid, sig)

    def wait_gone(self, strays: dict, timeout: float) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline and (any(self.all_members().values())
                                          or any(_alive(pid, ticks) for pid, (_, ticks) in strays.items())):
            time.sleep(0.05)

    def kill_all_but_supervisors(self, strays: dict) -> set[str]:
        killed = set()
        members = self.all_members()
        for task, info in self.infos.items():
            victims = [pid for pid in members[task] if pid != info.get("supervisor")]
            for pid in victims:
                _signal(pid, signal.SIGKILL)
            if victims:
                killed.add(task)
        for pid, (task, ticks) in strays.items():
            if _alive(pid, ticks):
                _signal(pid, signal.SIGKILL)
                killed.add(task)
        return killed

    def kill_stuck_groups(self, run: str) -> set[str]:
        """KILL whole groups still alive (a stuck supervisor too); record the code it could not."""
        killed = set()
        members = self.all_members()
        for task in self.infos:
            if members[task]:
                self.signal(task, signal.SIGKILL)
                killed.add(task)
                # Only into a run folder that is still there: a stop never makes it again.
                exit_file = layout.task_file(run, task, "exit")
                if os.path.isdir(os.path.dirname(exit_file)) and not os.path.exists(exit_file):
                    spawn._write_atomic(exit_file, f"{-signal.SIGKILL}\n")
        return killed


def _look_and_end(run: str, tasks: list[str], spare: set[int]) -> tuple[set[str], dict]:
    """Look for marked processes again and KILL them, until a look finds none (at most SWEEPS
    looks): the tasks that had some, and what the last look still found."""
    killed: set[str] = set()
    for _ in range(SWEEPS):
        found = marked(run, tasks, spare)
        if not found:
            return killed, {}
        for pid in found:
            _signal(pid, signal.SIGKILL)
        killed |= {task for task, _ in found.values()}
        _Scope({}, spare).wait_gone(found, GONE_WAIT_S)
    return killed, marked(run, tasks, spare)


def marked(run: str, tasks: list[str], spare: set[int]) -> dict[int, tuple[str, int]]:
    """This user's live processes that carry one of the tasks' marks: pid -> (task, start ticks)."""
    wanted = {f"{taskenv.GROUP}={spawn._mark(run, task)}".encode(): task for task in tasks}
    prefix = f"{taskenv.GROUP}=".encode()
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in spare:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue   # ended since listed, or another user's
        if prefix not in env:
            continue
        task = next((wanted[item] for item in env.split(b"\0") if item in wanted), None)
        ticks = spawn.start_ticks(int(entry))
        if task is not None and ticks is not None and _alive(int(entry), ticks):
            out[int(entry)] = (task, ticks)
    return out


def spared() -> set[int]:
    """This process and its ancestors: a stop run from inside a task must not end itself."""
    out, pid = set(), os.getpid()
    while pid > 1 and pid not in out:
        out.add(pid)
        fields = _stat(pid)
        pid = int(fields[1]) if fields else 0
    return out


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (state, ppid, pgrp, ...)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2:].split()


def _states() -> dict[int, tuple[str, int]]:
    """Every process's state letter and process group: pid -> (state, pgid)."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields:
                out[int(entry)] = (fields[0], int(fields[2]))
    return out


def _alive(pid: int, ticks: int) -> bool:
    """The same process (pid and start time) is still there and not a zombie."""
    fields = _stat(pid)
    return bool(fields) and fields[0] != "Z" and int(fields[19]) == ticks


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass
