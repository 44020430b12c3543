"""A finished sweep on the Sweep and Runs pages in a real browser (issue 50): four trials of a
small reporting job (no TensorFlow) on the console's two local workers, one at a time, finished
by the sweep's keeper before the page opens. The Sweep page names the best trial and its run as
`tfconsole sweep status` does, draws every trial's objective and Optuna's figures; the Runs page
lists the trials' runs with their sweep. The README's screenshots of both pages come from here
(`UPDATE_SCREENSHOTS=1`)."""
from __future__ import annotations

import sys

import pytest

from backend.hosts.ssh import SSHOptions
from backend.sweeps import control
from backend.sweeps.spec import sweep_from_dict
from rig import sshd
from tests.conftest import wait_for
from tests.e2e import browser as web
from tests.integration.test_sweep import REPORT


@pytest.mark.slow   # a console, a browser and four runs
def test_a_finished_sweep_on_the_sweep_and_runs_pages(server, tmp_path):
    sync_playwright = web.playwright()
    url, runs = server
    workers = [{"role": role, "host": "127.0.0.1", "transport": "local", "tf_port": sshd.free_port(),
                "python": sys.executable, "workdir": str(tmp_path / "local")} for role in ("chief", "worker")]
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
        web.wait_text(page, r"run\(s\) under", 60)
        page.wait_for_timeout(1500)
        web.shot(page, "runs-sweep")
        browser.close()
