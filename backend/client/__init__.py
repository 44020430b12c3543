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

# Drive runs from Python: tfconsole.launch(cluster, job) -> a handle (api.py). The backend is
# imported when they are called, so the client stays standard-library only on worker hosts.
from .api import RunHandle, attach, launch  # noqa: E402
__all__ += ["ConsoleError", "RunHandle", "attach", "launch"]


def __getattr__(name):
    # Lazy: `import tfconsole` must not load TensorFlow or Keras.
    if name == "keras":
        import importlib
        return importlib.import_module(".keras", __name__)
    if name == "Loop":
        from .loop import Loop
        return Loop
    if name == "KerasCallback":
        from .keras import Callback
        return Callback
    if name == "ConsoleError":   # the backend's error family: not on worker hosts
        from .api import __getattr__ as from_api
        return from_api(name)
    raise AttributeError(f"module 'tfconsole' has no attribute {name!r}")
