"""The Sweep page (issue 50): a sweep's trials with state, objective and the step a pruned one
stopped at, the best trial and its run, the curves of every trial and Optuna's figures; drawn
from a sweep's own folder and Optuna storage (no keeper, no hosts)."""
from __future__ import annotations

import time

import yaml
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from backend.sweeps import control, study as studies
from backend.sweeps.spec import sweep_from_dict

DATA = {"cluster": {"tasks": [{"role": "chief", "host": "10.0.0.1", "tf_port": 2222},
                              {"role": "worker", "host": "10.0.0.2", "tf_port": 2222}]},
        "job": {"kind": "command", "command": ["python", "-c", "pass", "{x}"]},
        "space": {"x": {"range": [0.0, 1.0]}}, "objective": {"metric": "val_loss", "direction": "min"},
        "budget": {"trials": 3}, "at_once": 2, "sampler": "random", "pruner": "median"}


def _finished_sweep(runs_dir, sweep_id="sweep-a") -> None:
    here = control.folder(runs_dir, sweep_id)
    here.mkdir(parents=True)
    (here / control.SPEC).write_text(yaml.safe_dump(DATA))
    control.set_state(here, phase="finished", reason="budget spent", created=time.time())
    found = studies.open_study(sweep_from_dict(DATA), here, sweep_id)
    dist = {"x": FloatDistribution(0.0, 1.0)}
    for n, (x, state) in enumerate(((0.3, TrialState.COMPLETE), (0.9, TrialState.COMPLETE),
                                    (0.95, TrialState.PRUNED))):
        curve = {s: (x - 0.3) ** 2 + 1.0 / s for s in range(1, 6 if state == TrialState.COMPLETE else 3)}
        found.add_trial(create_trial(params={"x": x}, distributions=dist, state=state,
                                     value=curve[max(curve)] if state == TrialState.COMPLETE else None,
                                     intermediate_values=curve,
                                     user_attrs={"run_id": f"{sweep_id}-t{n}", "group": n % 2}))


def test_the_sweep_page_shows_trials_best_curves_and_optunas_figures(page, runs_dir):
    _finished_sweep(runs_dir)
    at = page("sweep")
    assert not at.exception, at.exception
    table = at.dataframe[0].value
    assert list(table["state"]) == ["complete", "complete", "pruned"]
    assert list(table["pruned at step"].fillna(-1)) == [-1, -1, 2]
    assert list(table["run"]) == ["sweep-a-t0", "sweep-a-t1", "sweep-a-t2"]
    assert list(table["x"]) == [0.3, 0.9, 0.95]   # a column per parameter
    assert any("Best so far: trial 0" in t.value and "run sweep-a-t0" in t.value and "params x=0.3" in t.value
               for t in at.text)
    assert any("budget: 3 trials;" in c.value for c in at.caption)
    titles = [s.value for s in at.subheader]
    assert "Optimisation history" in titles and "Parallel coordinates" in titles
    assert len(at.get("plotly_chart")) >= 3   # the curves and Optuna's figures


def test_the_sweep_page_without_a_sweep_says_how_to_start_one(page, runs_dir):
    at = page("sweep")
    assert not at.exception and "tfconsole sweep start" in at.info[0].value


def test_a_damaged_sweep_storage_is_said_on_the_page(page, runs_dir):
    here = control.folder(runs_dir, "sweep-b")
    here.mkdir(parents=True)
    (here / control.SPEC).write_text(yaml.safe_dump(DATA))
    (here / studies.DB).write_bytes(b"garbage" * 100)
    at = page("sweep")
    assert not at.exception and "cannot be read" in at.error[0].value


