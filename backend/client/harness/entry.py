"""How a host-side process starts another of ours: the same Python, the same package, the same name.

On a host the package is ``tfconsole`` in ``RUN/lib/``; in the console's checkout (tests) it is
``backend.client``. A child runs its module with ``-m`` under the parent's own package name, with
the folder holding that package first on its ``PYTHONPATH``, so parent and child agree on every
module's identity and nothing is importable by a bare name. Standard library only.
"""
from __future__ import annotations

import os
import sys

_PACKAGE = __package__ or "tfconsole.harness"     # "tfconsole.harness" or "backend.client.harness"
# The folder holding the top-level package: one level up per dotted part (harness/, then its parents).
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    *[os.pardir] * len(_PACKAGE.split("."))))


def argv(module: str, *args: str, site: bool = False) -> list[str]:
    """A new process running the harness module ``module``'s ``__main__`` block (``python -m
    PACKAGE.harness.module``). ``site=False`` adds ``-S``: no site-packages, a fast start for the
    standard-library-only modules."""
    return [sys.executable, *(() if site else ("-S",)), "-m", f"{_PACKAGE}.{module}", *args]


def env(base: dict | None = None) -> dict[str, str]:
    """``base`` (this process's environment) with the package's folder first on PYTHONPATH."""
    out = dict(os.environ if base is None else base)
    out["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, out.get("PYTHONPATH")) if p)
    return out
