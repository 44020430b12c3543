"""Monitor and train.json (issue 37 item 6): every redraw of a run with metrics asks for the
chief's train.json (``LiveRun.train_info``, from ``monitor_view.snapshot``). A command job that
only calls ``tfconsole.report`` never writes it, so each redraw cost a remote command for the
run's whole life. Now a miss is asked again only after a doubling wait, and a train.json that does
appear (KerasCallback writes it when it starts) is still found."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from backend.config.spec import job_from_dict
from backend.runs import launcher
from backend.runs.store import RunStore
from console.live_run import LiveRun
from tests.conftest import wait_for


def test_a_train_json_that_never_comes_is_not_asked_for_on_every_redraw(local_cluster, tmp_path):
    job = job_from_dict({"kind": "command", "command": [sys.executable, "-c", "import time; time.sleep(120)"]})
    run = launcher.launch(local_cluster, job, store=RunStore(tmp_path / "runs"), preflight=launcher.Preflight.SKIP)
    live = LiveRun(run)
    try:
        chief = run.state.tasks[0]
        transport = run.pool.transport(run.cluster.tasks[chief.position])
        commands = []
        real = transport.run
        transport.run = lambda argv, **kw: (commands.append(argv), real(argv, **kw))[1]
        for _ in range(20):   # redraws, faster than the page's 2 s
            assert live.train_info() is None
            time.sleep(0.2)
        assert 1 <= len(commands) <= 3, f"{len(commands)} remote commands for 20 redraws"
        # A job whose KerasCallback starts now writes it: found within the wait, not lost for good.
        info = {"run_id": run.run_id, "attempt": run.state.attempt, "total_steps": 40,
                "source": "tfconsole.KerasCallback"}
        Path(chief.remote_run_dir, "train.json").write_text(json.dumps(info))
        found = wait_for(live.train_info, 30, "train.json once written")
        assert found["total_steps"] == 40
        before = len(commands)
        for _ in range(5):
            assert live.train_info()["total_steps"] == 40
        assert len(commands) == before, "read once per attempt"
    finally:
        live.close()
        run.stop(grace_s=1)
