"""Metrics lines and Save-now requests, in the files the console already reads (stdlib only)."""
from __future__ import annotations

import atexit
import math
import os
import sys

from .harness import ckpt_index, layout, metric_line, requests_dir
from .harness.chief_writer import ChiefWriter
from .harness.report import BLOCKED  # noqa: F401 (the Keras callback and Loop add their saves and validation)
from .context import Context, from_env

_state: dict = {"ctx": None, "writer": None, "seen": [], "told": set()}
# The same files under their other name: ``tfconsole`` on a host and in a job, ``backend.client``
# in the console's own processes. Both in one run's process would keep two states (two Save-now
# request lists, two preemption watches): refused at the first use in a run.
_TWIN = ("backend.client." if __name__.startswith("tfconsole.") else "tfconsole.") + __name__.rpartition(".")[2]


def context() -> Context:
    """This process's place in the run (cached: the environment does not change)."""
    if _state["ctx"] is None:
        ctx = from_env()
        if ctx.in_run and _TWIN in sys.modules:
            raise ImportError(f"tfconsole is imported twice in this process, as {__name__} and {_TWIN}: "
                              "import it only as `tfconsole` in a job script")
        _state["ctx"] = ctx
    return _state["ctx"]


def _writer(ctx: Context):
    """The chief's writer (harness/chief_writer.py: the harness writes through the same one)."""
    if _state["writer"] is None:
        _state["writer"] = ChiefWriter(ctx.run_dir, ctx.run_id or "", ctx.attempt)
        atexit.register(close)   # a loop's script ends normally: its last second of points too
    return _state["writer"]


def report(step: int, loss: float | None = None, *, epoch: int = 1,
           losses: dict | None = None, step_time: float | dict | None = None,
           examples_per_sec: float | dict | None = None, metrics: dict | None = None,
           global_metrics: dict | None = None) -> bool:
    """Record ``loss`` (this worker's own mean loss since the last report) at ``step``.

    The chief writes RUN/metrics.jsonl, which the console tails. Other workers write nothing:
    their host may not be the chief's. To show every worker's curve, gather the workers' losses
    (the Keras callback does) and pass ``losses={task: loss}`` on the chief. Returns whether a
    line was written; outside a run, nothing is written and it returns False. ``step_time``
    (seconds per step) and ``examples_per_sec`` may be one figure or one per task.

    Named metrics besides the loss: ``metrics={"accuracy": 0.9}`` with ``loss=``, or
    ``metrics={task: {"accuracy": 0.9}}`` with ``losses=``; ``global_metrics={name: value}``
    (the learning rate, or values from summed state); without it each name's global value is
    the mean over workers (metric_line.mean_of_workers). Names: 1-64 printable characters, at
    most 64 per line, the loss first. Nothing here ends training: a name or value
    that cannot be carried is left out, and the task's log (and Monitor) says once which and
    why; a call that can make no line (a step that is not a whole number) writes none, says so
    once and returns False.
    """
    ctx = context()
    if not ctx.in_run or not ctx.is_chief:
        return False
    if _whole(step) is None or _whole(epoch) is None:
        _say_once(ctx, f"step={step!r}, epoch={epoch!r}: no metrics line without a whole step "
                  "and epoch; pass the number of steps done (an int)")
        return False
    values = _losses(ctx, loss, losses)
    given = _per_task(ctx, metrics, values, single=not isinstance(losses, dict) or not losses)
    # The loss is a metric like any other from here on, and the first of its line (metric_line.py).
    per_task = {t: {metric_line.LOSS: v, **given.get(t, {})} for t, v in values.items()}
    if global_metrics is not None and not isinstance(global_metrics, dict):
        _say_once(ctx, "global_metrics= is a dict of metric name -> number, not "
                  f"{type(global_metrics).__name__}: left out")
        global_metrics = None
    glob = {**metric_line.mean_of_workers(per_task), **(global_metrics or {})}
    tasks = [t for t in ctx.tasks if t in values] + [t for t in values if t not in ctx.tasks]
    _writer(ctx).write(step, epoch, tasks, per_task, glob, {t: {
        "step_time": _nan(_of(step_time, t)), "examples_per_sec": _nan(_of(examples_per_sec, t))} for t in tasks})
    return True


