"""Monitor's live charts: plotly.js in the page, fed only the new points.

``st.plotly_chart`` sends the whole figure on every 2 s redraw. Here a small component
(Streamlit components v2, mounted in the page's own DOM) keeps the figure in the browser, and
each redraw sends what ``console.chart_feed.ChartFeed`` computes for that browser: the figure
once, then only the points past what it holds. A browser that holds something else (the chart
was remounted, the page reloaded) asks for the whole figure again through the component's
``resync`` state.

plotly.js itself comes from the installed plotly package, copied into ``console/static`` and
served by Streamlit's static file serving (``server.enableStaticServing`` in
``.streamlit/config.toml``), once per browser, cached.
"""
from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path

import plotly
import plotly.graph_objects as go
import streamlit as st

from console.chart_feed import ChartFeed, plain

STATIC = Path(__file__).resolve().parents[1] / "static"   # console/static, next to app.py: Streamlit serves it
PLOTLY_JS = "plotly.min.js"

# The element's own JavaScript travels with every redraw: it only loads the real module, which
# the browser fetches once (console/static/live_chart.js).
JS = """export default function (component) {
  import(new URL("app/static/live_chart.js", document.baseURI).href).then((m) => m.default(component));
}"""


def ensure_plotly_js() -> Path:
    """The installed plotly's plotly.js in the static folder (copied when missing or changed)."""
    src = Path(plotly.__file__).resolve().parent / "package_data" / PLOTLY_JS
    dst = STATIC / PLOTLY_JS
    stat = src.stat()
    if dst.exists() and (dst.stat().st_size, int(dst.stat().st_mtime)) == (stat.st_size, int(stat.st_mtime)):
        return dst
    STATIC.mkdir(exist_ok=True)
    tmp = STATIC / f".{PLOTLY_JS}.{os.getpid()}"   # consoles starting together each copy whole
    shutil.copy2(src, tmp)
    os.replace(tmp, dst)
    return dst


@functools.cache
def plotly_js_problem() -> str:
    """Why the charts cannot load plotly.js ("" when they can); checked once per console."""
    try:
        ensure_plotly_js()
        return ""
    except OSError as err:   # a read-only checkout, a full disk: said where the charts would be
        return (f"Charts unavailable: plotly.js could not be copied into {STATIC} ({err}). "
                "Make that folder writable, then restart the console.")


_COMPONENT = st.components.v2.component("tfconsole_live_chart", js=JS, isolate_styles=False)


def live_chart(figure: go.Figure, *, key: str, height: int = 450) -> dict | None:
    """Draw ``figure`` under ``key``, sending this browser only what it lacks; the message sent."""
    problem = plotly_js_problem()
    if problem:
        st.error(problem)
        return None
    feed: ChartFeed = st.session_state.setdefault(f"{key}__feed", ChartFeed())
    state = st.session_state.get(key) or {}
    message = feed.update(plain(figure), resync=state.get("resync"))
    _COMPONENT(key=key, data={"message": message, "height": height}, height=height,
               on_resync_change=lambda: None)
    return message
