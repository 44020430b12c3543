"""Pure plotly figure builders for the monitor and runs pages (no Streamlit here).

Every figure keeps one constant ``uirevision`` so a user's zoom survives the live redraws, draws
with ``Scattergl`` (WebGL: dozens of workers stay smooth), and is downsampled here, on the server,
with MinMaxLTTB, so spikes survive and the browser gets at most ``max_points`` points per line.
Traces are given as plain dicts: plotly validates them once in ``go.Figure`` rather than twice.
"""
from __future__ import annotations

import html
from typing import Callable, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative

from backend.watch.metrics import MetricsStore, downsample, ema
from console import crowd

UIREVISION = "training-console"
PALETTE = qualitative.Plotly + qualitative.D3 + qualitative.Dark24 + qualitative.Light24
GLOBAL_COLOR = "#111111"
# How a line is cut to at most about n points: MinMaxLTTB by default; Monitor's live charts use
# chart_feed.stable_thin, whose points stay put as a line grows (only new points travel).
Thin = Callable[[np.ndarray, np.ndarray, int], tuple[np.ndarray, np.ndarray]]
# Task -> the step spans ``(after, up to]`` of attempts that task was not in (a host gone for good,
# a run that shrank: monitor_view.absent_spans). Its line has no point there and is broken across
# them: a line joining its last step before the gap to its first after would be drawn training
# that never happened.
Gaps = dict[str, list[tuple[float, float]]]


def loss_figure(store: MetricsStore, smoothing: float = 0.0, max_points: int = 2000, *,
                thin: Thin = downsample, show: list[str] | None = None, gaps: Gaps | None = None) -> go.Figure:
    """Each worker's own loss, thin, plus the global mean loss, thick, on top (and the
    validation loss, dashed, where the run validates)."""
    return metric_figure(store, "loss", smoothing, max_points, thin=thin, show=show, gaps=gaps)


def metric_figure(store: MetricsStore, name: str, smoothing: float = 0.0, max_points: int = 2000,
                  *, thin: Thin = downsample, show: list[str] | None = None,
                  gaps: Gaps | None = None) -> go.Figure:
    """One metric: each worker's own value, thin, the global value thick on top; its validation
    counterpart (``val_<name>``) on the same axes, dashed with markers (a point per validation).
    Past ``crowd.MANY`` workers: the band across workers, the odd ones out and the workers in
    ``show`` instead of every line. Names come from the job's lines: escaped, since plotly
    reads a few HTML tags in names. ``gaps``: where a worker was not in the run (``Gaps``)."""
    tasks = store.metric_tasks(name)
    traces = _worker_traces(store, name, tasks, smoothing, max_points, thin, show, gaps=gaps)
    gx, gy = store.metric(name)
    if len(gx):
        label = "global (mean of workers)" if name == "loss" else "global"
        traces.append(_line(label, *_smooth_thin(gx, gy, smoothing, max_points, thin), GLOBAL_COLOR,
                            width=3.5))
    val = f"val_{name}"
    if val in store.metric_names():
        val_tasks = store.metric_tasks(val)
        if len(val_tasks) <= crowd.MANY:   # a crowd's validation: its global value speaks for it
            for i, task in enumerate(val_tasks):
                x, y = store.metric(val, task)
                traces.append(_line(f"{task} (validation)", *_task_line(x, y, (gaps or {}).get(task),
                                                                        0.0, max_points, thin), _color(i),
                                    width=1.2, dash="dash", markers=True, group="validation"))
        vx, vy = store.metric(val)
        if len(vx):
            traces.append(_line("global (validation)", *thin(vx, vy, max_points), GLOBAL_COLOR,
                                width=3.0, dash="dash", markers=True))
    title = "Loss" if name == "loss" else html.escape(name)
    return _figure(traces, title=title, y_title=html.escape(name))


