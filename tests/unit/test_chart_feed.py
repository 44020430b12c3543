"""Live charts send each browser only the new points (console/chart_feed.py)."""
from __future__ import annotations

import os

import numpy as np
import pytest

from backend.watch.metrics import MetricsStore
from console import figures
from console.chart_feed import DELTA, FULL, SAME, ChartFeed, stable_thin
from tests.conftest import ROOT


def _figure(store: MetricsStore, **kw) -> dict:
    fig = figures.loss_figure(store, thin=stable_thin, **kw)
    return {"data": [t.to_plotly_json() for t in fig.data], "layout": {"title": "Loss"}}


def _add(store: MetricsStore, tasks: list[str], steps, loss=None) -> None:
    """Rows as the harness writes them: the chief's (worker-0) also carry the global loss."""
    for task in tasks:
        for s in steps:
            value = float(loss if loss is not None else 1.0 / (1 + s))
            row = {"task": task, "step": int(s), "time": float(s), "step_time": 0.01,
                   "examples_per_sec": 100.0, "loss": value}
            store.add({**row, "global_loss": value} if task == "worker-0" else row)


class Browser:
    """What the component's JavaScript does with each message (console/live_chart.py)."""

    def __init__(self) -> None:
        self.seq, self.data = None, None

    def apply(self, msg: dict) -> bool:
        """False where the real chart would ask for a resync."""
        if msg["op"] == FULL:
            self.seq, self.data = msg["seq"], [dict(t) for t in msg["data"]]
            return True
        if self.seq == msg["seq"]:
            return True
        if msg["op"] != DELTA or self.seq != msg["base"]:
            return False
        for trace, d in zip(self.data, msg["traces"]):
            trace.update(d.get("style", {}))
            end = d["drop"] + d["keep"]
            trace["x"] = trace["x"][d["drop"]:end] + d["x"]
            trace["y"] = trace["y"][d["drop"]:end] + d["y"]
        self.seq = msg["seq"]
        return True

    def lines(self) -> dict:
        return {t["name"]: (t["x"], t["y"]) for t in self.data}


def _expected(figure: dict) -> dict:
    return {t["name"]: (np.asarray(t["x"]).tolist(),
                        [None if not np.isfinite(v) else v for v in np.asarray(t["y"], float).tolist()])
            for t in figure["data"]}


def test_the_first_message_is_whole_then_only_new_points_travel():
    store, feed, browser = MetricsStore(), ChartFeed(), Browser()
    _add(store, ["worker-0", "worker-1"], range(0, 100))
    first = feed.update(_figure(store))
    assert first["op"] == FULL and browser.apply(first)
    assert feed.sent_points == 3 * 100                      # two workers and the global line
    _add(store, ["worker-0", "worker-1"], range(100, 110))
    fig = _figure(store)
    msg = feed.update(fig)
    assert msg["op"] == DELTA and msg["base"] == first["seq"]
    assert [t["keep"] for t in msg["traces"]] == [100, 100, 100]
    assert feed.sent_points == 3 * 10                       # only the ten new steps
    assert browser.apply(msg) and browser.lines() == _expected(fig)


def test_nothing_new_sends_no_points():
    store, feed = MetricsStore(), ChartFeed()
    _add(store, ["worker-0"], range(50))
    first = feed.update(_figure(store))
    again = feed.update(_figure(store))
    assert again == {"op": SAME, "seq": first["seq"], "layout": {"title": "Loss"}}
    assert feed.sent_points == 0


def test_a_rewound_run_and_new_smoothing_resend_what_changed():
    store, feed, browser = MetricsStore(), ChartFeed(), Browser()
    _add(store, ["worker-0"], range(100))
    browser.apply(feed.update(_figure(store)))
    smoothed = _figure(store, smoothing=0.6)
    msg = feed.update(smoothed)
    assert msg["op"] == DELTA and msg["traces"][0]["keep"] < 5   # nearly every point changed
    assert browser.apply(msg) and browser.lines() == _expected(smoothed)
    store.add({"task": "worker-0", "step": 40, "time": 1.0, "loss": 9.0, "attempt": 2})
    rewound = _figure(store, smoothing=0.6)
    assert browser.apply(feed.update(rewound)) and browser.lines() == _expected(rewound)
    assert browser.lines()["worker-0"][0][-1] == 40 and len(browser.lines()["worker-0"][0]) == 41


def test_a_restyled_line_keeps_its_points():
    """The step-time chart names and thickens the slowest worker, who changes now and then."""
    def fig(slowest: int, n: int) -> dict:
        return {"data": [{"name": f"w{i}" + (" (slowest)" if i == slowest else ""),
                          "line": {"width": 3.0 if i == slowest else 1.2},
                          "x": np.arange(n), "y": np.ones(n) * i} for i in range(2)], "layout": {}}
    feed, browser = ChartFeed(), Browser()
    browser.apply(feed.update(fig(0, 50)))
    msg = feed.update(fig(1, 52))
    assert msg["op"] == DELTA and feed.sent_points == 4
    assert [t.get("style", {}).get("name") for t in msg["traces"]] == ["w0", "w1 (slowest)"]
    assert browser.apply(msg) and browser.lines() == {"w0": (list(range(52)), [0.0] * 52),
                                                      "w1 (slowest)": (list(range(52)), [1.0] * 52)}
    assert browser.data[1]["line"] == {"width": 3.0}


