"""``RUN/train.json``: what this attempt trains (steps, epochs, workers, parameters, versions).

One writer, ``write``, which the chief calls from whichever kind of job it runs (the harness
session, ``tfconsole.KerasCallback``, ``tfconsole.Loop``); one reader, ``parse`` (``read`` for a
file on this host). The console reads the chief's copy for progress and ETA; export reads the
parameters a harness job trained with and which kind of script wrote the run. Standard library only.
"""
from __future__ import annotations

import json
import os
import time

from . import ckpt_index, layout

SOURCES = ("harness", "tfconsole.KerasCallback", "tfconsole.Loop")


def write(run_dir: str, *, source: str, run_id: str | None, attempt: int, total_steps: int | None,
          steps_per_epoch: int | None, epochs: int | None, start_step: int, tasks, params: dict,
          versions: dict, **extra) -> None:
    """The chief's record of this attempt, replaced atomically (a reader sees all or nothing)."""
    assert source in SOURCES, source
    ckpt_index.write_json_atomic(path(run_dir), {
        "run_id": run_id, "attempt": attempt, "total_steps": total_steps,
        "steps_per_epoch": steps_per_epoch, "epochs": epochs, "start_step": start_step,
        "num_workers": len(tasks), "tasks": list(tasks), "params": params, "time": time.time(),
        "versions": versions, "source": source, **extra})


def path(run_dir: str) -> str:
    return os.path.join(run_dir, layout.TRAIN_INFO)


def parse(text: str | bytes | None) -> dict | None:
    """The record, or None for nothing yet, a half-read or a damaged file."""
    try:
        info = json.loads(text) if text and text.strip() else None
    except ValueError:
        return None
    return info if isinstance(info, dict) else None


def read(run_dir: str) -> dict:
    """This host's copy; {} when there is none (a command job without the client, an old run)."""
    try:
        with open(path(run_dir), "rb") as fh:
            return parse(fh.read()) or {}
    except OSError:
        return {}
