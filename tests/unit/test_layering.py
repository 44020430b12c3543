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


# The backend's floors, lowest first: a module may import its own room or a lower floor, never a
# higher one or another room of its floor (docs/architecture.md, "Layout"). The record
# types that engines, runs, alerts and pages share live on the low floors (files, records), so a
# run drives its engine and the engine never reaches back into runs.
FLOORS = (
    {"backend.errors", "backend.term_text", "backend.client"},   # the host package ships alone
    {"backend.files"},
    {"backend.alerts"},
    {"backend.config"},
    {"backend.hosts"},
    {"backend.watch"},
    {"backend.diagnosis"},
    {"backend.access"},
    {"backend.records"},
    {"backend.checkpoints", "backend.engines"},
    {"backend.profiles"},   # a profile waits as Save now does (checkpoints.attempt_ended)
    {"backend.runs"},
    {"backend.sweeps"},   # a sweep launches ordinary runs
    {"backend.api", "backend.cli"},
    {"backend.__main__"},
)


def room_of(module: str) -> tuple[int, str] | None:
    """(floor, room) of a backend module: its top two name parts."""
    room = ".".join(module.split(".")[:2])
    for floor, rooms in enumerate(FLOORS):
        if room in rooms:
            return floor, room
    return None


def upward_imports(module: str, source: str) -> list[str]:
    """Every import in ``source`` (at any depth: lazy imports count) that goes up a floor or
    sideways to another room of the same floor."""
    import ast
    here = room_of(module)
    wrong = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            targets = [node.module] if node.module != "backend" else [f"backend.{a.name}" for a in node.names]
        else:
            continue
        for target in targets:
            there = room_of(target) if target.startswith("backend.") else None
            if there and here and there[1] != here[1] and there[0] >= here[0]:
                wrong.append(f"{module}:{node.lineno} -> {target}")
    return wrong


def test_every_backend_module_has_a_floor():
    assert [m for m in backend_modules() if m != "backend" and room_of(m) is None] == []


def test_no_backend_import_goes_up_a_floor():
    wrong = []
    for path in sorted((ROOT / "backend").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if module != "backend":
            wrong += upward_imports(module, path.read_text())
    assert wrong == [], wrong


def test_the_floor_check_sees_an_import_going_up():
    """The imports this check removed (issue 46): an alert writing through runs' store, a run's
    record reaching into the engines, and the keeper's log taking the CLI's text rule."""
    assert upward_imports("backend.alerts.outbox", "from backend.runs.store import write_private")
    assert upward_imports("backend.engines.base", "def f():\n    from backend.runs import store\n")
    assert upward_imports("backend.records.state", "import backend.engines.slurm")
    assert upward_imports("backend.api", "from backend.cli import main")          # sideways
    assert not upward_imports("backend.runs.handle", "from backend.engines import engine_for")


def test_only_the_engines_and_the_specs_tell_the_cluster_kinds_apart():
    """The seam a cluster kind plugs into (issue 46, docs/slurm.md): outside backend/engines/ and
    backend/config/, no code asks which kind of spec it holds (``isinstance`` on a spec), so a
    third kind touches those folders and the Cluster page only."""
    import ast
    wrong = []
    for path in sorted([*(ROOT / "backend").rglob("*.py"), *(ROOT / "console").rglob("*.py"),
                        *(ROOT / "pages").rglob("*.py")]):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(("backend/engines/", "backend/config/")):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance" and len(node.args) == 2:
                names = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
                if names & {"SlurmSpec", "ClusterSpec"}:
                    wrong.append(f"{rel}:{node.lineno}")
    assert wrong == [], wrong


CONTRACT = "backend.client.harness.contract"


def host_package_imports(source: str) -> list[str]:
    """Every import of the host package (``backend.client``) in ``source``, at any depth, but of
    its contract: what the console side may not do."""
    import ast
    wrong = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            targets = [node.module] if node.module not in ("backend", "backend.client", "backend.client.harness") \
                else [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        wrong += [f"{node.lineno} {t}" for t in targets
                  if (t == "backend.client" or t.startswith("backend.client.")) and t != CONTRACT]
    return wrong


def test_the_console_side_imports_only_the_contract_of_the_host_package():
    """What crosses the wire is declared in one module (backend/client/harness/contract.py): the
    console side (backend outside backend/client, console, pages) imports nothing else of the
    host package, so a change on one side of the wire that the other side must know shows there."""
    wrong = []
    for path in sorted([*(ROOT / "backend").rglob("*.py"), *(ROOT / "console").rglob("*.py"),
                        *(ROOT / "pages").rglob("*.py")]):
        rel = path.relative_to(ROOT).as_posix()
        if not rel.startswith("backend/client/"):
            wrong += [f"{rel}:{w}" for w in host_package_imports(path.read_text())]
    assert wrong == [], wrong


def test_the_contract_check_sees_a_reach_past_the_contract():
    assert host_package_imports("from backend.client.harness import layout")
    assert host_package_imports("def f():\n    from backend.client.harness.jobs import DEFAULTS\n")
    assert host_package_imports("import backend.client.harness.spawn")
    assert host_package_imports("from backend.client import reporting")
    assert not host_package_imports("from backend.client.harness.contract import layout, metric_line")
    assert not host_package_imports("from backend.errors import SpecError")
