"""TensorBoard scalars for the chief, without the tensorboard package.

tf.summary.scalar needs tensorboard installed, which a worker host need not have; the summary
metadata it would attach is built here instead. Sync points are buffered and written about once
a second, all in one tf.function call: one call per sync point cost ~1 ms of the chief's time at
every sync point (bench/harness.md), which every worker then waited for in the next collective.
The writer flushes to disk every 2 s anyway, so TensorBoard sees points no later than before.

Tags: ``<metric>/<task>`` and ``<metric>/global`` for the loss and every job metric,
``step_time/<task>``, ``learning_rate/global``. Validation values go to their own run,
``tensorboard/validation/``, under the same tags without the ``val_`` prefix, so TensorBoard
draws training and validation loss on one chart (its convention, as Keras' callback does).
"""
from __future__ import annotations

import math
import time

import tensorflow as tf
from tensorflow.core.framework import summary_pb2

from .metric_line import LEARNING_RATE
from .rows import VAL_PREFIX

WRITE_EVERY_S = 1.0
MAX_TAG_SETS = 8      # traced write functions kept (one per tag set seen)
VALIDATION = "validation"   # the validation run's subfolder, TensorBoard's convention


def points(tasks, names, per_task: dict, glob: dict, step_times: dict | None = None) -> tuple[dict, dict]:
    """One sync step's (training, validation) points, whoever gathered them (the harness, the
    Keras callback, a custom loop): ``<name>/<task>`` and ``<name>/global`` for each name in
    ``names`` ("loss" and the job's metrics), NaN where a task has no value; validation values
    (``val_<name>``) under the same tags, for the validation run; ``step_time/<task>``;
    ``learning_rate/global``. The validation dict is empty when the step carries none."""
    def tags(prefix: str) -> dict:
        out = {}
        for name in names:
            out[f"{name}/global"] = glob.get(prefix + name, math.nan)
            for task in tasks:
                out[f"{name}/{task}"] = per_task.get(task, {}).get(prefix + name, math.nan)
        return out

    train = tags("")
    for task, seconds in (step_times or {}).items():
        train[f"step_time/{task}"] = seconds
    if LEARNING_RATE in glob:
        train[f"{LEARNING_RATE}/global"] = glob[LEARNING_RATE]
    has_val = any(VAL_PREFIX + name in glob for name in names)
    return train, (tags(VAL_PREFIX) if has_val else {})


def _scalar_metadata() -> bytes:
    meta = summary_pb2.SummaryMetadata()
    meta.plugin_data.plugin_name = "scalars"
    meta.data_class = summary_pb2.DATA_CLASS_SCALAR
    return meta.SerializeToString()


class ScalarWriter:
    """Scalars by tag; a point is ``{tag: value}`` at a step. Tags are known only as they
    appear (a job's metrics, a validation), so there is one traced write function per tag set,
    made the first time that set is written: a run has one or two sets, so it traces once or
    twice, not at every sync point."""

    def __init__(self, logdir: str):
        self.writer = tf.summary.create_file_writer(logdir, flush_millis=2000)
        self.points: list[tuple[int, dict]] = []
        self.written_at = time.monotonic()
        self._fns: dict[tuple, object] = {}
        self._meta = _scalar_metadata()

    def _fn(self, tags: tuple):
        if tags not in self._fns:
            if len(self._fns) >= MAX_TAG_SETS:   # a job whose tags keep changing: bounded
                self._fns.pop(next(iter(self._fns)))
            meta = self._meta

            # Any number of buffered points per call: one trace, a loop in the graph.
            @tf.function(input_signature=[tf.TensorSpec([None], tf.int64),
                                          tf.TensorSpec([None, len(tags)], tf.float32)])
            def write(steps, values):
                with self.writer.as_default():
                    for i in tf.range(tf.shape(steps)[0]):
                        for j, tag in enumerate(tags):
                            tf.summary.write(tag, values[i, j], step=steps[i], metadata=meta)

            self._fns[tags] = write
        return self._fns[tags]

    def write(self, step: int, values: dict) -> None:
        self.points.append((int(step), {str(k): float(v) for k, v in values.items()}))
        if time.monotonic() - self.written_at >= WRITE_EVERY_S:
            self.flush()

    def flush(self) -> None:
        # Consecutive points with the same tags go in one call.
        groups: list[tuple[tuple, list]] = []
        for step, values in self.points:
            tags = tuple(values)
            if not groups or groups[-1][0] != tags:
                groups.append((tags, []))
            groups[-1][1].append((step, [values[t] for t in tags]))
        for tags, points in groups:
            if tags:
                self._fn(tags)(tf.constant([s for s, _ in points], tf.int64),
                               tf.constant([v for _, v in points], tf.float32))
        self.points = []
        self.written_at = time.monotonic()

    def close(self) -> None:
        self.flush()
        self.writer.close()
