"""``runs/<id>/failure.log``: why a kept run ended failed, and the traceback of the task that
failed first, kept beside its state file (``status`` prints its tail)."""
from __future__ import annotations

from backend.diagnosis import diagnose
from backend.errors import ConsoleError

from backend.runs.detached import FAILURE_LOG   # one name: status reads it, the keeper writes it


def write(run, reason: str, *, why: str) -> None:
    """The reason and the tracebacks of the tasks that failed first, not of the peers whose
    collective they aborted."""
    try:
        failing = [s for s in run.status() if s.failed]
    except ConsoleError:
        failing = []
    first = [s for s in failing if not diagnose.casualty(s.diagnosis)] or failing
    tails = [f"==> {s.name} ({s.label}) <==\n"
             f"{traceback_tail(diagnose.current_attempt(run.log_tail(s.name)))}" for s in first]
    (run.local_dir / FAILURE_LOG).write_text(
        f"{why}: {reason}\n"
        "Fix the cause shown below, then launch again (or restore from a checkpoint).\n\n"
        + "\n".join(tails))


def traceback_tail(log: str, max_lines: int = 60) -> str:
    """The last traceback in a log and what follows it, or the log's last lines."""
    start = log.rfind("Traceback (most recent call last)")
    lines = (log[start:] if start >= 0 else log).splitlines()
    return "\n".join(lines[-max_lines:]) + "\n"
