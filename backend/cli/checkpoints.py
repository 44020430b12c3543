"""The Checkpoints page on the command line: list, save now, export, restore; and ``--json``.

Each command calls ``backend.checkpoints``, the module the page uses, so both do the same thing.
With ``--json`` a command prints one JSON document on stdout (for scripts) instead of a table.
"""
from __future__ import annotations

import json
import sys

from backend.errors import SpecError

# The runs, hosts and checkpoint modules are imported inside each command: the parser is built
# for every command, and they pull in SSH, the engines and the specs.

EXIT_CODES = """exit codes:
  0    done (for status and runs: whatever the run's state)
  1    the check or the wait did not succeed: preflight failed on a host, launch --wait ended
       other than finished, stacks got no stack, trust-host needs --fingerprint, restore
       started a new attempt that not every worker confirmed resuming from the step
  2    an error, one line on stderr saying why and what to do; or a usage error
  3    an unexpected error (a bug): one line on stderr; please report it
  130  interrupted (Ctrl-C)
"""


def print_json(value) -> None:
    json.dump(value, sys.stdout, indent=1, default=str)
    print()


def _options(a):
    from backend.hosts.ssh import SSHOptions   # imported here: it brings paramiko (0.2 s)
    return SSHOptions(known_hosts=a.known_hosts, ssh_config=a.ssh_config)


def _store(a):
    from backend.runs.store import RunStore
    return RunStore(a.runs)


def _attach(a, *, reads_only: bool = False):
    """The run named on the command line, attached with the command line's SSH options
    (``reads_only``: a command that only reads, as on a read-only runs folder)."""
    from backend.runs import launcher   # imported here: the engines and SSH, 0.7 s at start
    return launcher.attach(a.run, store=_store(a), options=_options(a), reads_only=reads_only)


def print_table(rows: list[dict], header: list[str]) -> None:
    widths = {h: max(len(h), *(len(str(r.get(h, ""))) for r in rows)) for h in header}
    print("  ".join(h.ljust(widths[h]) for h in header))
    for r in rows:
        print("  ".join(str("" if r.get(h) is None else r.get(h)).ljust(widths[h]) for h in header))


def cmd_checkpoints(a) -> int:
    from backend import checkpoints
    rows = checkpoints.checkpoint_rows(checkpoints.list_checkpoints(_attach(a)))
    if a.json:
        print_json(rows)
    elif rows:   # the metrics each checkpoint holds follow the loss
        print_table(rows, list(dict.fromkeys(k for r in rows for k in r)))
    else:
        print("no complete checkpoint yet")
    return 0


def cmd_save(a) -> int:
    from backend import checkpoints
    step = checkpoints.save_now(_attach(a), wait_s=a.wait)
    print(f"saved at step {step}" if step is not None else "save requested: every worker saves at its next sync point")
    return 0


def _step(text: str | None) -> int | None:
    if text in (None, "latest"):
        return None
    try:
        return int(text)
    except ValueError:
        raise SpecError("--step", f"{text!r} is not a step", "Give a step number from `checkpoints RUN`, or latest.") from None


def cmd_export(a) -> int:
    from backend import checkpoints
    step = _step(a.step)   # bad input is refused before any host is asked
    result = checkpoints.export(_attach(a), step=step, name=a.name,
                                formats=tuple(f.strip() for f in a.formats.split(",") if f.strip()))
    if a.json:
        print_json(result)
    else:
        print(f"exported step {result.get('step')} as {result.get('name')}: "
              + ", ".join(f"{k} {v}" for k, v in result.items() if k not in ("step", "name")))
    return 0


def cmd_restore(a) -> int:
    """Exit 1 when the new attempt runs but not every worker confirmed resuming from the step
    (a script that ignores the resume step): the run goes on, the user must know."""
    from backend.runs import restore
    run = _attach(a)
    result = restore.restore(run, a.step)
    if result.confirmed:
        print(f"run {run.run_id}: {result.summary}")
        return 0
    print(f"run {run.run_id}: attempt {result.attempt} started, NOT confirmed as resumed from step {a.step}")
    print(result.summary, file=sys.stderr)
    return 1


def add_commands(add) -> None:
    """The checkpoint commands, on the parser's ``add(name, fn, help)``."""
    s = add("checkpoints", cmd_checkpoints, "list the chief's complete checkpoints")
    s.add_argument("run")
    s.add_argument("--json", action="store_true", help="print JSON instead of a table")
    s = add("save", cmd_save, "ask every worker to save a checkpoint at its next sync point")
    s.add_argument("run")
    s.add_argument("--wait", type=float, default=120.0, metavar="SECONDS",
                   help="wait this long for the save and print its step (0: do not wait)")
    s = add("export", cmd_export, "export a checkpoint (SavedModel and .keras) and verify it in a fresh process")
    s.add_argument("run")
    s.add_argument("--step", default="latest", help="a checkpoint step, or latest (default)")
    s.add_argument("--name", help="the export's name (default: step-<S>-<time>)")
    s.add_argument("--formats", default="savedmodel,keras", help="savedmodel, keras or both (comma separated)")
    s.add_argument("--json", action="store_true", help="print the export's result as JSON")
    s = add("restore", cmd_restore, "start a new attempt of the run from a checkpoint step")
    s.add_argument("run")
    s.add_argument("--step", type=int, required=True, help="a complete checkpoint step (see checkpoints RUN)")
