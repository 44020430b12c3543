"""A real agent subprocess whose events a test can wait for, and a run-directory writer."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from backend.client.harness.watch import RESCAN_S
from backend.watch import local_agent


class AgentProc:
    def __init__(self, run: Path, *extra: str) -> None:
        self.proc = subprocess.Popen([*local_agent(), "--run-dir", str(run), *extra],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        self.events: list[dict] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            event = json.loads(line)
            if event["type"] == "metrics":   # the header of a block of raw metric lines
                block = self.proc.stdout.read(event["bytes"])
                event["data"] = [json.loads(m) for m in block.splitlines()]
                assert len(event["data"]) == event["lines"], event
            with self._lock:
                self.events.append(event)

    def of(self, kind: str) -> list[dict]:
        with self._lock:
            return [e for e in self.events if e["type"] == kind]

    def lines(self, task: str) -> list[str]:
        return [e["line"] for e in self.of("log") if e["task"] == task]

    def metrics(self) -> list[dict]:
        return [m for e in self.of("metrics") for m in e["data"]]

    def wait(self, predicate, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.02)
        raise AssertionError(f"timed out; events so far: {self.events[-20:]}")

    def settle(self, timeout: float = 20.0) -> None:
        """Wait until the agent has surely looked at everything written before this call, so a
        test can then check that something did NOT come. The agent rescans every folder every
        RESCAN_S and sends a heartbeat every HEARTBEAT_S; a heartbeat stamped more than RESCAN_S
        after this call comes from a loop that has rescanned since. A fixed sleep could end
        before the agent had even started, and then check nothing."""
        since = time.time() + RESCAN_S + 0.2
        self.wait(lambda: any(e["time"] >= since for e in self.of("heartbeat")), timeout)

    def close(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(5)
        finally:
            self.proc.stdin.close()
            self._reader.join(2)


def append(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fh.write(text)
        fh.flush()


def metric(task: str, step: int, attempt: int = 0, **extra) -> str:
    rec = {"run_id": "r", "attempt": attempt, "task": task, "step": step, "epoch": 0,
           "time": 1000.0 + step, "loss": 1.0 / (step + 1), "global_loss": 1.0 / (step + 1),
           "step_time": 0.1, "examples_per_sec": 320.0, **extra}
    return json.dumps(rec) + "\n"


def make_run(root: Path) -> Path:
    for sub in ("logs", "checkpoints", "exports", "tasks"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    return root


def agent_pids(run: Path) -> list[int]:
    """Agents started for this test's run directory (its path is unique to the test)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        # a host runs it as `python RUN/lib watch ...`, this machine as `python -c <import of harness.watch>`
        is_agent = b"watch" in argv or any(a.startswith(b"import sys") and b"harness.watch" in a for a in argv)
        if is_agent and str(run).encode() in argv:
            pids.append(int(entry))
    return pids