def _worker_traces(store: MetricsStore, name: str, tasks: list[str], smoothing: float,
                   max_points: int, thin: Thin, show: list[str] | None,
                   field: str | None = None, gaps: Gaps | None = None) -> list[dict]:
    """A line per worker; past crowd.MANY, the band plus the odd ones out and ``show``. A
    worker's ``gaps`` hold no point of it, and its line breaks there."""
    gaps = gaps or {}

    def values(task):
        if field is None:
            return store.metric(name, task)
        s = store.series(task)
        return s.step, getattr(s, field)
    if len(tasks) <= crowd.MANY:
        return [_line(task, *_task_line(*values(task), gaps.get(task), smoothing, max_points, thin), _color(i),
                      width=1.2, group="workers") for i, task in enumerate(tasks)]
    series = {t: _outside(*values(t), gaps.get(t)) for t in tasks}
    spread = crowd.band(series)
    last = {t: crowd.level(v) for t, (_, v) in series.items() if len(v)}
    picked = list(dict.fromkeys([*crowd.odd_ones(last), *(t for t in show or () if t in series)]))
    lo_x, lo = _smooth_thin(spread.step, spread.low, smoothing, max_points, thin)
    hi_x, hi = _smooth_thin(spread.step, spread.high, smoothing, max_points, thin)
    traces = [
        {"type": "scatter", "mode": "lines", "name": "lowest worker", "x": lo_x, "y": lo,
         "line": {"width": 0, "color": crowd.BAND_COLOR}, "showlegend": False, "hoverinfo": "skip"},
        {"type": "scatter", "mode": "lines", "name": f"range of {len(tasks)} workers", "x": hi_x,
         "y": hi, "line": {"width": 0, "color": crowd.BAND_COLOR}, "fill": "tonexty",
         "fillcolor": crowd.BAND_COLOR, "hoverinfo": "skip"}]
    for task in picked:
        i = tasks.index(task)
        traces.append(_line(task, *_broken(*_smooth_thin(*series[task], smoothing, max_points, thin),
                                           gaps.get(task)), _color(i), width=1.5, group="workers"))
    return traces


def learning_rate_figure(store: MetricsStore, max_points: int = 2000, *,
                         thin: Thin = downsample) -> go.Figure:
    """The learning rate the optimizer used, per step (one value for every worker)."""
    x, y = store.metric("learning_rate")
    traces = [_line("learning rate", *thin(x, y, max_points), GLOBAL_COLOR, width=2.0)] if len(x) else []
    fig = _figure(traces, title="Learning rate", y_title="learning rate")
    # Log scale: rates span decades under a schedule, and a constant 0.001 on a linear axis is
    # drawn as 0 (plotly pads a flat line by +-1).
    positive = np.asarray(y)[np.isfinite(y)] if len(x) else np.empty(0)
    if len(positive) and (positive > 0).all():
        fig.update_layout(yaxis_type="log", yaxis_exponentformat="e")
    return fig


def chart_metrics(store: MetricsStore) -> list[str]:
    """The metrics that get a chart of their own: training metrics (a validation metric shares
    its training metric's chart; one with no training twin gets its own), the loss first; the
    learning rate has its own figure."""
    names = store.metric_names()
    return [n for n in names if n != "learning_rate"
            and not (n.startswith("val_") and n.removeprefix("val_") in names)]


def _smooth_thin(x, y, smoothing: float, max_points: int, thin: Thin):
    y = ema(y, smoothing) if smoothing else y
    return thin(x, y, max_points)


def _task_line(x, y, spans, smoothing: float, max_points: int, thin: Thin):
    """One worker's points for its line: none in ``spans``, thinned, broken across each span."""
    return _broken(*_smooth_thin(*_outside(x, y, spans), smoothing, max_points, thin), spans)


def _outside(x, y, spans):
    """The points whose step lies in none of ``spans`` (``(after, up to]``)."""
    if not spans or not len(x):
        return x, y
    x, y = np.asarray(x), np.asarray(y)
    inside = np.zeros(len(x), bool)
    for after, upto in spans:
        inside |= (x > after) & (x <= upto)
    return (x, y) if not inside.any() else (x[~inside], y[~inside])


