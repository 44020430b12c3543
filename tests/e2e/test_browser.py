"""The whole console in a real browser, over real sshd hosts named by ~/.ssh/config aliases: import
the cluster, start, watch the loss fall, save, export, restart the console and reattach to the live
run, stop, and check with ps that no process of the run is left. Screenshots of every page go to
test-output/e2e/ (and docs/screenshots/ with UPDATE_SCREENSHOTS=1)."""
from __future__ import annotations

import contextlib
import re
import shutil
import time
from pathlib import Path

import pytest

from backend.runs.store import RunStore
from tests.conftest import processes_of, require, wait_for
from rig import browser as chromium
from tests.e2e import browser as web


class SSHConsole:
    """A console for an operator whose ~/.ssh/config names the two sshd hosts h2 and h3, and a
    cluster YAML that names them by alias alone. ``restart()`` kills the console's whole process
    group (as a crash would; the run on the hosts goes on) and starts a new console over the same
    runs folder and HOME, as the operator would."""

    def __init__(self, tmp_path: Path, cluster, stack: contextlib.ExitStack) -> None:
        from backend.config.spec import save_cluster
        self.tmp_path, self.stack = tmp_path, stack
        self.cluster = tmp_path / "cluster.yaml"
        save_cluster(cluster, self.cluster)
        self.served: web.Console | None = None
        self.url = self.restart()

    @property
    def runs(self) -> Path:
        return self.served.runs

    def restart(self) -> str:
        """Start the console (killing the running one first); the URL with a new login token."""
        from console import tokens
        if self.served is not None:
            web.kill_group(self.served.proc)
        token = tokens.new_token(tokens.token_path(self.tmp_path / "runs"))
        self.served = self.stack.enter_context(web.console(web.STREAMLIT, self.tmp_path))
        return tokens.url(token, address="127.0.0.1", port=int(self.served.url.rsplit(":", 1)[1]))


@pytest.fixture
def ssh_console(tmp_path, alias_cluster):
    with contextlib.ExitStack() as stack:   # closing it stops live runs, then every console started
        yield SSHConsole(tmp_path, alias_cluster, stack)


ALIAS_TASKS = r"chief-0 on h2:\d+, worker-0 on h3:\d+"                 # the Cluster page's summary
LAUNCH_CLUSTER = r"Cluster: chief-0 on h2:\d+ \(ssh\), worker-0 on h3:\d+ \(ssh\)"   # Launch's caption


def _import_yaml(page, path: Path) -> None:
    web.goto(page, "Cluster")
    page.get_by_text("Import tasks").first.click()
    page.locator('[data-testid="stFileUploader"] input[type="file"]').set_input_files(str(path))
    web.click(page, "Load this YAML")
    web.wait_text(page, r"Imported\.", 60)
    web.wait_text(page, rf"2 task\(s\): {ALIAS_TASKS}", 60)


