"""Start's progress (issue 38 item 2): the pages show the run at once, with the stage its hosts
record (starting, importing TensorFlow, waiting for peers, first step), and its watch agent runs
before Start's own checks are over."""
from __future__ import annotations

import time

import pytest

from tests.app.conftest import errors, local_rows

HOST_STAGES = ("importing TensorFlow", "waiting for peers", "first step")


def _texts(at) -> list[str]:
    return [e.value for e in (*at.info, *at.caption, *at.markdown)]


@pytest.mark.slow
def test_start_shows_the_hosts_stages_and_watches_before_it_returns(page, runs_dir):
    from console.ui import state
    at = page("launch", cluster_rows=local_rows())
    at.number_input(key="param_epochs").set_value(1)
    at.number_input(key="param_steps_per_epoch").set_value(2000)   # still running at the end
    at.button(key="start_button").click().run()
    assert not at.exception and not errors(at), errors(at)
    run_id = at.session_state["run_id"]
    registry = state._registry(str(runs_dir.resolve()))
    action = registry.actions.get(run_id)
    shown, monitor_seen, watched_early = set(), None, False
    deadline = time.time() + 240
    while not action.done and time.time() < deadline:
        texts = _texts(at.run())
        assert not at.exception
        shown |= {s for s in HOST_STAGES for t in texts if s in t}
        if run_id in registry.held() and registry.get(run_id).monitor is not None and not action.done:
            watched_early = True
        if shown and monitor_seen is None and not action.done:   # Monitor, opened while it starts
            mon = page("monitor", run_id=run_id, action_run_id=run_id)
            assert not mon.exception
            monitor_seen = _texts(mon) + [p.proto.text for p in mon.get("progress")]
        time.sleep(0.3)
    assert action.done and not action.error, action.error
    said = [s for s in action.steps if any(s.startswith(h) for h in HOST_STAGES)]
    # The stages in the order the hosts reached them.
    assert said and said[0].startswith("importing TensorFlow (worker-"), action.steps
    order = [HOST_STAGES.index(next(h for h in HOST_STAGES if s.startswith(h))) for s in said]
    assert order == sorted(order), action.steps
    assert shown, "the Launch page never showed a stage the hosts recorded while Start ran"
    assert monitor_seen is not None
    assert not any("No run yet" in t for t in monitor_seen), monitor_seen
    assert any(f"Run `{run_id}`" in t for t in monitor_seen), monitor_seen
    assert any(s in t for s in HOST_STAGES for t in monitor_seen), monitor_seen
    assert watched_early, "the watch agent started only after Start had returned"
