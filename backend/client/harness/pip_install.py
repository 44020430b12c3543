"""A project's requirements installed into this host's Python, when the job asks (``pip_install:
true``; backend/records/project.py reads the same files on the console for preflight).

``RUN/job/requirements.txt`` is given to pip as it is (its ``--find-links``, ``--index-url`` and
``-r`` lines too); without one, ``pyproject.toml``'s ``[project] dependencies`` are. pip runs as
``<this Python> -m pip install``, so the packages go where the tasks' Python imports from, never
into another interpreter; its whole output is appended to ``RUN/logs/pip-install.log``.
Standard library only.
"""
from __future__ import annotations

import os
import subprocess
import sys

from . import layout

LOG = "pip-install.log"
TAIL = 12   # lines of pip's output an error carries


class PipFailed(Exception):
    """pip could not install what the project needs; the message names what pip said."""


def requirement_args(job_dir: str) -> list[str]:
    """pip's arguments for the project in ``job_dir``, or [] when it names nothing to install."""
    listed = os.path.join(job_dir, "requirements.txt")
    if os.path.isfile(listed):
        return ["-r", listed]
    pyproject = os.path.join(job_dir, "pyproject.toml")
    if not os.path.isfile(pyproject):
        return []
    try:
        import tomllib
    except ImportError:   # Python < 3.11 on this host
        raise PipFailed("this host's Python cannot read pyproject.toml (tomllib is Python 3.11+); "
                        "add a requirements.txt to the project") from None
    with open(pyproject, "rb") as fh:
        deps = (tomllib.load(fh).get("project") or {}).get("dependencies") or []
    return [str(d) for d in deps]


def install(run: str) -> dict:
    """Install the project's requirements; ``{"installed": bool, "log": path}``. PipFailed with
    pip's last lines (its ERROR lines first) when it fails."""
    job_dir = os.path.join(run, layout.JOB)
    args = requirement_args(job_dir)
    log = os.path.join(run, layout.LOGS, LOG)
    if not args:
        return {"installed": False, "log": None}
    os.makedirs(os.path.dirname(log), exist_ok=True)
    argv = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", *args]
    with open(log, "ab") as out:
        out.write(("$ " + " ".join(argv) + "\n").encode())
        out.flush()
        code = subprocess.run(argv, cwd=job_dir, stdin=subprocess.DEVNULL, stdout=out,
                              stderr=subprocess.STDOUT).returncode
    if code:
        with open(log, "rb") as fh:
            lines = fh.read().decode(errors="replace").splitlines()[-200:]
        errors = [line for line in lines if line.startswith("ERROR")]
        said = "; ".join(errors[-3:]) or " / ".join(lines[-TAIL:])
        raise PipFailed(f"pip install failed (exit {code}): {said} (whole output: {log})")
    return {"installed": True, "log": log}
