"""Named metrics through the one line format (backend/client/harness/metric_line.py), the console's store
and the summary every reader prints: what an operator sees for accuracy, val_loss and the
learning rate, and what a damaged or hostile line does (nothing but a counted, stated drop)."""
from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from backend.client.harness import metric_line
from backend.client.harness.report import MetricsReporter
from backend.watch import summary
from backend.watch.lines import ARROW_MIN_LINES, parse_metric_block
from backend.watch.metrics import MetricsStore

TASKS = ("chief-0", "worker-1")


def lines(steps, *, val_every=0, old=False) -> bytes:
    """Lines as the chief writes them: every worker's accuracy, the global values, and at every
    ``val_every`` steps a validation line at the same step. ``old``: loss-only lines."""
    out = []
    for step in steps:
        acc = {"chief-0": 0.5 + step / 1e5, "worker-1": 0.4 + step / 1e5}
        for task in TASKS:
            line = {"run_id": "r", "attempt": 0, "task": task, "step": step, "epoch": 1,
                    "time": 1000.0 + step, "loss": 2.0 - step / 1e5, "global_loss": 2.0 - step / 1e5,
                    "step_time": 0.01, "examples_per_sec": 100.0}
            if not old:
                line["metrics"] = {"accuracy": acc[task]}
                line["global"] = {"accuracy": (acc["chief-0"] + acc["worker-1"]) / 2,
                                  "learning_rate": 0.1 / (1 + step // 100)}
            out.append(line)
        if val_every and step % val_every == 0:
            for task in TASKS:
                out.append({"task": task, "step": step, "attempt": 0, "time": 1000.5 + step,
                            "loss": 2.0 - step / 1e5, "global_loss": 2.0 - step / 1e5,
                            "metrics": {"val_loss": 1.0 + (step == 200)},
                            "global": {"val_loss": 1.0 + (step == 200) + step / 1e6}})
    return ("\n".join(json.dumps(x) for x in out) + "\n").encode()


def store_of(data: bytes) -> MetricsStore:
    store = MetricsStore()
    cols, _ = parse_metric_block(data)
    store.add_columns(cols)
    return store


def test_every_named_metric_per_worker_and_global_with_validation_at_the_same_step():
    store = store_of(lines(range(1, 301), val_every=100))
    assert store.metric_names() == ["loss", "accuracy", "learning_rate", "val_loss"]
    steps, acc = store.metric("accuracy", "worker-1")
    assert len(steps) == 300 and acc[-1] == pytest.approx(0.403)
    # The validation lines repeat a trained step: their values are kept, the loss not twice.
    assert store.metric("val_loss")[0].tolist() == [100, 200, 300]
    assert store.metric("val_loss", "chief-0")[1].tolist() == [1.0, 2.0, 1.0]
    assert len(store.series("chief-0")) == 300
    # The learning rate is global only: no per-worker series.
    assert store.metric_tasks("learning_rate") == [] and store.metric("learning_rate")[1][-1] == pytest.approx(0.1 / 4)


def test_old_loss_only_lines_read_as_before():
    store = store_of(lines(range(1, 51), old=True))
    assert store.metric_names() == ["loss"]
    assert len(store.metric("loss")[0]) == 50 and len(store.metric("loss", "worker-1")[0]) == 50
    assert summary.summarize(store)["global"]["loss"]["best_step"] == 50


def test_the_fast_columnar_parser_reads_exactly_what_the_line_parser_reads():
    data = lines(range(1, ARROW_MIN_LINES), val_every=1000)
    fast = store_of(data)
    slow = MetricsStore()
    slow.add_many(json.loads(x) for x in data.splitlines())
    assert fast.metric_names() == slow.metric_names()
    for name in fast.metric_names():
        for task in [None, *TASKS]:
            a, b = fast.metric(name, task), slow.metric(name, task)
            assert a[0].tolist() == b[0].tolist() and np.allclose(a[1], b[1], equal_nan=True)


def test_summary_last_and_best_by_the_metrics_direction():
    found = summary.summarize(store_of(lines(range(1, 301), val_every=100)))
    val = found["global"]["val_loss"]
    assert (val["mode"], val["best_step"], val["last_step"]) == ("min", 100, 300)
    assert found["global"]["accuracy"]["mode"] == "max"
    assert found["global"]["accuracy"]["best_step"] == 300
    assert found["global"]["learning_rate"]["best"] is None        # no better way for it
    assert found["workers"]["worker-1"]["accuracy"] == pytest.approx(0.403)


@pytest.mark.parametrize("bad", [
    {"": 1.0}, {"x" * 65: 1.0}, {"bell\x07": 1.0}, {"acc": "high"}, {"acc": [1]}, {"acc": True},
])
def test_a_bad_name_or_value_in_a_line_is_dropped_counted_and_named_never_a_crash(bad):
    line = {"task": "chief-0", "step": 1, "loss": 1.0, "metrics": {"ok": 1.0, **bad}, "global": bad}
    store = store_of((json.dumps(line) + "\n").encode())
    assert store.metric_names() == ["loss", "ok"]
    assert "metric value(s) dropped" in store.warning()


def test_a_script_reporting_hundreds_of_names_is_capped_at_a_stated_bound():
    data = b"".join((json.dumps({"task": "chief-0", "step": s, "loss": 1.0,
                                  "metrics": {f"m{s}_{i}": 1.0 for i in range(10)}}) + "\n").encode()
                    for s in range(1, 31))
    store = store_of(data)
    assert len(store.metric_names()) == 1 + metric_line.MAX_NAMES
    assert f"past the first {metric_line.MAX_NAMES}" in store.warning()


def test_the_writer_keeps_the_first_64_names_and_says_once_what_it_left_out(tmp_path, capsys):
    """Issue 56: 64 named metrics plus the loss raised ValueError inside tfconsole.report and
    ended training. Now the line keeps the loss and the first 63 others, in the order given, and
    the log says once which were left out, why and how to choose; training goes on."""
    rep = MetricsReporter(str(tmp_path), "r")
    many = {"loss": 1.0, **{f"m{i}": float(i) for i in range(64)}}
    for step in (1, 2, 3):
        rep.log("worker-0", step, 1, metrics=many, global_metrics=many)
    rep.close()
    written = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [w["step"] for w in written] == [1, 2, 3]
    assert list(written[0]["metrics"]) == ["loss", *[f"m{i}" for i in range(63)]]
    assert list(written[0]["global"]) == list(written[0]["metrics"])
    assert written[0]["left_out"] == ["m63"]
    assert all("left_out" not in w for w in written[1:])     # listed once, not on every line
    log = capsys.readouterr().err.splitlines()
    assert len(log) == 1, log
    assert "metrics of worker-0: left out m63 (past the first 64 names of a line)" in log[0]
    assert "training goes on" in log[0] and "report fewer metrics" in log[0]
    assert metric_line.parse(written[0]).metrics == {n: many[n] for n in written[0]["metrics"]}


def test_the_writer_leaves_out_bad_names_and_values_naming_them_and_writes_the_rest(tmp_path, capsys):
    rep = MetricsReporter(str(tmp_path), "r")
    bad = {"": 1.0, "a\nb": 1.0, "x" * 65: 1.0, "acc": "0.9", 1: 1.0, "flag": True,
           "vec": np.array([1.0, 2.0]), "none": None, "huge": 10 ** 400}
    rep.log("chief-0", 1, 1, metrics={"loss": 1.0, "ok": np.float32(0.5), **bad},
            global_metrics={"loss": 1.0, "learning_rate": 0.01, "val_loss": math.nan}, step_time="fast")
    rep.log("chief-0", 2, 1, metrics={"loss": 0.5}, global_metrics="not a dict")
    rep.close()
    first, second = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert first["metrics"] == {"loss": 1.0, "ok": 0.5} and math.isnan(first["global"]["val_loss"])
    assert first["step_time"] is None
    assert first["left_out"] == ["", "a\\nb", "x" * 64 + "...", "acc", "<int>", "flag", "vec", "none", "huge"]
    assert second["metrics"] == {"loss": 0.5} and "global" not in second
    log = capsys.readouterr().err
    for words in ["empty", "control characters", "65 characters (at most 64)", "acc (str, not a number)",
                  "must be a string", "flag (bool, not a number)", "vec (ndarray, not a number)",
                  "none (NoneType, not a number)", "str (not a dict of metric name -> number)"]:
        assert words in log, (words, log)


@pytest.mark.parametrize("count", [2, ARROW_MIN_LINES])   # below and above pyarrow's threshold
def test_the_names_a_writer_left_out_reach_monitor_and_older_lines_read_as_before(count):
    from console import monitor_view
    rows = []
    for step in range(1, count + 1):
        for task in ("worker-0", "worker-1"):
            row = {"task": task, "step": step, "metrics": {"loss": 1.0 / step}}
            if step == 1:
                row["left_out"] = [f"m{i}" for i in range(63, 75)]
            rows.append(row)
    if count < ARROW_MIN_LINES:   # a hand-written line's left_out of another type lists nothing
        rows.append({"task": "worker-2", "step": 1, "metrics": {"loss": 1.0}, "left_out": "not a list"})
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    if count >= ARROW_MIN_LINES:
        from backend.watch import lines as reader
        assert reader._with_arrow(data, data.count(b"\n")) is not None   # the columnar reader's turn
    store = store_of(data)
    assert store.left_out() == {t: [f"m{i}" for i in range(63, 75)] for t in ("worker-0", "worker-1")}
    said = monitor_view.left_out_warning(store)
    assert said.startswith("Metrics left out of the lines (training went on): worker-0, worker-1: "
                           "m63, m64, m65, m66, m67, m68, m69, m70, m71, m72 and 2 more.")
    assert "first 64 names" in said and "report fewer metrics" in said
    old = store_of(lines(range(1, 4)))
    assert old.left_out() == {} and monitor_view.left_out_warning(old) == ""


def test_the_loss_is_a_metric_name_and_older_lines_with_a_top_level_loss_still_read():
    """One line as written now (the loss among the named values) and one as written before (a
    top-level loss and global_loss): parse, the line-by-line reader and pyarrow's columnar one
    all give the same loss and global loss."""
    from backend.watch import lines
    new = {"task": "worker-0", "step": 1, "metrics": {"loss": 0.5, "acc": 0.9},
           "global": {"loss": 0.4, "acc": 0.8}}
    old = {"task": "worker-0", "step": 2, "loss": 0.3, "global_loss": 0.2, "metrics": {"acc": 0.9}}
    assert metric_line.parse(new).metrics["loss"] == 0.5 and metric_line.parse(new).global_["loss"] == 0.4
    assert metric_line.parse(old).metrics["loss"] == 0.3 and metric_line.parse(old).global_["loss"] == 0.2
    for count in (2, lines.ARROW_MIN_LINES):   # below and above pyarrow's threshold
        data = "".join(json.dumps({**line, "step": i + 1}) + "\n"
                       for i, line in ((i, (new, old)[i % 2]) for i in range(count))).encode()
        cols, bad = lines.parse_metric_block(data)
        assert bad == 0 and list(cols["loss"][:2]) == [0.5, 0.3], count
        assert list(cols["global_loss"][:2]) == [0.4, 0.2]
        assert {key for key, _ in cols["named"]} == {"metrics", "global"}
        assert not any(name == "loss" for _, name in cols["named"])
        store = store_of(data)
        assert list(store.global_loss()[1][:2]) == [0.4, 0.2]


def test_a_non_finite_metric_is_flagged_with_its_name():
    data = (json.dumps({"task": "worker-1", "step": 7, "loss": 1.0,
                        "metrics": {"accuracy": float("nan")}}) + "\n").encode()
    store = store_of(data)
    assert store.nonfinite_metrics["worker-1"][:2] == ("accuracy", 7)


def _mirror(run_dir, data: bytes):
    path = summary.mirror_path(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _parsed(run_dir) -> tuple[dict, int]:
    """(the run's summary, bytes of metric lines parsed to make it)."""
    before = summary.bytes_parsed
    found = summary.of_mirror(run_dir)
    return found, summary.bytes_parsed - before


def test_a_live_mirror_is_parsed_only_where_it_grew(tmp_path):
    """Issue 37 item 5: a click on a live run's Runs row reads only the lines added since."""
    old, new = lines(range(1, 101)), lines(range(101, 111))
    path = _mirror(tmp_path, old)
    first, parsed = _parsed(tmp_path)
    assert first["step"] == 100 and parsed == len(old)
    assert _parsed(tmp_path) == (first, 0)                  # a second click parses nothing
    with open(path, "ab") as fh:
        fh.write(new)
    again, parsed = _parsed(tmp_path)
    assert again["step"] == 110 and again["global"]["loss"]["last_step"] == 110
    assert parsed == len(new)


def test_a_mirror_that_shrank_or_was_replaced_is_parsed_from_its_start(tmp_path):
    path = _mirror(tmp_path, lines(range(1, 101)))
    assert _parsed(tmp_path)[0]["step"] == 100
    shorter = lines(range(1, 21))                           # the run was reset: fewer lines
    path.write_bytes(shorter)
    found, parsed = _parsed(tmp_path)
    assert found["step"] == 20 and parsed == len(shorter)
    longer = lines(range(1, 51))                            # another file moved into its place
    tmp = path.with_suffix(".new")
    tmp.write_bytes(longer)
    os.replace(tmp, path)
    found, parsed = _parsed(tmp_path)
    assert found["step"] == 50 and parsed == len(longer)


def test_a_half_written_last_line_waits_for_its_newline(tmp_path):
    whole, tail = lines(range(1, 11)), lines(range(11, 12))
    path = _mirror(tmp_path, whole + tail[:40])             # the console is mid-write
    found, parsed = _parsed(tmp_path)
    assert found["step"] == 10 and parsed == len(whole)
    with open(path, "ab") as fh:
        fh.write(tail[40:])
    found, parsed = _parsed(tmp_path)
    assert found["step"] == 11 and parsed == len(tail)
    assert summary.from_mirror(tmp_path).rejected == 0      # no torn line was parsed as bad


def test_the_first_nonfinite_value_of_a_line_is_named():
    def first(**line):
        return metric_line.first_nonfinite(metric_line.parse({"task": "worker-1", "step": 3, **line}))
    assert first(loss=1.0, global_loss=1.0, metrics={"acc": 0.5}) is None
    assert first(loss=1.0, global_loss=math.inf)[0] == "loss"
    assert first(loss=1.0, global_loss=1.0, metrics={"val_loss": math.nan})[0] == "worker-1 val_loss"
    assert first(loss=1.0, global_loss=1.0, **{"global": {"val_loss": math.inf}}) == ("global val_loss", math.inf)


def test_a_runs_table_past_the_store_cache_reparses_nothing_on_a_second_click(tmp_path, monkeypatch):
    """More runs than parsed stores kept: their summaries are still kept per file version."""
    monkeypatch.setattr(summary, "CACHED_RUNS", 2)
    runs = [tmp_path / f"run-{i}" for i in range(5)]
    for run in runs:
        summary.mirror_path(run).parent.mkdir(parents=True)
        summary.mirror_path(run).write_bytes(lines(range(1, 11)))
    first = [summary.of_mirror(run) for run in runs]
    parsed = []
    monkeypatch.setattr(summary, "from_mirror", lambda run: parsed.append(run))
    assert [summary.of_mirror(run) for run in runs] == first and parsed == []
