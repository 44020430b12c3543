"""Text that comes from a job or a host reaches the terminal as text (issue 35): a job's
exception with control sequences in it (clear the screen, set the window title, hide what
follows) is printed by `status` and `logs` with those sequences shown as escapes."""
from __future__ import annotations

import json

import yaml

from backend.term_text import term_safe
from tests.integration.test_cli import cli

# Clear the screen, set the window title, hide the text after it, a one-character CSI, a bidi
# override; in the log also a CR that writes over the line.
HOSTILE = "\x1b[2J\x1b]0;pwned\x07\x1b[8mhidden\x1b[0m \x9b31m red \u202eevil"
JOB = f"""import sys, time
sys.stdout.write("line one\\tcolumn\\nsecret\\rshown\\n")
time.sleep(15)   # well past launch's start check even on a loaded host (CI saw 3 s lost), then fails
raise RuntimeError({HOSTILE!r})
"""
ESCAPED = r"\x1b[2J\x1b]0;pwned\x07\x1b[8mhidden\x1b[0m \x9b31m red \u202eevil"


def _controls(text: str) -> set[str]:
    return {c for c in text if (ord(c) < 32 and c not in "\n\t") or 0x7f <= ord(c) <= 0x9f or c == "\u202e"}


def test_the_rule_keeps_newlines_and_tabs_and_shows_every_other_control():
    assert term_safe(HOSTILE) == ESCAPED and term_safe("secret\rshown") == r"secret\rshown"
    assert term_safe("a\tb\nc") == "a\tb\nc"
    assert term_safe("\x00\x7f\x0b") == r"\0\x7f\v"


def test_status_and_logs_show_a_jobs_control_sequences_as_escapes(tmp_path, python_path):
    (tmp_path / "job.py").write_text(JOB)
    cluster = {"tasks": [{"role": "worker", "host": "127.0.0.1", "transport": "local", "tf_port": 23999,
                          "python": python_path, "workdir": str(tmp_path / "host")}]}
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    (tmp_path / "job.yaml").write_text(yaml.safe_dump({"kind": "command", "command": [str(tmp_path / "job.py")]}))
    runs = tmp_path / "runs"
    launched = cli("launch", str(tmp_path / "cluster.yaml"), str(tmp_path / "job.yaml"), "--wait", "60",
                   runs=runs, check=False)
    assert launched.returncode == 1, launched.stderr   # ended failed
    run_id = launched.stdout.splitlines()[0]
    status = cli("status", run_id, runs=runs).stdout
    assert ESCAPED in status and not _controls(status), status
    logs = cli("logs", run_id, runs=runs).stdout
    assert "line one\tcolumn\n" in logs and r"secret\rshown" in logs   # tabs and newlines stay
    assert ESCAPED in logs and not _controls(logs), logs
    shown = json.loads(cli("status", run_id, "--json", runs=runs).stdout)   # JSON escapes them its own way
    assert HOSTILE in shown["tasks"][0]["diagnosis"]
