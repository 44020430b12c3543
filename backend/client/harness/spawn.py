"""Start, inspect and stop one run's tasks on this host. Standard library only; Linux.

``hostctl`` (the host-side command line) calls these on every host, over SSH or as a local
subprocess, so the same code manages processes everywhere.

Why a supervisor: every task runs under a small supervisor process that is the leader of a new
session and process group. The task inherits that group, so stopping the group stops the task
and anything it spawned, and no wrapper can leave an orphan behind (docs/facts.md #7). The
supervisor ignores SIGTERM so it can record the task's exit code after the task has stopped.
What leaves the group (a ``setsid`` daemon) still carries the task's mark (``taskenv.GROUP``): the stop
(``proctree.py``) finds it by that.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time

from . import entry, layout
from . import taskenv

# INT and TERM, then this long before KILL for a group still alive. TensorFlow workers catch TERM
# (docs/facts.md #10) and a peer's end leaves the other waiting on its coordination service for
# about nine seconds: waiting longer than this only delays the stop.
KILL_AFTER_S = 1.0


def _write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in a process group, read from /proc."""
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name may hold spaces or parentheses: fields start after the last ')'.
        fields = stat[stat.rfind(")") + 2:].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            pids.append(int(pid))
    return pids


def start_ticks(pid: int) -> int | None:
    """When a process started (clock ticks since boot, /proc/PID/stat field 22): with its pid it
    names one process, never a later one that reuses the number."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return int(stat[stat.rfind(")") + 2:].split()[19])


def _mark(run: str, task: str) -> str:
    return f"{os.path.abspath(run)}:{task}"


def _marked(pid: int, mark: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f"{taskenv.GROUP}={mark}".encode() in f.read().split(b"\0")
    except OSError:
        return False


def ours(run: str, task: str, info: dict) -> list[int]:
    """The live members of the task's recorded group, if that group is still the task's: its
    supervisor (same pid, same start time) or a process with the task's mark is in it. A group
    number the system has since given to another program yields [] (never signal it)."""
    members = group_members(info["pgid"])
    sup, start = info.get("supervisor"), info.get("start_ticks")
    if sup in members and start is not None and start_ticks(sup) == start:
        return members
    mark = _mark(run, task)
    return members if any(_marked(pid, mark) for pid in members) else []


def _default_signals() -> None:
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):  # ignored ones survive exec: undo
        signal.signal(sig, signal.SIG_DFL)


def supervise(run: str, task: str, argv: list[str], cwd: str) -> int:
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    log = open(layout.log_file(run, task), "ab", buffering=0)
    log.write(f"{layout.attempt_banner(os.environ.get(taskenv.ATTEMPT, '?'))}\n".encode())
    try:
        proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, preexec_fn=_default_signals)
    except OSError as err:
        log.write(f"spawn: cannot start {argv[0]!r}: {err}\n".encode())
        _write_atomic(layout.task_file(run, task, "exit"), "127\n")
        return 127
    info = {"pid": proc.pid, "pgid": os.getpgid(0), "supervisor": os.getpid(), "argv": argv,
            "start_ticks": start_ticks(os.getpid()), "started": time.time(),
            "tf_config": os.environ.get("TF_CONFIG")}
    _write_atomic(layout.task_file(run, task, "json"), json.dumps(info))
    code = proc.wait()
    _write_atomic(layout.task_file(run, task, "exit"), f"{code}\n")
    if group_members(info["pgid"]) == [os.getpid()]:   # else what is left may still use it: the stop's
        layout.remove_task_tmp(run, task)
    return 0


def run_paths_absolute(env: dict) -> dict:
    """The run folder and PYTHONPATH entries, given relative to where we are (the host's home),
    made absolute: a task started in another folder must still find its run and ``tfconsole``."""
    out = dict(env)
    if out.get(taskenv.RUN_DIR):
        out[taskenv.RUN_DIR] = os.path.abspath(out[taskenv.RUN_DIR])
    if out.get("PYTHONPATH"):
        out["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in out["PYTHONPATH"].split(os.pathsep) if p)
    return out


def start(run: str, task: str, argv: list[str], env: dict, cwd: str = ".") -> subprocess.Popen:
    """Start one task's supervisor detached, in a new session; it records the task's pid."""
    for sub in (layout.TASKS, layout.LOGS):
        os.makedirs(os.path.join(run, sub), exist_ok=True)
    for suffix in ("json", "exit", "preempted", READY):  # a relaunch (restart, resume) starts from a clean slate
        if os.path.exists(layout.task_file(run, task, suffix)):
            os.remove(layout.task_file(run, task, suffix))
    env = {str(k): str(v) for k, v in env.items()}
    if cwd != ".":
        env = run_paths_absolute(env)
    if env.get("PYTHONPATH") and os.environ.get("PYTHONPATH"):   # the host's own entries still count
        env["PYTHONPATH"] += os.pathsep + os.environ["PYTHONPATH"]
    # The supervisor and everything the task starts inherit it, even what leaves the group
    # (setsid): how a stop finds them all (proctree.py). Set last: a job's env cannot change it.
    env[taskenv.GROUP] = _mark(run, task)
    # Temporary files inside the run folder, gone with the task (supervise, proctree.stop): TensorFlow
    # leaves its autograph files behind at an os._exit (layout.task_tmp). Set last, as the mark.
    env["TMPDIR"] = layout.fresh_task_tmp(run, task)
    # The environment goes to the supervisor directly, never on a command line `ps` would show.
    return subprocess.Popen(
        entry.argv("hostctl", "supervise", "--run", run, "--task", task, "--cwd", cwd, "--", *argv),
        env=entry.env({**os.environ, **env}), start_new_session=True,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True)


# A harness task writes tasks/<task>.ready once TensorFlow and its job module are imported. Start
# waits for it (or for the task's end), so a job that fails at import is refused by the launch
# however long TensorFlow takes to load on a busy host; a fixed wait missed it under load.
READY = "ready"
READY_WAIT_S = 90.0


def _wait_ready(run: str, names: list[str], bound_s: float) -> None:
    waiting, deadline = set(names), time.time() + bound_s
    while waiting and time.time() < deadline:
        for name in list(waiting):
            # Two file checks a round: scanning /proc here would take CPU from the very start-up
            # it waits on. The supervisor writes the exit file when the task ends.
            if os.path.exists(layout.task_file(run, name, READY)) or _exit_code(run, name) is not None:
                waiting.discard(name)
        time.sleep(0.1)


def start_many(run: str, tasks: list[dict], wait_s: float = 10.0, settle_s: float = 0.0) -> dict:
    """Start every task of this host at once; wait until each has recorded its pid (or ended),
    then ``settle_s`` more, so a task that dies at once (bad import, port taken) is reported.

    ``tasks`` holds ``{"task", "argv", "env"}`` (and ``"cwd"``, a folder of the run) for each
    task, and ``"ready": true`` for a task
    that says when it is past its imports (harness tasks); the answer maps task -> status.
    """
    # A task whose previous process group still lives keeps its record: starting over it would
    # forget the only pgid that can stop those processes.
    busy = {t["task"]: {**status_one(run, t["task"]), "state": "busy"} for t in tasks
            if status_one(run, t["task"])["state"] == "running"}
    if busy:
        return busy
    sups = {t["task"]: start(run, t["task"], t["argv"], t.get("env", {}), t.get("cwd") or ".") for t in tasks}
    deadline = time.time() + wait_s
    out = {name: {"state": "starting"} for name in sups}
    while time.time() < deadline:
        out = {name: {**status_one(run, name), "supervisor": sup.pid} for name, sup in sups.items()}
        if all(info["state"] != "starting" for info in out.values()):
            break
        time.sleep(0.02)
    _wait_ready(run, [t["task"] for t in tasks if t.get("ready")], READY_WAIT_S)
    if settle_s:
        time.sleep(settle_s)
        out = {name: {**status_one(run, name), "supervisor": sup.pid} for name, sup in sups.items()}
    return out


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return None


def _exit_code(run: str, task: str) -> int | None:
    text = _read(layout.task_file(run, task, "exit"))
    return None if text is None else int(text.strip() or -1)


def status_one(run: str, task: str) -> dict:
    code = _exit_code(run, task)
    info_text = _read(layout.task_file(run, task, "json"))
    info = json.loads(info_text) if info_text else {}
    if code is None and not info:
        return {"state": "starting"}
    if code is None and ours(run, task, info):
        return {**info, "state": "running", **_got_past(run, task, info)}
    # The supervisor writes the exit code, then leaves the group: if it did so since the first
    # read, the code is there now (a task that ended well is not "lost").
    code = _exit_code(run, task) if code is None else code
    if code is None:
        return {**info, "state": "lost"}
    return {**info, "state": "exited", "exit_code": code, "ended_ago_s": _ended_ago(run, task)}


def _ended_ago(run: str, task: str) -> float | None:
    """Seconds since the task's exit code was written, on this host's clock at both ends: the
    console compares it with no clock of its own (a skewed console clock cannot shorten it)."""
    try:
        return max(0.0, time.time() - os.stat(layout.task_file(run, task, "exit")).st_mtime)
    except OSError:
        return None


def _got_past(run: str, task: str, info: dict) -> dict:
    """How far a running harness task has come, as its files say (the console shows it as the
    run's start progress, read with the status it asks for anyway): ``ready``, past its imports
    (READY); ``set_up``, the run folder's train.json is newer than this task's start (the chief
    writes it once the strategy and model are made, just before step 1)."""
    try:
        set_up = os.stat(os.path.join(run, layout.TRAIN_INFO)).st_mtime >= float(info.get("started") or "inf")
    except OSError:
        set_up = False
    return {"ready": os.path.exists(layout.task_file(run, task, READY)), "set_up": set_up}


def cpu_seconds(pids: list[int]) -> float:
    """CPU time of these processes and of their children they have reaped (/proc/PID/stat
    utime, stime, cutime, cstime), in seconds."""
    ticks = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue   # ended since it was listed
        fields = stat[stat.rfind(")") + 2:].split()
        ticks += sum(int(v) for v in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def signs_of_life(run: str, task: str) -> dict:
    """What says a task is working even when it writes no metrics: its live processes, their CPU
    time (None where its processes are not on this host: a Slurm task seen from the login host)
    and its log's size (None: no log yet). The keeper compares them from poll to poll."""
    info = status_one(run, task)
    members = ours(run, task, info) if info.get("pgid") and info["state"] == "running" else []
    try:
        log_size = os.stat(layout.log_file(run, task)).st_size
    except OSError:
        log_size = None
    return {"state": info["state"], "pids": len(members),
            "cpu_s": round(cpu_seconds(members), 2) if members else None, "log_size": log_size}
