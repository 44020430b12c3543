"""Every host command, declared once: its name, its arguments, what it answers, and which file
holds its body. Standard library only (hostctl runs with ``-S``).

Both sides are built from this table: the host's parser (``hostctl.parser``) and the console's
argument lists (``argv``, called by ``backend.hosts.remote``, the one client). A command's body is
the function of the same name (``-`` read as ``_``) in ``hostctl_<subject>.py``; a client passes
the declared arguments by keyword, so an argument the table does not declare fails on the console,
at once, not as a usage error on a host. ``docs/wire-protocol.md`` is the prose of this table and
of the answers' rules (hostctl's docstring: one JSON object on stdout, exit ``FAILED`` for a
failure the command understands).

To add a command: a ``Command`` here, its body in the subject's file, its client in
``backend/hosts/remote.py``; tests/unit/test_host_commands.py checks the three agree.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from . import profiling, spawn

FAILED = 3                # exit code of a failure a command understands: stdout {"error", "missing"}
READ_LIMIT = 16 << 20     # bytes per read answer: one call stays short on a slow link


class Refused(Exception):
    """A failure a command understands: answered as JSON, not as a traceback."""

    def __init__(self, message: str, *, missing: bool = False) -> None:
        super().__init__(message)
        self.missing = missing


def inside(run: str, rel: str) -> str:
    """``rel`` under the run directory; refuses absolute paths and ``..``."""
    if not rel or os.path.isabs(rel) or ".." in rel.split("/"):
        raise Refused(f"path {rel!r} is not inside the run directory")
    return os.path.join(run, rel)


def number(text: str, what: str) -> int:
    """``text`` as an int, or refused naming ``what`` (the flag it came in)."""
    try:
        return int(text)
    except ValueError:
        raise Refused(f"{what} {text!r} is not a number") from None


@dataclass(frozen=True)
class Arg:
    """One argument: ``name`` is the client's keyword, ``--name`` (``_`` as ``-``) the flag."""
    name: str
    kind: type = str          # str, int or float; bool: a switch, given only when true
    required: bool = False
    default: object = None
    many: bool = False        # given once per value: --task a --task b
    help: str | None = None
    metavar: str | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


@dataclass(frozen=True)
class Command:
    name: str
    subject: str              # its body's file: hostctl_<subject>.py
    help: str
    answer: str               # the JSON object it prints
    args: tuple[Arg, ...] = ()
    exclusive: tuple[str, ...] = ()   # arguments of which at most one may be given
    stdin: str = ""           # what it reads from stdin, if anything
    stream: bool = False      # answers with a stream of bytes, not one JSON object

    @property
    def handler(self) -> str:
        return self.name.replace("-", "_")


def _task(help: str | None = None) -> Arg:
    return Arg("task", required=True, many=True, help=help)


def _folder() -> Arg:
    return Arg("dir", required=True, help="the checkpoint folder, run-relative")


