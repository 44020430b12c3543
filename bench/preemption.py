"""Preemption: steps lost, signal -> every worker exited, save-then-stop -> no process left.

``.venv/bin/python bench/preemption.py [--rounds 3] [--log-every 10] [--pace-s 0.005]``

Two local workers (transport local, launched by ``backend.runs.launcher.launch`` as the console
does), the examples/synthetic.py harness job with one endless epoch, no scheduled checkpoint
(``checkpoint_every=0``: a checkpoint can only come from the signal or the stop) and a paced
small model (``pace_s`` after each step, so the run leaves the 2 cores some room). Each round
runs three runs side by side, each once the chief's metrics reach step 20:

- preempt: ``restart: on_failure, max_restarts: 0``. SIGTERM to worker-1's training process.
  (a) steps lost: the last step attempt 1 ran (its newest metrics row; rows come every
  ``log_every`` steps and the harness exits only at such a step) minus the step attempt 2
  resumes from (target 0); also the step both workers saved and attempt 2's first step.
  (b) seconds from the signal until both training processes are gone (polled in /proc), and the
  harness's own signal -> saved figure from ``tasks/<task>.preempted``.
  Then the run is stopped once attempt 2 has written its first row.
- save-stop: ``Run.stop(save=True)`` (what ``tfconsole stop RUN --save`` and the console's "Save,
  then stop" call): (c) seconds until ``stop`` returns, and until no process of the run is left
  (ps: the tasks' process groups, or the run id in argv), plus the step saved.
- plain-stop: ``Run.stop()`` (TERM, KILL after 1 s) beside it: the same two times, and the
  newest checkpoint the chief has afterwards (the harness may save on that TERM within the 1 s;
  with none, every step the run ran counts as lost).

Prints each round with the load average, then min / median / max of every figure, the load
average before and after, and one JSON line with every round.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend import checkpoints  # noqa: E402
from backend.config.spec import cluster_from_dict, job_from_dict  # noqa: E402
from backend.runs import detached, launcher  # noqa: E402
from backend.runs.store import RunStore  # noqa: E402
from rig import sshd  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TF_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}
WAIT_S = 240


def load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def wait_for(predicate, timeout: float, what: str, poll: float = 0.1):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")


def local_dir(path: str) -> Path:
    return Path(path if os.path.isabs(path) else os.path.expanduser(f"~/{path}"))


def rows(run) -> list[dict]:
    path = local_dir(run.state.chief.remote_run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass   # a line being written
    return out


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def processes(run_id: str, groups: set[int]) -> list[str]:
    """Live processes of the run: in one of its tasks' process groups, or naming it in argv."""
    out = subprocess.run(["ps", "-ww", "-eo", "pid=,pgid=,stat=,args="], capture_output=True,
                         text=True).stdout.splitlines()
    left = []
    for line in out:
        pid, pgid, stat, args = line.split(None, 3)
        if stat.startswith("Z") or "ps -ww" in args or int(pid) == os.getpid():
            continue
        if int(pgid) in groups or run_id in args:
            left.append(line)
    return left


def groups_of(run) -> set[int]:
    return {t.pgid for t in run.reload().tasks if t.pgid}


def task_pid(run, name: str) -> int:
    info = local_dir(run.task(name).remote_run_dir) / "tasks" / f"{name}.json"
    return int(json.loads(info.read_text())["pid"])


