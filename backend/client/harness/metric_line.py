"""The metrics line: its fields, its name rules, and the one parser every reader uses.

Standard library only: the chief writes these lines on its host (report.py) and the console,
the keeper, the Runs page and the CLI read them back through ``parse``. One JSON object per
worker per sync point in RUN/metrics.jsonl::

    {"run_id", "attempt", "task", "step", "epoch", "time",
     "step_time", "examples_per_sec",          # timings (null where unknown)
     "input_wait", "first_batch",              # the harness's input checks (optional)
     "metrics": {"loss": 0.29, "accuracy": 0.91, "val_loss": 0.31, ...},   # this worker's
     "global":  {"loss": 0.28, "accuracy": 0.90, "val_loss": 0.30, "learning_rate": 0.001, ...},
     "left_out": ["m64", ...],                 # optional: names the writer left out (below)
     "blocked": {"save": 1.2, "validation": 3.4}}   # optional: seconds the chief's training
                                                    # stood still for these since its last line

What the values mean (docs/job-contract.md, "Metrics"): a worker's value is that worker's own
over the window since the previous line (its share of the data); a global value is computed
from every worker's summed metric state (sum of totals over sum of counts), never from Keras'
logged per-batch numbers under MultiWorkerMirroredStrategy (docs/facts.md #2). ``loss`` is a
metric name like any other. Lines written before (``loss`` and ``global_loss`` as top-level
fields, ``LEGACY``) read the same: ``parse`` and the columnar readers (watch/metrics.py,
watch/lines.py, through ``legacy_loss``) take the loss from either place.

Names are nested under "metrics"/"global", so a metric called "step" cannot clash with a line
field. A name is 1-64 printable characters; a line carries at most MAX_NAMES of them. The writer
never refuses a line, so a script's metrics never end its training: it keeps the
first MAX_NAMES usable names in the order given (the loss first), leaves out the rest (a bad
name, a value that is not a number, a name past the limit), prints once why, and lists each
name it left out in ``left_out`` on the first line of that task that left it out (at most
MAX_NAMES a task), so Monitor can say it too. Readers skip a bad entry (and count it), so a
hand-written line can never break a reader; a line without ``left_out`` reads as before.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

LOSS = "loss"
LEARNING_RATE = "learning_rate"
NAME_MAX = 64
MAX_NAMES = 64      # per line and per worker; a run's store keeps at most MAX_NAMES names too
# Top-level fields a line may carry; "metrics" and "global" hold the named values.
FIELDS = ("run_id", "attempt", "task", "step", "epoch", "time",
          "step_time", "examples_per_sec", "input_wait", "first_batch", "metrics", "global",
          "left_out", "blocked")
FLOATS = ("time", "step_time", "examples_per_sec", "input_wait", "first_batch")   # numbers or null
MINE, GLOBAL = "metrics", "global"     # the named values: this worker's, and global
LEFT_OUT = "left_out"                  # names the writer left out (kept, module docstring)
# Older lines' top-level loss fields, and where their value lives now.
LEGACY = {LOSS: (MINE, LOSS), "global_loss": (GLOBAL, LOSS)}
BLOCKED = "blocked"                    # {kind: seconds} training stood still since the last line
BLOCKED_KINDS = ("save", "validation")  # checkpoint saves (every kind), validation (harness, fit)


def name_problem(name) -> str | None:
    """Why ``name`` cannot be a metric name, or None when it can."""
    if not isinstance(name, str):
        return f"a metric name must be a string, not {type(name).__name__}"
    if not name:
        return "a metric name must not be empty"
    if len(name) > NAME_MAX:
        return f"metric name {name[:20]!r}... is {len(name)} characters (at most {NAME_MAX})"
    if not name.isprintable():
        return f"metric name {name!r} holds control characters"
    return None


def kept(values, *, limit: int = MAX_NAMES) -> tuple[dict[str, float], list[tuple[str, str]]]:
    """The writer's sort, which never raises: the first ``limit`` usable ``{name: float}`` of
    ``values`` in the order given, and ``(name as shown, why)`` for each entry left out (a bad
    name, a value that is not a number, a name past ``limit``). NaN and Inf are kept (the
    console flags them). A script's metrics must never end its training."""
    if values is None:
        return {}, []
    if not isinstance(values, Mapping):
        return {}, [(type(values).__name__, "not a dict of metric name -> number")]
    out, left = {}, []
    for name, value in values.items():
        problem = name_problem(name)
        number = None if problem else as_number(value)
        if problem:
            left.append((shown(name), problem))
        elif number is None:
            left.append((name, f"{type(value).__name__}, not a number"))
        elif len(out) >= limit:
            left.append((name, f"past the first {limit} names of a line"))
        else:
            out[name] = number
    return out, left


def as_number(value) -> float | None:
    """``value`` as a float, or None for anything that is not one number: text, a bool, None, an
    array of several values, an integer no float holds."""
    if isinstance(value, (bool, str, bytes)) or not hasattr(value, "__float__"):
        return None
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return None


def shown(name) -> str:
    """A name as a log line or a metrics line can carry it: printable, at most NAME_MAX + 3."""
    if not isinstance(name, str):
        return f"<{type(name).__name__}>"
    text = name if name.isprintable() else repr(name)[1:-1]
    return text if len(text) <= NAME_MAX else text[:NAME_MAX] + "..."


def named(values) -> tuple[dict[str, float], int]:
    """The reader's side: the usable ``{name: float}`` of a line's "metrics"/"global" and the
    number of entries skipped (bad name, not a number, past MAX_NAMES). Never raises."""
    if not isinstance(values, dict):
        return {}, 0 if values is None else 1
    out, skipped = {}, 0
    for name, value in values.items():
        if (len(out) >= MAX_NAMES or name_problem(name)
                or isinstance(value, bool) or not isinstance(value, (int, float))):
            skipped += 1
            continue
        try:
            out[name] = float(value)
        except OverflowError:   # an integer no float holds
            skipped += 1
    return out, skipped


