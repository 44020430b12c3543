"""Input-bound and same-data diagnosis, as Monitor and ``status`` say it.

The harness measures both (``harness/step_probe.py``): each metrics line carries ``input_wait``,
the share of the last log_every window that worker spent waiting in ``next(iterator)``; the first
line of an attempt carries ``first_batch``, a hash of the worker's first batch. Identical hashes
on two workers mean they train on the same data; the chief also writes ``data_check.json`` then,
which ``status`` reads from its host.
"""
from __future__ import annotations

import json
import math

from backend.errors import ConsoleError
from backend.hosts import remote
from backend.hosts.tasks import RunOnHosts, task_host

WAIT_DOMINATES = 0.30   # a worker waiting for data this share of each step is input-bound
DATA_CHECK = "data_check.json"   # harness/step_probe.DATA_CHECK
SHARD_FIX = ("shard the dataset by input_context in make_dataset (ds.shard(ctx.num_input_pipelines, "
             "ctx.input_pipeline_id), or a slice per ctx.input_pipeline_id), or for a dataset that "
             "tf.distribute shards itself set options.experimental_distribute.auto_shard_policy "
             "(DATA or FILE, not OFF)")


def wait_caption(shares: dict[str, float]) -> str:
    """'waiting for data: worker-0 3 %, worker-1 61 %' ("" before any figure)."""
    known = {t: v for t, v in shares.items() if math.isfinite(v)}
    if not known:
        return ""
    return "waiting for data: " + ", ".join(f"{t} {100 * v:.0f} %" for t, v in known.items())


def input_bound_lines(shares: dict[str, float]) -> list[str]:
    """One line per worker whose wait for data dominates its step."""
    return [f"{task} waits for data {100 * v:.0f} % of each step: prefetch "
            "(ds.prefetch(tf.data.AUTOTUNE)), more parallel calls (map(..., num_parallel_calls="
            "tf.data.AUTOTUNE)) or a faster store."
            for task, v in shares.items() if math.isfinite(v) and v > WAIT_DOMINATES]


def same_data_line(groups: list[list[str]]) -> str:
    """The warning for workers whose first batches were identical ("" when none were)."""
    if not groups:
        return ""
    names = "; ".join(", ".join(g) for g in groups)
    return (f"Same data on several workers: the first batches of {names} are identical, so "
            f"they train on the same examples. Fix: {SHARD_FIX}.")


def recorded_groups(run: RunOnHosts) -> list[list[str]]:
    """The chief's data_check.json of this attempt: groups of tasks with identical data."""
    h = task_host(run.pool, run.cluster, run.task(run.state.chief.name))
    try:
        found = json.loads(remote.read_tail(h, DATA_CHECK, 1 << 16) or b"null")
    except ValueError:
        return []
    if not isinstance(found, dict) or found.get("attempt") != run.state.attempt:
        return []
    groups = found.get("same_data")
    return [[str(t) for t in g] for g in groups if isinstance(g, list)] if isinstance(groups, list) else []


def status_line(run: RunOnHosts) -> str:
    """For ``status``: the same-data warning, or "" (also when the chief cannot be read)."""
    try:
        return same_data_line(recorded_groups(run))
    except (ConsoleError, ValueError, TypeError):
        return ""
