"""Import TensorFlow and Keras for a harness process, about 0.9 s of CPU sooner. Standard library only.

Keras 3 imports two optional libraries whenever they are installed, and both are here (the digits
example reads its data from scikit-learn, which needs pandas): its scikit-learn wrappers, with
sklearn and scipy.stats (0.6 of the 2.8 s that ``import tensorflow, keras`` takes on this machine),
and pandas, for its array adapter (0.3 CPU-s more). Every worker, export and verification process
paid both. No harness code uses them, so they are hidden while TensorFlow loads (Keras treats them
as not installed) and visible again after: a job that imports sklearn or pandas still gets it.
Keras then takes a DataFrame or Series as any array (``np.asarray``): ``model.predict(frame)``
still works (tests/harness/test_units.py).
"""
from __future__ import annotations

import sys

HIDDEN = ("sklearn", "pandas")


def load() -> None:
    """Import tensorflow and keras once, without Keras's optional sklearn and pandas."""
    if "tensorflow" in sys.modules:
        return
    hidden = [name for name in HIDDEN if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None   # `import NAME` raises ImportError while this is set
    try:
        import keras  # noqa: F401
        import tensorflow  # noqa: F401
    finally:
        for name in hidden:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]
