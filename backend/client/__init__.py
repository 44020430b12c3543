"""tfconsole: report metrics, honour Save now and write listed checkpoints from a job script.

Shipped with every run as RUN/lib/tfconsole/ (on the job's PYTHONPATH). Standard library only
at import; the Keras callback loads TensorFlow when it is made. Outside a console run every
call is a harmless no-op, so the same script still runs by hand.

    import tfconsole
    model.fit(..., callbacks=[tfconsole.KerasCallback()])
"""
from __future__ import annotations

from .context import Context
from .reporting import checkpoint_dir, close, context, report, saved, should_save

__all__ = ["Context", "KerasCallback", "checkpoint_dir", "close", "context", "report", "saved",
           "should_save"]


def __getattr__(name):
    # Lazy: `import tfconsole` must not load TensorFlow or Keras.
    if name == "keras":
        import importlib
        return importlib.import_module(".keras", __name__)
    if name == "KerasCallback":
        from .keras import Callback
        return Callback
    raise AttributeError(f"module 'tfconsole' has no attribute {name!r}")
