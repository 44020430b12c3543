"""Too many metrics never ends training (issue 56, item 11): a real TensorFlow script reporting
64 named metrics plus its loss through ``tfconsole.report`` died at its first report with
``ValueError: metrics of worker-0: 65 metrics, at most 64 per line``. Now it trains to its last
step, its log says once what was left out and how to choose, and Monitor says it too."""
from __future__ import annotations

import re
import sys

import pytest

from tests.app.test_monitor_page import _command_run
from tests.conftest import wait_for

STEPS = 20
SCRIPT = f"""
import tensorflow as tf
import tfconsole

w = tf.Variable(5.0)
for step in range(1, {STEPS} + 1):
    with tf.GradientTape() as tape:
        loss = (w - 2.0) ** 2
    w.assign_sub(0.1 * tape.gradient(loss, w))
    if step % 5 == 0:   # tensors, as a custom loop has them
        tfconsole.report(step, loss=loss, metrics={{f"m{{i}}": w * i for i in range(64)}})
print("trained to step", step, flush=True)
"""


@pytest.mark.slow
def test_a_script_reporting_64_metrics_and_its_loss_trains_to_the_end_and_monitor_says_what_was_left_out(
        page, runs_dir):
    run = _command_run(runs_dir, [sys.executable, "-c", SCRIPT])
    statuses = run.wait(timeout=180)
    chief = "worker-0"
    assert [s.exit_code for s in statuses] == [0, 0], [run.log_tail(s.name, 3000) for s in statuses]
    log = run.log_tail(chief, 200_000)
    assert f"trained to step {STEPS}" in log
    said = re.findall(r"tfconsole: metrics of worker-0: left out .*", log)
    assert len(said) == 1, log                   # once, not at each of the 4 reports
    assert "left out m63 (past the first 64 names of a line)" in said[0]
    assert "report fewer metrics" in said[0]

    at = page("monitor", run_id=run.run_id)
    assert not at.exception

    def warned():
        at.run()
        return [w.value for w in at.warning if "Metrics left out" in w.value]
    shown = wait_for(warned, 90, "Monitor's warning of the metrics left out")
    text = re.sub(r"\\(.)", r"\1", shown[0])    # Markdown-escaped job text, as the user reads it
    assert "worker-0: m63." in text and "first 64 names" in text and "report fewer metrics" in text
    from console.ui import state
    live = state.registry().get(run.run_id)
    assert list(live.metrics.global_loss()[0]) == [5, 10, 15, 20]       # every report was written
    assert len(live.metrics.metric_names()) == 64                        # the loss and m0 ... m62

    # Where its time went (docs/goodput.md), from this machine's copy of the chief's lines: the
    # four reports make a training window, and the causes add up to the run's task-seconds.
    at.run()
    said = [c.value for c in at.caption if c.value.startswith("goodput ")]
    assert said and "task-seconds" in said[0], [c.value for c in at.caption]
    found = live._goodput[1]
    assert found.reported and sum(found.causes.values()) == pytest.approx(found.total_s)
