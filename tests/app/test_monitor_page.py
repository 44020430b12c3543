"""Monitor page: a finished run's history comes back; a finished run offers no Stop; a run without
metrics says so."""
from __future__ import annotations

import time

import numpy as np

from console import monitor_view
from console.ui import state
from tests.conftest import ended_well


def _wait_for_metrics(live, tasks=2, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if len(live.metrics.tasks()) >= tasks and len(live.metrics.global_loss()[0]) >= 12:
            return
        time.sleep(0.3)
    raise AssertionError(f"no metrics after {timeout} s: {live.monitor.status()}")


def test_history_of_a_finished_run(on_finished):
    open_page, run_id = on_finished
    at = open_page("monitor")
    assert not at.exception
    assert any(run_id in m.value for m in at.markdown)
    live = state.registry().get(run_id)        # the same shared object the page used
    _wait_for_metrics(live)
    snap = monitor_view.snapshot(live)          # the fragment's body, as a function
    workers = [t for t in snap.loss.data if t.legendgroup == "workers"]   # not global, not validation
    assert [t.name for t in workers] == ["worker-0", "worker-1"]
    for trace in workers:
        y = np.asarray(trace.y)
        assert y[-3:].mean() < y[:3].mean()     # the loss falls
    assert snap.progress.step == 60 and snap.progress.total == 60
    assert snap.progress.fraction == 1.0
    assert len(snap.step_time.data) == 2 and len(snap.throughput.data) == 2
    # The demo job reports its mae and validates at each epoch end (issue 34): a chart for mae,
    # validation on the loss chart (one point per epoch end), the learning rate, a last-values row.
    assert [t.name for t in snap.metrics["mae"].data][:3] == ["worker-0", "worker-1", "global"]
    val = next(t for t in snap.loss.data if t.name == "global (validation)")
    assert list(val.x) == [30, 60]
    assert snap.learning_rate is not None
    assert [r["task"] for r in snap.last_values] == ["worker-0", "worker-1", "global"]
    at.run()                                    # a rerun draws the charts from the filled store
    assert not at.exception
    loss = _chart_messages(at)["loss_chart"]
    assert loss["op"] == "full"
    drawn = {t["name"]: t["y"] for t in loss["data"]}
    assert drawn["worker-0"] == list(live.metrics.series("worker-0").loss)
    at.run()                                    # nothing new: no point travels again
    assert _chart_messages(at)["loss_chart"] == {"op": "same", "seq": loss["seq"], "layout": loss["layout"]}
    assert "metric_chart:mae" in _chart_messages(at)


def _chart_messages(at) -> dict:
    """Chart key -> the message its live chart element carries to the browser."""
    import json
    out = {}
    for el in at.get("bidi_component"):
        if el.proto.component_name == "tfconsole_live_chart":
            out[el.proto.id.rsplit("-", 1)[-1]] = json.loads(el.proto.json)["message"]
    return out


def test_a_stop_clicked_after_the_token_is_revoked_does_nothing(page, runs_dir):
    """Stop acts in a button callback, which Streamlit runs before the page's token check: the
    callback checks the token itself, so a revoked session's click reaches no run. (Stop shows
    on a live run only: a command job that sleeps is one, without TensorFlow.)"""
    import sys
    from backend.runs.store import RunStore
    from console import tokens
    run_id = _command_run(runs_dir, [sys.executable, "-c", "import time; time.sleep(120)"]).run_id
    at = page("monitor")
    at.button(key="monitor_stop").click().run()
    tokens.token_path().unlink()                  # the owner revokes every URL handed out so far
    at.button(key="monitor_yes").click().run()
    assert not at.exception
    assert [t.value for t in at.title] == ["Login token needed"]
    assert RunStore(runs_dir).load(run_id).live  # the click reached no run
    assert "monitor_stop__said" not in at.session_state   # nor said anything


def test_log_filter_and_highlight():
    lines = ["I0000 00:00 noise", "step 10 loss 0.5", "Traceback (most recent call last):",
             "ValueError: bad <input>"]
    assert monitor_view.filter_log(lines) == lines[1:]
    assert monitor_view.filter_log(lines, "loss") == ["step 10 loss 0.5"]
    assert monitor_view.filter_log(lines, errors_only=True) == lines[2:]
    many = [f"step {i}" if i % 2 else f"I0000 noise {i}" for i in range(1000)]
    assert monitor_view.filter_log(many, last=3) == ["step 995", "step 997", "step 999"]
    html = monitor_view.log_html(lines[1:])
    assert "&lt;input&gt;" in html and html.count("color:#b00020") == 2


def test_dump_stacks_is_offered_only_for_a_live_run(on_finished):
    open_page, run_id = on_finished
    at = open_page("monitor")
    assert not at.exception
    assert at.button(key="dump_stacks").disabled   # a finished run has no process to ask
    assert at.button(key="profile").disabled       # nor anything to profile


def test_the_newest_profile_copied_here_shows_as_a_table(on_finished):
    """What ``backend.profiles`` leaves in the run's folder here (one task's summary as a worker
    writes it; tests/integration/test_profile.py makes real ones) is read back by the page."""
    import json
    import shutil
    open_page, run_id = on_finished
    folder = state.registry().get(run_id).run.local_dir / "profile" / "step-10"
    folder.mkdir(parents=True)
    try:
        (folder / "worker-0.json").write_text(json.dumps({
            "task": "worker-0", "start_step": 10, "steps": 5, "seconds": 0.25, "error": None,
            "compute_s": 0.01, "collective_s": 0.03, "input_s": 0.0,
            "top_ops": [{"op": "CollectiveReduceV2", "seconds": 0.03}]}))
        at = open_page("monitor")
        assert not at.exception
        tables = [d.value for d in at.dataframe if "collective %" in d.value.columns]
        assert len(tables) == 1, [list(d.value.columns) for d in at.dataframe]
        table = tables[0]
        assert list(table["task"]) == ["worker-0"] and list(table["collective %"]) == [75]
        assert any("Latest profile" in c.value and "10" in c.value for c in at.caption)
    finally:
        shutil.rmtree(folder.parent)


def _command_run(root, command: list[str]):
    """A command job (no metrics, ever) on the two local workers: its run id."""
    from backend.runs.launcher import Preflight, launch
    from backend.runs.store import RunStore
    from backend.config.spec import job_from_dict
    from console.forms import check_rows
    from tests.app.conftest import local_rows
    cluster, _ = check_rows(local_rows())
    run = launch(cluster, job_from_dict({"kind": "command", "command": command}), store=RunStore(root),
                 preflight=Preflight.SKIP)
    return run


def _ended_command_run(root) -> str:
    import sys
    run = _command_run(root, [sys.executable, "-c", "print('no metrics here')"])
    assert ended_well(run, run.wait(timeout=60))
    return run.run_id


def test_a_finished_run_without_metrics_says_so_and_offers_no_stop(page, runs_dir):
    from tests.conftest import wait_for
    run_id = _ended_command_run(runs_dir)
    at = page("monitor")
    assert not at.exception
    assert any(run_id in m.value for m in at.markdown)
    # Once the watch agent has caught up (it looks, finds nothing, rests), the page says so.
    wait_for(lambda: at.run() and any("This run reported no metrics" in i.value for i in at.info) and at, 60,
             "the page to say the run reported no metrics")
    assert not at.exception
    assert not any("waiting for the first metrics" in (p.proto.text or "") for p in at.get("progress"))
    assert "loss_chart" not in _chart_messages(at)               # no empty chart
    assert not [b for b in at.button if b.key == "monitor_stop"]  # nothing to stop: no Stop
    assert any("nothing left to stop" in c.value for c in at.caption)


def test_stop_is_hidden_on_a_finished_run(on_finished):
    open_page, run_id = on_finished
    at = open_page("monitor")
    assert not at.exception
    assert not [b for b in at.button if b.key in ("monitor_stop", "monitor_yes")]
    assert any("This run is finished: there is nothing left to stop" in c.value for c in at.caption)
