"""The Keras callback's metrics: which compiled metrics travel, the gathered row, and values.

Standard library at import (TensorFlow is imported inside the functions that read variables),
so the row helper can be tested without it.

A *mean metric* is one whose state is ``total`` and ``count`` (Keras' ``Mean`` and every
``MeanMetricWrapper``: the loss, accuracy, MAE, cross-entropies ...). Each worker sends, in the
one gather of a sync point, its own change of each mean metric's state since the last sync
(training) and, at an epoch end after validation, its own validation state. Then:

- a worker's value = its own ``Δtotal / Δcount`` (its share of the data, as the loss always was);
- the global value = ``Σ Δtotal / Σ Δcount`` over workers (``metric_line.from_state``): the
  value of the whole global batch, never Keras' logged per-batch numbers, which are N x the
  mean under MultiWorkerMirroredStrategy (docs/facts.md #2).

Any other metric (AUC, Precision, Recall: confusion-count state) is **global-only**: its value
is read from the epoch-end ``logs``, which Keras reduces across workers correctly at the epoch
end (checked for the loss, accuracy and val_*: docs/facts.md #18), and appears once per epoch,
with no per-worker value.
"""
from __future__ import annotations

import math
from .harness import metric_line, rows

VAL = rows.VAL_PREFIX
# Every mean metric is written as itself and as val_<name>, per worker and global; the global
# part also carries the global-only ones (and val_ of them) and the learning rate.
BUDGET = 31   # 2 x 31 + 1 = 63 names, under metric_line.MAX_NAMES (64) per line


def _line():
    return metric_line


# ---- the gathered row: harness/rows.meeting_layout, one schema with the harness's ------------------
def per_worker(rows: list, tasks: tuple, prefix: str = "") -> dict[str, dict[str, float]]:
    """{task: {prefix+name: own value}} for every mean metric with a count in the window."""
    out = {}
    for r in rows:
        out[tasks[r.task_index]] = {f"{prefix}{m}": r.value(m, prefix) for m in r.layout.metrics
                                    if r.state(m, prefix)[1] > 0}
    return out


def global_values(rows: list, prefix: str = "") -> dict[str, float]:
    """{prefix+name: Σtotal / Σcount} for every mean metric that some worker counted."""
    if not rows:
        return {}
    out = {}
    for m in rows[0].layout.metrics:
        total = sum(r.state(m, prefix)[0] for r in rows)
        count = sum(r.state(m, prefix)[1] for r in rows)
        if count > 0:
            out[f"{prefix}{m}"] = _line().from_state(total, count)
    return out


def counted(rows: list, metric: str, prefix: str = "") -> bool:
    return any(r.state(metric, prefix)[1] > 0 for r in rows)


# ---- which metrics --------------------------------------------------------------------------------
def flat_metrics(model) -> list:
    """The model's metric objects, containers opened (Keras 3 keeps the compiled ones in one
    ``CompileMetrics``), the first of each name."""
    out, seen = [], set()

    def walk(items):
        for m in items:
            inner = getattr(m, "metrics", None)
            if not (hasattr(m, "total") or hasattr(m, "count")) and isinstance(inner, (list, tuple)):
                walk(inner)
            elif getattr(m, "name", None) not in seen:
                seen.add(m.name)
                out.append(m)
    walk(list(getattr(model, "metrics", []) or []))
    return out


def is_mean(metric) -> bool:
    return hasattr(metric, "total") and hasattr(metric, "count")


def choose(metrics: list) -> tuple[dict, list[str], list[str]]:
    """({name: metric} of the mean metrics carried, [global-only names], [names left out and
    why]). The loss comes first; names whose ``val_`` form breaks metric_line's rules, and
    names past BUDGET, are left out (the caller prints them once)."""
    line = _line()
    mean, only, left = {}, [], []
    ordered = sorted(metrics, key=lambda m: m.name != line.LOSS)
    for m in ordered:
        problem = line.name_problem(m.name) or line.name_problem(VAL + m.name)
        if problem:
            left.append(f"{m.name!r} ({problem})")
        elif len(mean) + len(only) >= BUDGET:
            left.append(f"{m.name!r} (more than {BUDGET} metrics)")
        elif is_mean(m):
            mean[m.name] = m
        elif m.name != line.LOSS and m.name != line.LEARNING_RATE:
            only.append(m.name)
    return mean, only, left


# ---- reading state --------------------------------------------------------------------------------
def local_sum(strategy, var) -> float:
    """This worker's part of a sum-on-read metric variable, read with no collective."""
    import tensorflow as tf
    v = var if isinstance(var, tf.Variable) else getattr(var, "value", var)
    return sum(float(x.numpy()) for x in strategy.experimental_local_results(v))


def local_state(strategy, mean: dict) -> dict[str, tuple[float, float]]:
    """{name: (total, count)} of this worker's own metric state."""
    return {n: (local_sum(strategy, m.total), local_sum(strategy, m.count)) for n, m in mean.items()}


def delta(now: dict, before: dict) -> dict[str, tuple[float, float]]:
    """The change since ``before`` (both cumulative within one epoch)."""
    return {n: (t - before.get(n, (0.0, 0.0))[0], c - before.get(n, (0.0, 0.0))[1])
            for n, (t, c) in now.items()}


def from_logs(logs, names: list[str]) -> dict[str, float]:
    """Global-only metrics (and their val_ forms) from the epoch-end ``logs``."""
    out = {}
    for name in [n for base in names for n in (base, VAL + base)]:
        value = (logs or {}).get(name)
        try:
            out[name] = float(value)
        except (TypeError, ValueError):
            continue
    return out


def learning_rate(optimizer) -> float | None:
    """The learning rate the next step uses: a fixed rate, or a LearningRateSchedule evaluated
    at the optimizer's ``iterations`` (read from this worker's copy: no collective)."""
    if optimizer is None:
        return None
    rate = getattr(optimizer, "_learning_rate", None)
    try:
        if rate is None:
            rate = optimizer.learning_rate
        if callable(rate) and not hasattr(rate, "numpy"):   # a schedule, not a variable
            rate = rate(optimizer.iterations)
        value = float(getattr(rate, "numpy", lambda: rate)())
    except Exception:  # noqa: BLE001 - an optimizer without a readable rate: no figure
        return None
    return value if math.isfinite(value) else None
