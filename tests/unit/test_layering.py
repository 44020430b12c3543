"""`backend` never imports Streamlit: every module, imported as its users import it, checked in a
fresh interpreter (an import anywhere in the tree would show up in sys.modules)."""
from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT

HARNESS = ROOT / "backend" / "harness"
# Imports every module named on the command line (a path: a harness script, run as the hosts run
# it, by file name with its folder on sys.path), then prints the Streamlit modules it pulled in.
CHECK = """import importlib, json, sys
for name in sys.argv[1:]:
    if name.endswith(".py"):
        sys.path.insert(0, {harness!r})
        name = name.rsplit("/", 1)[-1][:-3]
    importlib.import_module(name)
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "streamlit")))
"""


def backend_modules() -> list[str]:
    names = []
    for path in sorted((ROOT / "backend").rglob("*.py")):
        if path.is_relative_to(HARNESS):
            names.append(str(path))
        else:
            parts = path.relative_to(ROOT).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def streamlit_imported_by(names: list[str]) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", CHECK.format(harness=str(HARNESS)), *names],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_no_backend_module_imports_streamlit():
    names = backend_modules()
    assert len(names) > 40 and "backend.hosts.ssh" in names and str(HARNESS / "train.py") in names
    assert streamlit_imported_by(names) == []


def test_the_check_sees_an_import_of_streamlit():
    assert "streamlit" in streamlit_imported_by(["console.state"])
