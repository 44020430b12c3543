"""Monitor's metric charts and last-values table, built from a store as the live panel builds
them: a chart per training metric with its validation twin on the same axes, the learning rate,
and names from the job's lines shown escaped."""
from __future__ import annotations

import json

from backend.watch.metrics import MetricsStore
from console import figures
from console.monitor_view import last_value_rows
from tests.watch.test_named_metrics import lines, store_of


def test_a_chart_per_training_metric_with_validation_dashed_on_the_same_axes():
    store = store_of(lines(range(1, 301), val_every=100))
    assert figures.chart_metrics(store) == ["loss", "accuracy"]      # val_loss joins loss's chart
    loss = figures.loss_figure(store)
    names = [t.name for t in loss.data]
    assert names == ["chief-0", "worker-1", "global (mean of workers)", "chief-0 (validation)",
                     "worker-1 (validation)", "global (validation)"]
    val = loss.data[-1]
    assert val.line.dash == "dash" and list(val.x) == [100, 200, 300]
    acc = figures.metric_figure(store, "accuracy")
    assert [t.name for t in acc.data] == ["chief-0", "worker-1", "global"]
    lr = figures.learning_rate_figure(store)
    assert list(lr.data[0].y)[-1] == 0.1 / 4


def test_the_last_values_table_has_a_row_per_worker_and_the_global_values():
    rows = last_value_rows(store_of(lines(range(1, 301), val_every=100)))
    assert [r["task"] for r in rows] == ["chief-0", "worker-1", "global"]
    assert rows[1]["accuracy"] == 0.403 and rows[2]["val_loss"] == 1.0003
    assert "learning_rate" not in rows[2]


def test_a_metric_named_like_html_is_shown_as_text():
    store = MetricsStore()
    store.add_many([{"task": "<b>w</b>", "step": 1, "loss": 1.0,
                     "metrics": {"<img src=x onerror=alert(1)>": 0.5}}])
    name = "<img src=x onerror=alert(1)>"
    fig = figures.metric_figure(store, name)
    text = json.dumps(fig.to_plotly_json(), default=str)
    assert "<img" not in text and "&lt;img src=x" in text
    assert fig.data[0].name == "&lt;b&gt;w&lt;/b&gt;"
