"""Installed as an ordinary package (issue 47 #9): a wheel built from the checkout, installed into
a fresh venv, used from a folder outside the checkout. Every page opens (the page scripts travel
inside the wheel), and the built-in demo job (examples/, inside the wheel too) trains on two
local workers whose harness is the installed package's.

The fresh venv reaches this venv's site-packages through a .pth file for its dependencies
(Streamlit, TensorFlow): what `pip install` of the wheel would download, which this machine's
closed network does not allow. Nothing of the checkout is on its path (checked)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.conftest import ROOT
from rig.sshd import free_port

pytestmark = pytest.mark.slow

PAGES = """
import json, sys
from streamlit.testing.v1 import AppTest
import backend, console
from console import tokens
from console.ui import auth
app = sys.argv[1]
at = AppTest.from_file(app, default_timeout=120)
at.session_state[auth.SESSION_KEY] = tokens.read_token(tokens.token_path())
seen = {"backend": backend.__file__, "console": console.__file__}
at.run()
seen["launch"] = [str(e.value) for e in at.exception]
for name in ("monitor", "checkpoints", "cluster", "runs", "audit", "launch"):
    at.switch_page(f"pages/{name}.py").run()
    seen[name] = [str(e.value) for e in at.exception]
seen["start_button"] = any(b.label == "Start" for b in at.button)
print("SEEN", json.dumps(seen))
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path]:
    """(the fresh venv's python, its site-packages holding the wheel's files)."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "src"
    top = {".git", ".venv", "runs", "test-output", "build", "tests", "bench", "tfconsole.egg-info"}
    shutil.copytree(ROOT, source, ignore=lambda folder, names: [
        n for n in names if n == "__pycache__" or (Path(folder) == ROOT and n in top)])
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            "-w", str(tmp / "dist"), str(source)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    wheel = next((tmp / "dist").glob("tfconsole-*.whl"))
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    out = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site),
                          str(wheel)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    (site / "zz_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return python, site


def test_every_page_of_the_installed_console_opens_outside_the_checkout(installed, tmp_path):
    python, site = installed
    out = subprocess.run([str(python), "-c", PAGES, str(site / "console" / "app.py")], cwd=tmp_path,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.split("SEEN ", 1)[1])
    assert seen["backend"].startswith(str(site)) and seen["console"].startswith(str(site)), seen
    assert all(seen[p] == [] for p in ("launch", "monitor", "checkpoints", "cluster", "runs")), seen
    assert seen["start_button"] is True


def test_the_installed_demo_job_trains_on_two_local_workers(installed, tmp_path):
    python, site = installed
    demo = site / "console" / "examples" / "synthetic.py"
    assert demo.is_file()
    cluster = {"tasks": [{"role": "worker", "host": "127.0.0.1", "transport": "local", "tf_port": free_port(),
                          "python": str(python), "workdir": str(tmp_path / "hosts")} for _ in range(2)]}
    job = {"kind": "harness", "module": str(demo), "params": {"epochs": 1, "steps_per_epoch": 30},
           "env": {"TF_CPP_MIN_LOG_LEVEL": "2"}}
    (tmp_path / "cluster.json").write_text(json.dumps(cluster))
    (tmp_path / "job.json").write_text(json.dumps(job))
    runs = tmp_path / "runs"
    out = subprocess.run([str(python), "-m", "backend", "--runs", str(runs), "launch", "cluster.json",
                          "job.json", "--run-id", "demo", "--wait", "300"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=400)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    state = json.loads((runs / "demo" / "state.json").read_text())
    assert state["phase"] == "finished", state["phase"]
    shipped = next((tmp_path / "hosts" / "runs").glob("demo.*"))
    assert (shipped / "lib" / "tfconsole" / "harness" / "train.py").is_file()
    lines = [json.loads(x) for x in (shipped / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert {m["task"] for m in lines} == {"worker-0", "worker-1"} and max(m["step"] for m in lines) == 30
