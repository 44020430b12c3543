"""What one browser needs to bring its copy of a live chart up to date: only the new points.

Monitor redraws its charts every 2 s. Sent whole, a figure re-sends every point of every line on
each tick; fed through ``ChartFeed`` the browser receives the figure once, then per line only the
points past what it already holds (the first ``drop`` of its points go, as a rolling window
moves on; ``keep`` of the rest stay; ``x``/``y`` are appended). Any change a browser cannot get
by appending (a restored run's rewound steps, new smoothing) is found the same way: the points
that differ are sent again. A restyled line (the slowest worker named) gets its new style with
its new points; a figure with other lines is sent whole.

For appending to work on long runs, lines are thinned here with *stable* buckets
(``stable_thin``): bucket edges sit at fixed multiples of a power-of-two stride in step units,
so closed buckets never change and only the last one moves; the stride doubles (and the line is
re-sent) only when the run's length doubles.

Pure: no Streamlit here (``console.ui.live_chart`` mounts the browser side).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FULL, DELTA, SAME = "full", "delta", "same"


def stable_thin(x: np.ndarray, y: np.ndarray, max_points: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    """At most about ``max_points`` points: per bucket of ``stride`` steps its lowest and highest
    value (spikes survive), at the bucket's first and last step. Lines this short are unchanged."""
    x, y = np.asarray(x), np.asarray(y, dtype=np.float64)
    if len(x) <= max_points or max_points < 4:
        return x, y
    # Buckets count from the line's first step, which stays put while the line grows.
    offset = x - x[0]
    stride = 1 << max(0, int(np.ceil(np.log2((float(offset[-1]) + 1.0) / (max_points // 2)))))
    bucket = offset // stride if x.dtype.kind in "iu" else np.floor(offset / stride)
    starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
    ends = np.r_[starts[1:], len(x)] - 1
    finite = np.isfinite(y)
    lo = np.minimum.reduceat(np.where(finite, y, np.inf), starts)
    hi = np.maximum.reduceat(np.where(finite, y, -np.inf), starts)
    empty = ~np.isfinite(lo)            # a bucket of NaN / Inf only: keep a gap in the line
    lo[empty], hi[empty] = np.nan, np.nan
    xs = np.empty(2 * len(starts), dtype=x.dtype)
    ys = np.empty(2 * len(starts))
    xs[0::2], xs[1::2] = x[starts], x[ends]
    ys[0::2], ys[1::2] = lo, hi
    return xs, ys


def plain(figure) -> dict:
    """A plotly figure as ``update`` takes it: traces and layout with numpy arrays kept, and no
    template (the browser draws plotly.js's plain look; the template is most of the bytes)."""
    layout = figure.layout.to_plotly_json()
    layout.pop("template", None)
    return {"data": [t.to_plotly_json() for t in figure.data], "layout": layout}


@dataclass
class _Line:
    style: dict            # everything of the trace but its points
    x: np.ndarray
    y: np.ndarray


def _lines(traces: list[dict]) -> list[_Line]:
    out = []
    for t in traces:
        x = np.asarray(t.get("x", ()))
        if x.dtype.kind == "M":   # wall-clock axes (GPU charts): epoch milliseconds, a date axis
            x = x.astype("datetime64[ms]").astype(np.int64)
        out.append(_Line({k: v for k, v in t.items() if k not in ("x", "y")}, x,
                         np.asarray(t.get("y", ()), dtype=np.float64)))
    return out


def _json(a: np.ndarray) -> list:
    """A JSON list; NaN and Inf (no JSON numbers) become null, a gap in the line."""
    if a.dtype.kind == "f" and not np.isfinite(a).all():
        return [v if np.isfinite(v) else None for v in a.tolist()]
    return a.tolist()


def common_prefix(ax: np.ndarray, ay: np.ndarray, bx: np.ndarray, by: np.ndarray) -> int:
    """How many leading points two lines share (NaN equals NaN)."""
    n = min(len(ax), len(bx))
    same = (ax[:n] == bx[:n]) & ((ay[:n] == by[:n]) | (np.isnan(ay[:n]) & np.isnan(by[:n])))
    return n if same.all() else int(np.argmin(same))


def _dropped(held_x: np.ndarray, new_x: np.ndarray) -> int:
    """How many points a rolling window (the GPU charts' last samples) let go at its front."""
    if not len(held_x) or not len(new_x) or held_x[0] >= new_x[0]:
        return 0
    d = int(np.searchsorted(held_x, new_x[0]))
    return d if d < len(held_x) and held_x[d] == new_x[0] else 0


@dataclass
class ChartFeed:
    """One browser's copy of one chart, and the next message that brings it up to date.

    ``seq`` numbers what the browser holds; a delta names the ``base`` it applies to, so a browser
    that holds something else (a remounted chart, a missed message) asks for a resync instead of
    drawing wrong lines, and ``update`` then sends the figure whole.
    """
    seq: int = 0
    held: list[_Line] | None = None
    resync_seen: object = None
    sent_points: int = 0    # points in the last message (for tests and benchmarks)

    def update(self, figure: dict, *, resync: object = None) -> dict:
        """The message for ``figure`` (a plotly figure as a dict: ``data`` and ``layout``)."""
        if resync is not None and resync != self.resync_seen:
            self.resync_seen, self.held = resync, None
        lines = _lines(list(figure.get("data", ())))
        layout = figure.get("layout", {})
        held = self.held
        if held is None or [sorted(h.style) for h in held] != [sorted(n.style) for n in lines]:
            return self._send(lines, {"op": FULL, "layout": layout, "data": [
                {**n.style, "x": _json(n.x), "y": _json(n.y)} for n in lines]})
        drops = [_dropped(h.x, n.x) for h, n in zip(held, lines)]
        keeps = [common_prefix(h.x[d:], h.y[d:], n.x, n.y) for d, h, n in zip(drops, held, lines)]
        restyled = [h.style != n.style for h, n in zip(held, lines)]
        if not any(restyled) and all(d == 0 and k == len(h.x) == len(n.x)
                                     for d, k, h, n in zip(drops, keeps, held, lines)):
            self.sent_points = 0
            return {"op": SAME, "seq": self.seq, "layout": layout}
        # A line restyled (the step-time chart's slowest worker changes) keeps its points.
        return self._send(lines, {"op": DELTA, "base": self.seq, "layout": layout, "traces": [
            {"drop": d, "keep": k, "x": _json(n.x[k:]), "y": _json(n.y[k:]),
             **({"style": n.style} if r else {})}
            for d, k, n, r in zip(drops, keeps, lines, restyled)]})

    def _send(self, lines: list[_Line], message: dict) -> dict:
        self.seq += 1
        self.held = lines
        rows = message["data"] if message["op"] == FULL else message["traces"]
        self.sent_points = sum(len(r["x"]) for r in rows)
        return {**message, "seq": self.seq}
