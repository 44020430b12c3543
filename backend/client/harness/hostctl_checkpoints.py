"""hostctl's checkpoint commands and the chief's requests (declared in ``host_commands.py``):
list, hold, release, abandon and verify a checkpoint folder (``retention.py``; ``--dir`` is the
task's checkpoint folder, run-relative), export, and leave or answer a save-now or profile request
(``requests_dir.py``, ``profiling.py``). Each takes the parsed arguments and returns the JSON answer.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import time

from . import entry, layout, profiling, requests_dir, retention
from .host_commands import Refused, inside, number

SAVE_NAME = re.compile(r"^save-[A-Za-z0-9_-]{1,80}\.json$")
PROFILE_NAME = re.compile(r"^profile-[A-Za-z0-9_-]{1,80}\.json$")


def _held(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except retention.HoldError as err:
        raise Refused(str(err)) from None


def ckpt_list(a) -> dict:
    """Checkpoints users may pick (retention keeps them), each with the purposes holding it."""
    return {"checkpoints": retention.listed(inside(a.run, a.dir))}


def ckpt_abandoned(a) -> dict:
    """Checkpoints that restores moved aside."""
    return {"checkpoints": retention.list_abandoned(inside(a.run, a.dir))}


def ckpt_hold(a) -> dict:
    """Hold a step (``latest``: the newest, resolved now): {"hold", "step", ...}."""
    step = None if a.step == "latest" else number(a.step, "--step")
    return _held(retention.pin, inside(a.run, a.dir), step, purpose=a.purpose, ttl_s=a.ttl)


def ckpt_release(a) -> dict:
    return {"released": _held(retention.release, inside(a.run, a.dir), a.hold)}


def ckpt_abandon(a) -> dict:
    """Move checkpoints newer than ``--after`` aside (a restore), but never the one held."""
    return {"moved": _held(retention.abandon, inside(a.run, a.dir), a.after, a.tag, keep_hold=a.keep_hold)}


def ckpt_verify(a) -> dict:
    """Read ``--step``s of a checkpoint folder, newest first, with TensorFlow's checkpoint reader
    until one reads whole (export's ``--check``, a child: ``-S`` leaves TensorFlow out here):
    {"good": step or None, "damaged": {step: why}}. A resume asks before it picks a step."""
    argv = entry.argv("export", "--run-dir", a.run, "--check", inside(a.run, a.dir),
                      "--steps", ",".join(map(str, a.step)), site=True)
    return _tf_child(argv, "checkpoint check")


def export(a) -> dict:
    """Export a checkpoint in a child process: it loads TensorFlow, which ``-S`` leaves out, and
    its answer (the last stdout line, this protocol's JSON) becomes this one. Its stderr (a
    traceback) passes through, for the client's stderr tail."""
    argv = entry.argv("export", "--run-dir", a.run, "--formats", a.formats, site=True)
    # No job module (a command job): export builds the model from checkpoints/model.json.
    argv += ["--job", inside(a.run, a.job)] if a.job else []
    argv += (["--step", str(a.step)] if a.step is not None else []) + (["--name", a.name] if a.name else [])
    return _tf_child(argv, "export")


def _tf_child(argv: list, what: str) -> dict:
    """Run the export module; its answer (the last stdout line, this protocol's JSON) becomes this one."""
    child = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=entry.env())
    answer = _last_json(child.stdout.decode(errors="replace"))
    if child.returncode == 0 and answer is not None and "error" not in answer:
        return answer
    raise Refused((answer or {}).get("error") or f"{what} failed (exit {child.returncode})")


def _last_json(text: str) -> dict | None:
    """The last stdout line that is a JSON object (a job may print its own lines before it)."""
    for line in reversed(text.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def request_save(a) -> dict:
    """Leave a save-now request for the chief (``requests_dir.py``); written whole, then renamed."""
    kind = requests_dir.STOP if a.stop else "save-"   # save-stop-: save, then every worker exits
    return _leave_request(a.run, kind, {})


def _leave_request(run: str, kind: str, body: dict) -> dict:
    """A request file ``<kind><ms>-<pid>.json`` for the chief, written whole, then renamed in
    (the hidden .tmp name matches no request pattern: the chief never reads half a request)."""
    folder = os.path.join(run, layout.REQUESTS)
    os.makedirs(folder, exist_ok=True)
    name = f"{kind}{int(time.time() * 1000)}-{os.getpid()}.json"
    tmp = os.path.join(folder, f".{name}.tmp")
    with open(tmp, "w") as fh:
        json.dump(body, fh)
    os.replace(tmp, os.path.join(folder, name))
    return {"name": name}


def _answer_of(a, pattern: re.Pattern, kind: str):
    """The chief's answer to request ``a.name`` (its ``.done`` file); FileNotFoundError while it
    waits. Only a request's own name is read: never a path the caller made up."""
    if not pattern.match(a.name):
        raise Refused(f"{a.name!r} is not a {kind} request name")
    with open(os.path.join(a.run, layout.REQUESTS, a.name[:-len(".json")] + ".done")) as fh:
        return json.load(fh)


def save_done(a) -> dict:
    """The step a request was saved at, or None while it waits."""
    try:
        answer = _answer_of(a, SAVE_NAME, "save")
        if isinstance(answer, dict) and answer.get("error"):
            # saved, but at a step the checkpoint list will never show (requests_dir.mark_failed)
            raise Refused(f"the job saved at step {answer.get('saved_step')} but the checkpoint "
                          f"list will never show it: {answer['error']}")
        return {"step": int(answer["step"])}
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return {"step": None}   # not answered yet, or its answer is still being renamed in


def request_profile(a) -> dict:
    """Leave a profile request for the chief (``profiling.py``); written whole, then renamed."""
    if not 1 <= a.steps <= profiling.MAX_STEPS:
        raise Refused(f"--steps {a.steps}: give 1 to {profiling.MAX_STEPS} steps")
    return _leave_request(a.run, profiling.PREFIX, {"steps": a.steps})


def profile_done(a) -> dict:
    """Where a profile request's window began (step, steps, folder), or step None while it waits."""
    try:
        answer = _answer_of(a, PROFILE_NAME, "profile")
        return {"step": int(answer["step"]), "steps": int(answer["steps"]), "dir": str(answer["dir"]),
                "error": answer.get("error")}
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return {"step": None}
