"""The host-side command line: every action the console takes on a host, one subcommand each,
declared in ``host_commands.py`` (name, arguments, answer) and written in ``hostctl_tasks.py``,
``hostctl_files.py`` and ``hostctl_checkpoints.py``.

The console runs ``python -S RUN/lib hostctl SUBCOMMAND --run RUN ...`` (``layout.host_argv``;
``backend.hosts.remote`` is its only client). Standard library only, so ``-S`` skips site-packages:
it starts fast and works before and without the job's packages. ``export`` and ``ckpt-verify`` load
TensorFlow, so they run the ``export`` module in a child process (``entry.argv``: the same Python
and package, with site-packages) and answer with that child's JSON answer.

The protocol, the same for every subcommand (docs/wire-protocol.md):

- stdout: ONE JSON object (its last line), the answer; exit 0.
- exit ``FAILED`` (3): a failure this command understands (a refused checkpoint hold, a missing
  file, a full disk, a failed export): stdout is ``{"error": "...", "missing": bool}``.
- exit 2: argparse's usage error, or Python's own "can't open file" (no ``RUN/lib`` here).
- ``follow`` is the one stream: it writes the file's bytes as they are appended (``tail -F``) until
  the client closes it; a refusal before its first byte is answered as above.
"""
from __future__ import annotations

import argparse
import json
import sys

from . import host_commands, hostctl_checkpoints, hostctl_files, hostctl_tasks, spawn
from .host_commands import FAILED, Refused

SUBJECTS = {"tasks": hostctl_tasks, "files": hostctl_files, "checkpoints": hostctl_checkpoints}


def handlers() -> dict:
    """Command name -> its body: the function of its name in its subject's file."""
    return {c.name: getattr(SUBJECTS[c.subject], c.handler) for c in host_commands.TABLE}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python RUN/lib hostctl", description="The console's actions on this host.")
    sub = p.add_subparsers(dest="cmd", required=True)
    host_commands.add_parsers(sub, handlers())
    v = sub.add_parser("supervise", help=argparse.SUPPRESS)   # spawn.start runs it: one per task
    v.add_argument("--run", required=True)
    v.add_argument("--task", required=True)
    v.add_argument("--cwd", default=".")
    v.add_argument("argv", nargs="+")
    return p


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    if a.cmd == "supervise":
        return spawn.supervise(a.run, a.task, a.argv, a.cwd)
    try:
        out = a.fn(a)
        if out is None:   # a stream (follow): its bytes were the answer
            return 0
    except Refused as err:
        print(json.dumps({"error": str(err), "missing": err.missing}))
        return FAILED
    except OSError as err:   # a full disk, a permission: say which file, without a traceback
        print(json.dumps({"error": f"{err.strerror or err}: {err.filename or ''}".strip(": "),
                          "missing": False}))
        return FAILED
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
