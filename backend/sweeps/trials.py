"""A sweep's trials read straight from its own SQLite file, without Optuna.

``sweep status`` and the Sweeps page only read: opening the study through Optuna costs 1.7 s on a
quiet machine (Optuna, SQLAlchemy and alembic's schema check) for what a few SELECTs answer. The
rows are those of ``backend.sweeps.study.rows`` and ``best``, the same values in the same order
(tests/unit/test_sweep_trials.py holds them side by side). Only the schema this Optuna writes is
read; anything else (another schema version, a parameter kind not known here, a file that is
not such a database yet) raises ``Unknown``, and the caller reads through Optuna as before.
"""
from __future__ import annotations

import contextlib
import json
import math
import sqlite3
from pathlib import Path

DB = "optuna.db"
SCHEMA_VERSION = 12   # optuna/storages/_rdb/models.py for the pinned Optuna (5.x)
_SPECIAL = {"INF_POS": math.inf, "INF_NEG": -math.inf, "NAN": math.nan}
_BEST_ORDER = ("CASE v.value_type WHEN 'INF_NEG' THEN -1 WHEN 'FINITE' THEN 0 WHEN 'INF_POS' THEN 1 END {0}, "
               "v.value {0}")   # Optuna's own order (TrialModel.find_min/max_value_trial_id)


class Unknown(Exception):
    """Not a file this module reads: the caller asks Optuna."""


def read(db: Path, name: str) -> tuple[dict | None, list[dict]] | None:
    """(best, rows) of study ``name`` in the SQLite file ``db``, None when no such study is in
    it; ``Unknown`` when this file is not one this module knows how to read (then ask Optuna)."""
    try:
        uri = f"{Path(db).resolve().as_uri()}?mode=ro"   # read only: never creates or changes it
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=5.0)) as con:
            return _read(con, name)
    except (sqlite3.Error, ValueError, KeyError, IndexError, TypeError) as err:
        raise Unknown(f"{type(err).__name__}: {err}") from None


def _read(con: sqlite3.Connection, name: str) -> tuple[dict | None, list[dict]] | None:
    if con.execute("SELECT schema_version FROM version_info").fetchone() != (SCHEMA_VERSION,):
        raise Unknown
    found = con.execute("SELECT study_id FROM studies WHERE study_name = ?", (name,)).fetchone()
    if found is None:
        return None
    study_id = found[0]
    directions = con.execute("SELECT direction FROM study_directions WHERE study_id = ?", (study_id,)).fetchall()
    if len(directions) != 1:   # a sweep has one objective
        raise Unknown
    trials = {tid: {"trial": number, "state": state.lower(), "params": {}, "value": None, "run_id": None,
                    "note": "", "counted": True, "pruned_step": None, "curve": []}
              for tid, number, state in con.execute(
                  "SELECT trial_id, number, state FROM trials WHERE study_id = ? ORDER BY trial_id", (study_id,))}
    _fill(con, study_id, trials)
    best_id = con.execute(
        "SELECT t.trial_id FROM trials t JOIN trial_values v ON v.trial_id = t.trial_id WHERE t.study_id = ? "
        "AND t.state = 'COMPLETE' AND v.objective = 0 ORDER BY "
        + _BEST_ORDER.format("DESC" if directions[0][0] == "MAXIMIZE" else "ASC") + " LIMIT 1",
        (study_id,)).fetchone()
    rows = list(trials.values())
    if best_id is None:
        return None, rows
    best = trials[best_id[0]]
    return {"trial": best["trial"], "value": best["value"], "params": dict(best["params"]),
            "run_id": best["run_id"]}, rows


def _fill(con: sqlite3.Connection, study_id: int, trials: dict[int, dict]) -> None:
    """Each trial's parameters, value, user attributes and reported curve, as Optuna builds them."""
    def of_study(table: str, columns: str, order: str):
        return con.execute(f"SELECT x.trial_id, {columns} FROM {table} x JOIN trials t ON t.trial_id = x.trial_id "
                           f"WHERE t.study_id = ? ORDER BY {order}", (study_id,))
    for tid, name, value, dist in of_study("trial_params", "x.param_name, x.param_value, x.distribution_json",
                                           "x.param_id"):
        trials[tid]["params"][name] = _external(value, json.loads(dist))
    for tid, objective, value, kind in of_study("trial_values", "x.objective, x.value, x.value_type",
                                                "x.trial_value_id"):
        if trials[tid]["state"] == "complete" and objective == 0:
            trials[tid]["value"] = _SPECIAL.get(kind, value)
    attrs: dict[int, dict] = {}
    for tid, key, value in of_study("trial_user_attributes", "x.key, x.value_json", "x.trial_user_attribute_id"):
        attrs.setdefault(tid, {})[key] = json.loads(value)
    curves: dict[int, dict] = {}
    for tid, step, value, kind in of_study("trial_intermediate_values",
                                           "x.step, x.intermediate_value, x.intermediate_value_type", "x.step"):
        curves.setdefault(tid, {})[step] = _SPECIAL.get(kind, value)
    for tid, row in trials.items():
        user = attrs.get(tid, {})
        steps = sorted(curves.get(tid, {}))
        row.update(run_id=user.get("run_id"), note=user.get("note", ""), counted=not user.get("never_launched"),
                   pruned_step=_pruned_step(user, steps) if row["state"] == "pruned" else None,
                   curve=[[s, curves[tid][s]] for s in steps])


def _pruned_step(user: dict, steps: list) -> int | None:
    """The step the prune was decided at (stored by the keeper), else the last one reported."""
    decided = user.get("pruned")
    if isinstance(decided, dict) and isinstance(decided.get("step"), int):
        return decided["step"]
    return steps[-1] if steps else None


def _external(value: float, dist: dict):
    """A parameter's stored float as the trial's ``params`` holds it (Optuna's to_external_repr)."""
    kind, attributes = dist["name"], dist["attributes"]
    if kind == "FloatDistribution":
        return float(value)
    if kind == "IntDistribution":
        return int(value)
    if kind == "CategoricalDistribution":
        return attributes["choices"][int(value)]
    raise Unknown   # an older distribution kind: Optuna converts it
