"""What Monitor's "where the time went" bar costs the console per refresh: ``goodput.here`` (read
this machine's copy of the chief's lines whole, parse them, account) against ``Following`` (what
the bar uses: only the lines added since its last read), on runs of growing length.

Each case writes a metrics file as the chief writes it (two workers' lines per sync point, each
with ``blocked`` and ``input_wait``) into a run folder's kept copy, then times ``here`` (median
of ``--repeat`` calls, wall and CPU) and, for the keeper's live alert, one ``fold_points`` of the
last 100 sync points' lines (what a minute's new lines cost it).

    .venv/bin/python bench/goodput_cost.py [--points 1000 10000 100000] [--repeat 5]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backend.client.harness import metric_line  # noqa: E402
from backend.records import goodput as account  # noqa: E402
from backend.records.state import Attempt, RunState, TaskState  # noqa: E402
from backend.runs import goodput  # noqa: E402
from backend.watch import chief_metrics  # noqa: E402


def lines(points: int) -> bytes:
    out = []
    for i in range(points):
        step, t = 1 + 10 * i, 1000.0 + 0.5 * i
        for task in ("worker-0", "worker-1"):
            out.append(json.dumps({"task": task, "attempt": 1, "step": step, "epoch": 1, "time": t,
                                   "metrics": {"loss": 0.5}, "global": {"loss": 0.5},
                                   "step_time": 0.05, "examples_per_sec": 640.0, "input_wait": 0.1,
                                   "blocked": {"save": 0.2} if i % 10 == 0 else {}}))
    return ("\n".join(out) + "\n").encode()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--points", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}")
    for points in args.points:
        with tempfile.TemporaryDirectory() as tmp:
            data = lines(points)
            local = Path(tmp)
            chief_metrics.kept_path(local).write_bytes(data)
            state = RunState(run_id="r", created=990.0, cluster={}, job={},
                             tasks=[TaskState(f"worker-{i}", i, "h", "runs/r") for i in range(2)],
                             attempts=[Attempt(1, started=995.0, ended=1000.0 + 0.5 * points + 5)])
            wall, cpu = [], []
            for _ in range(args.repeat):
                w, c = time.perf_counter(), time.process_time()
                found = goodput.here(state, local)
                wall.append(time.perf_counter() - w)
                cpu.append(time.process_time() - c)
            follow = goodput.Following(local)
            follow.of(state)                      # the first read: the whole copy
            with open(chief_metrics.kept_path(local), "ab") as fh:
                fh.write(lines(100))              # then a minute's new lines (100 sync points)
            w = time.perf_counter()
            follow.of(state)
            follow_ms = (time.perf_counter() - w) * 1000
            tail = [metric_line.parse(json.loads(raw)) for raw in data.splitlines()[-200:]]
            seen = account.fold_points({}, [metric_line.parse(json.loads(raw)) for raw in data.splitlines()])
            w = time.perf_counter()
            account.fold_points(seen, tail)
            fold_ms = (time.perf_counter() - w) * 1000
            print(f"{points:>7} sync points ({len(data) / 1e6:.1f} MB): here {statistics.median(wall) * 1000:.1f} ms "
                  f"wall, {statistics.median(cpu) * 1000:.1f} ms CPU (median of {args.repeat}); "
                  f"goodput {found.share:.1%}; Monitor's next refresh (Following, 100 new sync points) "
                  f"{follow_ms:.1f} ms; a minute's new lines folded {fold_ms:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
