"""The preflight probe's TensorFlow check reads versions from the installed packages instead of
importing TensorFlow (seconds of CPU per host on the way to step 1): it must report exactly what
an import reports, and say so plainly when a Python has no TensorFlow."""
from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT

PROBE = (ROOT / "backend" / "client" / "harness" / "probe.py").read_text()


def probe_with(python: str, tmp_path) -> dict:
    out = subprocess.run([python, "-c", PROBE, "--port", "0", "--workdir", str(tmp_path)],
                         capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def test_versions_are_the_ones_an_import_reports(tmp_path):
    found = probe_with(sys.executable, tmp_path)["tensorflow"]
    imported = subprocess.run([sys.executable, "-c", "import tensorflow as tf, keras; "
                               "print(tf.__version__, keras.__version__)"],
                              capture_output=True, text=True, timeout=300, check=True).stdout.split()[-2:]
    assert found == {"ok": True, "tensorflow": imported[0], "keras": imported[1]}


def test_a_python_without_tensorflow_is_named(tmp_path):
    # Debian's own python3 has no TensorFlow (the project's is in .venv).
    check = probe_with("/usr/bin/python3", tmp_path)["tensorflow"]
    assert check["ok"] is False and "tensorflow is not installed" in check["error"], check
    assert "pip install tensorflow" in check["error"]
