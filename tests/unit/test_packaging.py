"""Packaging (issue 36): pyproject.toml lists every package (a mapped `tfconsole` rules out
setuptools' find), and a plain `pip install .` into a fresh venv outside the checkout gives
`import tfconsole`: the same client library, a harmless no-op outside a run."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_folder_is_listed_and_tfconsole_is_the_client():
    folders = {".".join(p.parent.relative_to(ROOT).parts) for top in ("backend", "console")
               for p in (ROOT / top).rglob("__init__.py")}
    listed = set(_config()["packages"])
    assert folders - listed == set(), "add these to packages in pyproject.toml"
    assert _config()["package-dir"] == {"tfconsole": "backend/client", "console.pages": "pages",
                                        "console.examples": "examples"}
    assert {"tfconsole", "tfconsole.harness", "console.pages", "console.examples"} <= listed


def test_a_plain_install_into_a_fresh_venv_imports_tfconsole_anywhere(tmp_path):
    # A copy of the checkout (pip builds in the source folder; the shared one stays untouched).
    source = tmp_path / "src"
    top = {".git", ".venv", "runs", "test-output", "build", "tests", "bench", "tfconsole.egg-info"}
    shutil.copytree(ROOT, source, ignore=lambda folder, names: [
        n for n in names if n == "__pycache__" or (Path(folder) == ROOT and n in top)])
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    # Built by this venv's pip and setuptools (no index needed), installed into the fresh one.
    out = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                          "--target", str(site), str(source)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = ("import json, sys, tfconsole\n"
            "print(json.dumps({'file': tfconsole.__file__, 'report': tfconsole.report(3, loss=0.5),"
            " 'dir': tfconsole.checkpoint_dir(), 'launch': callable(tfconsole.launch),"
            " 'backend': 'backend.runs' in sys.modules}))")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    got = json.loads(subprocess.run([str(python), "-c", code], cwd=elsewhere, env=env, capture_output=True,
                                    text=True, timeout=60, check=True).stdout)
    assert got["file"] == str(site / "tfconsole" / "__init__.py")
    assert got == {**got, "report": False, "dir": None, "launch": True, "backend": False}
