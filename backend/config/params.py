"""A job's parameters: ``params`` and ``env`` of a job spec, the harness's known parameters with
their types and bounds, and the keys a job module reads (for a misspelt key's "did you mean")."""
from __future__ import annotations

import ast
import difflib
import math
from pathlib import Path
from typing import Mapping

from backend.client.harness.contract import BEST_MODES
from backend.client.harness.contract import name_problem
from backend.config.values import each_entry, is_int, show_value
from backend.errors import SpecError

# Known harness params that must be whole numbers, with their minimum; other params are free.
_INT_PARAMS = {"epochs": 1, "steps_per_epoch": 1, "global_batch_size": 1, "log_every": 1,
               "checkpoint_every": 0, "keep_checkpoints": 0, "keep_best_checkpoints": 0, "seed": None,
               "val_every": 0, "val_steps": 1}
# Known harness params that are seconds: (minimum, whether the minimum itself is allowed, an example).
_SECONDS_PARAMS = {"checkpoint_grace_s": (0.0, True, 30), "startup_timeout_s": (0.0, False, 30),
                   "collective_timeout_s": (0.0, True, 60)}   # 0: no bound on a step


def parse_params(value: object, where: str) -> dict:
    fix = "Use identifier keys (like epochs) with number, text or true/false values."
    return each_entry(value, where, fix, _param_value)


def unknown_params(params: Mapping, known: frozenset[str] | None, module_name: str) -> list[SpecError]:
    """A harness job's params that nothing reads: a typo (``steps_per_epcoh``) would otherwise
    launch silently with the default. ``known``: the harness's keys and the module's ``DEFAULTS``;
    None when the module's keys cannot be read without running it (then nothing is refused)."""
    if known is None:
        return []
    out = []
    for key in params:
        if key in known:
            continue
        close = difflib.get_close_matches(key, sorted(known), n=1)
        hint = f"Did you mean {close[0]!r}? " if close else ""
        out.append(SpecError(f"params.{key}", f"unknown key {key!r}",
                             f"{hint}A harness job reads the harness's params (docs/job-contract.md) and the "
                             f"keys of its module's DEFAULTS: fix the name, or add the key to DEFAULTS "
                             f"in {module_name}."))
    return out


def module_param_keys(path: str, harness_keys) -> frozenset[str] | None:
    """The params a harness job module reads: the harness's keys and those of its literal
    ``DEFAULTS = {...}``, read without running it. None when that cannot be known: the file
    unreadable, DEFAULTS built by code, or changed after it is set (``DEFAULTS["x"] = ...``)."""
    import ast
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    keys: set[str] = set(harness_keys)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            named = [t for t in targets if isinstance(t, ast.Name) and t.id == "DEFAULTS"]
            if any(isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == "DEFAULTS"
                   for t in targets) or (named and not isinstance(node, ast.Assign)):
                return None
            if named:
                try:
                    value = ast.literal_eval(node.value)
                except (ValueError, SyntaxError, TypeError):
                    return None
                if not isinstance(value, dict):
                    return None
                keys |= {k for k in value if isinstance(k, str)}
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.value.id == "DEFAULTS" and node.attr in ("update", "setdefault", "__setitem__")):
            return None
    return frozenset(keys)


def _param_value(key: str, item: object, where: str, fix: str) -> object:
    if key == "keep_best_mode" and item not in BEST_MODES:
        raise SpecError(where, f"expected min or max, got {show_value(item)}",
                        "Use min for a loss (lower is better), max for accuracy-like metrics.")
    if key == "keep_best_metric" and (problem := name_problem(item)):
        raise SpecError(where, problem, "Name a metric the job reports, e.g. loss, or val_loss for a job "
                                        "with validation (docs/job-contract.md).")
    if key in _INT_PARAMS:
        low = _INT_PARAMS[key]
        if not is_int(item) or (low is not None and item < low):
            raise SpecError(where, f"expected a whole number{'' if low is None else f' of {low} or more'}, "
                                   f"got {show_value(item)}", fix)
    if key in _SECONDS_PARAMS:
        low, inclusive, example = _SECONDS_PARAMS[key]
        number = isinstance(item, (int, float)) and not isinstance(item, bool) and math.isfinite(item)
        if not number or item < low or (item == low and not inclusive):
            raise SpecError(where, f"expected a number of seconds {'of' if inclusive else 'above'} {low:g}"
                                   f"{' or more' if inclusive else ''}, got {show_value(item)}",
                            f"Set {where} to e.g. {example}.")
    if isinstance(item, float) and not math.isfinite(item):
        raise SpecError(where, f"{show_value(item)} is not a finite number", fix)
    if not isinstance(item, (bool, int, float, str)) or (isinstance(item, str) and "\0" in item):
        raise SpecError(where, f"{show_value(item)} is not a number, text or true/false", fix)
    return item


def parse_env(value: object, where: str) -> dict:
    fix = "Use names like OMP_NUM_THREADS ([A-Za-z_][A-Za-z0-9_]*) with text values; quote true/false."
    return each_entry(value, where, fix, _env_value)


def _env_value(key: str, item: object, where: str, fix: str) -> str:
    if key == "TF_CONFIG":  # the console writes TF_CONFIG per task; a user copy would break it
        raise SpecError(where, "TF_CONFIG is set by the console", "Remove it from env.")
    if is_int(item) or (isinstance(item, float) and math.isfinite(item)):
        item = str(item)
    if not isinstance(item, str) or "\0" in item:
        raise SpecError(where, f"{show_value(item)} is not a text value", fix)
    return item


