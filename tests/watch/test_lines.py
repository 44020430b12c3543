"""Metric lines to columns: the pyarrow path and the standard-library path agree."""
from __future__ import annotations

import json

import numpy as np

from backend.metrics import MetricsStore
from backend.watch import lines as lines_mod
from backend.watch.lines import parse_metric_lines


def make(n):
    return [json.dumps({"task": f"worker-{i % 3}", "step": i // 3, "attempt": 0, "time": i,
                        "loss": 1.0 / (i + 1), "global_loss": None if i % 2 else 0.5,
                        "step_time": 0.1, "examples_per_sec": 10}).encode() for i in range(n)]


def test_arrow_and_json_paths_give_the_same_store(monkeypatch):
    data = make(6000)
    fast, bad = parse_metric_lines(data)
    assert bad == 0
    monkeypatch.setattr(lines_mod, "ARROW_MIN_LINES", 10 ** 9)
    slow, bad = parse_metric_lines(data)
    assert bad == 0
    a, b = MetricsStore(), MetricsStore()
    assert a.add_columns(fast) == b.add_columns(slow) == 6000
    for task in a.tasks():
        for field in ("step", "time", "loss", "step_time", "examples_per_sec"):
            np.testing.assert_array_equal(getattr(a.series(task), field),
                                          getattr(b.series(task), field))
    np.testing.assert_array_equal(a.global_loss()[1], b.global_loss()[1])


def test_a_bad_line_falls_back_and_is_counted():
    data = make(6000)
    data[100] = b"{torn"
    data[200] = b"[1, 2]"
    cols, bad = parse_metric_lines(data)
    assert bad == 2 and len(cols["task"]) == 5998


def test_a_missing_field_is_nan():
    data = [json.dumps({"task": "chief-0", "step": i}).encode() for i in range(6000)]
    cols, _ = parse_metric_lines(data)
    assert np.isnan(cols["loss"]).all() and (cols["attempt"] == 0).all()
