"""Headless Chromium as the browser tests and the console benchmarks drive it: where it is, how
it is started, what a live chart has received, and the page's fresh buttons. Failing a test with
what the page showed stays in tests/e2e/browser.py (it is pytest's)."""
from __future__ import annotations

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-quic", "--no-first-run", "--disable-component-update", "--disable-sync"]
# What each of Monitor's live charts has received (console/static/live_chart.js counts it) and
# how many points it holds now.
FEED_JS = """() => Array.from(document.querySelectorAll('.tfconsole-chart')).map(el => ({
    whole: Number(el.dataset.whole || 0), last: el.dataset.lastOp || '',
    received: Number(el.dataset.points || 0),
    held: (el.data || []).reduce((n, t) => n + t.x.length, 0)}))"""


def button(page, name: str):
    """The page's button ``name``; not a stale one the previous page or run left on screen."""
    fresh = page.locator('[data-testid="stElementContainer"]:not([data-stale="true"])')
    return fresh.get_by_role("button", name=name, exact=True)