TABLE = (
    # -- tasks: hostctl_tasks.py ------------------------------------------------------------------
    Command("start", "tasks", "start tasks detached", "task -> {pid, pgid, ...} or {error}",
            (Arg("wait", float, default=10.0, help="seconds to wait for each pid"),
             Arg("settle", float, default=0.0, help="then this long, to catch early deaths")),
            stdin='{"tasks": [{"task", "argv", "env"}]}'),
    Command("status", "tasks", "each task's state", "task -> {state, pid, exit_code, ...}", (_task(),)),
    Command("stop", "tasks", "stop tasks and all they started: INT and TERM, then KILL, then look again",
            "task -> {left, killed, found, skipped}",
            (_task(), Arg("group", many=True, metavar="TASK=PGID",
                          help="a task's process group as the console recorded it"),
             Arg("grace", float, default=spawn.KILL_AFTER_S))),
    Command("stacks", "tasks", "each task's Python stacks (SIGUSR1 to its faulthandler)",
            "task -> {pid, stacks} or {error}",
            (_task(), Arg("wait", float, default=5.0, help="seconds to wait for each dump"))),
    Command("liveness", "tasks", "each task's processes, CPU seconds and log size",
            "task -> {state, processes, cpu_s, log_size}", (_task(),)),
    Command("resumed", "tasks", "the step each task resumed from in an attempt",
            '{"resumed": {task: step}, "ended": [task]}',
            (Arg("attempt", int, required=True), Arg("task", many=True))),
    # -- files: hostctl_files.py ------------------------------------------------------------------
    Command("read", "files", "a file's bytes (base64), by offset or from its end",
            '{"size", "offset", "data", "eof"}',
            (Arg("path", required=True), Arg("offset", int, default=0), Arg("tail", int),
             Arg("limit", int, default=READ_LIMIT)), exclusive=("offset", "tail")),
    Command("write", "files", "stdin into a file at an offset; --final makes it appear", '{"size", "final"}',
            (Arg("path", required=True), Arg("offset", int, default=0), Arg("final", bool),
             Arg("private", bool, help="mode 0600 (the file holds secrets)")), stdin="the bytes"),
    Command("follow", "files", "a file's bytes as they are written (a stream, like tail -F)",
            "the file's bytes, until the client closes", (Arg("path", required=True),), stream=True),
    Command("files", "files", "every file under a run folder, with its size",
            '{"files": [{"path", "size"}], "cut"}', (Arg("dir", required=True),)),
    Command("progress", "files", "size and last line of metrics.jsonl", '{"size", "last"}'),
    Command("project", "files", "the run's project folder from this host's cache, or from stdin",
            '{"cached"}', (Arg("hash", required=True, help="the project tar's sha256"),),
            stdin="the project's tar, or nothing to use the cache"),
    Command("pip", "files", "pip install the project's requirements into this Python (pip_install: true)",
            "pip_install's answer"),
    Command("exports", "files", "finished exports' result.json", '{"exports": [result]}'),
    # -- checkpoints and the chief's requests: hostctl_checkpoints.py -----------------------------
    Command("ckpt-list", "checkpoints", "checkpoints users may pick, with their holds",
            '{"checkpoints": [...]}', (_folder(),)),
    Command("ckpt-abandoned", "checkpoints", "checkpoints moved aside by restores",
            '{"checkpoints": [...]}', (_folder(),)),
    Command("ckpt-hold", "checkpoints", "hold a checkpoint step: retention keeps it until released",
            '{"hold", "step", ...}',
            (_folder(), Arg("step", required=True, help="a step, or latest"),
             Arg("purpose", required=True), Arg("ttl", float, help="seconds; none: held until released"))),
    Command("ckpt-release", "checkpoints", "end a hold", '{"released"}',
            (_folder(), Arg("hold", required=True))),
    Command("ckpt-abandon", "checkpoints", "move checkpoints newer than a step aside", '{"moved": [step]}',
            (_folder(), Arg("after", int, required=True), Arg("tag", required=True), Arg("keep_hold"))),
    Command("ckpt-verify", "checkpoints", "read steps with TensorFlow's reader until one reads whole",
            '{"good", "damaged": {step: why}}', (_folder(), Arg("step", int, required=True, many=True))),
    Command("export", "checkpoints", "export a checkpoint and verify it in a fresh process (export.py)",
            "export's result",
            (Arg("job", help="the job module, run-relative (none: the model.json a fit job's callback wrote)"),
             Arg("step", int, help="default: the newest complete checkpoint"), Arg("name"),
             Arg("formats", default="savedmodel,keras"))),
    Command("request-save", "checkpoints", "ask the chief to save at its next sync point", '{"name"}',
            (Arg("stop", bool, help="then every worker exits (preempt.EXIT_CODE)"),)),
    Command("save-done", "checkpoints", "the step a save request was saved at", '{"step"}',
            (Arg("name", required=True),)),
    Command("request-profile", "checkpoints", "ask every worker to profile N steps from the next sync point",
            '{"name"}', (Arg("steps", int, default=profiling.DEFAULT_STEPS),)),
    Command("profile-done", "checkpoints", "where a profile request's window began",
            '{"step", "steps", "dir", "error"}', (Arg("name", required=True),)),
)
COMMANDS = {c.name: c for c in TABLE}


def argv(name: str, /, **values) -> list[str]:
    """The command's arguments after ``--run``, from the client's keywords: None and a false
    switch are left out, a ``many`` argument is repeated per value. A keyword the command does not
    declare, or a required one missing, is a bug on the console's side: ValueError."""
    command = COMMANDS[name]
    declared = {a.name: a for a in command.args}
    unknown = sorted(set(values) - set(declared))
    if unknown:
        raise ValueError(f"host command {name} takes no {', '.join(unknown)}")
    out: list[str] = []
    for arg in command.args:
        value = values.get(arg.name)
        if value is None or (arg.many and not value):
            if arg.required:
                raise ValueError(f"host command {name} needs {arg.name}")
            continue
        if arg.kind is bool:
            out += [arg.flag] if value else []
            continue
        for item in (value if arg.many else (value,)):
            out += [arg.flag, str(item)]
    return out


def add_parsers(sub, handlers: dict) -> None:
    """The table's commands on an argparse subparsers object, each calling ``handlers[name]``."""
    for command in TABLE:
        s = sub.add_parser(command.name, help=command.help)
        s.add_argument("--run", required=True, help="the run directory on this host")
        s.set_defaults(fn=handlers[command.name])
        group = s.add_mutually_exclusive_group() if command.exclusive else None
        for arg in command.args:
            target = group if arg.name in command.exclusive else s
            if arg.kind is bool:
                target.add_argument(arg.flag, action="store_true", help=arg.help)
                continue
            options = {"type": arg.kind, "help": arg.help, "metavar": arg.metavar}
            if arg.many:
                options.update(action="append", default=None if arg.required else [])
            else:
                options["default"] = arg.default
            if arg.required:
                options["required"] = True
            target.add_argument(arg.flag, **options)
