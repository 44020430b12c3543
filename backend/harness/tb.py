"""TensorBoard scalars for the chief, without the tensorboard package.

tf.summary.scalar needs tensorboard installed, which a worker host need not have; the summary
metadata it would attach is built here instead. Sync points are buffered and written about once
a second, all in one tf.function call: one call per sync point cost ~1 ms of the chief's time at
every sync point (bench/harness.md), which every worker then waited for in the next collective.
The writer flushes to disk every 2 s anyway, so TensorBoard sees points no later than before.
"""
from __future__ import annotations

import time

import tensorflow as tf
from tensorflow.core.framework import summary_pb2

WRITE_EVERY_S = 1.0


def _scalar_metadata() -> bytes:
    meta = summary_pb2.SummaryMetadata()
    meta.plugin_data.plugin_name = "scalars"
    meta.data_class = summary_pb2.DATA_CLASS_SCALAR
    return meta.SerializeToString()


class ScalarWriter:
    def __init__(self, logdir: str, tags: list[str]):
        self.tags = list(tags)
        self.writer = tf.summary.create_file_writer(logdir, flush_millis=2000)
        self.steps: list[int] = []
        self.rows: list[list[float]] = []
        self.written_at = time.monotonic()
        meta = _scalar_metadata()

        # Any number of buffered points per call: one trace, a loop in the graph.
        @tf.function(input_signature=[tf.TensorSpec([None], tf.int64),
                                      tf.TensorSpec([None, len(self.tags)], tf.float32)])
        def write(steps, values):
            with self.writer.as_default():
                for i in tf.range(tf.shape(steps)[0]):
                    for j, tag in enumerate(self.tags):
                        tf.summary.write(tag, values[i, j], step=steps[i], metadata=meta)

        self._write = write
        write.get_concrete_function()   # traced now, at start-up, not in the training loop

    def write(self, step: int, values: list[float]) -> None:
        self.steps.append(int(step))
        self.rows.append([float(v) for v in values])
        if time.monotonic() - self.written_at >= WRITE_EVERY_S:
            self.flush()

    def flush(self) -> None:
        if self.steps:
            self._write(tf.constant(self.steps, tf.int64), tf.constant(self.rows, tf.float32))
            self.steps, self.rows = [], []
        self.written_at = time.monotonic()

    def close(self) -> None:
        self.flush()
        self.writer.close()
