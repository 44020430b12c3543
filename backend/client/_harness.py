"""The run's own harness modules (standard library only), loaded under private names.

The checkpoint layout, retention, metrics lines and Save-now files have one definition: the
harness copy in RUN/harness/ (or backend/harness/ when running from the repository). They are
loaded by file, not put on sys.path, so names like ``layout`` never shadow a user's modules.
"""
from __future__ import annotations

import importlib.util
import os
import sys

_DEPS = {"layout": (), "ckpt_index": (), "metric_line": (), "report": ("layout", "metric_line"), "retention": ("ckpt_index",),
         "requests_dir": ("ckpt_index", "layout"), "preempt": ("layout",), "taskenv": ()}
_loaded: dict = {}


def _folders(run_dir: str | None) -> list[str]:
    here = os.path.dirname(os.path.abspath(__file__))
    found = [os.path.join(run_dir, "harness")] if run_dir else []
    # RUN/lib/tfconsole/ -> RUN/harness/; backend/client/ -> backend/harness/; installed by
    # `pip install .`: site-packages/tfconsole/ -> site-packages/backend/harness/
    return found + [os.path.join(here, os.pardir, os.pardir, "harness"),
                    os.path.join(here, os.pardir, "harness"),
                    os.path.join(here, os.pardir, "backend", "harness")]


def load(name: str, run_dir: str | None = None):
    if name in _loaded:
        return _loaded[name]
    deps = {d: load(d, run_dir) for d in _DEPS[name]}
    path = next((os.path.join(f, f"{name}.py") for f in _folders(run_dir)
                 if os.path.exists(os.path.join(f, f"{name}.py"))), None)
    if path is None:
        raise ImportError(f"tfconsole: the harness's {name}.py is not in {_folders(run_dir)}; "
                          "launch the job from the console, which ships it with the run")
    # Its own `import ckpt_index` must find our copy, for the time of the import only.
    saved = {d: sys.modules.get(d) for d in deps}
    sys.modules.update(deps)
    try:
        spec = importlib.util.spec_from_file_location(f"_tfconsole_{name}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module   # dataclasses look their module up while it loads
        spec.loader.exec_module(module)
    finally:
        for d, old in saved.items():
            if old is None:
                sys.modules.pop(d, None)
            else:
                sys.modules[d] = old
    _loaded[name] = module
    return module
