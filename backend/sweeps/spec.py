"""A sweep's spec: a job, its cluster, a search space, an objective, a budget. Pure builders:
plain data (parsed YAML, a form, a Python dict) in, a frozen ``SweepSpec`` out, or ``SpecErrors``
naming every bad field and what to do about it.

A parameter lands where the job reads it: a harness job's ``params``; for a ``kind: command``
job, ``env.NAME`` sets an environment variable and a plain name fills ``{name}`` in the
command's arguments. A name the job does not take is refused naming the closest one.
"""
from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping

from backend.client.harness.contract import JOB_DEFAULTS as HARNESS_DEFAULTS
from backend.client.harness.contract import name_problem
from backend.config.values import show_value, unknown_keys
from backend.config.params import module_param_keys
from backend.config.yaml_files import read_yaml
from backend.config.kinds import any_cluster_from_dict, load_any_cluster
from backend.config.slurm_spec import SlurmSpec, is_slurm_spec
from backend.config.spec import ClusterSpec, JobKind, JobSpec, Role, job_from_dict, load_job
from backend.errors import SpecError, SpecErrors

KINDS = ("choice", "range", "int_range", "log_range")
SAMPLERS = ("tpe", "random", "grid")
PRUNERS = ("none", "median", "successive_halving", "hyperband")
# Options a pruner takes in `pruner: {NAME: {...}}`, in the job's reported steps, and their defaults:
# rungs from the first step (Optuna's own "auto" for successive halving waits for a finished
# trial, too late for a short sweep); hyperband's last rung at the steps a finished trial
# reported, unless max_resource says it.
PRUNER_OPTIONS = {"successive_halving": {"min_resource": 1, "reduction_factor": 3},
                  "hyperband": {"min_resource": 1, "max_resource": "auto", "reduction_factor": 3}}
DIRECTIONS = ("min", "max")
OFS = ("best", "last")   # a complete trial's value: its best reported value, or its last
TOP_KEYS = ("cluster", "job", "space", "objective", "budget", "at_once", "sampler", "pruner",
            "seed", "storage")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SPACE_FIX = ("Write each parameter as `name: {choice: [a, b]}`, `{range: [low, high]}`, "
              "`{int_range: [low, high]}` or `{log_range: [low, high]}`.")


@dataclass(frozen=True)
class Dimension:
    """One searched parameter: ``kind`` one of KINDS; ``values`` for a choice, else low/high."""
    name: str
    kind: str
    values: tuple = ()
    low: float = 0.0
    high: float = 0.0


@dataclass(frozen=True)
class SweepSpec:
    cluster: ClusterSpec | SlurmSpec
    job: JobSpec
    space: tuple[Dimension, ...]
    metric: str
    direction: str = "min"
    of: str = "best"                 # a complete trial's value: its best reported value, or its last
    trials: int | None = None        # budget: how many trials in all (None: wall time alone)
    wall_s: float | None = None      # budget: no new trial after this long
    at_once: int = 1
    sampler: str = "tpe"
    pruner: str = "none"
    pruner_options: tuple = ()       # (name, value) pairs, every option of PRUNER_OPTIONS[pruner]
    seed: int | None = None
    storage: str | None = None       # an Optuna RDB URL; None: SQLite in the sweep's folder


def load_sweep(path: str | Path) -> SweepSpec:
    """A sweep file; its cluster and job may be paths, read from the sweep file's folder."""
    return sweep_from_dict(read_yaml(path), base_dir=Path(path).absolute().parent)