class Bench:
    def __init__(self, folder: Path, params: dict) -> None:
        self.folder, self.params = folder, params
        self.store = RunStore(folder / "runs")

    def cluster(self):
        return cluster_from_dict({"tasks": [
            {"role": "worker", "host": "127.0.0.1", "transport": "local", "tf_port": sshd.free_port(),
             "python": sys.executable, "workdir": str(self.folder / "host")} for _ in range(2)]})

    def job(self, restart: dict | None = None):
        spec = {"kind": "harness", "module": str(ROOT / "examples" / "synthetic.py"),
                "params": self.params, "env": TF_ENV}
        if restart:
            spec["restart"] = restart
        return job_from_dict(spec)

    def start(self, restart: dict | None = None):
        run = launcher.launch(self.cluster(), self.job(restart), store=self.store,
                              preflight=launcher.Preflight.SKIP)
        wait_for(lambda: any(r["step"] >= 20 for r in rows(run)), WAIT_S, "step 20")
        return run

    def clean_up(self, run) -> None:
        """Stop what is left (a failed round) and wait until nothing of the run is left."""
        handle = launcher.attach(run.run_id, store=self.store)
        if handle.state.live:
            try:
                handle.stop(grace_s=2)
            except Exception as err:  # noqa: BLE001 - the next round must still run
                print(f"  stop after the round: {err}")
        groups = groups_of(handle)
        wait_for(lambda: detached.keeper_pid(self.store.path(run.run_id)) is None, 30, "the keeper to exit")
        wait_for(lambda: not processes(run.run_id, groups), 30, "no process of the run")

    def preempt(self) -> dict:
        run = self.start({"mode": "on_failure", "max_restarts": 0, "backoff_s": 0.5})
        try:
            pids = [task_pid(run, "worker-0"), task_pid(run, "worker-1")]
            t0 = time.time()
            os.kill(pids[1], signal.SIGTERM)
            wait_for(lambda: not any(alive(p) for p in pids), 120, "both workers to exit", poll=0.01)
            exited_s = time.time() - t0
            # Read at once: attempt 2's start clears them (spawn.start).
            records = [json.loads((local_dir(run.task(t).remote_run_dir) / "tasks" / f"{t}.preempted")
                                  .read_text()) for t in ("worker-0", "worker-1")]
            state = wait_for(lambda: (s := self.store.load(run.run_id)).attempts[1:]
                             and s.attempts[1].resume_step is not None and s, WAIT_S, "attempt 2")
            wait_for(lambda: any(r["attempt"] == 2 for r in rows(run)), WAIT_S, "attempt 2's first row")
            first, second = state.attempts[0], state.attempts[1]
            if not (first.reason or "").startswith("preempted: saved at step "):
                raise RuntimeError(f"attempt 1 ended {first.reason!r}, not preempted")
            saved = int(first.reason.split("saved at step ")[1].split()[0])
            got = rows(run)
            ran = max(r["step"] for r in got if r["attempt"] == 1)
            first2 = min(r["step"] for r in got if r["attempt"] == 2)
            return {"lost": ran - second.resume_step, "ran": ran, "saved": saved,
                    "resume": second.resume_step, "first2": first2, "exited_s": exited_s,
                    "saved_s": max(r["seconds"] for r in records),
                    "within_grace": all(r["within_grace"] for r in records),
                    "same_step": len({r["step"] for r in records}) == 1}
        finally:
            self.clean_up(run)

    def stop(self, save: bool) -> dict:
        run = self.start()
        try:
            groups = groups_of(run)
            t0 = time.time()
            run.stop(save=True) if save else run.stop()
            returned_s = time.time() - t0
            wait_for(lambda: not processes(run.run_id, groups), 60, "no process of the run", poll=0.01)
            gone_s = time.time() - t0
            ran = max(r["step"] for r in rows(run))
            newest = [c["step"] for c in checkpoints.list_checkpoints(launcher.attach(run.run_id,
                                                                                      store=self.store))]
            saved = run.saved_step if save else (newest[-1] if newest else None)
            return {"returned_s": returned_s, "gone_s": gone_s, "ran": ran, "saved": saved,
                    "lost": ran - (saved or 0)}   # no checkpoint at all: every step
        finally:
            self.clean_up(run)


