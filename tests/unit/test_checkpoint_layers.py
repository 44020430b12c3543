"""Checkpoint listing sits below run life; restore is a run-life step (issue 28: no folder circle).

The keeper (``backend.runs``) reads ``backend.checkpoints``; restore begins an attempt, so it lives
in ``backend.runs.restore``. If ``backend.checkpoints`` imported ``backend.runs`` again, the two
folders would import each other.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def imported(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_checkpoints_never_import_run_life():
    found = sorted(n for n in imported(ROOT / "backend" / "checkpoints.py") if n.startswith("backend.runs"))
    assert not found, f"backend/checkpoints.py imports {found}: run-life steps belong in backend/runs/"


def test_restore_is_a_run_life_step():
    from backend.runs import restore
    assert callable(restore.restore) and "begin_attempt" in vars(restore)
