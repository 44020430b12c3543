"""tfconsole: report metrics, honour Save now and write listed checkpoints from a job script.

Shipped with every run as RUN/lib/tfconsole/ (on the job's PYTHONPATH), with harness/: the worker harness,
hostctl and export, the rest of what runs on a host (one package, one name: __main__.py). Standard library only
at import; the Keras callback loads TensorFlow when it is made. Outside a console run every
call is a harmless no-op, so the same script still runs by hand.

    import tfconsole
    model.fit(..., callbacks=[tfconsole.KerasCallback()])      # fit
    loop = tfconsole.Loop(strategy, checkpoint_manager, model=model)   # a custom loop (loop.py)
"""
from __future__ import annotations

from .context import Context
from .reporting import checkpoint_dir, close, context, report, saved, should_save

__all__ = ["Context", "KerasCallback", "Loop", "checkpoint_dir", "close", "context", "report", "saved",
           "should_save"]

# Drive runs from Python: tfconsole.launch(cluster, job) -> a handle. These live in the console's
# backend (backend/api.py), found when first used: a worker host has only this package, and
# `import tfconsole` loads nothing of the console.
CONSOLE_API = ("ConsoleError", "RunHandle", "attach", "launch", "sweep_start", "sweep_status", "sweep_stop",
               "sweep_resume", "sweep_export")
__all__ += list(CONSOLE_API)


def __getattr__(name):
    # Lazy: `import tfconsole` must not load TensorFlow or Keras.
    import importlib
    if name == "keras":
        return importlib.import_module(".keras", __name__)
    if name == "Loop":
        from .loop import Loop
        return Loop
    if name == "KerasCallback":
        from .keras import Callback
        return Callback
    if name in CONSOLE_API:
        try:
            api = importlib.import_module("backend.api")
        except ImportError:
            raise AttributeError(f"tfconsole.{name} drives runs from the console's machine, where "
                                 "the tfconsole project is installed; this Python has only the "
                                 "package a run ships to its hosts") from None
        return getattr(api, name)
    raise AttributeError(f"module 'tfconsole' has no attribute {name!r}")
