"""The gathered row of a fit script's or a custom loop's meeting, read by column name: the
harness's row schema (harness/rows.meeting_layout), values by backend/client/keras_metrics.py.

Pure: no TensorFlow. Rows are what every worker's all_gather returns: one per replica, so a
worker with two GPUs sends its row twice.
"""
from __future__ import annotations

import math

import pytest

from backend.client.harness.rows import meeting_layout
from backend.client.keras_metrics import VAL, choose, from_logs, global_values, per_worker

TASKS = ("chief-0", "worker-0")


def test_columns_name_every_metric_for_training_and_validation():
    cols = meeting_layout(("loss", "accuracy"))
    assert cols.cols == ("task_index", "step_time", "save_flag", "next_sync", "profile_steps",
                          "loss/total", "loss/count", "accuracy/total", "accuracy/count",
                          "val_loss/total", "val_loss/count", "val_accuracy/total",
                          "val_accuracy/count")
    row = cols.row(dict(task_index=1, step_time=0.01, save_flag=0, next_sync=40),
                   {"loss": (6.0, 8.0), "accuracy": (5.0, 8.0)})
    read = cols.read_tasks([row])[0]
    assert read.task_index == 1 and read["next_sync"] == 40 and read["step_time"] == 0.01
    assert read.state("accuracy") == (5.0, 8.0) and read.state("accuracy", VAL) == (0.0, 0.0)


def test_per_worker_is_own_state_and_global_is_summed_state_not_mean_of_workers():
    cols = meeting_layout(("loss", "accuracy"))
    # worker 1 saw three times the examples: the global value weights by count
    gathered = [cols.row(dict(task_index=0, step_time=0.01, save_flag=0, next_sync=10),
                         {"loss": (2.0, 4.0), "accuracy": (1.0, 4.0),
                          "val_loss": (3.0, 10.0), "val_accuracy": (7.0, 10.0)}),
                cols.row(dict(task_index=1, step_time=0.02, save_flag=1, next_sync=20),
                         {"loss": (12.0, 12.0), "accuracy": (12.0, 12.0)})]
    rows = cols.read_tasks(gathered + [gathered[1]])        # worker 1 has two replicas: same row twice
    assert [r.task_index for r in rows] == [0, 1]
    assert per_worker(rows, TASKS) == {"chief-0": {"loss": 0.5, "accuracy": 0.25},
                                       "worker-0": {"loss": 1.0, "accuracy": 1.0}}
    assert global_values(rows) == {"loss": 14.0 / 16.0, "accuracy": 13.0 / 16.0}
    # only the chief validated here: worker 1 has no val value, the global one is the chief's
    assert per_worker(rows, TASKS, VAL) == {"chief-0": {"val_loss": 0.3, "val_accuracy": 0.7},
                                            "worker-0": {}}
    assert global_values(rows, VAL) == {"val_loss": 0.3, "val_accuracy": 0.7}
    assert math.isnan(rows[1].value("accuracy", VAL))


def test_a_row_of_another_shape_is_refused_with_what_to_do():
    cols = meeting_layout(("loss",))
    with pytest.raises(ValueError, match="every worker must compile the same model"):
        cols.read_tasks([[0.0, 0.0, 0.0, 10.0, 1.0, 2.0]])


class _Metric:
    def __init__(self, name, mean=True):
        self.name = name
        if mean:
            self.total = self.count = 0.0


def test_metrics_without_total_and_count_are_global_only_and_bad_names_are_left_out():
    mean, only, left = choose([_Metric("accuracy"), _Metric("auc", mean=False), _Metric("loss"),
                               _Metric("x" * 61), _Metric("bad\x1bname")])
    assert list(mean) == ["loss", "accuracy"] and only == ["auc"]
    assert len(left) == 2 and "at most 64" in left[0] and "control" in left[1]
    assert from_logs({"auc": 0.8, "val_auc": 0.7, "accuracy": 0.9}, only) == {"auc": 0.8,
                                                                              "val_auc": 0.7}
