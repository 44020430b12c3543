"""Import TensorFlow and Keras for a harness process, about 1.5 s of CPU sooner. Standard library only.

Keras 3 imports two optional libraries whenever they are installed, and both are here (the digits
example reads its data from scikit-learn, which needs pandas): its scikit-learn wrappers, with
sklearn and scipy.stats (0.6 of the 2.8 s that ``import tensorflow, keras`` takes on this machine),
and pandas, for its array adapter (0.3 CPU-s more). TensorFlow's own legacy Keras (tf.compat.v1)
imports scipy.sparse, only to recognise sparse inputs if it can (0.1 CPU-s). Every worker, export
and verification process paid all three. No harness code uses them, so they are hidden while
TensorFlow loads (the importers treat them as not installed) and visible again after: a job that
imports sklearn, scipy or pandas still gets it. Keras then takes a DataFrame or Series as any array
(``np.asarray``): ``model.predict(frame)`` still works (tests/harness/test_units.py).

Python's cyclic garbage collector ran 876 times during that import (6 full passes over the 350,000
objects it ends with), a fifth of the import's CPU (perf), though an import makes no
garbage worth finding. It is off while TensorFlow loads, and what the import made is then frozen
(``gc.freeze``: kept out of every later pass, never freed, as a module is anyway), so the
collections while the job builds and traces its model skip those objects too: 0.4 CPU-s less a
worker (bench/README.md "A worker's start-up CPU").
"""
from __future__ import annotations

import gc
import sys

HIDDEN = ("sklearn", "pandas", "scipy")


def load() -> None:
    """Import tensorflow and keras once, without the optional sklearn, pandas and scipy and
    without garbage collection passes."""
    if "tensorflow" in sys.modules:
        return
    hidden = [name for name in HIDDEN if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None   # `import NAME` raises ImportError while this is set
    collecting = gc.isenabled()
    gc.disable()
    try:
        import keras  # noqa: F401
        import tensorflow  # noqa: F401
    finally:
        gc.freeze()
        if collecting:
            gc.enable()
        for name in hidden:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]
