"""What Monitor and ``status`` say about input wait and same data, from the metric lines."""
from types import SimpleNamespace

from backend.diagnosis import data_checks
from backend.watch.lines import parse_metric_block
from backend.watch.metrics import MetricsStore
from console import monitor_view


def _line(task, step, attempt=0, **extra):
    return {"run_id": "r", "attempt": attempt, "task": task, "step": step, "epoch": 1,
            "time": 1.0, "loss": 1.0, "global_loss": 1.0, "step_time": 0.005,
            "examples_per_sec": 1.0, **extra}


def _notes(records):
    store = MetricsStore()
    store.add_many(records)
    return monitor_view.data_notes(SimpleNamespace(metrics=store))


def test_a_worker_that_waits_most_of_its_step_is_named_with_the_fix():
    records = [_line("worker-0", 1, first_batch=11), _line("worker-2", 1, first_batch=12)]
    for step in (10, 20, 30):
        records += [_line("worker-0", step, input_wait=0.02), _line("worker-2", step, input_wait=0.6)]
    caption, warnings = _notes(records)
    assert caption == "waiting for data: worker-0 2 %, worker-2 60 %"
    assert warnings == ["worker-2 waits for data 60 % of each step: prefetch "
                        "(ds.prefetch(tf.data.AUTOTUNE)), more parallel calls (map(..., "
                        "num_parallel_calls=tf.data.AUTOTUNE)) or a faster store."]


def test_a_fast_input_says_nothing_but_its_figures():
    records = [_line(t, s, input_wait=0.25) for s in (10, 20) for t in ("worker-0", "worker-1")]
    caption, warnings = _notes(records)
    assert caption == "waiting for data: worker-0 25 %, worker-1 25 %" and warnings == []
    assert _notes([_line("worker-0", 10)]) == ("", [])    # lines without the figure (a BYO script)


def test_the_share_is_the_mean_of_the_last_sync_points():
    store = MetricsStore()
    store.add_many([_line("worker-0", s, input_wait=0.9) for s in (10, 20, 30)])
    store.add_many([_line("worker-0", s, input_wait=0.1) for s in (40, 50, 60, 70, 80)])
    assert store.input_wait() == {"worker-0": 0.1}      # the old slow phase has left the window


def test_identical_first_batches_warn_with_the_fix_and_a_new_attempt_clears_it():
    store = MetricsStore()
    store.add_many([_line(t, 1, first_batch=42) for t in ("worker-0", "worker-1", "worker-2")])
    _, warnings = monitor_view.data_notes(SimpleNamespace(metrics=store))
    assert len(warnings) == 1 and warnings[0].startswith(
        "Same data on several workers: the first batches of worker-0, worker-1, worker-2 are identical")
    assert "input_context" in warnings[0] and "options.experimental_distribute.auto_shard_policy" in warnings[0]
    store.add_many([_line("worker-0", 51, attempt=1, first_batch=1),
                    _line("worker-1", 51, attempt=1, first_batch=2)])
    assert store.same_data() == []


def test_the_figures_survive_the_bulk_reader():
    """A console catching up reads big blocks with pyarrow: the fields come through it too."""
    import json
    lines = [_line("worker-0", 1, first_batch=7), _line("worker-1", 1, first_batch=7)]
    lines += [_line(f"worker-{i % 2}", 2 + i, input_wait=0.5) for i in range(6000)]
    cols, bad = parse_metric_block("".join(json.dumps(r) + "\n" for r in lines).encode())
    store = MetricsStore()
    store.add_columns(cols)
    assert bad == 0 and store.same_data() == [["worker-0", "worker-1"]]
    assert store.input_wait() == {"worker-0": 0.5, "worker-1": 0.5}


def test_status_line_names_the_fix():
    line = data_checks.same_data_line([["worker-0", "worker-1"]])
    assert "worker-0, worker-1" in line and "auto_shard_policy" in line
    assert data_checks.same_data_line([]) == ""