def test_the_runs_table_filters_by_sweep_and_compares_its_trials_on_the_objective(page, runs_dir):
    """Filtered to a sweep, the table lists its trials only, and Compare draws all of them over
    the sweep's objective (read from its kept spec) from each run's kept metric lines."""
    import json
    import sys

    from backend.config.spec import cluster_to_dict, default_cluster
    from backend.records.state import Attempt, Phase, RunState, TaskState
    from backend.runs.store import RunStore
    from backend.watch import chief_metrics
    _finished_sweep(runs_dir)
    store = RunStore(runs_dir)
    for run_id, tag in (("sweep-a-t0", {"sweep": "sweep-a", "trial": 0, "params": {"x": 0.3}}),
                        ("sweep-a-t1", {"sweep": "sweep-a", "trial": 1, "params": {"x": 0.9}}),
                        ("sweep-a-t2", {"sweep": "sweep-a", "trial": 2, "params": {"x": 0.95}}),
                        ("sweep-b-t0", {"sweep": "sweep-b", "trial": 0, "params": {"x": 0.5}}), ("solo", None)):
        store.reserve(run_id)
        x = (tag or {"params": {"x": 0.0}})["params"]["x"]
        lines = [{"task": "chief", "step": s, "attempt": 1, "metrics": {"loss": 1.0 / s},
                  "global": {"loss": 1.0 / s, "val_loss": (x - 0.3) ** 2 + 1.0 / s}} for s in range(1, 6)]
        (store.path(run_id) / chief_metrics.KEPT).write_text("".join(json.dumps(x) + "\n" for x in lines))
        store.save(RunState(run_id, 1000.0, cluster_to_dict(default_cluster(sys.executable)),
                            {"kind": "command", "command": ["true"]},
                            [TaskState("chief-0", 0, "localhost", f"tfconsole/{run_id}")],
                            [Attempt(1, 1000.0)], phase=Phase.FINISHED, sweep=tag))
    at = page("runs")
    assert not at.exception and len(at.dataframe[0].value) == 5
    at.selectbox(key="runs_sweep").set_value("sweep-a").run()
    table = at.dataframe[0].value.sort_values("run")
    assert list(table["run"]) == ["sweep-a-t0", "sweep-a-t1", "sweep-a-t2"]
    assert list(table["sweep"]) == ["sweep-a #0", "sweep-a #1", "sweep-a #2"]
    assert list(table["best val_loss"]) == [0.2, (0.9 - 0.3) ** 2 + 0.2, (0.95 - 0.3) ** 2 + 0.2]
    assert at.selectbox(key="compare_metric_sweep-a").value == "val_loss"
    assert len(at.multiselect(key="compare_more_sweep-a").value) == 1   # the third trial
    curves = at.get("plotly_chart")[-1].proto.spec
    assert curves.count('"name":"sweep-a-t') >= 3, curves[:500]


def test_export_the_best_names_what_stands_in_its_way(page, runs_dir):
    """The best trial's run is gone from the runs folder: the click says so, no traceback."""
    _finished_sweep(runs_dir)
    at = page("sweep")
    at.button(key="sweep_export").click().run()
    assert not at.exception, at.exception
    assert at.error and "sweep-a-t0" in at.error[0].value, [e.value for e in at.error]


def test_a_viewer_is_offered_no_export_of_the_best(page, runs_dir):
    _finished_sweep(runs_dir)
    (runs_dir / "roles.yaml").write_text("default: viewer\n")
    at = page("sweep")
    assert not at.exception, at.exception
    assert at.button(key="sweep_export").disabled


def test_a_sweep_typed_on_the_page_is_checked_field_by_field_and_nothing_is_started(page, runs_dir):
    """The Start form holds the example sweep; a mistake in what the operator typed is named by
    field and leaves no sweep behind (a real sweep started from the page is the CLI's start)."""
    at = page("sweep")
    assert "objective:" in at.text_area(key="sweep_yaml").value   # the example, to edit
    bad = DATA | {"space": {"x": {"range": [1.0, 0.0]}}}
    at.text_area(key="sweep_yaml").set_value(yaml.safe_dump(bad))
    at.button[0].click().run()   # the form's Start sweep
    assert not at.exception, at.exception
    assert at.error and "space" in at.error[0].value, [e.value for e in at.error]
    assert control.list_sweeps(runs_dir) == []
    at.text_area(key="sweep_yaml").set_value("space: [unclosed")
    at.button[0].click().run()
    assert at.error and "not valid YAML" in at.error[0].value


def test_the_sweeps_goodput_adds_its_trials_and_names_what_pruned_ones_took(runs_dir, monkeypatch):
    """The aggregation only: each trial's own goodput is ``backend.runs.goodput.here`` (checked on
    real runs in tests/faults/test_faults.py and tests/app/test_runs_page.py); here it is given."""
    from backend.records.goodput import TRAINING, Goodput
    from console import sweep_view
    from types import SimpleNamespace
    own = {"sweep-a-t0": Goodput(100.0, {TRAINING: 80.0}), "sweep-a-t1": Goodput(60.0, {TRAINING: 30.0}),
           "sweep-a-t2": Goodput(40.0, {TRAINING: 10.0})}
    # The pruned trial (t2, pruned at step 2) planned 1 x 12 steps: 10 unrun at 5 task-s a step.
    job = {"kind": "harness", "params": {"epochs": 1, "steps_per_epoch": 12}}
    monkeypatch.setattr(sweep_view.RunStore, "load", lambda self, run_id: SimpleNamespace(run_id=run_id, job=job))
    monkeypatch.setattr(sweep_view.goodput, "here", lambda state, local_dir: own[state.run_id])
    _finished_sweep(runs_dir)
    found, _ = sweep_view.status(runs_dir, "sweep-a")
    said = sweep_view.goodput_line(runs_dir, found)
    assert said.startswith("Goodput of 3 trial(s): 60% of 200 task-seconds"), said
    assert "pruned trials took 40 task-seconds (20%)" in said, said
    assert "pruning saved about 50 task-seconds" in said, said
    job = {"kind": "command"}   # a plain script's planned steps are not known
    assert "what pruning saved is not known for 1" in sweep_view.goodput_line(runs_dir, found)
    monkeypatch.setattr(sweep_view.goodput, "here", lambda state, local_dir: Goodput(0.0, {}, reported=False))
    assert sweep_view.goodput_line(runs_dir, found) is None   # nothing reported yet: no line
