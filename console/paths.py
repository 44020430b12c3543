"""Where the page scripts and the example jobs are.

In a checkout they are the top-level ``pages/`` and ``examples/``; an installed wheel carries them
inside this package (``console/pages``, ``console/examples``: pyproject.toml's package-dir), so
``tfconsole console`` and its built-in demo job work from any folder, with no checkout.
"""
from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent


def _shipped(name: str) -> Path:
    inside = HERE / name
    return inside if inside.is_dir() else HERE.parent / name


PAGES = _shipped("pages")
EXAMPLES = _shipped("examples")
