"""The Sweep page's content, Streamlit-free: a sweep's trials as table rows, its best
trial, a figure of every trial's objective over steps, and Optuna's own plotly figures. The
numbers come from ``backend.sweeps.control.status`` (what `tfconsole sweep status --json` prints)."""
from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go
import yaml

from backend.errors import ConsoleError
from backend.hosts.ssh import SSHOptions
from backend.client.harness.contract import JOB_DEFAULTS
from backend.records.goodput import TRAINING, unrun_cost
from backend.runs import goodput
from backend.runs.store import RunStore
from backend.sweeps import best as best_export, control, keeper
from backend.sweeps.spec import sweep_from_dict
from console import paths, runs_view

EXAMPLE = paths.EXAMPLES / "sweep_keras.yaml"


def sweeps(runs_root: Path) -> list[str]:
    return control.list_sweeps(runs_root)


def status(runs_root: Path, sweep_id: str) -> tuple[dict | None, str]:
    """The sweep's status, or None and why it cannot be read (a damaged storage, say)."""
    try:
        return control.status(runs_root, sweep_id), ""
    except ConsoleError as err:
        return None, str(err)


def example_text() -> str:
    """What the Start form holds at first: the example sweep (docs/sweeps.md) to edit."""
    return EXAMPLE.read_text() if EXAMPLE.exists() else ""


def start(runs_root: Path, text: str, options: SSHOptions) -> tuple[str | None, str]:
    """Start a sweep from the YAML typed on the page: (its id, "") or (None, what to fix).
    Paths in it are read from the console's folder, as `tfconsole sweep start` reads a file's."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        return None, f"The sweep is not valid YAML ({' '.join(str(err).split())[:200]}): fix that line."
    try:
        return control.start(sweep_from_dict(data), data, runs_root, options), ""
    except ConsoleError as err:
        return None, str(err)


def export_best(runs_root: Path, sweep_id: str, options: SSHOptions) -> tuple[str, bool]:
    """Export the best trial's best checkpoint; what to say, and whether it went well."""
    try:
        result = best_export.export_best(runs_root, sweep_id, options)
    except ConsoleError as err:
        return str(err), False
    said = (f"Trial {result['trial']}'s step {result['chosen_step']} (run {result['run_id']}) exported as "
            f"{result.get('name')}")
    if result.get("match"):
        said += (f" and verified: reloaded models match the checkpoint, max abs diff "
                 f"{result['max_abs_diff']:.2e}")
    return said + ".", bool(result.get("match"))


def stop(runs_root: Path, sweep_id: str) -> tuple[str, bool]:
    """Stop the sweep: its running trials stop, its keeper ends."""
    try:
        found = keeper.stop(runs_root, sweep_id)
    except ConsoleError as err:
        return str(err), False
    return f"Sweep {sweep_id} {found.get('phase')}.", True


def trial_rows(found: dict) -> list[dict]:
    """One row per trial: state, objective, pruned at which step, its run, then a column per
    parameter (sortable, as the Runs table's metrics)."""
    rows = []
    for t in found["trials"]:
        row = {"trial": t["trial"], "state": t["state"], "objective": t["value"],
               "pruned at step": t["pruned_step"], "run": t["run_id"] or ""}
        row.update({(f"param {k}" if k in row or k == "note" else k): v for k, v in t["params"].items()})
        rows.append({**row, "note": t["note"]})
    return rows


def goodput_line(runs_root: Path, found: dict) -> str | None:
    """The sweep's goodput: training kept over every trial's task-seconds (docs/goodput.md),
    and what the pruned trials took before their prune; None before any trial reported a step.
    From this machine's copies of each trial's lines: no host is asked."""
    store = RunStore(runs_root)
    total = kept = pruned = 0.0
    counted, saved, unknown = 0, 0.0, 0
    for t in found["trials"]:
        if not t["run_id"]:
            continue
        try:
            state = store.load(t["run_id"])
            g = goodput.here(state, store.path(t["run_id"]))
        except ConsoleError:
            continue
        if not g.reported or not g.total_s:
            continue
        counted += 1
        total, kept = total + g.total_s, kept + g.causes[TRAINING]
        if t["state"] == "pruned":
            pruned += g.total_s
            left = unrun_cost(g, t["pruned_step"], _planned_steps(state))
            saved, unknown = (saved + left, unknown) if left is not None else (saved, unknown + 1)
    if not total:
        return None
    said = (f"Goodput of {counted} trial(s): {kept / total:.0%} of {total:.0f} task-seconds spent in "
            f"training kept; pruned trials took {pruned:.0f} task-seconds ({pruned / total:.0%}) before "
            "their prune")
    if saved:
        said += (f"; pruning saved about {saved:.0f} task-seconds (the steps they did not run, at "
                 "each one's own pace)")
    if unknown:
        said += f"; what pruning saved is not known for {unknown} (no planned step count: not a harness job)"
    return said + "."


def _planned_steps(state) -> int | None:
    """A harness trial's planned steps (epochs x steps_per_epoch of its job); None for others."""
    job = getattr(state, "job", None) or {}
    if job.get("kind") != "harness":
        return None
    params = {**JOB_DEFAULTS, **(job.get("params") or {})}
    try:
        return int(params["epochs"]) * int(params["steps_per_epoch"])
    except (KeyError, TypeError, ValueError):
        return None


def best_line(found: dict) -> str:
    best = found["best"]
    if not best:
        return f"No trial has finished yet ({found['direction']} {found['metric']})."
    return (f"Best so far: trial {best['trial']}, {found['metric']} = {best['value']:.6g} ({found['of']} of its values) "
            f"(run {best['run_id']}), params {runs_view.params_text(best['params'])}")


def budget_text(budget: dict) -> str:
    """``{"trials": 12, "wall_s": 3600}`` as "12 trials or 3600 s, whichever comes first"."""
    parts = [f"{budget['trials']} trials" if budget.get("trials") else "",
             f"{budget['wall_s']:g} s" if budget.get("wall_s") else ""]
    said = " or ".join(p for p in parts if p)
    return said + (", whichever comes first" if all(parts) else "")


def curves_figure(found: dict) -> go.Figure:
    """Every trial's reported objective over steps, one line each (a pruned one ends early)."""
    fig = go.Figure()
    for t in found["trials"]:
        if t["curve"]:
            steps, values = zip(*t["curve"])
            fig.add_trace(go.Scatter(x=steps, y=values, mode="lines+markers",
                                     name=f"trial {t['trial']} ({t['state']})"))
    fig.update_layout(xaxis_title="step", yaxis_title=found["metric"], height=380,
                      margin=dict(l=10, r=10, t=30, b=10))
    return fig


def optuna_figures(runs_root: Path, sweep_id: str) -> tuple[dict[str, go.Figure], list[str]]:
    """Optuna's figures by title, and why any could not be drawn (too few finished trials)."""
    import optuna.visualization as vis
    try:
        study = control.study_of(runs_root, sweep_id)
    except ConsoleError as err:
        return {}, [str(err)]
    if study is None:
        return {}, ["No trial yet."]
    out, skipped = {}, []
    for title, draw in (("Optimisation history", vis.plot_optimization_history),
                        ("Parallel coordinates", vis.plot_parallel_coordinate),
                        ("Parameter importances", vis.plot_param_importances)):
        try:
            out[title] = draw(study)
        except Exception as err:  # noqa: BLE001 - Optuna's refusals (e.g. one finished trial)
            skipped.append(f"{title}: {str(err).splitlines()[0][:200] if str(err) else type(err).__name__}")
    return out, skipped