def summary(name: str, values: list) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return f"{name:<44} {'-':>8} {'-':>8} {'-':>8}   (none)"
    fmt = (lambda v: f"{v:.2f}") if any(isinstance(v, float) for v in values) else str
    return (f"{name:<44} {fmt(min(values)):>8} {fmt(statistics.median(values)):>8} "
            f"{fmt(max(values)):>8}   " + " ".join(fmt(v) for v in values))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                epilog="Runs TensorFlow: do not start it while a test suite runs.")
    p.add_argument("--rounds", type=int, default=3, help="rounds of the three runs (default 3)")
    p.add_argument("--log-every", type=int, default=10,
                   help="steps between sync points, where a save can happen (default 10, the harness's)")
    p.add_argument("--pace-s", type=float, default=0.005, help="sleep after each step (default 0.005)")
    p.add_argument("--grace-s", type=float, default=25.0, help="preempt_grace_s (default 25)")
    a = p.parse_args()
    params = {"epochs": 1, "steps_per_epoch": 100000, "log_every": a.log_every, "checkpoint_every": 0,
              "pace_s": a.pace_s, "preempt_grace_s": a.grace_s}
    folder = Path(tempfile.mkdtemp(prefix="bench-preempt-"))
    bench = Bench(folder, params)
    print(f"two local workers, {json.dumps(params)}; files in {folder}")
    print(f"load average before: {load()}", flush=True)
    got: dict[str, list[dict]] = {"preempt": [], "save-stop": [], "plain-stop": []}
    for n in range(1, a.rounds + 1):
        r = bench.preempt()
        got["preempt"].append(r)
        print(f"round {n} preempt:    ran to {r['ran']}, saved {r['saved']}, attempt 2 resumed from "
              f"{r['resume']} (first step {r['first2']}): lost {r['lost']}; signal -> both exited "
              f"{r['exited_s']:.2f} s (saved after {r['saved_s']:.2f} s)  (load {load()})", flush=True)
        for name, save in (("save-stop", True), ("plain-stop", False)):
            r = bench.stop(save)
            got[name].append(r)
            print(f"round {n} {name + ':':<11} stop returned {r['returned_s']:.2f} s, no process "
                  f"{r['gone_s']:.2f} s; ran to {r['ran']}, checkpoint {r['saved']}  (load {load()})",
                  flush=True)
    print(f"load average after: {load()}")
    pre, save, plain = got["preempt"], got["save-stop"], got["plain-stop"]
    print(f"\n{'':<44} {'min':>8} {'median':>8} {'max':>8}   rounds")
    for line in (
            summary("(a) steps lost per preemption (target 0)", [r["lost"] for r in pre]),
            summary("    saved step - resumed step", [r["saved"] - r["resume"] for r in pre]),
            summary("    attempt 2's first step - resumed - 1", [r["first2"] - r["resume"] - 1 for r in pre]),
            summary("(b) SIGTERM -> both workers exited, s", [r["exited_s"] for r in pre]),
            summary("    SIGTERM -> saved (harness record), s", [r["saved_s"] for r in pre]),
            summary("(c) stop(save=True) -> returned, s", [r["returned_s"] for r in save]),
            summary("    stop(save=True) -> no process, s", [r["gone_s"] for r in save]),
            summary("    stop(save=True): last step ran - saved", [r["lost"] for r in save]),
            summary("    plain stop() -> returned, s", [r["returned_s"] for r in plain]),
            summary("    plain stop() -> no process, s", [r["gone_s"] for r in plain]),
            summary("    plain stop(): steps lost (ran - newest ckpt)", [r["lost"] for r in plain])):
        print(line)
    print(f"plain stop left a checkpoint in {sum(r['saved'] is not None for r in plain)} of {len(plain)} "
          f"rounds; preempt records within grace and the same step on both workers: "
          f"{all(r['within_grace'] and r['same_step'] for r in pre)}")
    print(json.dumps({k: [{f: round(v, 2) if isinstance(v, float) else v for f, v in r.items()}
                          for r in vs] for k, vs in got.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
