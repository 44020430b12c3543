"""The wire between the console and the hosts, in one place: what one side writes and the other
reads. Every module of the console side (``backend`` outside ``backend/client``, ``console``,
``pages``) imports the host package through this module and nothing else of it
(tests/unit/test_layering.py guards it), so what the two sides share is this list and no more;
the host side's modules import the same modules. docs/wire-protocol.md is its prose.

  layout         the run folder: its files and folders, by name (``RUN/metrics.jsonl``, ...)
  metric_line    one line of ``metrics.jsonl``: its fields, limits and the valid-line rule
  taskenv        the environment variables a task starts with (run, attempt, resume step, ...)
  tf_config_doc  TF_CONFIG: built for each task by the console, read back once on the host
  host_commands  every ``python -S RUN/lib COMMAND``: its arguments, answer and exit codes
  train_info     ``train.json``: what a job says about its own training (steps, batch, model)
  jobs           a harness job's parameters and their defaults (the console's forms show them)
  preempt        the exit code and record of a task that saved on a preemption signal
  profiling      a profile request's bounds and the folder its traces land in
  watch          the watch agent's event stream (``python RUN/lib watch``): its events and bounds

Standard library only, as the host package is.
"""
from __future__ import annotations

from . import (host_commands, jobs, layout, metric_line, preempt, profiling, taskenv, tf_config_doc,
               train_info, watch)
from .jobs import BEST_MODES, DEFAULTS as JOB_DEFAULTS
from .metric_line import name_problem

__all__ = ["host_commands", "jobs", "layout", "metric_line", "preempt", "profiling", "taskenv",
           "tf_config_doc", "train_info", "watch", "BEST_MODES", "JOB_DEFAULTS", "name_problem"]