def sweep_from_dict(data: object, *, base_dir: Path | None = None) -> SweepSpec:
    if not isinstance(data, Mapping):
        raise SpecErrors([SpecError("sweep", f"expected a mapping, got {show_value(data)}",
                                    f"Write it as keys {', '.join(TOP_KEYS)}.")])
    base = Path(base_dir or Path.cwd())
    errors = unknown_keys(data, TOP_KEYS, "")
    cluster = _part(data, "cluster", base, errors, load_any_cluster, any_cluster_from_dict)
    job = _part(data, "job", base, errors, load_job, lambda d: job_from_dict(d, base_dir=base))
    space = _space(data.get("space"), errors)
    metric, direction, of = _objective(data.get("objective"), errors)
    trials, wall_s = _budget(data.get("budget"), errors)
    at_once = _count(data.get("at_once", 1), "at_once", errors, low=1)
    sampler = _one_of(data.get("sampler") or "tpe", "sampler", SAMPLERS, errors)
    pruner, pruner_options = _pruner(data.get("pruner") or "none", errors)
    seed = None if data.get("seed") is None else _count(data.get("seed"), "seed", errors, low=0)
    storage = data.get("storage")
    if storage is not None and not (isinstance(storage, str) and "://" in storage):
        errors.append(SpecError("storage", f"expected a database URL, got {show_value(storage)}",
                                "Give an SQLAlchemy URL like sqlite:////path/sweep.db, or leave it out."))
    if job is not None:
        errors += unknown_targets(job, space)
    if sampler == "grid":
        errors += [SpecError(f"space.{d.name}", f"a grid cannot search a {d.kind}",
                             "Use choice or int_range with the grid sampler, or sampler: tpe.")
                   for d in space if d.kind in ("range", "log_range")]
    if cluster is not None and at_once is not None:
        errors += _at_once_fits(cluster, at_once)
    if errors:
        raise SpecErrors(errors)
    return SweepSpec(cluster, job, space, metric, direction, of, trials, wall_s, at_once, sampler,
                     pruner, pruner_options, seed, storage)


def _part(data: Mapping, name: str, base: Path, errors: list, load, build):
    """The sweep's cluster or job: a file's path (against ``base``) or the spec inline."""
    value = data.get(name)
    if value is None:
        errors.append(SpecError(name, f"{name} is missing",
                                f"Give the {name} file's path, or the {name} itself as a mapping."))
        return None
    try:
        if isinstance(value, str):
            path = Path(value).expanduser()
            return load(path if path.is_absolute() else base / path)
        return build(value)
    except SpecErrors as errs:
        errors += [SpecError(f"{name}.{e.field}", e.problem.split(": ", 1)[-1].rstrip("."), e.fix)
                   for e in errs.errors]
    except SpecError as err:
        errors.append(SpecError(f"{name}.{err.field}", err.problem.split(": ", 1)[-1].rstrip("."), err.fix))
    return None


def _space(value: object, errors: list) -> tuple[Dimension, ...]:
    if not isinstance(value, Mapping) or not value:
        errors.append(SpecError("space", f"expected parameters to search, got {show_value(value)}", _SPACE_FIX))
        return ()
    out = []
    for name, entry in value.items():
        try:
            out.append(dimension(str(name), entry))
        except SpecError as err:
            errors.append(err)
    return tuple(out)


def dimension(name: str, entry: object) -> Dimension:
    """One parameter's range from ``{kind: [...]}``; SpecError naming ``space.NAME``."""
    where = f"space.{name}"
    if not isinstance(entry, Mapping) or len(entry) != 1 or next(iter(entry)) not in KINDS:
        raise SpecError(where, f"expected one of {', '.join(KINDS)}, got {show_value(entry)}", _SPACE_FIX)
    kind, raw = next(iter(entry.items()))
    if kind == "choice":
        if not isinstance(raw, (list, tuple)) or not raw or not all(_scalar(v) for v in raw):
            raise SpecError(where, f"a choice needs a non-empty list of values, got {show_value(raw)}",
                            "Write it as `choice: [a, b, c]` (numbers, strings or true/false).")
        return Dimension(name, kind, values=tuple(raw))
    if not (isinstance(raw, (list, tuple)) and len(raw) == 2 and all(_number(v) for v in raw)):
        raise SpecError(where, f"a {kind} needs [low, high], got {show_value(raw)}",
                        f"Write it as `{kind}: [low, high]` with two numbers.")
    low, high = raw
    if kind == "int_range" and not all(float(v).is_integer() for v in raw):
        raise SpecError(where, f"an int_range needs whole numbers, got {show_value(list(raw))}",
                        "Use whole numbers, or range: for real values.")
    if low == high:
        raise SpecError(where, f"the range [{low}, {high}] is empty (one value)",
                        f"Widen it, or write `choice: [{low}]` to fix the value.")
    if low > high:
        raise SpecError(where, f"the range [{low}, {high}] is inverted (low above high)",
                        f"Write it as [{high}, {low}].")
    if kind == "log_range" and low <= 0:
        raise SpecError(where, f"a log_range must stay above zero, got [{low}, {high}]",
                        "Start it above zero (e.g. 1e-5), or use range: for a linear scale.")
    if kind == "int_range":
        return Dimension(name, kind, low=int(low), high=int(high))
    return Dimension(name, kind, low=float(low), high=float(high))


