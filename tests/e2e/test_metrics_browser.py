"""Every metric a fit script compiles, on Monitor in a real browser (issue 34): the Keras example
(examples/keras_fit.py: accuracy compiled, validation_data at every epoch end, one callback)
started from the Launch form on the two local workers. Monitor draws an accuracy chart with each
worker's curve and the global one, the validation values as points on the loss and accuracy
charts (one per epoch end) and the learning rate; the values the browser holds are the ones
`tfconsole metrics --json` prints for the same run (tests/integration/test_keras_metrics.py
checks those against numpy on the recorded weights)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.e2e import browser as web

EPOCHS = 3
STEPS = 20
LAST = EPOCHS * STEPS
FIT = f"examples/keras_fit.py --epochs {EPOCHS} --steps {STEPS}"
# Each chart's title and its traces (name, x, y), as plotly holds them in the page.
TITLED_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(el => ({
    title: ((el.layout || {}).title || {}).text || '',
    traces: (el.data || []).map(t => ({name: t.name, x: Array.from(t.x || []), y: Array.from(t.y || [])}))}))"""


def _charts(page) -> dict[str, dict[str, dict]]:
    return {c["title"]: {t["name"]: t for t in c["traces"]} for c in page.evaluate(TITLED_JS)}


def _last_x(charts: dict, title: str, trace: str):
    """The last step a chart's trace holds, or None."""
    xs = charts.get(title, {}).get(trace, {}).get("x") or []
    return xs[-1] if xs else None


@pytest.mark.slow   # trains with real TensorFlow workers
def test_accuracy_validation_and_learning_rate_on_monitor(server):
    sync_playwright = web.playwright()
    url, runs = server
    with sync_playwright() as p:
        browser, page = web.open_console(p, url, height=2200)
        run_id = web.start_command(page, FIT)
        web.goto(page, "Monitor")
        charts = {}
        for _ in range(240):     # until every chart has drawn the last epoch's values
            charts = _charts(page)
            # Each chart on its own: a redraw reaches the page chart by chart, and the loss chart
            # with its third validation point can be there while the accuracy chart still has two.
            if (_last_x(charts, "Loss", "global (validation)") == LAST
                    and _last_x(charts, "accuracy", "global (validation)") == LAST
                    and _last_x(charts, "Learning rate", "learning rate") == LAST):
                break
            page.wait_for_timeout(1000)
        else:
            web.fail(page, f"no accuracy, learning rate and {EPOCHS} validation points; charts: "
                           f"{ {t: sorted(c) for t, c in charts.items()} }")
        web.shot(page, "metrics-monitor")
        accuracy = charts["accuracy"]
        assert {"worker-0", "worker-1", "global", "global (validation)"} <= set(accuracy), sorted(accuracy)
        assert charts["Loss"]["global (validation)"]["x"] == [20, 40, 60]
        assert accuracy["global (validation)"]["x"] == [20, 40, 60]
        assert all(0.0 <= v <= 1.0 for v in accuracy["global"]["y"])
        web.goto(page, "Runs")     # the runs table with each metric's last and best value
        web.wait_text(page, r"run\(s\) under", 60)
        page.wait_for_timeout(1500)
        web.shot(page, "metrics-runs")

    out = subprocess.run([sys.executable, "-m", "backend", "--runs", str(runs), "metrics", run_id, "--json"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)["global"]
    assert found["val_accuracy"]["last"] == pytest.approx(accuracy["global (validation)"]["y"][-1], rel=1e-6)
    assert found["val_loss"]["last"] == pytest.approx(charts["Loss"]["global (validation)"]["y"][-1], rel=1e-6)
    assert found["learning_rate"]["last"] == pytest.approx(charts["Learning rate"]["learning rate"]["y"][-1])
