"""Runs page helpers: a table of runs, what each ran (``backend.runs.record``), what two runs
differ in, and each run's loss read back from its local folder."""
from __future__ import annotations

import time
from pathlib import Path

from backend.watch.metrics import MetricsStore
from backend.runs import goodput, record
from backend.runs.store import RunStore
from backend.access import identity
from backend.records.state import RunState
from backend.errors import ConsoleError
from backend.sweeps import control
from backend.watch import summary
from console.markdown_safe import home_short, md_escape

SWEEP_CURVES = 8   # a sweep's trials drawn at first on Compare: more hide one another


def damaged_note(store: RunStore) -> str | None:
    """The runs the page cannot show (a damaged state file: every list skips them), each named
    with why, as Markdown for ``st.warning``; None when there are none. Escaped: the reasons
    quote a path and the file's own values."""
    damaged = [found for found in store.list_all() if not isinstance(found, RunState)]
    if not damaged:
        return None
    lines = "\n".join(f"- {md_escape(err.problem)}" for err in damaged)
    return (f"{len(damaged)} run(s) under {md_escape(home_short(store.root))} cannot be shown: their state file is "
            f"damaged, and they are left out below.\n\n{lines}\n\n"
            "Inspect each file by hand; the runs' logs are still in their folders.")


def mine(states: list[RunState]) -> list[RunState]:
    """The runs this console's person started (``identity.current()``'s name)."""
    me = identity.current().name
    return [s for s in states if (identity.Identity.of(s.owner) or identity.Identity("", "", "")).name == me]


def sweep_ids(states: list[RunState]) -> list[str]:
    """The sweeps the runs are trials of (``RunState.sweep``), newest first."""
    return sorted({s.sweep["sweep"] for s in states if s.sweep and s.sweep.get("sweep")}, reverse=True)


def of_sweep(states: list[RunState], sweep_id: str) -> list[RunState]:
    return [s for s in states if (s.sweep or {}).get("sweep") == sweep_id]


def objective_of(runs_root: Path, sweep_id: str) -> str | None:
    """The metric the sweep optimises (its kept spec), or None when its folder cannot say."""
    try:
        return control.load_spec(control.folder(runs_root, sweep_id)).metric
    except ConsoleError:
        return None


def run_rows(states: list[RunState], root: RunStore | None = None) -> list[dict]:
    """A row per run: what it ran (job, parameters: a sweep trial's own where the job has none),
    how it went (phase, duration), and with ``root`` each metric's last and best global value from
    its local copy of the metrics (``summary.of_mirror``: parsed once, then only the lines added
    since the last click), ahead of who and when. Sorting the table by a column answers "which run
    is best by val_accuracy"."""
    rows = []
    for s in states:
        owner = identity.Identity.of(s.owner)
        row = {"run": s.run_id, "phase": s.phase,
               "sweep": f"{s.sweep['sweep']} #{s.sweep['trial']}" if s.sweep else "",
               "params": params_text(s.job.get("params") or (s.sweep or {}).get("params")),
               "duration": duration_text(s)}
        if root is not None:
            row["goodput %"] = goodput_cell(s, root.path(s.run_id))
            row.update(metric_cells(summary.of_mirror(root.path(s.run_id))))
        row.update({"job": job_text(s.job), "owner": owner.name if owner else "", "live": s.live,
                    "attempt": s.attempt, "tasks": len(s.tasks),
                    "created": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s.created))})
        rows.append(row)
    return rows


_GOODPUT: dict = {}   # (run, phase, attempt, sizes of its line copies) -> goodput %: read once


def goodput_cell(s: RunState, local_dir: Path) -> float | None:
    """An ended run's goodput in % (a number: the column sorts), from this machine's copies of
    its chief's lines (docs/goodput.md); None for a live run (Monitor's bar follows it) and for a
    run that reported no step. Read once per run and copy: a page of many runs reads no file
    twice."""
    if s.live:
        return None
    sizes = tuple(p.stat().st_size if p.exists() else -1 for p in goodput.copies(local_dir))
    key = (s.run_id, str(s.phase), s.attempt, sizes)
    if key not in _GOODPUT:
        share = goodput.here(s, local_dir).share
        _GOODPUT[key] = None if share is None else round(100 * share, 1)
    return _GOODPUT[key]


