"""The metrics store, smoothing, downsampling and straggler figures."""
from __future__ import annotations

import math
import threading

import numpy as np
import pytest

from backend.watch.metrics import MetricsStore, downsample, ema


def rec(task, step, attempt=0, loss=None, step_time=0.1, **extra):
    return {"task": task, "step": step, "attempt": attempt, "time": float(step),
            "loss": 1.0 / (step + 1) if loss is None else loss, "global_loss": 0.5,
            "step_time": step_time, "examples_per_sec": 100.0, **extra}


def test_add_and_read_back():
    s = MetricsStore()
    assert s.add_many([rec("worker-1", 0), rec("chief-0", 0), rec("chief-0", 10)]) == 3
    assert s.tasks() == ["chief-0", "worker-1"]
    c = s.series("chief-0")
    assert list(c.step) == [0, 10] and c.loss[1] == pytest.approx(1 / 11)
    steps, values = s.global_loss()
    assert list(steps) == [0, 10] and list(values) == [0.5, 0.5]
    assert s.progress() == 10


def test_same_task_step_attempt_is_stored_once():
    s = MetricsStore()
    s.add_many([rec("chief-0", i) for i in range(5)])
    assert s.add_many([rec("chief-0", i) for i in range(3, 8)]) == 3
    assert s.add(rec("chief-0", 2)) == 0
    assert list(s.series("chief-0").step) == list(range(8))
    assert list(s.global_loss()[0]) == list(range(8))


def test_new_attempt_replaces_steps_from_its_start():
    s = MetricsStore()
    s.add_many([rec("chief-0", i) for i in range(10)])
    s.add_many([rec("chief-0", i, attempt=1, loss=9.0) for i in range(6, 12)])
    ser = s.series("chief-0")
    assert list(ser.step) == list(range(12))
    assert list(ser.loss[6:]) == [9.0] * 6
    assert s.add(rec("chief-0", 20, attempt=0)) == 0   # an old attempt's line is not shown


def test_bad_records_are_rejected_and_missing_fields_are_nan():
    s = MetricsStore()
    assert s.add_many([{"step": 1}, {"task": "chief-0"}, {"task": "chief-0", "step": "3"},
                       {"task": "chief-0", "step": 4}]) == 1
    assert s.rejected == 3
    assert math.isnan(s.series("chief-0").loss[0])


def test_snapshots_do_not_change_and_are_read_only():
    s = MetricsStore()
    s.add_many([rec("chief-0", i) for i in range(10)])
    snap = s.series("chief-0")
    s.add_many([rec("chief-0", i) for i in range(10, 5000)])
    s.add_many([rec("chief-0", i, attempt=1, loss=7.0) for i in range(3, 6)])
    assert list(snap.step) == list(range(10)) and snap.loss[5] == pytest.approx(1 / 6)
    with pytest.raises(ValueError):
        snap.loss[0] = 1.0


def test_memory_is_bounded_by_thinning_old_points():
    s = MetricsStore(max_points_per_task=1000)
    s.add_many([rec("chief-0", i) for i in range(10_000)])
    ser = s.series("chief-0")
    assert len(ser) <= 1000
    assert ser.step[-1] == 9999 and ser.step[0] == 0
    assert np.all(np.diff(ser.step) > 0)
    assert s.nbytes() <= 1000 * 40 + 1000 * 24


def test_concurrent_writers_and_readers():
    s = MetricsStore()
    errors = []

    def write(task):
        for i in range(0, 3000, 10):
            s.add_many([rec(task, j) for j in range(i, i + 10)])

    def read():
        try:
            for _ in range(300):
                for t in s.tasks():
                    ser = s.series(t)
                    assert len(ser.step) == len(ser.loss)
                s.stragglers()
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(f"worker-{i}",)) for i in range(4)]
    threads.append(threading.Thread(target=read))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert all(len(s.series(f"worker-{i}")) == 3000 for i in range(4))


def tensorboard_smooth(values, weight):
    """TensorBoard's smoothing, transcribed from its TypeScript, as the reference."""
    last, num, out = 0.0, 0, []
    for v in values:
        if not math.isfinite(v):
            out.append(v)
            continue
        last = last * weight + (1 - weight) * v
        num += 1
        out.append(last / (1 - weight ** num))
    return out


@pytest.mark.parametrize("weight", [0.0, 0.3, 0.6, 0.9, 0.99])
def test_ema_matches_tensorboard(weight):
    rng = np.random.default_rng(0)
    v = rng.normal(size=500) + np.linspace(5, 0, 500)
    v[[10, 200]] = [np.nan, np.inf]
    np.testing.assert_allclose(ema(v, weight), tensorboard_smooth(v, weight), rtol=1e-9)
    assert ema([3.0, 3.0, 3.0], 0.9).tolist() == pytest.approx([3.0, 3.0, 3.0])  # no pull to 0


