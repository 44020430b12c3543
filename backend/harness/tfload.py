"""Import TensorFlow and Keras for a harness process, 0.6 s sooner. Standard library only.

Keras 3 imports its scikit-learn wrappers whenever scikit-learn is installed (it is: the digits
example reads its data from it), and with them sklearn and scipy.stats: 0.6 of the 2.8 s that
``import tensorflow, keras`` takes on this machine, paid by every worker, export and verification
process. No harness code uses those wrappers, so sklearn is hidden while TensorFlow loads (Keras
treats it as not installed) and visible again after: a job that imports sklearn still gets it.
"""
from __future__ import annotations

import sys


def load() -> None:
    """Import tensorflow and keras once, without Keras's optional sklearn wrappers."""
    if "tensorflow" in sys.modules:
        return
    hide = "sklearn" not in sys.modules
    if hide:
        sys.modules["sklearn"] = None   # `import sklearn` raises ImportError while this is set
    try:
        import keras  # noqa: F401
        import tensorflow  # noqa: F401
    finally:
        if hide and sys.modules.get("sklearn", 0) is None:
            del sys.modules["sklearn"]
