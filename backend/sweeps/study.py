"""Optuna glue: a sweep's study in its RDB storage, the spec's samplers and pruners, and the
sweep's trials read back as plain rows. The search and the pruning are Optuna's; this module
only translates the spec into Optuna's objects and Optuna's trials into what pages print."""
from __future__ import annotations

import logging
import math
from pathlib import Path

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from backend.errors import SweepError
from backend.sweeps.spec import Dimension, SweepSpec
from backend.sweeps.trials import DB

NEVER = "never_launched"   # a trial's user attr: cut off before its run existed, not in the budget
PRUNED = "pruned"          # a trial's user attr: a prune decided, {"step", "said"}, stored before its stop
# Asks for a trial whose parameters no launched trial had, before a repeat is taken: a search
# that keeps to a point it knows (TPE near its best) is not asked forever.
ASK_AGAIN = 10
optuna.logging.set_verbosity(logging.WARNING)


def storage_url(spec: SweepSpec, folder: Path) -> str:
    return spec.storage or f"sqlite:///{Path(folder).resolve() / DB}"


def open_study(spec: SweepSpec, folder: Path, name: str) -> optuna.Study:
    """The sweep's study, created or loaded; a storage that cannot be opened said by name."""
    try:
        storage = optuna.storages.RDBStorage(storage_url(spec, folder))
        study = optuna.create_study(storage=storage, study_name=name, sampler=sampler(spec),
                                    pruner=pruner(spec), load_if_exists=True,
                                    direction="minimize" if spec.direction == "min" else "maximize")
        asked = len(study.get_trials(deepcopy=False))
    except Exception as err:  # noqa: BLE001 - SQLAlchemy's and Optuna's errors, one line each
        raise SweepError(f"sweep {name}: its storage {storage_url(spec, folder)} cannot be opened "
                         f"({type(err).__name__}: {str(err).splitlines()[0][:200]})",
                         "Check the URL or the file (a damaged SQLite file: move it away and start "
                         "the sweep again).") from None
    if asked:
        # A keeper started again (``sweep resume``) goes on with the search: a sampler seeded as
        # the first keeper's was would draw its random start-up points again, the finished
        # trials' parameters. Moved by the trials already asked, the seed stays reproducible.
        study.sampler = sampler(spec, asked=asked)
    return study


def read_study(folder: Path, name: str, url: str | None = None) -> optuna.Study:
    try:
        return optuna.load_study(study_name=name, storage=url or f"sqlite:///{Path(folder).resolve() / DB}")
    except Exception as err:  # noqa: BLE001
        raise SweepError(f"sweep {name}: its trials cannot be read ({type(err).__name__}: "
                         f"{str(err).splitlines()[0][:200]})", "Check the sweep's storage file.") from None


def tell(study: optuna.Study, trial, value: float | None = None, *, state: TrialState | None = None) -> None:
    """``study.tell``, once. The grid sampler ends its grid with ``Study.stop``, which only
    ``optimize`` accepts (a RuntimeError under ask/tell); the trial is told by then (Optuna sets
    its state in a ``finally``), and the keeper's budget already stops at the grid's size."""
    try:
        study.tell(trial, value, state=state, skip_if_finished=True)
    except RuntimeError as err:
        if "Study.stop" not in str(err):
            raise


def trial_value(values, direction: str, of: str) -> float:
    """A complete trial's objective from the values it reported, in order: the best (``of:
    best``; min or max by ``direction``) or the last (``of: last``). A NaN or infinite value (a
    diverged step) is never the best; with none finite the last is told, and Optuna fails it."""
    values = [float(v) for v in values]
    finite = [v for v in values if math.isfinite(v)]
    if of == "last" or not finite:
        return values[-1]
    return min(finite) if direction == "min" else max(finite)