def goodput_split(store: RunStore, run_ids: list[str]) -> list[dict]:
    """Compare's badput split: one row per cause (docs/goodput.md), one column per run, each
    the cause's share of that run's task-seconds in %; runs still live are read up to now."""
    found = {}
    for run_id in run_ids:
        try:
            found[run_id] = goodput.here(store.load(run_id), store.path(run_id))
        except ConsoleError:
            continue
    causes = list(dict.fromkeys(c for g in found.values() for c in g.causes))
    return [{"cause": c, **{r: round(100 * g.causes.get(c, 0.0) / g.total_s, 1) if g.total_s and g.reported
                             else None for r, g in found.items()}} for c in causes]


def job_text(job: dict, width: int = 48) -> str:
    """The module's file name, or the command with its program's name only, cut to ``width``."""
    if job.get("module"):
        return Path(job["module"]).name
    argv = [str(a) for a in job.get("command") or []]
    text = " ".join([Path(argv[0]).name, *argv[1:]]) if argv else ""
    text = " ".join(text.split())   # a `-c` script's newlines as spaces: one line per run
    return text if len(text) <= width else text[:width - 1] + "…"


def params_text(params) -> str:
    if not isinstance(params, dict):
        return ""
    # A sampled float to 4 significant digits: 0.5108, not 0.510827605197663 (the record keeps all).
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(params.items()))


def duration_text(s: RunState) -> str:
    """From the first attempt's start to the last one's end (or now, while it runs)."""
    if not s.attempts:
        return ""
    end = s.attempts[-1].ended or (time.time() if s.live else None)
    if end is None:
        return ""
    seconds = max(0, int(end - s.attempts[0].started))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def metric_cells(found: dict) -> dict:
    """"<metric>": its last global value and "best <metric>": its best (for metrics with a
    direction: losses lowest, accuracies highest)."""
    cells = {}
    for name, v in found["global"].items():
        cells[name] = v["last"]
        if v["mode"]:
            cells[f"best {name}"] = v["best"]
    return cells


def load_metrics(run_dir: Path) -> MetricsStore:
    """The run's metrics from the monitor's local mirror (no host is contacted), parsed once
    per version of the file (shared: do not add to it)."""
    return summary.from_mirror(run_dir)


def compare_series(root: RunStore, runs: list[str], metric: str, *, x: str = "step") -> dict:
    """run -> (x, global values of ``metric``); ``x="time"``: seconds since the run's first
    point. Runs with no such metric are left out."""
    out = {}
    for run in runs:
        xs, ys = load_metrics(root.path(run)).metric(metric, x=x)
        if len(xs):
            out[run] = ((xs - xs[0]) if x == "time" else xs, ys)
    return out


def metric_names(root: RunStore, runs: list[str]) -> list[str]:
    """Every metric any of ``runs`` reported, the loss first."""
    seen: dict[str, None] = {}
    for run in runs:
        for name in load_metrics(root.path(run)).metric_names():
            seen.setdefault(name, None)
    return list(seen) or ["loss"]


def what_ran(store: RunStore, run_id: str) -> tuple[list[str], str]:
    """The picked run's record as lines, and its uncommitted diff ("" when none): from the local
    folder only (the hosts' versions are those kept when an attempt ended)."""
    shown = record.view(store.load(run_id), store.path(run_id))
    return record.summary(shown), (shown["code"].get("git") or {}).get("diff", "")


def differences(store: RunStore, a: str, b: str) -> list[dict]:
    """What differs between runs ``a`` and ``b``: one row per parameter, host field, version,
    code identity or package, with the value in each."""
    return record.differences(record.view(store.load(a), store.path(a)),
                              record.view(store.load(b), store.path(b)))
