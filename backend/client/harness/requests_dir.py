"""Save-now requests: files RUN/requests/save-<anything>.json, read by the chief only.

The chief raises a flag in the next sync all_gather when a request exists; every worker sees the
gathered flag and saves at that same step, so no worker ever waits on a save the others skip.
Then the chief answers each request it saw: ``save-<x>.json`` -> ``save-<x>.done`` holding
``{"step": S}`` (written atomically before the request is removed).
"""
from __future__ import annotations

import json
import os

from . import ckpt_index
from . import layout


def folder(run_dir: str) -> str:
    return os.path.join(run_dir, layout.REQUESTS)


def pending(run_dir: str) -> list[str]:
    """Request files waiting now, oldest name first."""
    try:
        names = os.listdir(folder(run_dir))
    except FileNotFoundError:
        return []
    return sorted(os.path.join(folder(run_dir), n) for n in names
                  if n.startswith("save-") and n.endswith(".json"))


STOP = "save-stop-"   # a save request that also stops the run (stop --save): preempt.py's path


def stop_requested(requests: list[str]) -> bool:
    return any(os.path.basename(r).startswith(STOP) for r in requests)


def done_path(request: str) -> str:
    return request[: -len(".json")] + ".done"


def mark_done(requests: list[str], step: int) -> None:
    for req in requests:
        try:
            with open(req) as fh:
                body = json.load(fh)
        except (OSError, ValueError):
            body = None   # content is optional; the file name is the request
        ckpt_index.write_json_atomic(done_path(req), {"step": int(step), "request": body})
        try:
            os.unlink(req)
        except FileNotFoundError:
            pass


def mark_failed(requests: list[str], step: int, reason: str) -> None:
    """Answer with an error: the script saved at ``step``, but the checkpoint list will never
    show it (``reason`` says why); the console's Save now raises it instead of a step."""
    for req in requests:
        ckpt_index.write_json_atomic(done_path(req), {"step": None, "saved_step": int(step),
                                                      "error": reason})
        try:
            os.unlink(req)
        except FileNotFoundError:
            pass
