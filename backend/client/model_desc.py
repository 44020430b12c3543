"""What Export needs to rebuild a model with no strategy: RUN/checkpoints/model.json.

The custom loop's entry (``describe``) and the one ``tfconsole.KerasCallback`` writes for fit
share ``architecture`` (harness/export.py's ``Described`` reads both): the architecture
(``to_json``) and the inputs' shapes for a probe batch; beside them which Keras, and for a
custom loop also ``checkpoint_key`` (the attribute of the script's ``tf.train.Checkpoint`` that
holds the model) and, when the script registered one, ``builder`` (a function in a module of its
own that Export imports and calls instead of reading the architecture).
"""
from __future__ import annotations

import inspect
import json
import os
import sys
import time


def keras_of(model) -> str:
    """"tf_keras" or "keras": the Keras the model object belongs to (not what the env says)."""
    return "tf_keras" if type(model).__module__.split(".")[0] == "tf_keras" else "keras"


def checkpoint_key(checkpoint, model) -> str:
    """The name under which ``checkpoint`` tracks ``model`` (``tf.train.Checkpoint(model=m)``)."""
    try:
        children = checkpoint._trackable_children()   # noqa: SLF001 - TF 2.x's one way to see them
    except Exception:  # noqa: BLE001 - an older TF: the conventional name
        return "model"
    return next((name for name, value in children.items() if value is model), "model")


def builder_entry(build) -> dict:
    """Where Export finds ``build``: its module's file and name; refused when it lives in the
    script itself (importing the script would train again)."""
    module = sys.modules.get(getattr(build, "__module__", "") or "")
    name = getattr(build, "__qualname__", "")
    path = inspect.getsourcefile(build) if module is not None else None
    if module is None or build.__module__ == "__main__" or not path or "<" in name:
        raise ValueError(f"tfconsole.Loop: build_model={name or build!r} must be a top-level "
                         "function in a module of its own (Export imports that module; importing "
                         "the training script would train again): move it to, e.g., model.py")
    return {"module": build.__module__, "file": os.path.abspath(path), "name": name}


def describe(model, *, key: str, build=None) -> dict:
    """The model.json entry: architecture or the reason there is none, inputs, key, builder."""
    kname = keras_of(model) if model is not None else "keras"
    kmod = sys.modules.get(kname)
    import tensorflow as tf
    entry = {"keras": kname, "keras_version": getattr(kmod, "__version__", None),
             "tensorflow": tf.__version__, "time": time.time(), "checkpoint_key": key,
             "source": "tfconsole.Loop", "config": None}
    if build is not None:
        entry["builder"] = builder_entry(build)
    if model is None:
        entry["reason"] = "no model object given (tfconsole.Loop(model=...))"
        return entry
    entry.update(architecture(model))
    return entry


def architecture(model) -> dict:
    """What Export rebuilds a model from, for the loop and the Keras callback alike: the inputs'
    shapes for a probe batch and the architecture (``to_json``: no compile, no weights, no
    collective), or ``config`` None and the reason."""
    import tensorflow as tf
    out: dict = {"config": None}
    try:
        out["inputs"] = [{"shape": [None if d is None else int(d) for d in t.shape],
                          "dtype": str(getattr(t.dtype, "name", t.dtype))}
                         for t in tf.nest.flatten(model.inputs)]
        out["config"] = json.loads(model.to_json())
    except Exception as exc:  # noqa: BLE001 - a subclassed model has no config: say why
        out["reason"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return out