def _scalar(value: object) -> bool:
    return isinstance(value, (str, bool)) or _number(value)


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _objective(value: object, errors: list) -> tuple[str, str, str]:
    fix = "Write it as `objective: {metric: val_loss, direction: min}` (a metric the job reports)."
    if not isinstance(value, Mapping):
        errors.append(SpecError("objective", f"expected a mapping, got {show_value(value)}", fix))
        return "", "min", "best"
    errors += unknown_keys(value, ("metric", "direction", "of"), "objective.")
    metric = value.get("metric")
    problem = name_problem(metric)
    if problem:
        errors.append(SpecError("objective.metric", problem, fix))
    direction = _one_of(value.get("direction") or "min", "objective.direction", DIRECTIONS, errors)
    of = _one_of(value.get("of") or "best", "objective.of", OFS, errors)
    return metric if not problem else "", direction or "min", of or "best"


def _pruner(value: object, errors: list) -> tuple[str | None, tuple]:
    """``pruner: NAME`` or ``pruner: {NAME: {option: value}}``: the name and every option of it
    (PRUNER_OPTIONS' defaults where not given)."""
    options: object = {}
    if isinstance(value, Mapping) and len(value) == 1:
        value, options = next(iter(value.items()))
    name = _one_of(value, "pruner", PRUNERS, errors)
    if name is None:
        return None, ()
    defaults = PRUNER_OPTIONS.get(name, {})
    if options is None:   # `{hyperband: }` in YAML: its defaults
        options = {}
    if not defaults and options:
        errors.append(SpecError(f"pruner.{name}", f"{name} takes no options, got {show_value(options)}",
                                f"Write it as `pruner: {name}`."))
        return name, ()
    if not isinstance(options, Mapping):
        errors.append(SpecError(f"pruner.{name}", f"expected options as a mapping, got {show_value(options)}",
                                f"Write it as `pruner: {{{name}: {{min_resource: 1}}}}` "
                                f"(options: {', '.join(defaults)}), or `pruner: {name}`."))
        return name, tuple(defaults.items())
    errors += unknown_keys(options, tuple(defaults), f"pruner.{name}.")
    got = {**defaults, **{k: v for k, v in options.items() if k in defaults and v is not None}}
    for key, low in (("min_resource", 1), ("reduction_factor", 2)):
        if key in options and _count(options[key], f"pruner.{name}.{key}", errors, low=low) is None:
            got[key] = defaults[key]
    top = got.get("max_resource")
    if top not in (None, "auto") and (isinstance(top, bool) or not isinstance(top, int)
                                      or top <= got["min_resource"]):
        errors.append(SpecError(f"pruner.{name}.max_resource",
                                f"expected a step above min_resource ({got['min_resource']}) or auto, "
                                f"got {show_value(top)}",
                                "Give the last step the job reports (its steps, not a count of reports), "
                                "or auto: the steps the first finished trial reported."))
    return name, tuple(got.items())


def _budget(value: object, errors: list) -> tuple[int | None, float | None]:
    fix = "Write it as `budget: {trials: 20}`, `{wall_s: 3600}` or both."
    if not isinstance(value, Mapping) or not (value.get("trials") or value.get("wall_s")):
        errors.append(SpecError("budget", f"expected trials and/or wall_s, got {show_value(value)}", fix))
        return None, None
    errors += unknown_keys(value, ("trials", "wall_s"), "budget.")
    trials = None if value.get("trials") is None else _count(value["trials"], "budget.trials", errors, low=1)
    wall = value.get("wall_s")
    if wall is not None and not (_number(wall) and wall > 0):
        errors.append(SpecError("budget.wall_s", f"expected seconds above zero, got {show_value(wall)}", fix))
        wall = None
    return trials, None if wall is None else float(wall)


def _count(value: object, where: str, errors: list, *, low: int) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        errors.append(SpecError(where, f"expected a whole number of at least {low}, got {show_value(value)}",
                                f"Give a whole number, {low} or more."))
        return None
    return value


