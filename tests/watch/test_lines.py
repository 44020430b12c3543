"""Metric lines to columns: the pyarrow path and the standard-library path agree."""
from __future__ import annotations

import json
import os

import numpy as np

from backend.watch.metrics import MetricsStore
from backend.watch import lines as lines_mod
from backend.watch.lines import parse_metric_block


def make(n):
    return [json.dumps({"task": f"worker-{i % 3}", "step": i // 3, "attempt": 0, "time": i,
                        "loss": 1.0 / (i + 1), "global_loss": None if i % 2 else 0.5,
                        "step_time": 0.1, "examples_per_sec": 10}).encode() for i in range(n)]


def block(lines: list[bytes]) -> bytes:
    return b"".join(line + b"\n" for line in lines)


def test_arrow_and_json_paths_give_the_same_store(monkeypatch):
    data = make(6000)
    fast, bad = parse_metric_block(block(data))
    assert bad == 0
    monkeypatch.setattr(lines_mod, "ARROW_MIN_LINES", 10 ** 9)
    slow, bad = parse_metric_block(block(data))
    assert bad == 0
    a, b = MetricsStore(), MetricsStore()
    assert a.add_columns(fast) == b.add_columns(slow) == 6000
    for task in a.tasks():
        for field in ("step", "time", "loss", "step_time", "examples_per_sec"):
            np.testing.assert_array_equal(getattr(a.series(task), field),
                                          getattr(b.series(task), field))
    np.testing.assert_array_equal(a.global_loss()[1], b.global_loss()[1])


def test_a_bad_line_falls_back_and_is_counted():
    data = make(6000)
    data[100] = b"{torn"
    data[200] = b"[1, 2]"
    cols, bad = parse_metric_block(block(data))
    assert bad == 2 and len(cols["task"]) == 5998


def test_a_missing_field_is_nan():
    data = [json.dumps({"task": "chief-0", "step": i}).encode() for i in range(6000)]
    cols, _ = parse_metric_block(block(data))
    assert np.isnan(cols["loss"]).all() and (cols["attempt"] == 0).all()


def test_the_mirror_replays_in_blocks_of_whole_lines(tmp_path):
    """Blocks end at a newline whatever the read size; a torn last line (a crash mid-write)
    comes back as a line of its own, which the parser then quarantines."""
    from backend.watch.journal import METRICS, Journal
    lines = make(50)
    journal = Journal(str(tmp_path))
    os.makedirs(journal.mirror, exist_ok=True)
    with open(os.path.join(journal.mirror, METRICS), "wb") as fh:
        fh.write(block(lines) + b'{"task": "worker-0", "st')
    blocks = list(journal.metric_blocks(size=97))
    assert all(b.endswith(b"\n") for b in blocks)
    assert b"".join(blocks).split(b"\n")[:-1] == [*lines, b'{"task": "worker-0", "st']
    cols, bad = parse_metric_block(b"".join(blocks))
    assert bad == 1 and len(cols["task"]) == 50