def test_ema_rejects_weights_outside_0_1():
    with pytest.raises(ValueError):
        ema([1.0], 1.0)


def test_downsample_keeps_spikes_and_bounds_points():
    x = np.arange(100_000)
    y = np.sin(x / 1000.0)
    y[54_321] = 50.0
    y[77_777] = -50.0
    dx, dy = downsample(x, y, 2000)
    assert len(dx) <= 2000
    assert 50.0 in dy and -50.0 in dy
    assert 54_321 in dx
    assert np.all(np.diff(dx) > 0)
    y[100] = np.nan
    assert len(downsample(x, y, 2000)[0]) <= 2000
    small = downsample(x[:50], y[:50], 2000)
    assert len(small[0]) == 50


def test_store_downsampled_with_smoothing():
    s = MetricsStore()
    s.add_many([rec("chief-0", i) for i in range(10_000)])
    x, y = s.downsampled("chief-0", "loss", n=500, smoothing=0.9)
    assert len(x) <= 500 and x[0] == 0 and x[-1] == 9999
    assert y[0] == pytest.approx(1.0)


def test_stragglers_and_progress():
    s = MetricsStore()
    assert s.stragglers() == {} and s.progress() is None
    for task, st in (("chief-0", 0.1), ("worker-1", 0.1), ("worker-2", 0.3)):
        s.add_many([rec(task, i, step_time=st) for i in range(50)])
    ratios = s.stragglers()
    assert ratios["worker-2"] == pytest.approx(3.0)
    assert ratios["chief-0"] == pytest.approx(1.0)
    assert max(ratios, key=ratios.get) == "worker-2"


def test_tasks_sort_numerically():
    s = MetricsStore()
    s.add_many([rec(f"worker-{i}", 0) for i in (10, 2, 1)] + [rec("chief-0", 0)])
    assert s.tasks() == ["chief-0", "worker-1", "worker-2", "worker-10"]


def test_a_batch_spanning_a_restart_keeps_the_new_attempt():
    s = MetricsStore()
    batch = [rec(t, i) for i in range(10) for t in ("chief-0", "worker-1")]
    batch += [rec(t, i, attempt=1, loss=9.0) for i in range(5, 9) for t in ("chief-0", "worker-1")]
    batch += [rec("chief-0", 12, attempt=0)]          # a straggling line of the old attempt
    assert s.add_many(batch) == 28
    for task in ("chief-0", "worker-1"):
        ser = s.series(task)
        assert list(ser.step) == list(range(9)) and list(ser.loss[5:]) == [9.0] * 4
    assert list(s.global_loss()[0]) == list(range(9))


def test_odd_values_do_not_break_a_batch():
    s = MetricsStore()
    assert s.add_many([rec("chief-0", 1, loss="oops"), rec("chief-0", 2, attempt=None),
                       rec("chief-0", 3, step_time=None), rec("chief-0", 2 ** 70)]) == 3
    ser = s.series("chief-0")
    assert math.isnan(ser.loss[0]) and math.isnan(ser.step_time[2]) and s.rejected == 1


def test_a_number_no_float_can_hold_is_quarantined_not_fatal():
    """A metrics line with a 400-digit loss once killed the monitor thread (and every replay)."""
    from backend.watch.lines import parse_metric_block
    store = MetricsStore()
    good = b'{"task": "worker-0", "step": 2, "loss": 0.5}'
    bad = b'{"task": "worker-0", "step": 1, "loss": ' + b"9" * 400 + b"}"
    cols, rejected = parse_metric_block(bad + b"\n" + good + b"\n")
    assert rejected == 1
    store.add_columns(cols)
    assert list(store.series("worker-0").step) == [2]
    assert store.add_many([{"task": "worker-1", "step": 1, "global_loss": 10 ** 400}]) == 0
    assert store.rejected == 1


def test_the_watch_line_says_since_when_no_data_came():
    import time
    from console.monitor_view import STALE_S, watch_line
    now = time.time()
    fresh = {"state": "connected", "last_event": now - 1, "last_heartbeat": now - 1}
    assert watch_line(fresh, now=now) == "watch: connected"
    quiet = {"state": "connected", "last_event": now - STALE_S - 5, "quarantined": 2}
    line = watch_line(quiet, now=now)
    assert "no data since " + time.strftime("%H:%M:%S", time.localtime(now - STALE_S - 5)) in line
    assert "2 malformed metric line(s) set aside" in line
