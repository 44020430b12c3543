"""The installed command: `make run`/`make test` install this checkout (`pip install -e .`), and
`tfconsole` then works from any folder, as does `python -m backend`, the same parser."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import require

TFCONSOLE = Path(sys.executable).parent / "tfconsole"
COMMANDS = ("tf-config", "preflight", "launch", "status", "logs", "stop", "runs", "checkpoints",
            "export", "restore", "trust-host", "console")


def run_in(folder: Path, *argv: str) -> subprocess.CompletedProcess:
    # A folder with no checkout above it, and no PYTHONPATH: only the installed package can answer.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TFCONSOLE_RUNS")}
    return subprocess.run(list(argv), capture_output=True, text=True, cwd=folder, env=env, timeout=120)


def test_tfconsole_help_works_from_any_folder(tmp_path):
    require("the tfconsole command (pip install -e ., which make test runs)", TFCONSOLE.exists())
    proc = run_in(tmp_path, str(TFCONSOLE), "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: tfconsole")
    assert all(c in proc.stdout for c in COMMANDS), proc.stdout


def test_python_m_backend_works_from_any_folder(tmp_path):
    require("the installed package (pip install -e ., which make test runs)", TFCONSOLE.exists())
    proc = run_in(tmp_path, sys.executable, "-m", "backend", "runs", "--json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"   # ./runs of an empty folder: no run, and no error


def test_tfconsole_console_help_names_its_options(tmp_path):
    require("the tfconsole command (pip install -e ., which make test runs)", TFCONSOLE.exists())
    proc = run_in(tmp_path, str(TFCONSOLE), "console", "--help")
    assert proc.returncode == 0 and "--port" in proc.stdout and "--address" in proc.stdout, proc.stderr
