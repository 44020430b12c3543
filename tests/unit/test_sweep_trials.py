"""A sweep's trials read straight from its SQLite file (backend/sweeps/trials.py) are the rows
Optuna gives (backend/sweeps/study.py's rows and best), value for value and in the same order:
every parameter kind, every trial state, infinite and NaN values, user attributes, both
directions. A file that reader does not know is said, never guessed at."""
from __future__ import annotations

import json
import math

import optuna
import pytest
from optuna.trial import TrialState

from backend.sweeps import study, trials
from backend.sweeps.spec import sweep_from_dict


def data_of(direction: str) -> dict:
    """A sweep file's data: four parameters, one of each kind."""
    return {
        "cluster": {"tasks": [{"role": "worker", "host": "127.0.0.1", "transport": "local", "tf_port": 2000}]},
        "job": {"kind": "command", "command": ["true", "{lr}", "{x}", "{units}", "{opt}"]},
        "space": {"lr": {"log_range": [1e-4, 1e-1]}, "x": {"range": [0.0, 1.0]}, "units": {"int_range": [1, 8]},
                  "opt": {"choice": ["adam", "sgd", True, 3]}},
        "objective": {"metric": "val_loss", "direction": direction}, "budget": {"trials": 8},
        "sampler": "random", "seed": 3}


def spec_of(direction: str):
    return sweep_from_dict(data_of(direction))


def filled(tmp_path, direction: str) -> optuna.Study:
    spec = spec_of(direction)
    found = study.open_study(spec, tmp_path, "s1")
    dists = study.distributions(spec.space)
    values = [0.5, float("inf"), 0.25, float("-inf"), 0.25]
    for i, value in enumerate(values):   # complete, with a tie (0.25) and both infinities
        t = found.ask(dists)
        t.set_user_attr("run_id", f"run-{i}")
        t.report(value, step=1)
        study.tell(found, t, value)
    t = found.ask(dists)                 # pruned after a NaN and an infinite report
    t.report(float("nan"), step=1)
    t.report(float("inf"), step=3)
    t.set_user_attr("note", "pruned at 3")
    study.tell(found, t, state=TrialState.PRUNED)
    t = found.ask(dists)                 # failed, never launched (out of the budget)
    t.set_user_attr("never_launched", True)
    study.tell(found, t, state=TrialState.FAIL)
    found.ask(dists)                     # still running
    return found


def same(a, b) -> bool:
    """Equal, with NaN equal to NaN (json keeps the order of keys: compared too)."""
    return json.dumps(a, allow_nan=True) == json.dumps(b, allow_nan=True)


@pytest.mark.parametrize("direction", ["min", "max"])
def test_the_direct_read_gives_optunas_rows_and_best(tmp_path, direction):
    found = filled(tmp_path, direction)
    best, rows = trials.read(tmp_path / trials.DB, "s1")
    assert same(rows, study.rows(found)), (rows, study.rows(found))
    assert same(best, study.best(found))
    assert best["value"] == (-math.inf if direction == "min" else math.inf)
    assert [r["state"] for r in rows] == ["complete"] * 5 + ["pruned", "fail", "running"]
    assert math.isnan(rows[5]["curve"][0][1]) and rows[5]["pruned_step"] == 3 and rows[6]["counted"] is False
    assert {type(v) for r in rows[:5] for v in r["params"].values()} >= {float, int}


def test_the_best_of_finite_values_and_no_complete_trial(tmp_path):
    spec = spec_of("min")
    found = study.open_study(spec, tmp_path, "s1")
    assert trials.read(tmp_path / trials.DB, "s1") == (None, [])
    for value in (0.5, 0.25, 0.25, 0.75):
        t = found.ask(study.distributions(spec.space))
        study.tell(found, t, value)
    best, _ = trials.read(tmp_path / trials.DB, "s1")
    assert same(best, study.best(found)) and best["value"] == 0.25


def test_no_such_study_is_none_and_a_file_it_does_not_know_is_said(tmp_path):
    filled(tmp_path, "min")
    assert trials.read(tmp_path / trials.DB, "another") is None
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"garbage" * 100)
    with pytest.raises(trials.Unknown):
        trials.read(garbage, "s1")
    with pytest.raises(trials.Unknown):   # never created by reading
        trials.read(tmp_path / "absent.db", "s1")
    assert not (tmp_path / "absent.db").exists()
