"""`backend` and the pure half of `console` never import Streamlit: every module, imported as its
users import it, checked in a fresh interpreter (an import anywhere in the tree would show up in
sys.modules). Only `console.ui` (and the entry script, console/app.py) draws."""
from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT

# Imports every module named on the command line, then prints the Streamlit modules it pulled in.
CHECK = """import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "streamlit" or m.startswith("console.ui"))))
"""


def backend_modules() -> list[str]:
    names = []
    for path in sorted((ROOT / "backend").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def console_pure_modules() -> list[str]:
    """Every module of ``console`` outside ``console.ui``, but the Streamlit entry script."""
    return ["console." + p.stem if p.stem != "__init__" else "console"
            for p in sorted((ROOT / "console").glob("*.py")) if p.name != "app.py"]


def streamlit_imported_by(names: list[str]) -> list[str]:
    """The Streamlit modules (and those of ``console.ui``) that importing ``names`` pulls in."""
    proc = subprocess.run([sys.executable, "-c", CHECK, *names],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_no_backend_module_imports_streamlit():
    names = backend_modules()
    assert len(names) > 40 and "backend.hosts.ssh" in names and "backend.client.harness.train" in names
    assert streamlit_imported_by(names) == []


def test_the_check_sees_an_import_of_streamlit():
    assert "streamlit" in streamlit_imported_by(["console.ui.state"])


def test_no_pure_console_module_imports_streamlit_or_the_ui():
    names = console_pure_modules()
    assert {"console.actions", "console.live_run", "console.tokens", "console.__main__"} <= set(names)
    assert streamlit_imported_by(names) == []


def test_the_host_package_imports_only_itself_the_standard_library_and_tensorflow():
    """backend/client is what ships to a host as `tfconsole` (the client and its harness): at
    module level it imports only its own modules (relative imports), the standard library and
    TensorFlow/Keras/NumPy, which a worker host has. The Python API (api.py) imports the backend
    inside its functions only, so nothing of the console is needed on a host."""
    import ast
    allowed = set(sys.stdlib_module_names) | {"tensorflow", "keras", "tf_keras", "numpy"}
    wrong = []
    for path in sorted((ROOT / "backend" / "client").rglob("*.py")):
        for node in ast.parse(path.read_text()).body:   # module level, including `if`/`try` bodies
            for sub in ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node]:
                if isinstance(sub, ast.Import):
                    tops = [a.name.split(".")[0] for a in sub.names]
                elif isinstance(sub, ast.ImportFrom) and not sub.level:
                    tops = [sub.module.split(".")[0]]
                else:
                    continue
                wrong += [f"{path.relative_to(ROOT)}:{sub.lineno} {t}" for t in tops if t not in allowed]
    assert wrong == [], wrong