def _one_of(value: object, where: str, allowed: tuple, errors: list) -> str | None:
    if value in allowed:
        return value
    close = difflib.get_close_matches(str(value), allowed, n=1)
    hint = f"Did you mean {close[0]!r}? " if close else ""
    errors.append(SpecError(where, f"unknown value {show_value(value)}", f"{hint}Use one of: {', '.join(allowed)}."))
    return None


def known_targets(job: JobSpec) -> frozenset[str] | None:
    """The parameter names a job takes: a harness job's params (None when its module's cannot be
    read), a command job's ``{name}`` placeholders (``env.NAME`` is always taken)."""
    if job.kind == JobKind.HARNESS:
        return module_param_keys(job.module, HARNESS_DEFAULTS)
    return frozenset(m for arg in job.command for m in _PLACEHOLDER.findall(arg))


def unknown_targets(job: JobSpec, space: tuple[Dimension, ...]) -> list[SpecError]:
    known = known_targets(job)
    out = []
    for dim in space:
        if job.kind == JobKind.COMMAND and dim.name.startswith("env."):
            if not _ENV_NAME.fullmatch(dim.name[4:]):
                out.append(SpecError(f"space.{dim.name}", "not an environment variable name",
                                     "Use letters, digits and '_' after env., not starting with a digit."))
            continue
        if known is None or dim.name in known:
            continue
        close = difflib.get_close_matches(dim.name, sorted(known), n=1)
        hint = f"Did you mean {close[0]!r}? " if close else ""
        takes = ("the harness's params and its module's DEFAULTS" if job.kind == JobKind.HARNESS
                 else "a {name} in its command's arguments, or env.NAME")
        out.append(SpecError(f"space.{dim.name}", f"the job takes no parameter {dim.name!r}",
                             f"{hint}A {job.kind.value} job takes {takes}."))
    return out


def with_params(job: JobSpec, params: Mapping[str, object]) -> JobSpec:
    """The job as one trial runs it: each parameter where the job reads it."""
    if job.kind == JobKind.HARNESS:
        return replace(job, params={**job.params, **params})
    env = {**job.env, **{k[4:]: str(v) for k, v in params.items() if k.startswith("env.")}}
    plain = {k: str(v) for k, v in params.items() if not k.startswith("env.")}
    command = tuple(_PLACEHOLDER.sub(lambda m: plain.get(m.group(1), m.group(0)), arg) for arg in job.command)
    return replace(job, env=env, command=command)


# ---- host groups: trials at once take disjoint groups of the cluster's hosts ------------------

def _host_key(task) -> tuple:
    return (task.host, task.ssh_port, task.user)


def host_groups(cluster: ClusterSpec | SlurmSpec, at_once: int) -> list[ClusterSpec | SlurmSpec]:
    """The cluster cut into ``at_once`` clusters on disjoint hosts (consecutive hosts together),
    each with at most one chief: a group without the chief makes its first task chief when the
    cluster had one. On Slurm every trial is a job of the whole allocation's shape, and Slurm's
    queue decides when each runs: ``at_once`` jobs are submitted, not hosts divided."""
    if is_slurm_spec(cluster):
        return [cluster] * at_once
    hosts = list(dict.fromkeys(_host_key(t) for t in cluster.tasks))
    size, extra = divmod(len(hosts), at_once)
    groups, start = [], 0
    for i in range(at_once):
        mine = set(hosts[start:start + size + (1 if i < extra else 0)])
        start += size + (1 if i < extra else 0)
        tasks = [t for t in cluster.tasks if _host_key(t) in mine]
        had_chief = any(t.role == Role.CHIEF for t in cluster.tasks)
        if had_chief and not any(t.role == Role.CHIEF for t in tasks):
            tasks[0] = replace(tasks[0], role=Role.CHIEF)
        groups.append(ClusterSpec(tuple(tasks)))
    return groups


def _at_once_fits(cluster, at_once: int) -> list[SpecError]:
    if is_slurm_spec(cluster):
        return []   # trials are jobs; the queue holds those the partition cannot run yet
    hosts = len({_host_key(t) for t in cluster.tasks})
    if at_once <= hosts:
        return []
    return [SpecError("at_once", f"{at_once} trials at once need {at_once} disjoint host groups, "
                                 f"and the cluster has {hosts} host(s)",
                      f"Set at_once to {hosts} or less (trials then run one group each), or add hosts.")]