def test_a_new_line_sends_the_figure_whole():
    store, feed = MetricsStore(), ChartFeed()
    _add(store, ["worker-0"], range(10))
    feed.update(_figure(store))
    _add(store, ["worker-1"], range(10))
    assert feed.update(_figure(store))["op"] == FULL


def test_a_browser_that_holds_something_else_asks_and_gets_the_whole_figure():
    """A chart remounted (the operator came back to Monitor) holds nothing: the delta does not
    apply, it asks for a resync, and the next message is whole."""
    store, feed = MetricsStore(), ChartFeed()
    _add(store, ["worker-0"], range(10))
    feed.update(_figure(store))
    _add(store, ["worker-0"], range(10, 20))
    fresh = Browser()
    assert not fresh.apply(feed.update(_figure(store)))
    msg = feed.update(_figure(store), resync="none>2@1")
    assert msg["op"] == FULL and fresh.apply(msg)
    assert feed.update(_figure(store), resync="none>2@1")["op"] == SAME   # asked once, answered once


def test_a_rolling_window_sends_the_new_samples_and_how_many_left():
    """GPU charts show the last samples only: the oldest leave as new ones come."""
    def gpu(t0: int, t1: int) -> dict:
        times = np.arange(t0, t1).astype("datetime64[s]")
        return {"data": [{"name": "host GPU 0", "x": times, "y": np.arange(t0, t1) % 7 * 10.0}],
                "layout": {}}
    feed, browser = ChartFeed(), Browser()
    browser.apply(feed.update(gpu(0, 100)))
    msg = feed.update(gpu(3, 103))
    assert msg["op"] == DELTA and msg["traces"][0]["drop"] == 3 and msg["traces"][0]["keep"] == 97
    assert feed.sent_points == 3
    assert browser.apply(msg)
    assert browser.lines()["host GPU 0"][0] == [t * 1000 for t in range(3, 103)]   # epoch ms


def test_nan_travels_as_a_gap():
    store, feed = MetricsStore(), ChartFeed()
    _add(store, ["worker-0"], range(5))
    _add(store, ["worker-0"], [5], loss=float("nan"))
    msg = feed.update(_figure(store))
    assert msg["data"][0]["y"][-1] is None


def test_stable_thin_keeps_closed_buckets_as_the_line_grows():
    rng = np.random.default_rng(0)
    x = np.arange(10_000)
    y = rng.normal(size=len(x))
    y[1234] = 50.0                                             # a spike
    a = stable_thin(x[:9_000], y[:9_000], 2000)
    b = stable_thin(x, y, 2000)
    assert len(a) == 2 and len(a[0]) <= 2000 and len(b[0]) <= 2000
    assert 50.0 in a[1] and 50.0 in b[1]
    # same stride (8 steps a bucket for both lengths): all but the last bucket are unchanged
    assert list(a[0][:-2]) == list(b[0][:len(a[0]) - 2])
    assert list(a[1][:-2]) == list(b[1][:len(a[1]) - 2])
    short_x, short_y = stable_thin(x[:500], y[:500], 2000)
    assert list(short_x) == list(x[:500])                      # short lines are not thinned


def test_stable_thin_leaves_a_gap_for_a_bucket_of_nan():
    x = np.arange(5000)
    y = np.ones(len(x))
    y[16:32] = np.nan                                          # a whole bucket (stride 8 here)
    _, ys = stable_thin(x, y, 2000)
    assert np.isnan(ys).any() and np.nanmax(ys) == 1.0


@pytest.mark.parametrize("n", [2001, 4000, 4001, 100_000])
def test_stable_thin_stays_within_its_budget(n):
    xs, ys = stable_thin(np.arange(n), np.zeros(n), 2000)
    assert len(xs) == len(ys) <= 2000 and xs[0] == 0 and xs[-1] == n - 1


def test_a_static_folder_that_cannot_be_written_is_a_clear_error(tmp_path, monkeypatch):
    from console.ui import live_chart
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setattr(live_chart, "STATIC", blocker / "static")
    live_chart.plotly_js_problem.cache_clear()
    try:
        problem = live_chart.plotly_js_problem()
    finally:
        live_chart.plotly_js_problem.cache_clear()
    assert problem.startswith("Charts unavailable: plotly.js could not be copied into")
    assert problem.endswith("Make that folder writable, then restart the console.")


def test_plotly_js_is_served_from_the_installed_plotly():
    import plotly
    from console.ui import live_chart
    served = live_chart.ensure_plotly_js()
    assert served == ROOT / "console" / "static" / "plotly.min.js"   # next to app.py: Streamlit serves it
    source = os.path.join(os.path.dirname(plotly.__file__), "package_data", "plotly.min.js")
    assert served.read_bytes() == open(source, "rb").read()
