"""Figure builders: one trace per worker, WebGL, constant uirevision, downsampled."""
from __future__ import annotations

import numpy as np

from backend.watch.metrics import MetricsStore
from console.figures import (UIREVISION, compare_figure, loss_figure, step_time_figure,
                             throughput_figure)


def filled_store(workers=4, steps=5000):
    s = MetricsStore()
    for w in range(workers):
        task = "chief-0" if w == 0 else f"worker-{w}"
        s.add_many([{"task": task, "step": i, "attempt": 0, "time": float(i),
                     "loss": 2.0 / (i + 1) + 0.01 * w, "global_loss": 2.0 / (i + 1),
                     "step_time": 0.1 * (3 if w == 2 else 1), "examples_per_sec": 100.0}
                    for i in range(steps)])
    return s


def test_loss_figure_has_a_trace_per_worker_and_a_thick_global():
    fig = loss_figure(filled_store(), smoothing=0.6, max_points=500)
    names = [t.name for t in fig.data]
    assert names[:4] == ["chief-0", "worker-1", "worker-2", "worker-3"]
    assert names[4].startswith("global")
    assert all(t.type == "scattergl" for t in fig.data)
    assert fig.layout.uirevision == UIREVISION
    assert all(len(t.x) <= 500 for t in fig.data)
    assert fig.data[4].line.width > fig.data[0].line.width


def test_step_time_figure_marks_the_slowest_worker():
    fig = step_time_figure(filled_store())
    slow = [t for t in fig.data if "slowest" in t.name]
    assert len(slow) == 1 and slow[0].name.startswith("worker-2")
    assert slow[0].line.width > min(t.line.width for t in fig.data)
    assert "worker-2" in fig.layout.title.text
    assert fig.layout.uirevision == UIREVISION


def test_throughput_figure():
    fig = throughput_figure(filled_store(workers=3))
    assert [t.name for t in fig.data] == ["chief-0", "worker-1", "worker-2"]
    assert fig.layout.uirevision == UIREVISION


def test_empty_store_gives_empty_figures():
    s = MetricsStore()
    for build in (loss_figure, step_time_figure, throughput_figure):
        fig = build(s)
        assert len(fig.data) == 0 and fig.layout.uirevision == UIREVISION


def test_compare_figure():
    a = filled_store(workers=1).global_loss()
    b = (np.arange(100), np.linspace(1, 0, 100))
    fig = compare_figure(a, b, ("run-1", "run-2"), smoothing=0.5, max_points=300)
    assert [t.name for t in fig.data] == ["run-1", "run-2"]
    assert len(fig.data[0].x) <= 300 and len(fig.data[1].x) == 100
    assert fig.layout.uirevision == UIREVISION
