"""A finished sweep on the Sweep and Runs pages in a real browser (issue 50): four trials of a
small reporting job (no TensorFlow) on the console's two local workers, one at a time, finished
by the sweep's keeper before the page opens. The Sweep page names the best trial and its run as
`tfconsole sweep status` does, draws every trial's objective and Optuna's figures; the Runs page
lists the trials' runs, filtered to the sweep, with each trial's metrics (kept when its run ended:
no trial was opened on Monitor) and Compare draws every trial over the sweep's objective. The
README's screenshots of both pages come from here (`UPDATE_SCREENSHOTS=1`): the runs folder and
the workers' folder sit in the (test) home, so the pages show `~/tfconsole-runs`, not a temp path."""
from __future__ import annotations

import json
import shutil
import sys

import pytest

from backend.hosts.ssh import SSHOptions
from backend.sweeps import control
from backend.sweeps.spec import sweep_from_dict
from rig import sshd
from console import tokens
from tests.conftest import HOME, wait_for
from tests.e2e import browser as web
from tests.integration.test_sweep import REPORT


@pytest.fixture
def home_server(tmp_path):
    """The console with its runs folder at ``~/tfconsole-runs`` (the tests' own home); removed after."""
    runs = HOME / "tfconsole-runs"
    token = tokens.new_token(tokens.token_path(runs))
    try:
        with web.console(web.STREAMLIT, tmp_path, runs=runs) as served:
            yield tokens.url(token, address="127.0.0.1", port=int(served.url.rsplit(":", 1)[1])), served.runs
    finally:
        shutil.rmtree(runs, ignore_errors=True)
        shutil.rmtree(HOME / "work", ignore_errors=True)


@pytest.mark.slow   # a console, a browser and four runs
def test_a_finished_sweep_on_the_sweep_and_runs_pages(home_server):
    sync_playwright = web.playwright()
    url, runs = home_server
    workers = [{"role": role, "host": "127.0.0.1", "transport": "local", "tf_port": sshd.free_port(),
                "python": sys.executable, "workdir": "~/work"} for role in ("chief", "worker")]
    data = {"cluster": {"tasks": workers},
            "job": {"kind": "command", "command": [sys.executable, "-c", REPORT, "{x}"]},
            "space": {"x": {"range": [0.0, 1.0]}}, "objective": {"metric": "val_loss", "direction": "min"},
            "budget": {"trials": 4}, "at_once": 1, "sampler": "random", "seed": 3}
    sweep_id = control.start(sweep_from_dict(data), data, runs, SSHOptions(), poll_s=0.3)
    found = wait_for(lambda: (s := control.status(runs, sweep_id))["phase"] in ("finished", "failed") and s,
                     240, "the sweep to finish")
    assert found["phase"] == "finished", found
    best = found["best"]
    with sync_playwright() as p:
        browser, page = web.open_console(p, url, height=2400)
        web.goto(page, "Sweep")
        said = web.wait_text(page, r"Best so far: trial", 60)
        assert f"trial {best['trial']}," in said and f"run {best['run_id']}" in said, said
        for _ in range(60):   # the trials' curves and Optuna's figures drawn
            if page.locator(".js-plotly-plot").count() >= 3:
                break
            page.wait_for_timeout(1000)
        else:
            web.fail(page, "fewer than 3 charts on the Sweep page")
        web.shot(page, "sweep")
        web.goto(page, "Runs")
        web.wait_text(page, r"run\(s\) under ~/tfconsole-runs", 60)
        web.choose(page, "Sweep", lambda texts: sweep_id)
        web.wait_text(page, r"4 run\(s\) under", 60)
        for _ in range(60):   # Compare: every trial's val_loss, from the metrics kept at each run's end
            traces = page.evaluate(web.CHARTS_JS)
            drawn = {t["name"] for chart in traces for t in chart if t["y"]}
            if {t["run_id"] for t in found["trials"]} <= drawn:
                break
            page.wait_for_timeout(1000)
        else:
            web.fail(page, f"Compare drew {sorted(drawn)}, not every trial: {json.dumps(found['trials'])[:300]}")
        assert "recorded locally" not in page.inner_text("body")
        assert web.wait_text(page, r"Metric", 5) and "val_loss" in page.inner_text("body")
        web.shot(page, "runs-sweep")
        browser.close()