def _broken(x, y, spans):
    """A NaN point (a gap: plotly joins no line across it) between two points with a span between
    them, just past the span's start, so the line stays in step order."""
    if not spans or len(x) < 2:
        return x, y
    x, y = np.asarray(x), np.asarray(y, dtype=np.float64)
    starts: dict[int, float] = {}
    for after, _ in sorted(spans):
        cut = int(np.searchsorted(x, after, side="right"))   # the first point past the span
        if 0 < cut < len(x):
            starts.setdefault(cut, after)
    if not starts:
        return x, y
    cuts = sorted(starts)
    step = 1 if x.dtype.kind in "iu" else 0
    return np.insert(x, cuts, [starts[c] + step for c in cuts]), np.insert(y, cuts, np.nan)


def step_time_figure(store: MetricsStore, max_points: int = 2000, *,
                     thin: Thin = downsample, show: list[str] | None = None,
                     gaps: Gaps | None = None) -> go.Figure:
    """Seconds per step for each worker; the slowest (by median) is drawn thick and named.
    Past crowd.MANY workers: the band, the odd ones out, the slowest and ``show``."""
    ratios = store.stragglers()
    slowest = max(ratios, key=ratios.get) if len(ratios) > 1 else None
    tasks = store.tasks()
    if len(tasks) > crowd.MANY:
        traces = _worker_traces(store, "step_time", tasks, 0.0, max_points, thin,
                                [*(show or ()), *([slowest] if slowest else [])], field="step_time",
                                gaps=gaps)
    else:
        traces = []
        for i, task in enumerate(tasks):
            s = store.series(task)
            x, y = _task_line(s.step, s.step_time, (gaps or {}).get(task), 0.0, max_points, thin)
            name, width, opacity = task, 1.2, 0.6
            if task == slowest:
                name, width, opacity = f"{task} (slowest, x{ratios[task]:.2f} median)", 3.0, 1.0
            traces.append(_line(name, x, y, _color(i), width=width, opacity=opacity))
    fig = _figure(traces, title="Step time", y_title="seconds per step")
    if slowest is not None:
        fig.update_layout(title_text=f"Step time (slowest: {html.escape(slowest)}, "
                                     f"x{ratios[slowest]:.2f} the median)")
    return fig


def throughput_figure(store: MetricsStore, max_points: int = 2000, *,
                      thin: Thin = downsample, show: list[str] | None = None,
                      gaps: Gaps | None = None) -> go.Figure:
    """Examples per second for each worker (past crowd.MANY: the band and the odd ones out)."""
    tasks = store.tasks()
    if len(tasks) > crowd.MANY:
        traces = _worker_traces(store, "examples_per_sec", tasks, 0.0, max_points, thin, show,
                                field="examples_per_sec", gaps=gaps)
    else:
        traces = []
        for i, task in enumerate(tasks):
            s = store.series(task)
            x, y = _task_line(s.step, s.examples_per_sec, (gaps or {}).get(task), 0.0, max_points, thin)
            traces.append(_line(task, x, y, _color(i), width=1.2))
    return _figure(traces, title="Throughput", y_title="examples per second")


def compare_figure(series_a, series_b, labels: Sequence[str] = ("run A", "run B"), *,
                   smoothing: float = 0.0, max_points: int = 2000,
                   y_title: str = "loss") -> go.Figure:
    """Two runs' curves on one axis; each series is a ``(steps, values)`` pair, e.g. two
    stores' ``global_loss()``."""
    return compare_runs_figure(dict(zip(labels, (series_a, series_b))), smoothing=smoothing,
                               max_points=max_points, y_title=y_title,
                               title=f"{labels[0]} vs {labels[1]}")