def left_out(value) -> list[str]:
    """The reader's side of ``left_out``: its names, shown printable, at most MAX_NAMES; [] for
    a line without it or with anything but a list there. Never raises."""
    if not isinstance(value, list):
        return []
    return [shown(name) for name in value[:MAX_NAMES] if isinstance(name, str)]


@dataclass(frozen=True)
class Line:
    """One parsed line. ``metrics``/``global_`` always hold "loss" when the line has one."""
    task: str
    step: int
    attempt: int = 0
    epoch: int | None = None
    time: float = math.nan
    metrics: dict = field(default_factory=dict)
    global_: dict = field(default_factory=dict)
    step_time: float = math.nan
    examples_per_sec: float = math.nan
    input_wait: float = math.nan   # share of the window since the last line spent waiting for input
    skipped: int = 0        # named entries that were not usable
    blocked: dict = field(default_factory=dict)   # kind -> seconds since the last line (BLOCKED)


STEP_BOUND = 2 ** 62   # |step| and |attempt| below it: readers hold them in int64 beside a sentinel


def whole(value) -> bool:
    """An int (not a bool, not a float) within STEP_BOUND: what a step and an attempt must be."""
    return type(value) is int and abs(value) < STEP_BOUND


def usable(obj) -> bool:
    """The one rule every reader (``parse``, watch/metrics.py's columns, watch/lines.py's arrow
    path) applies to a line: an object whose task is a string and whose step is ``whole``."""
    return isinstance(obj, dict) and type(obj.get("task")) is str and whole(obj.get("step"))


def parse(obj) -> Line | None:
    """A parsed line, or None where ``obj`` is not ``usable``."""
    if not usable(obj):
        return None
    task, step = obj["task"], obj["step"]
    mine, bad_mine = named(obj.get(MINE))
    glob, bad_glob = named(obj.get(GLOBAL))
    mine, glob = _legacy(mine, obj, MINE), _legacy(glob, obj, GLOBAL)
    attempt, epoch = obj.get("attempt"), obj.get("epoch")
    return Line(task=task, step=step, attempt=attempt if whole(attempt) else 0,
                epoch=epoch if type(epoch) is int else None,
                time=_float(obj.get("time"), math.nan), metrics=mine, global_=glob,
                step_time=_float(obj.get("step_time"), math.nan),
                examples_per_sec=_float(obj.get("examples_per_sec"), math.nan),
                input_wait=_share(obj.get("input_wait")),
                skipped=bad_mine + bad_glob, blocked=_blocked(obj.get(BLOCKED)))


def _share(value) -> float:
    """A share in 0..1, else NaN (not measured, or not sense)."""
    share = _float(value, math.nan)
    return share if share is not None and 0.0 <= share <= 1.0 else math.nan


def _blocked(value) -> dict:
    """The known kinds' finite, non-negative seconds; anything else is left out."""
    if not isinstance(value, dict):
        return {}
    out = {}
    for kind in BLOCKED_KINDS:
        seconds = _float(value.get(kind))
        if seconds is not None and math.isfinite(seconds) and seconds >= 0:
            out[kind] = seconds
    return out


def _legacy(values: dict, obj: dict, key: str) -> dict:
    """``values`` with an older line's top-level loss (LEGACY) first, where it has none itself."""
    for old, (where, name) in LEGACY.items():
        value = _float(obj.get(old)) if where == key and name not in values else None
        if value is not None:
            values = {name: value, **values}
    return values


def _float(value, default=None):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    try:
        return float(value)
    except OverflowError:
        return default


def mean_of_workers(per_task: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Global values where only each worker's own value is known: per name that every worker
    has, the mean over workers. Equal to the summed-state value when every worker saw an equal
    share of examples in the window (sharded batches of one size, as harness jobs and Keras'
    distributed datasets give); a script that has the summed state passes global values. A name
    whose value is not a number on some worker has none (the writer says why)."""
    rows = [r for r in per_task.values() if r]
    if not rows:
        return {}
    out = {}
    for name in rows[0]:
        values = [as_number(r[name]) if name in r else None for r in rows]
        if None not in values:
            out[name] = sum(values) / len(values)
    return out


def from_state(total: float, count: float) -> float:
    """A mean metric's value from its (summed) state: NaN where nothing was counted."""
    return total / count if count > 0 else math.nan


def direction(name: str) -> str | None:
    """Which way is better for a metric, by its name as Keras names them: "min" for losses and
    errors, "max" for accuracy-like metrics, None where a name says nothing (the learning rate,
    a custom metric): such a metric has a last value but no "best"."""
    base = name.removeprefix("val_").lower()
    if any(w in base for w in ("loss", "error", "mse", "mae", "perplexity")):
        return "min"
    if any(w in base for w in ("acc", "auc", "precision", "recall", "f1", "iou")):
        return "max"
    return None


def first_nonfinite(line: Line) -> tuple[str, float] | None:
    """The first NaN/Inf of a line, as ("loss" or "<task> <metric>" or "global <metric>", value):
    the global loss first, then the worker's values, then the other global values."""
    if LOSS in line.global_ and not math.isfinite(line.global_[LOSS]):
        return LOSS, line.global_[LOSS]
    for name, value in line.metrics.items():
        if not math.isfinite(value):
            return f"{line.task} {name}", value
    for name, value in line.global_.items():
        if not math.isfinite(value):
            return f"global {name}", value
    return None