def _curves_reach(page, step: int, timeout_s: float) -> list[dict]:
    """Poll the Monitor page until both tasks' loss curves fall and the progress is past ``step``."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        page.wait_for_timeout(1000)
        tasks = web.falling_workers(page)
        shown = page.get_by_text(re.compile(r"^step \d+ / \d+")).all_inner_texts()
        if tasks and shown and int(re.match(r"step (\d+)", shown[0]).group(1)) > step:
            return tasks
    curves = [[(t["name"], len(t["y"])) for t in chart] for chart in page.evaluate(web.CHARTS_JS)]
    web.fail(page, f"no two falling loss curves past step {step}; curves (name, points): {curves}")


def _start_on_aliases(page, ssh_console: SSHConsole) -> str:
    """Import the cluster YAML and Start a long run on it; the run id."""
    _import_yaml(page, ssh_console.cluster)
    web.goto(page, "Launch")
    web.wait_text(page, LAUNCH_CLUSTER, 60)
    # Long enough to save, export and restart the console while it trains (stopped by the test);
    # checkpoints only at epoch ends, so the one Save now makes is not rotated away first.
    # 20 ms asleep per step leaves the cores to the export, the console's restart and the browser.
    web.set_params(page, {"epochs": 3, "steps_per_epoch": 20000, "checkpoint_every": 0, "pace_s": 0.02})
    web.start(page)
    web.shot(page, "launch")
    return RunStore(ssh_console.runs).list()[0].run_id


def _save_and_export(page) -> int:
    """Save now, then Export while the job trains (a separate process on the chief's host);
    the saved step."""
    web.goto(page, "Checkpoints")
    web.click(page, "Save now")
    saved = int(re.search(r"step (\d+)", web.wait_text(page, r"Checkpoint saved at step \d+", 300)).group(1))
    web.wait_text(page, rf"at steps .*\b{saved}\b", 120)
    web.click(page, "Export")
    web.wait_text(page, r"Export \S+ \(step \d+\) verified", 400)   # nice +10: it yields to the training
    chromium.button(page, "Download model.keras").wait_for(timeout=60_000)
    web.shot(page, "checkpoints")
    return saved


@pytest.mark.slow   # trains with real TensorFlow workers
def test_console_over_ssh_aliases_survives_a_restart(ssh_console):
    """The whole console over real sshd hosts named by ~/.ssh/config aliases: import the cluster
    YAML, Start, watch both losses fall (the loss chart receiving only its new points), Save now,
    Export while it trains, back to Monitor (its new chart gets every point); then kill the console
    and start a new one while the run trains: a new browser session shows the live run on its
    hosts with Stop on Launch and Monitor, and its curves go on; Stop on Monitor, and no process
    of the run is left on the hosts."""
    from backend.runs.launcher import attach
    sync_playwright = web.playwright()
    require("ps (procps)", bool(shutil.which("ps")))
    with sync_playwright() as p:
        browser, page = web.open_console(p, ssh_console.url)
        run_id = _start_on_aliases(page, ssh_console)
        web.goto(page, "Monitor")
        _curves_reach(page, 0, 180)
        # The chart notes when each line first drew (bench/first_curves.py times the first curves
        # by it): both tasks' lines and the global one, none later than now.
        drawn = page.evaluate("() => document.querySelector('.tfconsole-chart').__firstDrawn")
        assert sorted(drawn) == ["chief-0", "global (mean of workers)", "worker-0"], drawn
        assert all(ms <= time.time() * 1000 for ms in drawn.values()), drawn
        web.shot(page, "monitor")
        # Only new points travel: the chart grows by exactly what it receives, never sent whole again.
        before, after = web.loss_feed_grows(page)
        assert after["whole"] == before["whole"] and after["last"] == "delta", (before, after)
        assert after["received"] - before["received"] == after["held"] - before["held"], (before, after)
        saved = _save_and_export(page)
        web.goto(page, "Monitor")   # a new chart on the page: it asks for, and draws, every point
        _curves_reach(page, saved, 180)

        # The console dies and a new one starts while the run trains; a new browser session.
        page.goto(ssh_console.restart())
        page.get_by_role("heading", name="Launch").first.wait_for(timeout=120_000)
        web.wait_text(page, rf"^Run {run_id} — running", 120)
        web.wait_text(page, LAUNCH_CLUSTER, 60)
        chromium.button(page, "Stop run").wait_for(timeout=120_000)
        web.shot(page, "reattached")
        web.goto(page, "Monitor")
        web.wait_text(page, rf"^Run {run_id} — running", 120)
        _curves_reach(page, saved, 180)   # steps made after the restart reach the new console
        # Stop here: Monitor offers it too (Launch's was seen above), and a live Monitor redraws
        # its charts every 2 s, so on a loaded machine the browser answers a click away late.
        web.click(page, "Stop run", 120)
        web.click(page, "Yes, stop it", 120)
        web.wait_text(page, rf"Stopped {run_id}: no process is left on any host", 120)
        run = attach(run_id, store=RunStore(ssh_console.runs))
        assert run.state.phase == "stopped", run.state.phase
        # The workers are gone at once; the console rests its watch agent within seconds.
        wait_for(lambda: processes_of(run) == [], 60, "no process of the run, the console's watch agent included")

        web.goto(page, "Cluster")   # what Start would use next: the hosts the run trained on
        web.wait_text(page, rf"2 task\(s\): {ALIAS_TASKS}", 60)
        page.get_by_text("TF_CONFIG", exact=True).first.wait_for(timeout=60_000)
        web.shot(page, "cluster")
        web.goto(page, "Runs")
        web.wait_text(page, rf"Current run: {run_id}", 60)
        web.shot(page, "runs")
        browser.close()