def compare_runs_figure(series: dict[str, tuple], *, smoothing: float = 0.0,
                        max_points: int = 2000, y_title: str = "loss", x_title: str = "step",
                        title: str | None = None) -> go.Figure:
    """Any number of runs' curves on one axis: run -> ``(x, values)``; x in steps, or in
    seconds since each run's first point (``x_title`` says which)."""
    traces = []
    for i, (label, (x, y)) in enumerate(series.items()):
        x, y = np.asarray(x), np.asarray(y, dtype=np.float64)
        y = ema(y, smoothing) if smoothing else y
        x, y = downsample(x, y, max_points)
        traces.append(_line(str(label), x, y, _color(i), width=2.5))
    fig = _figure(traces, title=html.escape(title or f"{y_title} by run"), y_title=html.escape(y_title))
    fig.update_layout(xaxis_title_text=x_title)
    return fig


def _color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _line(name: str, x, y, color: str, *, width: float, opacity: float = 1.0,
          group: str | None = None, dash: str | None = None, markers: bool = False) -> dict:
    name = html.escape(name, quote=False)   # task names come from the job's lines
    trace = {"type": "scattergl", "mode": "lines+markers" if markers else "lines", "name": name,
             "x": x, "y": y, "line": {"color": color, "width": width, **({"dash": dash} if dash else {})},
             "opacity": opacity,
             "hovertemplate": f"{name}<br>step %{{x}}<br>%{{y:.4g}}<extra></extra>"}
    if group:
        trace["legendgroup"] = group
    return trace


def _figure(traces: list[dict], *, title: str, y_title: str) -> go.Figure:
    # No plotly template: Streamlit's chart theme styles the figure in the browser, and resolving
    # "plotly_white" was 90 % of building a figure (16.5 of 18 ms, bench/README.md "Console CPU").
    return go.Figure({"data": traces, "layout": {
        "title": {"text": title}, "uirevision": UIREVISION,
        "xaxis": {"title": {"text": "step"}}, "yaxis": {"title": {"text": y_title}},
        "legend": {"orientation": "h", "y": -0.2}, "margin": {"l": 50, "r": 20, "t": 50, "b": 40},
        "hovermode": "closest"}})


def gpu_figure(samples: dict[str, list], field: str = "util", *, title: str = "GPU utilisation",
               y_title: str = "%") -> go.Figure:
    """One line per host and GPU over wall time, from the watch agent's nvidia-smi samples."""
    lines: dict[str, tuple[list, list]] = {}
    for host, readings in samples.items():
        for t, gpus in readings:
            for g in gpus:
                xs, ys = lines.setdefault(f"{host} GPU {g.get('index')}", ([], []))
                xs.append(np.datetime64(int(t * 1000), "ms"))
                ys.append(g.get(field))
    traces = [_line(name, np.array(x), np.array(y, dtype=np.float64), _color(i), width=1.5)
              for i, (name, (x, y)) in enumerate(sorted(lines.items()))]
    fig = _figure(traces, title=title, y_title=y_title)
    fig.update_layout(xaxis_title_text="time", xaxis_type="date")   # live charts send epoch ms
    for trace in fig.data:
        trace.hovertemplate = f"{trace.name}<br>%{{x}}<br>%{{y:.4g}}<extra></extra>"
    return fig


def goodput_figure(found) -> go.Figure:
    """Where the time went (``backend.records.goodput.Goodput``): one stacked bar of the run's
    task-seconds, a segment per cause with its share; training kept first, in green."""
    fig = go.Figure()
    total = found.total_s or 1.0
    colors = {"training kept": "#2ca02c", "steps lost": "#d62728", "unreported": "#bbbbbb"}
    for i, (cause, seconds) in enumerate(found.causes.items()):
        if seconds <= 0:
            continue
        fig.add_bar(y=["run"], x=[seconds / total * 100], name=cause, orientation="h",
                    marker_color=colors.get(cause, _color(i + 2)),
                    hovertemplate=f"{html.escape(cause)}: {seconds:.1f} task-s (%{{x:.1f}}%)<extra></extra>")
    fig.update_layout(barmode="stack", height=140, margin=dict(l=10, r=10, t=30, b=10),
                      title="Where the time went (% of task-seconds)", xaxis=dict(range=[0, 100]),
                      yaxis=dict(visible=False), legend=dict(orientation="h"))
    return fig
