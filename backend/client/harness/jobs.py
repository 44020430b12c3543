"""Load a job module from a file and settle its parameters. Standard library only.

A job is a plain .py file (see docs/job-contract.md). The harness, the export process and the
export's verification child all load it the same way, so custom Keras objects that the job
registers are known wherever a model is rebuilt or loaded.
"""
from __future__ import annotations

import importlib.util
import os
import sys

from . import metric_line

REQUIRED = ("build_model", "make_dataset", "loss_fn", "make_optimizer")
OPTIONAL = ("metrics_fn", "make_val_dataset", "probe_batch")
BEST_MODES = ("min", "max")

# Harness defaults; a job's DEFAULTS dict overrides them, --param key=value overrides both.
DEFAULTS = {
    "global_batch_size": 64,
    "epochs": 3,
    "steps_per_epoch": 100,
    "log_every": 10,            # K: gather and write metrics every K steps
    "checkpoint_every": 50,     # 0 = only at the end of each epoch
    "keep_checkpoints": 5,      # the last N checkpoints kept (0 = all); held ones are kept too
    "keep_best_checkpoints": 0, # also keep the K best by keep_best_metric
    "keep_best_metric": "loss", # a metric's global value at the checkpoint (val_loss: validation's)
    "keep_best_mode": "min",    # "min" (losses) or "max" (accuracy)
    "val_every": 0,             # validate every N steps; 0 = at each epoch end (needs make_val_dataset)
    "val_steps": 10,            # batches per replica each validation reads
    "checkpoint_grace_s": 30.0, # an unlisted checkpoint stays on disk this long (backend/client/harness/retention.py)
    "seed": 0,
    "collective_timeout_s": 60,
    "startup_timeout_s": 30,    # give up when peers are still unreachable this long (startup.py)
    "resume_data": "skip",      # on resume: "skip" consumed batches, or "reseed" the data
    "stop_on_nan": False,       # stop every worker at the first NaN or Inf loss (harness/nonfinite.py)
    "bare": False,              # benchmark switch: no gather, metrics, checkpoints or logs
    "pace_s": 0.0,              # sleep after each step: a long demo (or a test) leaves the cores to others
    "preempt_grace_s": 25.0,    # from SIGTERM/SIGUSR2 to saved and exited (harness/preempt.py); under Slurm's KillWait 30 s
}


class JobError(Exception):
    """A job file that cannot be used; the message says what to fix."""


def load_job(path: str):
    """Import the job file under the module name ``job`` and check the contract."""
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise JobError(f"job file not found: {path}")
    # The job's folder goes on sys.path so a job may import its own helper files.
    sys.path.insert(0, os.path.dirname(path))
    spec = importlib.util.spec_from_file_location("job", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["job"] = module
    spec.loader.exec_module(module)
    missing = [name for name in REQUIRED if not callable(getattr(module, name, None))]
    if missing:
        raise JobError(f"job {path} lacks {', '.join(missing)}; see docs/job-contract.md")
    wrong = [name for name in OPTIONAL
             if getattr(module, name, None) is not None and not callable(getattr(module, name))]
    if wrong:
        raise JobError(f"job {path}: {', '.join(wrong)} must be a function; see "
                       "docs/job-contract.md")
    return module


def _coerce(key: str, text: str, default):
    """Give a --param the type of its default, so `epochs=2` is an int and `bare=1` a bool."""
    if isinstance(default, bool):
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise JobError(f"--param {key}={text}: expected true/false")
    for kind in (int, float):
        if isinstance(default, kind):
            try:
                return kind(text)
            except ValueError:
                raise JobError(f"--param {key}={text}: expected {kind.__name__}") from None
    if default is None:   # unknown key: best effort int, float, then string
        for kind in (int, float):
            try:
                return kind(text)
            except ValueError:
                pass
    return text


def settle_params(module, overrides: list[str]) -> dict:
    """Harness defaults < job DEFAULTS < ``key=value`` overrides."""
    params = dict(DEFAULTS)
    params.update(getattr(module, "DEFAULTS", {}) or {})
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise JobError(f"--param {item!r}: expected key=value")
        params[key] = _coerce(key, text, params.get(key))
    for key in ("global_batch_size", "epochs", "steps_per_epoch", "log_every"):
        if int(params[key]) < 1:
            raise JobError(f"{key} must be >= 1, got {params[key]}")
    if not float(params["startup_timeout_s"]) > 0:
        raise JobError(f"startup_timeout_s must be > 0, got {params['startup_timeout_s']}")
    if not float(params["pace_s"]) >= 0:
        raise JobError(f"pace_s must be >= 0 seconds, got {params['pace_s']}")
    if not float(params["preempt_grace_s"]) > 0:
        raise JobError(f"preempt_grace_s must be > 0 seconds, got {params['preempt_grace_s']}")
    if params["resume_data"] not in ("skip", "reseed"):
        raise JobError(f"resume_data must be skip or reseed, got {params['resume_data']}")
    _check_metric_params(module, params)
    # The job reads its own parameters (model width, learning rate...) from here.
    module.PARAMS = params
    return params


def _check_metric_params(module, params: dict) -> None:
    """Validation and keep-best settings; the metric names themselves are known only once the
    model runs (Session checks keep_best_metric against them)."""
    if int(params["val_every"]) < 0:
        raise JobError(f"val_every must be >= 0 steps (0: each epoch end), got {params['val_every']}")
    if int(params["val_steps"]) < 1:
        raise JobError(f"val_steps must be >= 1 batches, got {params['val_steps']}")
    if int(params["val_every"]) and not callable(getattr(module, "make_val_dataset", None)):
        raise JobError(f"val_every is {params['val_every']} but the job defines no "
                       "make_val_dataset: add one (docs/job-contract.md) or drop val_every")
    if params["keep_best_mode"] not in BEST_MODES:
        raise JobError(f"keep_best_mode must be min or max, got {params['keep_best_mode']!r}")
    problem = metric_line.name_problem(params["keep_best_metric"])
    if problem:
        raise JobError(f"keep_best_metric: {problem}; name a metric such as loss or val_loss")
