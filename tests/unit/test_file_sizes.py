"""A long file says why it is one file: every module of backend, console and pages over LIMIT
lines carries a "Why one file of this size:" paragraph in its docstring, so the next person to
grow it reads the reason first, and a file that grew past the limit by accident fails here."""
from __future__ import annotations

import ast

from tests.conftest import ROOT

LIMIT = 400
MARK = "Why one file of this size:"


def long_files_without_a_reason(paths) -> list[str]:
    wrong = []
    for path in paths:
        text = path.read_text()
        lines = text.count("\n")
        if lines > LIMIT and MARK not in (ast.get_docstring(ast.parse(text)) or ""):
            wrong.append(f"{path.name}: {lines} lines")
    return wrong


def test_every_file_over_the_limit_says_why_it_is_one_file():
    paths = sorted(p for d in ("backend", "console", "pages") for p in (ROOT / d).rglob("*.py"))
    assert len(paths) > 100
    assert long_files_without_a_reason(paths) == []


def test_the_check_sees_a_long_file_without_a_reason(tmp_path):
    grown, said, short = tmp_path / "grown.py", tmp_path / "said.py", tmp_path / "short.py"
    grown.write_text('"""A module."""\n' + "x = 1\n" * (LIMIT + 1))
    said.write_text(f'"""A module.\n\n{MARK} it must be.\n"""\n' + "x = 1\n" * (LIMIT + 1))
    short.write_text('"""A module."""\nx = 1\n')
    assert long_files_without_a_reason([grown, said, short]) == [f"grown.py: {LIMIT + 2} lines"]