def sampler(spec: SweepSpec, *, asked: int = 0) -> optuna.samplers.BaseSampler:
    """The spec's sampler, for a study that holds ``asked`` trials already (its seed moves by them)."""
    seed = None if spec.seed is None else spec.seed + asked
    if spec.sampler == "grid":
        return optuna.samplers.GridSampler(grid(spec.space), seed=seed)
    if spec.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    # constant_liar: trials at once do not all pick the same point while the others run
    return optuna.samplers.TPESampler(seed=seed, constant_liar=True)


def ask(study: optuna.Study, space: tuple[Dimension, ...]) -> optuna.trial.Trial:
    """A new trial whose parameters no launched trial had, unless the space has nothing else
    (or the sampler keeps to one point ``ASK_AGAIN`` times): a repeat is asked again. A repeat
    asked again is told failed and marked ``NEVER`` (not in the budget), saying why."""
    wanted = distributions(space)
    tried = {_key(t.params): t.number for t in study.get_trials(deepcopy=False) if not t.user_attrs.get(NEVER)}
    room = space_size(space)
    for _ in range(ASK_AGAIN):
        trial = study.ask(wanted)
        twin = tried.get(_key(trial.params))
        if twin is None or (room is not None and len(tried) >= room):
            return trial
        trial.set_user_attr(NEVER, True)
        trial.set_user_attr("note", f"the same parameters as trial {twin}: asked again")
        tell(study, trial, state=TrialState.FAIL)
    return study.ask(wanted)   # the sampler keeps to what it tried: its repeat is taken


def _key(params: dict) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in params.items()))


def space_size(space: tuple[Dimension, ...]) -> int | None:
    """How many parameter sets the space holds; None when a dimension is continuous."""
    if any(d.kind not in ("choice", "int_range") for d in space):
        return None
    return grid_size(space)


def pruner(spec: SweepSpec) -> optuna.pruners.BasePruner:
    if spec.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=min(2, spec.trials or 2), n_min_trials=1)
    # Rungs are in the job's reported steps (the keeper reports each at its step): a job that
    # reports every 100 steps wants min_resource 100 (docs/sweeps.md, "Pruners").
    if spec.pruner == "successive_halving":
        return optuna.pruners.SuccessiveHalvingPruner(**dict(spec.pruner_options))
    if spec.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner(**dict(spec.pruner_options))
    return optuna.pruners.NopPruner()


def grid(space: tuple[Dimension, ...]) -> dict[str, list]:
    return {d.name: list(d.values) if d.kind == "choice" else list(range(int(d.low), int(d.high) + 1))
            for d in space}


def grid_size(space: tuple[Dimension, ...]) -> int:
    return math.prod(len(v) for v in grid(space).values())


def distributions(space: tuple[Dimension, ...]) -> dict:
    out = {}
    for d in space:
        if d.kind == "choice":
            out[d.name] = CategoricalDistribution(list(d.values))
        elif d.kind == "int_range":
            out[d.name] = IntDistribution(int(d.low), int(d.high))
        else:
            out[d.name] = FloatDistribution(d.low, d.high, log=d.kind == "log_range")
    return out


def rows(study: optuna.Study) -> list[dict]:
    """Each trial as the page and ``sweep status`` show it."""
    out = []
    for t in study.get_trials(deepcopy=False):
        steps = sorted(t.intermediate_values)
        out.append({"trial": t.number, "state": t.state.name.lower(), "params": dict(t.params),
                    "value": t.value if t.state == TrialState.COMPLETE else None,
                    "run_id": t.user_attrs.get("run_id"), "note": t.user_attrs.get("note", ""),
                    "counted": not t.user_attrs.get(NEVER),   # in the budget
                    "pruned_step": steps[-1] if t.state == TrialState.PRUNED and steps else None,
                    "curve": [[s, t.intermediate_values[s]] for s in steps]})
    return out


def best(study: optuna.Study) -> dict | None:
    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
    if not done:
        return None
    t = study.best_trial
    return {"trial": t.number, "value": t.value, "params": dict(t.params), "run_id": t.user_attrs.get("run_id")}