def _whole(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


def _say_once(ctx: Context, text: str) -> None:
    """One line in the task's log (stderr) per distinct problem: a report made every step must
    not fill the log with it."""
    if text not in _state["told"] and len(_state["told"]) < 100:
        _state["told"].add(text)
        print(f"[{ctx.task}] tfconsole.report: {text}; training goes on", file=sys.stderr, flush=True)


def _losses(ctx: Context, loss, losses) -> dict:
    """{task: loss} from ``losses=`` or ``loss=``; a loss that is no number is left out by the
    writer, which says so."""
    if losses is not None and not isinstance(losses, dict):
        _say_once(ctx, f"losses= is a dict of task -> loss, not {type(losses).__name__}: "
                  "loss= is used instead")
    return dict(losses) if isinstance(losses, dict) and losses else {ctx.task: loss}


def _per_task(ctx: Context, metrics, losses: dict, *, single: bool) -> dict:
    """``metrics`` as {task: {name: value}} whichever form it was given in; a form that fits
    neither is left out (said once)."""
    if not metrics:
        return {}
    if not isinstance(metrics, dict):
        _say_once(ctx, "metrics= is a dict of metric name -> number, not "
                  f"{type(metrics).__name__}: left out")
        return {}
    if single:
        return {ctx.task: metrics}
    unknown = [t for t in metrics if t not in losses]
    if unknown or not all(isinstance(v, dict) for v in metrics.values()):
        _say_once(ctx, "with losses={task: loss}, give metrics={task: {name: value}} for the same "
                  f"tasks (got {sorted(map(str, metrics))[:5]}): metrics= left out")
        return {}
    return metrics


def _of(value, task: str):
    return value.get(task) if isinstance(value, dict) else value


def _nan(value) -> float:
    number = metric_line.as_number(value)
    return math.nan if number is None else number


def should_save() -> bool:
    """True on the chief when the console's Save now is waiting (RUN/requests/save-*.json).

    Only the chief sees requests_dir. In a multi-worker job every worker must save at the same
    step (a save skipped by one worker can deadlock the others): carry this flag in a
    collective, as the Keras callback does, and call ``saved(step)`` on the chief afterwards.
    """
    return bool(save_requests())


def save_requests() -> list:
    """The Save-now requests waiting (the chief's; none elsewhere), kept for ``saved``."""
    ctx = context()
    _state["seen"] = requests_dir.pending(ctx.run_dir) if ctx.in_run and ctx.is_chief else []
    return _state["seen"]


def saved(step: int) -> bool:
    """Answer the Save-now requests that ``should_save`` saw with ``step``, once the checkpoint
    list shows it (``ckpt-<step>`` complete in ``checkpoint_dir()``: ``.index`` and
    ``.meta.json``). A step the list will never show is answered with an error that says why
    (the console's Save now shows it) and printed here; returns whether the step is listed."""
    ctx = context()
    if not (ctx.in_run and ctx.is_chief and _state["seen"]):
        _state["seen"] = []
        return False
    problem = unlisted_reason(step)
    if problem is None:
        requests_dir.mark_done(_state["seen"], step)
    else:
        print(f"[{ctx.task}] tfconsole: Save now NOT answered with step {step}: {problem}",
              flush=True)
        requests_dir.mark_failed(_state["seen"], step, problem)
    _state["seen"] = []
    return problem is None


def unlisted_reason(step: int) -> str | None:
    """None when ``ckpt-<step>`` is listed in this worker's checkpoint folder; else why not."""
    directory = checkpoint_dir()
    if directory is None:
        return "not in a console run"
    if any(c["step"] == int(step) for c in ckpt_index.list_complete(directory)):
        return None
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        names = []
    stem = f"{ckpt_index.PREFIX}-{int(step)}."
    if any(n == stem + "index" for n in names):
        return (f"{directory}/{stem}index has no {stem}meta.json, which the list needs (it proves "
                "the save finished and holds the step's metrics): save through tfconsole.Loop "
                "(its save(), or a CheckpointManager given to it) or tfconsole.checkpoints.save")
    others = [n for n in names if n.endswith(".index")]
    return (f"no checkpoint {ckpt_index.PREFIX}-{int(step)} in {directory} (there: "
            f"{', '.join(others[-3:]) or 'no checkpoint at all'}); the list names checkpoints "
            f"{ckpt_index.PREFIX}-<step> in tfconsole.checkpoint_dir(): save there, numbered by the "
            "step (CheckpointManager.save(checkpoint_number=step), or tfconsole.Loop's save())")


def checkpoint_dir() -> str | None:
    """Where this worker writes checkpoints the console lists; None outside a run."""
    ctx = context()
    if not ctx.in_run:
        return None
    if ctx.is_chief:
        return os.path.join(ctx.run_dir, layout.CHECKPOINTS)
    return layout.worker_checkpoint_dir(ctx.run_dir, ctx.task)


def close() -> None:
    if _state["writer"] is not None:
        _state["writer"].close()
        _state["writer"] = None
